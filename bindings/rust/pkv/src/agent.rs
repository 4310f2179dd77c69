//! The UCX transfer agent (pkv 0.12, DESIGN.md §10): `Agent` moves the KV of one engine's held
//! sequences (`Engine::hold`, `Request::hold_on_finish`) into another engine's receiving requests
//! (`Request::num_remote_tokens`), across processes, over UCX (`pkv_agent_*`). Agents connect by
//! address ("ipv4:port") and check each other's `Engine::layout_fingerprint` at the handshake; a
//! consumer's agent pulls a producer's held sequence with one-sided reads and ends both sides
//! (`Engine::receive_end` here, `Engine::hold_end` there). Nothing moves but in
//! `Agent::connect` and `Agent::progress`: both sides call `progress` in their loops.
use std::ffi::CString;
use std::os::raw::c_char;
use std::ptr::{self, NonNull};

use pkv_sys as sys;

use crate::engine::Engine;
use crate::error::{Error, Result, Status};
use crate::library::{call, library, sized, text, Library};
use crate::seq::Seq;
use crate::transfers::TransferOutcome;

/// An agent's parameters: `pkv_agent_params` with the library's defaults
/// (`pkv_agent_params_init`: rank 0, listening on `"127.0.0.1:0"`, a 30 s timeout, failed pulls
/// `TransferOutcome::Failed`, 64 MiB of reads in flight), then the setters.
///
/// ```no_run
/// let consumer = pkv::AgentParams::new()?.listen_address(None)?.timeout_ms(5_000);
/// let producer = pkv::AgentParams::new()?.listen_address(Some("0.0.0.0:7000"))?;
/// # Ok::<(), pkv::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct AgentParams {
    // its listen_address is always NULL here: the address is `listen_address`, set in c_params
    raw: sys::pkv_agent_params,
    listen_address: Option<CString>,
}

// SAFETY: raw's only pointer is NULL (the address is an owned CString, never mutated).
unsafe impl Send for AgentParams {}
unsafe impl Sync for AgentParams {}

impl AgentParams {
    /// The defaults of the default library (`pkv::library()`).
    pub fn new() -> Result<AgentParams> {
        AgentParams::with_library(library()?)
    }

    /// The defaults of `lib`.
    pub fn with_library(lib: &'static Library) -> Result<AgentParams> {
        let mut raw = sized!(sys::pkv_agent_params);
        // SAFETY: raw is a pkv_agent_params of the size passed; its listen_address is then a
        // static string of the library (or NULL), copied out at once.
        let listen_address = unsafe {
            call!(lib, pkv_agent_params_init(&mut raw, raw.struct_size))?;
            (!raw.listen_address.is_null()).then(|| text(raw.listen_address))
        };
        raw.listen_address = ptr::null();
        let listen_address = listen_address.map(|a| c_text(&a)).transpose()?;
        Ok(AgentParams { raw, listen_address })
    }

    /// The engine's rank whose pool the agent moves (0 by default; below the engine's ranks).
    pub fn rank(mut self, rank: u32) -> AgentParams {
        self.raw.rank = rank;
        self
    }

    /// The `"ipv4:port"` it accepts peers on (port 0: a free one, `Agent::address` says which);
    /// `None`: it listens nowhere and only connects. `"127.0.0.1:0"` by default. A string
    /// holding a NUL is `Status::InvalidArgument`; pkv checks the rest at `Agent::new`.
    pub fn listen_address(mut self, address: Option<&str>) -> Result<AgentParams> {
        self.listen_address = address.map(c_text).transpose()?;
        Ok(self)
    }

    /// A handshake or a pull taking longer fails (30000 by default).
    pub fn timeout_ms(mut self, timeout_ms: u32) -> AgentParams {
        self.raw.timeout_ms = timeout_ms;
        self
    }

    /// What becomes of a receiving request whose pull fails: `TransferOutcome::Failed` (the
    /// default: it computes its prompt itself) or `FailedFinish` (it finishes,
    /// `FinishReason::TransferFailed`); `Done` is refused at `Agent::new`.
    pub fn on_failure(mut self, outcome: TransferOutcome) -> AgentParams {
        self.raw.on_failure = outcome.code();
        self
    }

