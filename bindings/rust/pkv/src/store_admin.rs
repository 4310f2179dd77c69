//! `StoreAdmin`: a store's administration with no engine and no model (`pkv_store_open` ..
//! `pkv_store_close`, what `pkv store` does): what it holds, each block, whether every value is
//! whole, removing bad values or all of them.
use std::collections::VecDeque;
use std::os::raw::c_char;
use std::ptr::{self, NonNull};

use pkv_sys as sys;

use crate::error::{Error, Result, Status};
use crate::library::{call, codes, count, sized, Library};
use crate::store::{StoreKey, StoreParams};

codes! {
    /// A store's kind (`PKV_STORE_*`).
    StoreKind: u32 {
        None = sys::PKV_STORE_NONE,
        /// A directory of block files.
        File = sys::PKV_STORE_FILE,
        /// A Redis (or Valkey) server.
        Redis = sys::PKV_STORE_REDIS,
        /// The host's own `Store`.
        Callback = sys::PKV_STORE_CALLBACK,
    }
}

codes! {
    /// What reading a listed value found (`PKV_STORE_VALUE_*`).
    ValueState: u32 {
        /// Not read: `StoreAdmin::list_keys`.
        Unread = sys::PKV_STORE_VALUE_UNREAD,
        /// A whole pkv block naming its key; its header's fields are filled.
        Good = sys::PKV_STORE_VALUE_GOOD,
        /// Anything else (`StoreEntry::problem` says what): an engine never uses it.
        Bad = sys::PKV_STORE_VALUE_BAD,
    }
}

/// What a store holds (`struct pkv_store_info`); no value is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StoreInfo {
    pub kind: Option<StoreKind>,
    /// Values under block names.
    pub num_blocks: u64,
    /// Their sizes added up.
    pub total_bytes: u64,
}

/// One block of a listing (`pkv_store_entry`). The header's fields (`num_tokens`,
/// `payload_bytes`, `parent`, `fingerprint`) are filled for `ValueState::Good` only.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StoreEntry {
    pub key: StoreKey,
    /// The value's size as listed.
    pub value_bytes: u64,
    pub state: Option<ValueState>,
    pub num_tokens: u32,
    /// K and V of every layer.
    pub payload_bytes: u64,
    /// The parent block's key, or the root of its salt and model.
    pub parent: StoreKey,
    /// The model's KV-shape fingerprint.
    pub fingerprint: [u8; 32],
    /// `Bad`: why; else "".
    pub problem: String,
}

/// What `StoreAdmin::verify` found (`pkv_store_verify_result`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct VerifyResult {
    /// Values read.
    pub num_blocks: u64,
    pub num_good: u64,
    pub num_bad: u64,
    /// Of `num_bad`, removed (`remove_bad`).
    pub num_removed: u64,
    /// Listed, then gone or resized before they were read (an engine evicted or rewrote them).
    pub num_gone: u64,
    pub good_bytes: u64,
    pub bad_bytes: u64,
    /// The first bad value met and why; `None` when every value was good.
    pub first_bad: Option<(StoreKey, String)>,
}

/// A store opened for its administrator. Calls are serialized inside pkv; engines may use the
/// same store meanwhile. Every call but `open` walks the whole store. Dropping it (or `close`)
/// closes it (`pkv_store_close`).
///
/// ```no_run
/// let dir = std::env::temp_dir().join("pkv-blocks");
/// let mut store = pkv::StoreAdmin::open(&pkv::StoreParams::file(&dir)?)?;
/// println!("{} blocks", store.info()?.num_blocks);
/// for entry in store.list() {
///     let entry = entry?;
///     println!("{:?} {} bytes {}", entry.state, entry.value_bytes, entry.problem);
/// }
/// let found = store.verify(true)?; // removes the bad values
/// println!("{} good, {} bad removed", found.num_good, found.num_removed);
/// # Ok::<(), pkv::Error>(())
/// ```
pub struct StoreAdmin {
    raw: NonNull<sys::pkv_store>,
    lib: &'static Library,
}

// SAFETY: pkv serializes the calls on one handle and allows them from any thread.
unsafe impl Send for StoreAdmin {}
unsafe impl Sync for StoreAdmin {}

impl StoreAdmin {
    /// Opens the store `params` describes (`pkv_store_open`): FILE or REDIS (the write path's
    /// settings do not apply; `WriteMode::ReadOnly` opens it for reading only, and removals are
    /// then `Status::State`). A FILE store's directory must exist. `Status::Store`: it cannot be
    /// used (the message says why); `Status::Unsupported`: a callback store.
    pub fn open(params: &StoreParams) -> Result<StoreAdmin> {
        let lib = params.library();
        let (p, _bridge) = params.build(); // a callback store is refused before it is called
        let mut raw = ptr::null_mut();
        // SAFETY: p's strings live in params until the call returns; raw receives the handle.
        unsafe { call!(lib, pkv_store_open(&p, &mut raw))? };
        let raw =
            NonNull::new(raw).ok_or_else(|| Error::new(Status::Internal, "pkv_store_open gave NULL"))?;
        Ok(StoreAdmin { raw, lib })
    }

    /// Closes the store now (as dropping it does).
    pub fn close(self) {}

    /// The handle, for calls through `pkv-sys`. Valid while `self` lives.
    pub fn as_raw(&self) -> *mut sys::pkv_store {
        self.raw.as_ptr()
    }

