//! A sequence's life on an engine, outside the scheduler: `Engine::allocate` (and its query),
//! `append`, `fork`, `truncate`, `release`, preemption and swapping, and what a sequence holds
//! (`seq_info`, its block tables, its tokens).
use std::os::raw::c_void;
use std::ptr;

use pkv_sys as sys;

use crate::engine::Engine;
use crate::error::{Result, Status};
use crate::library::{call, count, sized};
use crate::types::SeqInfo;

/// A sequence id of one engine (never 0, never reused). Plain data: the engine says
/// `Status::NotFound` for one released or from another engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Seq(pub u64);

/// What `Engine::allocate` admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocation {
    pub seq: Seq,
    /// Prompt tokens whose KV was already cached: they count as computed.
    pub num_cached_tokens: u32,
}

/// What `Engine::allocate_query` found, changing nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocationQuery {
    /// Free blocks the allocation would take (new ones plus cached ones it would revive).
    pub num_blocks: u32,
    pub num_cached_tokens: u32,
}

impl Engine {
    /// Admits a prompt (`pkv_allocate`); `salt` keeps tenants' blocks apart. `Status::NoSpace`:
    /// not enough free blocks, nothing changed.
    pub fn allocate(&self, tokens: &[i32], salt: Option<&[u8]>) -> Result<Allocation> {
        let n = count(tokens.len(), "tokens")?;
        let sp = self.seq_params(salt)?;
        let (mut seq, mut cached) = (0u64, 0u32);
        // SAFETY: tokens has n elements; sp borrows salt, which outlives the call.
        unsafe {
            call!(
                self.library(),
                pkv_allocate(self.as_raw(), tokens.as_ptr(), n, sp_ptr(&sp), &mut seq, &mut cached)
            )?
        };
        Ok(Allocation { seq: Seq(seq), num_cached_tokens: cached })
    }

    /// What `allocate` would take now (`pkv_allocate_query`); changes nothing.
    pub fn allocate_query(&self, tokens: &[i32], salt: Option<&[u8]>) -> Result<AllocationQuery> {
        let n = count(tokens.len(), "tokens")?;
        let sp = self.seq_params(salt)?;
        let (mut blocks, mut cached) = (0u32, 0u32);
        // SAFETY: as in allocate.
        unsafe {
            call!(
                self.library(),
                pkv_allocate_query(self.as_raw(), tokens.as_ptr(), n, sp_ptr(&sp), &mut blocks, &mut cached)
            )?
        };
        Ok(AllocationQuery { num_blocks: blocks, num_cached_tokens: cached })
    }

    /// Reserves slots for more tokens of `seq` (`pkv_append`); `Status::NoSpace`: nothing changed.
    pub fn append(&self, seq: Seq, tokens: &[i32]) -> Result<()> {
        let n = count(tokens.len(), "tokens")?;
        // SAFETY: tokens has n elements.
        unsafe { call!(self.library(), pkv_append(self.as_raw(), seq.0, tokens.as_ptr(), n)) }
    }

    /// A new sequence sharing every block of `parent` (`pkv_fork`).
    pub fn fork(&self, parent: Seq) -> Result<Seq> {
        let mut child = 0u64;
        // SAFETY: live handle, child receives the id.
        unsafe { call!(self.library(), pkv_fork(self.as_raw(), parent.0, &mut child))? };
        Ok(Seq(child))
    }

    /// Ends a sequence (`pkv_release`); its full computed blocks stay cached. `Status::State`
    /// while it is in the open batch, or (pkv 0.12) held for a transfer or receiving one
    /// (`Engine::hold_end`, `Engine::receive_end`).
    pub fn release(&self, seq: Seq) -> Result<()> {
        // SAFETY: live handle.
        unsafe { call!(self.library(), pkv_release(self.as_raw(), seq.0)) }
    }

    /// Keeps `seq`'s first `num_tokens` tokens, 1..=len (`pkv_truncate`): rollback of rejected
    /// speculative tokens. `Status::InvalidArgument`: outside that range; `Status::State`: in the
    /// open batch, swapped out, or a request of `submit`.
    pub fn truncate(&self, seq: Seq, num_tokens: u32) -> Result<()> {
        // SAFETY: live handle.
        unsafe { call!(self.library(), pkv_truncate(self.as_raw(), seq.0, num_tokens)) }
    }

    /// Gives back `seq`'s blocks, keeping its tokens (`pkv_preempt`).
    pub fn preempt(&self, seq: Seq) -> Result<()> {
        // SAFETY: live handle.
        unsafe { call!(self.library(), pkv_preempt(self.as_raw(), seq.0)) }
    }