    /// Bytes of reads in flight at once, over all pulls (at least one segment's go; 0 is
    /// refused; 64 MiB by default).
    pub fn max_inflight_bytes(mut self, bytes: u64) -> AgentParams {
        self.raw.max_inflight_bytes = bytes;
        self
    }

    pub fn get_listen_address(&self) -> Option<&str> {
        self.listen_address.as_ref().map(|a| a.to_str().unwrap_or(""))
    }

    pub fn get_on_failure(&self) -> Option<TransferOutcome> {
        TransferOutcome::from_code(self.raw.on_failure)
    }

    /// The C struct's numbers (its `listen_address` is NULL here: `get_listen_address`).
    pub fn raw(&self) -> &sys::pkv_agent_params {
        &self.raw
    }

    /// The struct pkv reads, its address pointing into `self` (valid while `self` lives).
    fn c_params(&self) -> sys::pkv_agent_params {
        let mut raw = self.raw;
        raw.listen_address = self.listen_address.as_ref().map_or(ptr::null(), |a| a.as_ptr());
        raw
    }
}

/// A peer an agent connected to (`Agent::connect`), named in `Agent::pull`: plain data, the
/// agent's own numbering (0, 1, ... in the order of its connections).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Peer(pub u32);

/// One pull's end, as `Agent::progress` reports it (`pkv_agent_completion`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AgentCompletion {
    /// This engine's sequence: the receiving request a pull filled (`served` false), or the
    /// held sequence a peer pulled (`served` true).
    pub seq: Seq,
    /// `TransferOutcome::Done`, or how it failed (`AgentParams::on_failure` for a pull; `Failed`
    /// for a served one). `None` for a code this binding does not know.
    pub outcome: Option<TransferOutcome>,
    /// A peer's pull of this engine's hold, rather than this agent's own pull.
    pub served: bool,
    /// The bytes read (0 for a failed served pull).
    pub bytes: u64,
}

/// An agent's counters (`pkv_agent_stats`); all but `num_peers` and `pulls_in_flight` are
/// cumulative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AgentStats {
    /// Peers connected now.
    pub num_peers: u32,
    /// This agent's pulls under way now.
    pub pulls_in_flight: u64,
    pub pulls_done: u64,
    pub pulls_failed: u64,
    /// Peers' pulls of this engine's holds.
    pub served_done: u64,
    pub served_failed: u64,
    /// Read by this agent's pulls (as each read completes).
    pub bytes_pulled: u64,
    /// Read by peers from this engine (as their pulls end).
    pub bytes_served: u64,
    /// Handshakes refused: the peers' layout fingerprints differed.
    pub fingerprint_mismatches: u64,
}

/// A transfer agent for one rank of an engine (`pkv_agent_create`), destroyed on drop or
/// `close()` (`pkv_agent_destroy`: every pull in flight fails first, then its peers are
/// disconnected). It borrows its engine, which therefore outlives it:
///
/// ```compile_fail,E0505
/// let engine = pkv::Engine::new(&pkv::Params::new().unwrap()).unwrap();
/// let agent = pkv::Agent::new(&engine, &pkv::AgentParams::new().unwrap()).unwrap();
/// drop(engine); // error[E0505]: cannot move out of `engine` because it is borrowed
/// agent.stats();
/// ```
///
/// Calls on an agent are serialized inside pkv (and its calls take the engine's lock
/// themselves), so it is `Send + Sync` and every method takes `&self`; error messages are read
/// from the calling thread's `pkv_last_error()`. A library built without UCX refuses it with
/// `Status::Unsupported`.
///
/// ```no_run
/// # let engine = pkv::Engine::new(&pkv::Params::new()?)?;
/// # let (remote_seq, local_seq) = (pkv::Seq(1), pkv::Seq(2));
/// let agent = pkv::Agent::new(&engine, &pkv::AgentParams::new()?.listen_address(None)?)?;
/// let peer = agent.connect("10.0.0.7:7000")?; // the producer's Agent::address()
/// agent.pull(peer, remote_seq, local_seq)?; // its held sequence into our receiving request
/// loop {
///     if let Some(done) = agent.progress(10)?.into_iter().find(|c| c.seq == local_seq) {
///         println!("{:?}, {} bytes", done.outcome, done.bytes);
///         break;
///     }
/// }
/// # Ok::<(), pkv::Error>(())
/// ```
pub struct Agent<'e> {
    raw: NonNull<sys::pkv_agent>,
    engine: &'e Engine,
}

