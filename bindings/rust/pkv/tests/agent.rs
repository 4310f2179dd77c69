//! The UCX transfer agent (pkv 0.12, `Agent`) between two engines of this process: a producer
//! engine holds a computed prompt and its agent listens, progressed on a thread of its own (a
//! connect waits for the listening side to answer); the consumer's agent connects, pulls the
//! held sequence into a receiving request and progresses until it ends. A pull done (the
//! producer's bytes arrive, the consumer's step gets the producer's output, the producer's hold
//! ends), a fingerprint mismatch, a pull of a sequence not held (the request computes its prompt
//! itself, or finishes), and the refusals. Every test skips when libpkv was built without UCX.
mod common;
use common::transfer_model::{self as model, *};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;

use pkv::TRANSFER_TIMEOUT_NONE;
use pkv::{Agent, AgentCompletion, AgentParams, AgentStats, Dtype, Engine, FinishReason};
use pkv::{Peer, Request, Seq, Status, TransferOutcome, TransferState};

fn engine(dtype: Dtype, num_blocks: u32) -> Engine {
    Engine::new(&model::params(dtype, num_blocks)).unwrap()
}

/// Whether the library has the agent: false (the test skips, saying so) for a build without
/// UCX.
fn ucx() -> bool {
    let e = engine(Dtype::F32, 8);
    let agent = Agent::new(&e, &AgentParams::new().unwrap());
    match agent {
        Ok(_) => true,
        Err(err) if err.status() == Status::Unsupported => {
            eprintln!("skip: {}", err.message());
            false
        }
        Err(err) => panic!("Agent::new: {}", err),
    }
}

/// A consumer's agent: it listens nowhere, and gives up a handshake or a pull after 10 s.
fn consumer_params() -> AgentParams {
    AgentParams::new().unwrap().listen_address(None).unwrap().timeout_ms(10_000)
}

/// A request of `prompt` whose first `remote` tokens' KV comes from elsewhere, admitted by a
/// step and receiving.
fn receiving(c: &Engine, prompt: &[i32], remote: u32) -> Seq {
    let request = Request { max_new_tokens: 1, num_remote_tokens: remote, ..Request::default() };
    let seq = c.submit(prompt, &request).unwrap();
    assert!(c.step().unwrap().is_none(), "nothing to run: it receives");
    assert_eq!(c.drain_receiving().unwrap(), vec![seq]);
    assert_eq!(c.seq_info(seq).unwrap().transfer, Some(TransferState::Receiving));
    seq
}

/// The bytes of `seq`'s blocks `0 .. n` on `e` (a CPU engine's host memory), segment by segment.
fn block_bytes(e: &Engine, seq: Seq, n: u32) -> Vec<Vec<u8>> {
    let segments = e.seq_segments(0, seq, 0, n).unwrap();
    // SAFETY: a CPU engine's segments are host memory of s.bytes bytes, alive while the engine
    // is and the sequence holds its blocks; copied out at once.
    let of = |s: &pkv::Segment| unsafe {
        std::slice::from_raw_parts(s.base as *const u8, s.bytes as usize).to_vec()
    };
    segments.iter().map(of).collect()
}

/// Progresses `agent` until one pull ends (at most ~20 s) and returns it.
fn wait_one(agent: &Agent<'_>) -> AgentCompletion {
    for _ in 0..2000 {
        let done = agent.progress(10).unwrap();
        assert!(done.len() <= 1, "one pull ends: {:?}", done);
        if let Some(&c) = done.first() {
            return c;
        }
    }
    panic!("no pull ended");
}

/// What the producer's agent saw: the pulls that ended (its served ones) and its counters.
struct Served {
    completions: Vec<AgentCompletion>,
    stats: AgentStats,
}