    /// Re-admits a preempted sequence (`pkv_resume`); returns its cached-token count.
    pub fn resume(&self, seq: Seq) -> Result<u32> {
        let mut cached = 0u32;
        // SAFETY: live handle.
        unsafe { call!(self.library(), pkv_resume(self.as_raw(), seq.0, &mut cached))? };
        Ok(cached)
    }

    /// Moves `seq`'s KV to the host tier (`pkv_swap_out`), keeping its tokens and computed
    /// count; the next batch lists the copies (`CopyKind::SwapOut`). `Status::Unsupported`: no
    /// host tier; `Status::NoSpace`: too few host blocks, nothing changed; `Status::State`: not
    /// running.
    pub fn swap_out(&self, seq: Seq) -> Result<()> {
        // SAFETY: live handle.
        unsafe { call!(self.library(), pkv_swap_out(self.as_raw(), seq.0)) }
    }

    /// Brings a swapped-out sequence back into pool blocks (`pkv_swap_in`), all or nothing; the
    /// next batch lists the copies (`CopyKind::SwapIn`). `Status::State`: not swapped out.
    pub fn swap_in(&self, seq: Seq) -> Result<()> {
        // SAFETY: live handle.
        unsafe { call!(self.library(), pkv_swap_in(self.as_raw(), seq.0)) }
    }

    /// `seq`'s state (`pkv_seq_info`).
    pub fn seq_info(&self, seq: Seq) -> Result<SeqInfo> {
        let mut out = sized!(sys::pkv_seq_info);
        // SAFETY: live handle, full struct.
        unsafe { call!(self.library(), pkv_seq_info(self.as_raw(), seq.0, &mut out))? };
        Ok(SeqInfo::from_raw(&out))
    }

    /// `seq`'s block table: physical block ids, in order (`pkv_seq_block_table`).
    pub fn block_table(&self, seq: Seq) -> Result<Vec<i32>> {
        self.read_i32s(|out, cap, len| unsafe {
            // SAFETY: out has cap elements (or is NULL with cap 0).
            call!(self.library(), pkv_seq_block_table(self.as_raw(), seq.0, out, cap, len))
        })
    }

    /// `seq`'s block table in KV group `group` (`pkv_seq_group_block_table`): -1 where a
    /// windowed group gave back a block no later token's window reaches. Group 0's is
    /// `block_table`.
    pub fn group_block_table(&self, seq: Seq, group: u32) -> Result<Vec<i32>> {
        self.read_i32s(|out, cap, len| unsafe {
            // SAFETY: out has cap elements (or is NULL with cap 0).
            call!(self.library(), pkv_seq_group_block_table(self.as_raw(), seq.0, group, out, cap, len))
        })
    }

    /// `seq`'s token ids (`pkv_seq_tokens`).
    pub fn tokens(&self, seq: Seq) -> Result<Vec<i32>> {
        self.read_i32s(|out, cap, len| unsafe {
            // SAFETY: out has cap elements (or is NULL with cap 0).
            call!(self.library(), pkv_seq_tokens(self.as_raw(), seq.0, out, cap, len))
        })
    }

    fn seq_params(&self, salt: Option<&[u8]>) -> Result<Option<sys::pkv_seq_params>> {
        let salt = match salt {
            None | Some([]) => return Ok(None),
            Some(salt) => salt,
        };
        let mut sp = sized!(sys::pkv_seq_params);
        // SAFETY: sp is a full struct.
        unsafe { call!(self.library(), pkv_seq_params_init(&mut sp, sp.struct_size))? };
        sp.cache_salt_len = count(salt.len(), "salt")?;
        sp.cache_salt = salt.as_ptr() as *const c_void;
        Ok(Some(sp))
    }

    /// Reads a variable-size array: asks its length (a short buffer is InvalidArgument with the
    /// length written), then fills a buffer of that length.
    fn read_i32s(&self, read: impl Fn(*mut i32, u32, *mut u32) -> Result<()>) -> Result<Vec<i32>> {
        let mut len = 0u32;
        match read(ptr::null_mut(), 0, &mut len) {
            Err(e) if !(e.status() == Status::InvalidArgument && len > 0) => return Err(e),
            _ => {}
        }
        let mut out = vec![0i32; len as usize];
        read(out.as_mut_ptr(), len, &mut len)?;
        out.truncate(len as usize);
        Ok(out)
    }
}

fn sp_ptr(sp: &Option<sys::pkv_seq_params>) -> *const sys::pkv_seq_params {
    sp.as_ref().map_or(ptr::null(), |p| p as *const _)
}