// SAFETY: pkv serializes the calls on one agent and allows them from any thread; the engine is
// Sync.
unsafe impl Send for Agent<'_> {}
unsafe impl Sync for Agent<'_> {}

/// Completions read per `pkv_agent_progress` call.
const COMPLETIONS: usize = 16;

impl<'e> Agent<'e> {
    /// An agent for rank `params.rank` of `engine` (`pkv_agent_create`), listening when
    /// `params` has a listen address. It registers the rank's pool (and host tier and state
    /// slots) with UCX once.
    ///
    /// Errors: `Status::InvalidArgument` for bad params (a rank not below the engine's ranks,
    /// an address that is not ipv4:port, `on_failure` `Done`, `max_inflight_bytes` 0);
    /// `Status::Unsupported` for a library built without UCX or a CUDA engine;
    /// `Status::Device` when UCX failed (the address cannot be listened on, memory cannot be
    /// registered; the message has UCX's).
    pub fn new(engine: &'e Engine, params: &AgentParams) -> Result<Agent<'e>> {
        let p = params.c_params();
        let mut raw = ptr::null_mut();
        // SAFETY: live engine; p is a full struct whose address lives in params until the call
        // returns (pkv copies what it keeps); raw receives the handle.
        unsafe { call!(engine.library(), pkv_agent_create(engine.as_raw(), &p, &mut raw))? };
        let gave_null = || Error::new(Status::Internal, "pkv_agent_create gave NULL");
        Ok(Agent { raw: NonNull::new(raw).ok_or_else(gave_null)?, engine })
    }

    /// Destroys the agent now (as dropping it does).
    pub fn close(self) {}

    /// The engine it moves KV of.
    pub fn engine(&self) -> &'e Engine {
        self.engine
    }

    /// The handle, for calls through `pkv-sys`. Valid while `self` lives.
    pub fn as_raw(&self) -> *mut sys::pkv_agent {
        self.raw.as_ptr()
    }