    /// Counts the blocks and their bytes (`pkv_store_info`).
    pub fn info(&self) -> Result<StoreInfo> {
        let mut out = sized!(sys::pkv_store_info);
        // SAFETY: live handle, full struct.
        unsafe { call!(self.lib, pkv_store_info(self.as_raw(), &mut out))? };
        Ok(StoreInfo {
            kind: StoreKind::from_code(out.kind),
            num_blocks: out.num_blocks,
            total_bytes: out.total_bytes,
        })
    }

    /// Every block, each value read and checked (`pkv_store_list`), a page at a time. The
    /// listing borrows the store: no other call on it until the listing is dropped.
    pub fn list(&mut self) -> StoreList<'_> {
        StoreList::new(self, 0)
    }

    /// Every block's key and size, reading no value (`PKV_STORE_LIST_KEYS_ONLY`; state
    /// `ValueState::Unread`).
    pub fn list_keys(&mut self) -> StoreList<'_> {
        StoreList::new(self, sys::PKV_STORE_LIST_KEYS_ONLY)
    }

    /// Reads and checks every value (`pkv_store_verify`); `remove_bad` removes each bad one as
    /// it is found (`Status::State` on a store opened read-only). A failure part way keeps what
    /// was removed before it.
    pub fn verify(&self, remove_bad: bool) -> Result<VerifyResult> {
        let mut r = sized!(sys::pkv_store_verify_result);
        // SAFETY: live handle, full struct.
        unsafe { call!(self.lib, pkv_store_verify(self.as_raw(), u32::from(remove_bad), &mut r))? };
        let first_bad =
            if r.num_bad > 0 { Some((r.first_bad_key.bytes, c_text(&r.first_bad_problem))) } else { None };
        Ok(VerifyResult {
            num_blocks: r.num_blocks,
            num_good: r.num_good,
            num_bad: r.num_bad,
            num_removed: r.num_removed,
            num_gone: r.num_gone,
            good_bytes: r.good_bytes,
            bad_bytes: r.bad_bytes,
            first_bad,
        })
    }

    /// Removes every block (`pkv_store_clear`; other files and keys stay) and returns how many
    /// it removed. `Status::State` on a store opened read-only. A failure part way keeps what
    /// was removed before it.
    pub fn clear(&self) -> Result<u64> {
        let mut removed = 0u64;
        // SAFETY: live handle.
        unsafe { call!(self.lib, pkv_store_clear(self.as_raw(), &mut removed))? };
        Ok(removed)
    }
}

impl Drop for StoreAdmin {
    fn drop(&mut self) {
        if let Ok(close) = &self.lib.raw().pkv_store_close {
            // SAFETY: the handle is live and nothing borrows it any more.
            unsafe { close(self.as_raw()) };
        }
    }
}

/// A listing of a store (`StoreAdmin::list`, `list_keys`): an iterator of its blocks. A failed
/// page is one `Err`, after which the listing ends.
pub struct StoreList<'s> {
    store: &'s mut StoreAdmin,
    flags: u32,
    cursor: u64,
    page: VecDeque<StoreEntry>,
    done: bool,
}

/// Entries pkv writes per call: a page's buffer (memory stays bounded whatever the store).
const PAGE: usize = 64;

impl<'s> StoreList<'s> {
    fn new(store: &'s mut StoreAdmin, flags: u32) -> StoreList<'s> {
        StoreList { store, flags, cursor: 0, page: VecDeque::new(), done: false }
    }

    /// The next page into `self.page`; the listing is done when pkv's cursor comes back 0.
    fn fetch(&mut self) -> Result<()> {
        // SAFETY: pkv's entries are integers and byte arrays: all-zero is valid.
        let mut buf: Vec<sys::pkv_store_entry> = vec![unsafe { std::mem::zeroed() }; PAGE];
        let size = count(std::mem::size_of::<sys::pkv_store_entry>(), "entry size")?;
        let mut len = 0u32;
        let lib = self.store.lib;
        // SAFETY: buf holds PAGE entries of `size` bytes; the cursor is the last one pkv gave.
        unsafe {
            call!(
                lib,
                pkv_store_list(
                    self.store.as_raw(),
                    &mut self.cursor,
                    self.flags,
                    buf.as_mut_ptr(),
                    size,
                    PAGE as u32,
                    &mut len
                )
            )?
        };
        self.page.extend(buf[..len as usize].iter().map(entry));
        self.done = self.cursor == 0;
        Ok(())
    }
}

impl Iterator for StoreList<'_> {
    type Item = Result<StoreEntry>;

    fn next(&mut self) -> Option<Result<StoreEntry>> {
        loop {
            if let Some(e) = self.page.pop_front() {
                return Some(Ok(e));
            }
            if self.done {
                return None;
            }
            if let Err(e) = self.fetch() {
                self.done = true;
                return Some(Err(e));
            }
        }
    }
}

fn entry(e: &sys::pkv_store_entry) -> StoreEntry {
    StoreEntry {
        key: e.key.bytes,
        value_bytes: e.value_bytes,
        state: ValueState::from_code(e.state),
        num_tokens: e.num_tokens,
        payload_bytes: e.payload_bytes,
        parent: e.parent.bytes,
        fingerprint: e.fingerprint,
        problem: c_text(&e.problem),
    }
}

/// A NUL-terminated text in a fixed array (cut to fit by pkv; the whole array if no NUL).
fn c_text(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