/// Sets the flag when dropped: the producer's thread stops even when the consumer panics.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Runs `consumer` with the address of a producer's agent: engine `p`'s, listening on a free port
/// of 127.0.0.1, created and progressed (1 ms waits) on a thread of its own until `consumer`
/// returns. Returns what `consumer` returned and what the producer's agent saw.
fn with_producer<T>(p: &Engine, consumer: impl FnOnce(&str) -> T) -> (T, Served) {
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        let (tx, rx) = mpsc::channel();
        let stopping = &stop;
        let producer = s.spawn(move || {
            let agent = Agent::new(p, &AgentParams::new().unwrap()).unwrap();
            tx.send(agent.address().unwrap()).unwrap();
            let mut completions = Vec::new();
            while !stopping.load(Ordering::Acquire) {
                completions.extend(agent.progress(1).unwrap());
            }
            Served { completions, stats: agent.stats().unwrap() }
        });
        let got = {
            let _stop = StopOnDrop(&stop);
            let address = rx.recv().expect("the producer's address");
            assert!(address.starts_with("127.0.0.1:"), "{}", address);
            consumer(&address)
        };
        (got, producer.join().expect("the producer's thread"))
    })
}

/// The producer computes a 13-token prompt and holds it; the consumer's agent pulls its first 12
/// tokens' KV into a receiving request: the bytes are the producer's, its step computes the last
/// token alone and gets the producer's output; both agents count the pull, the hold ends DONE.
#[test]
fn a_pull_between_two_engines() {
    if !ucx() {
        return;
    }
    let (p, c) = (engine(Dtype::F32, 64), engine(Dtype::F32, 48)); // one layout
    let prompt = tokens(300, 13);
    let (ps, want) = computed(&p, &prompt);
    p.hold(ps, TRANSFER_TIMEOUT_NONE).unwrap();
    let sent = block_bytes(&p, ps, 3);
    let ((cs, done, stats), served) = with_producer(&p, |address| {
        let agent = c.agent(&consumer_params()).unwrap();
        assert_eq!(agent.address().unwrap_err().status(), Status::State, "it does not listen");
        let peer = agent.connect(address).unwrap();
        assert_eq!(peer, Peer(0));
        assert_eq!(agent.stats().unwrap().num_peers, 1);
        let plain = c.allocate(&tokens(900, 5), None).unwrap().seq;
        assert_eq!(agent.pull(peer, ps, plain).unwrap_err().status(), Status::State);
        assert_eq!(agent.pull(peer, ps, Seq(999)).unwrap_err().status(), Status::NotFound);
        c.release(plain).unwrap();
        let cs = receiving(&c, &prompt, 12);
        agent.pull(peer, ps, cs).unwrap();
        let again = agent.pull(peer, ps, cs).unwrap_err();
        assert_eq!(again.status(), Status::State, "one pull into a sequence at a time");
        let done = wait_one(&agent);
        (cs, done, agent.stats().unwrap())
    });
    let block_bytes_f32 = (BLOCK_SIZE * ROW * 4) as u64;
    let done_outcome = Some(TransferOutcome::Done);
    let all = 3 * u64::from(LAYERS) * 2 * block_bytes_f32; // 3 blocks, K and V
    let want_done = AgentCompletion { seq: cs, outcome: done_outcome, served: false, bytes: all };
    assert_eq!(done, want_done);
    assert_eq!((stats.pulls_done, stats.pulls_failed, stats.pulls_in_flight), (1, 0, 0));
    assert_eq!((stats.bytes_pulled, stats.num_peers, stats.served_done), (all, 1, 0));
    // the producer's side: its hold served and ended DONE
    let served_done = AgentCompletion { seq: ps, served: true, ..want_done };
    assert_eq!(served.completions, vec![served_done]);
    let st = served.stats;
    assert_eq!((st.served_done, st.served_failed, st.bytes_served), (1, 0, all));
    assert_eq!((st.pulls_done, st.fingerprint_mismatches), (0, 0));
    assert_eq!(p.seq_info(ps).unwrap().transfer, Some(TransferState::None));
    let pst = p.stats().unwrap();
    assert_eq!((pst.num_holds_done, pst.num_holds_failed, pst.num_held_seqs), (1, 0, 0));
    p.release(ps).unwrap();
    p.check().unwrap();
    // the consumer's side: the producer's bytes, computed and cached
    let info = c.seq_info(cs).unwrap();
    assert_eq!((info.transfer, info.num_computed_tokens), (Some(TransferState::None), 12));
    assert_eq!(block_bytes(&c, cs, 3), sent);
    let cst = c.stats().unwrap();
    assert_eq!((cst.num_receives_done, cst.received_tokens), (1, 12));
    assert_eq!(c.allocate_query(&prompt, None).unwrap().num_cached_tokens, 12);
    let (got, computed) = step_one(&c, cs);
    assert_eq!(computed, 1, "the last prompt token only, on the received KV");
    assert_close(&got, &want);
    assert_eq!(c.drain_finished().unwrap(), vec![cs]);
    c.release(cs).unwrap();
    c.check().unwrap();
}