    fn lib(&self) -> &'static Library {
        self.engine.library()
    }

    /// The address it listens on, `"ipv4:port"` (`pkv_agent_address`): its port resolved when
    /// `AgentParams::listen_address` asked for port 0. Peers `connect` to it.
    ///
    /// Errors: `Status::State` when it does not listen (`listen_address(None)`).
    pub fn address(&self) -> Result<String> {
        // "255.255.255.255:65535" and its NUL are 22 bytes
        let mut buf = [0 as c_char; 64];
        // SAFETY: live handle; buf has 64 bytes, which pkv NUL-terminates on success.
        unsafe {
            call!(self.lib(), pkv_agent_address(self.as_raw(), buf.as_mut_ptr(), 64))?;
            Ok(text(buf.as_ptr()))
        }
    }

    /// Connects to the agent listening at `address` (`"ipv4:port"`, `pkv_agent_connect`) and
    /// waits for the handshake, up to `AgentParams::timeout_ms`: the peer listening there must
    /// `progress` meanwhile (it answers in its own loop). A peer whose layout fingerprint
    /// differs is refused on both sides (`AgentStats::fingerprint_mismatches`).
    ///
    /// Errors: `Status::InvalidArgument` for an address that is not ipv4:port (or holds a NUL),
    /// or fingerprints that differ (the message says "fingerprints differ" and where);
    /// `Status::Device` for no connection (nobody listens there, the handshake timed out, UCX
    /// failed).
    pub fn connect(&self, address: &str) -> Result<Peer> {
        let address = c_text(address)?;
        let mut peer = 0u32;
        let (a, at) = (self.as_raw(), address.as_ptr());
        // SAFETY: live handle; address is a C string living until the call returns.
        unsafe { call!(self.lib(), pkv_agent_connect(a, at, &mut peer))? };
        Ok(Peer(peer))
    }

    /// Starts pulling `peer`'s held sequence `remote_seq` (an id of the peer's engine) into
    /// `local_seq`, a receiving request of this agent's engine (`pkv_agent_pull`): its blocks
    /// `SeqInfo::remote_first_block ..` + `remote_num_blocks`, and with state layers its state.
    /// It ends in `progress`, which reports it. One pull into a sequence at a time.
    ///
    /// Errors: `Status::InvalidArgument` for no peer `peer`; `Status::NotFound` for no sequence
    /// `local_seq`; `Status::State` when `local_seq` is not receiving or a pull into it is in
    /// flight, or the peer is gone.
    pub fn pull(&self, peer: Peer, remote_seq: Seq, local_seq: Seq) -> Result<()> {
        let a = self.as_raw();
        // SAFETY: live handle.
        unsafe { call!(self.lib(), pkv_agent_pull(a, peer.0, remote_seq.0, local_seq.0)) }
    }

    /// Moves things along (`pkv_agent_progress`): accepts peers, answers their pulls, issues and
    /// completes reads, ends pulls (`Engine::receive_end` / `Engine::hold_end`, under the
    /// engine's lock) and fails those past their timeout. Waits up to `wait_ms` for something
    /// to end (0: returns at once) and returns every pull that ended since the last call, this
    /// agent's (`served` false) and its peers' pulls of its engine's holds (`served` true).
    pub fn progress(&self, wait_ms: u32) -> Result<Vec<AgentCompletion>> {
        let empty = sys::pkv_agent_completion { seq: 0, outcome: 0, served: 0, bytes: 0 };
        let mut chunk = [empty; COMPLETIONS];
        let (mut all, mut wait) = (Vec::new(), wait_ms);
        loop {
            let (mut len, a, out) = (0u32, self.as_raw(), chunk.as_mut_ptr());
            let cap = COMPLETIONS as u32;
            // SAFETY: live handle; chunk has COMPLETIONS elements.
            unsafe { call!(self.lib(), pkv_agent_progress(a, wait, out, cap, &mut len))? };
            all.extend(chunk[..len as usize].iter().map(|c| AgentCompletion {
                seq: Seq(c.seq),
                outcome: TransferOutcome::from_code(c.outcome),
                served: c.served != 0,
                bytes: c.bytes,
            }));
            if (len as usize) < COMPLETIONS {
                return Ok(all);
            }
            wait = 0; // more may be waiting: read them without waiting again
        }
    }

    /// The agent's counters now (`pkv_agent_stats_get`).
    pub fn stats(&self) -> Result<AgentStats> {
        let mut s = sized!(sys::pkv_agent_stats);
        // SAFETY: live handle, full struct.
        unsafe { call!(self.lib(), pkv_agent_stats_get(self.as_raw(), &mut s))? };
        Ok(AgentStats {
            num_peers: s.num_peers,
            pulls_in_flight: s.pulls_in_flight,
            pulls_done: s.pulls_done,
            pulls_failed: s.pulls_failed,
            served_done: s.served_done,
            served_failed: s.served_failed,
            bytes_pulled: s.bytes_pulled,
            bytes_served: s.bytes_served,
            fingerprint_mismatches: s.fingerprint_mismatches,
        })
    }
}

impl Drop for Agent<'_> {
    fn drop(&mut self) {
        if let Ok(destroy) = &self.lib().raw().pkv_agent_destroy {
            // SAFETY: the handle is live; its engine outlives it (the borrow).
            unsafe { destroy(self.as_raw()) };
        }
    }
}

impl Engine {
    /// A transfer agent for this engine (`Agent::new(self, params)`).
    pub fn agent(&self, params: &AgentParams) -> Result<Agent<'_>> {
        Agent::new(self, params)
    }
}

fn c_text(s: &str) -> Result<CString> {
    let holds_nul = |_| format!("{:?}: not a C string (it holds a NUL)", s);
    CString::new(s).map_err(|e| Error::new(Status::InvalidArgument, holds_nul(e)))
}