/// Engines of another dtype have other layouts: both agents refuse the handshake.
///
/// The producer answers the consumer's hello with its own, then force-closes the connection at
/// once; its hello may be lost with it (libpkv 0.12's agent, as in tests/agent's C test): the
/// consumer then sees the connection reset (`Status::Device`) and counts no mismatch itself.
/// Either way the connect fails, no peer is left and the producer counts the mismatch.
#[test]
fn a_fingerprint_mismatch() {
    if !ucx() {
        return;
    }
    let (p, c) = (engine(Dtype::Bf16, 64), engine(Dtype::F32, 64));
    assert_ne!(p.layout_fingerprint(0).unwrap(), c.layout_fingerprint(0).unwrap());
    let ((err, stats), served) = with_producer(&p, |address| {
        let agent = Agent::new(&c, &consumer_params()).unwrap();
        let err = agent.connect(address).unwrap_err();
        let gone = agent.pull(Peer(0), Seq(1), Seq(1)).unwrap_err();
        assert_eq!(gone.status(), Status::State, "that peer is gone: {}", gone.message());
        (err, agent.stats().unwrap())
    });
    let why = err.message();
    match err.status() {
        Status::InvalidArgument => {
            assert!(why.contains("fingerprints differ"), "{}", why);
            assert_eq!(stats.fingerprint_mismatches, 1);
        }
        Status::Device => {
            assert!(why.contains("connection lost"), "{}", why); // the race above
            assert_eq!(stats.fingerprint_mismatches, 0);
        }
        other => panic!("connect: {:?}: {}", other, why),
    }
    assert_eq!((stats.num_peers, stats.pulls_done), (0, 0));
    assert_eq!((served.stats.fingerprint_mismatches, served.stats.num_peers), (1, 0));
    assert!(served.completions.is_empty());
}

/// A pull of a sequence the producer does not hold fails: the receiving request is preempted
/// and computes its prompt itself (`on_failure` `Failed`, the default), or finishes
/// (`FailedFinish`).
#[test]
fn a_pull_of_a_sequence_not_held() {
    if !ucx() {
        return;
    }
    let (p, c) = (engine(Dtype::F32, 64), engine(Dtype::F32, 64));
    let prompt = tokens(300, 13);
    let (ps, want) = computed(&p, &prompt); // running, not held
    let ((cs, failed, cs2, finished, stats), served) = with_producer(&p, |address| {
        let agent = Agent::new(&c, &consumer_params()).unwrap();
        let peer = agent.connect(address).unwrap();
        let cs = receiving(&c, &prompt, 12);
        agent.pull(peer, ps, cs).unwrap();
        let failed = wait_one(&agent);
        let stats = agent.stats().unwrap();
        agent.close();
        let info = c.seq_info(cs).unwrap();
        assert_eq!((info.transfer, info.is_preempted), (Some(TransferState::None), true));
        assert_eq!(c.stats().unwrap().num_receives_failed, 1);
        c.check().unwrap();
        let (got, computed) = step_one(&c, cs);
        assert_eq!(computed, 13, "its whole prompt");
        assert_close(&got, &want);
        assert_eq!(c.drain_finished().unwrap(), vec![cs]);
        c.release(cs).unwrap();
        // an agent whose failed pulls finish their requests
        let params = consumer_params().on_failure(TransferOutcome::FailedFinish);
        let agent = Agent::new(&c, &params).unwrap();
        let peer = agent.connect(address).unwrap();
        let cs2 = receiving(&c, &tokens(500, 13), 12);
        agent.pull(peer, ps, cs2).unwrap();
        let finished = wait_one(&agent);
        let info = c.seq_info(cs2).unwrap();
        assert_eq!(info.finish_reason, Some(FinishReason::TransferFailed));
        assert_eq!(c.drain_finished().unwrap(), vec![cs2]);
        c.release(cs2).unwrap();
        (cs, failed, cs2, finished, stats)
    });
    let outcome = |c: AgentCompletion| (c.seq, c.outcome, c.served);
    assert_eq!(outcome(failed), (cs, Some(TransferOutcome::Failed), false));
    assert_eq!(outcome(finished), (cs2, Some(TransferOutcome::FailedFinish), false));
    assert_eq!((stats.pulls_done, stats.pulls_failed, stats.pulls_in_flight), (0, 1, 0));
    // the producer refused both: nothing served, its sequence untouched
    assert!(served.completions.is_empty(), "{:?}", served.completions);
    assert_eq!((served.stats.served_done, served.stats.served_failed), (0, 0));
    assert_eq!(p.seq_info(ps).unwrap().transfer, Some(TransferState::None));
    assert_eq!(p.stats().unwrap().num_holds_failed, 0);
    c.check().unwrap();
    p.check().unwrap();
}

#[test]
fn refusals() {
    if !ucx() {
        return;
    }
    let e = engine(Dtype::F32, 16);
    // the defaults are pkv.h's
    let defaults = AgentParams::new().unwrap();
    assert_eq!(defaults.get_listen_address(), Some("127.0.0.1:0"));
    assert_eq!(defaults.get_on_failure(), Some(TransferOutcome::Failed));
    let raw = defaults.raw();
    assert_eq!((raw.rank, raw.timeout_ms, raw.max_inflight_bytes), (0, 30_000, 64 << 20));
    // bad params
    let bad = [
        defaults.clone().listen_address(Some("nowhere:1")).unwrap(),
        defaults.clone().listen_address(Some("127.0.0.1")).unwrap(),
        defaults.clone().on_failure(TransferOutcome::Done),
        defaults.clone().rank(1),
        defaults.clone().max_inflight_bytes(0),
    ];
    for params in &bad {
        let err = Agent::new(&e, params).err().expect("refused");
        assert_eq!(err.status(), Status::InvalidArgument, "{:?}: {}", params, err.message());
    }
    let err = defaults.clone().listen_address(Some("127.0.0.1:0\0")).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    // a listening agent says where; one that only connects has no address
    let listening = e.agent(&defaults.clone().timeout_ms(2_000)).unwrap();
    let address = listening.address().unwrap();
    let port: u16 = address.strip_prefix("127.0.0.1:").expect("127.0.0.1:PORT").parse().unwrap();
    assert_ne!(port, 0, "the free port it took");
    let quiet = Agent::new(&e, &consumer_params()).unwrap();
    assert_eq!(quiet.address().unwrap_err().status(), Status::State);
    // bad addresses; an address nobody listens on (an agent's, closed)
    for address in ["localhost:1", "127.0.0.1", "127.0.0.1:99999", "", "127.0.0.1:1\0"] {
        let err = listening.connect(address).unwrap_err();
        assert_eq!(err.status(), Status::InvalidArgument, "{:?}: {}", address, err.message());
    }
    let other = e.agent(&defaults).unwrap();
    let closed = other.address().unwrap();
    other.close(); // its port is free again
    assert_eq!(listening.connect(&closed).unwrap_err().status(), Status::Device);
    // no such peer; nothing under way
    let err = listening.pull(Peer(7), Seq(1), Seq(1)).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert_eq!(listening.progress(0).unwrap(), vec![]);
    assert_eq!(quiet.stats().unwrap(), AgentStats::default());
    let st = listening.stats().unwrap();
    assert_eq!((st.num_peers, st.pulls_done, st.pulls_failed), (0, 0, 0));
    assert_eq!(listening.engine().stats().unwrap().num_seqs, 0);
    e.check().unwrap();
}

/// An agent is `Send + Sync` (pkv serializes the calls on one), and so are its params.
#[test]
fn agents_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Agent<'static>>();
    send_sync::<AgentParams>();
    send_sync::<AgentCompletion>();
}
