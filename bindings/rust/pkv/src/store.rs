//! The store tier (pkv 0.2): `StoreParams` (`pkv_store_params`) given to `Engine::with_store`,
//! and `Store`, a store of the host's own that pkv calls through the C callbacks below.
use std::collections::HashMap;
use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::ptr;
use std::sync::{Arc, Mutex};

use pkv_sys as sys;

use crate::error::{Error, Result, Status};
use crate::library::{call, library, sized, Library};

/// A store key: 32 bytes (SHA-256 of the parent's key and the block's tokens).
pub type StoreKey = [u8; 32];

/// What a `Store` returns: its error's text reaches `Engine::store_error`.
pub type StoreResult<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// A KV store of the host's own (`PKV_STORE_CALLBACK`): a byte map from 32-byte keys to values
/// of one size per engine. pkv calls it from its own threads (a fetcher and a writer, possibly
/// while the engine's thread runs), hence `Send + Sync`. An error (or a panic, which never
/// unwinds into C) makes every key of that call a miss, counted in `Stats::num_store_errors`
/// and told by `Engine::store_error`; no engine call fails because of it. pkv checks every
/// value it reads before it can hit.
pub trait Store: Send + Sync {
    /// Copies the value held under `key` into `value` (its exact size) and returns true; false
    /// when there is none (or it has another size).
    fn get(&self, key: &StoreKey, value: &mut [u8]) -> StoreResult<bool>;
    /// Stores `value` under `key`, replacing any.
    fn put(&self, key: &StoreKey, value: &[u8]) -> StoreResult<()>;
    /// Whether `key` is held (a hint), when `has_exists` says so; else pkv uses `get`.
    fn exists(&self, _key: &StoreKey) -> StoreResult<bool> {
        Ok(false)
    }
    fn has_exists(&self) -> bool {
        false
    }
}

/// The example store: a map behind a mutex. Share one (`Arc`) between engines to share their KV.
#[derive(Debug, Default)]
pub struct MapStore {
    values: Mutex<HashMap<StoreKey, Vec<u8>>>,
}

impl MapStore {
    pub fn new() -> MapStore {
        MapStore::default()
    }
    pub fn len(&self) -> usize {
        self.lock().len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<StoreKey, Vec<u8>>> {
        self.values.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Store for MapStore {
    fn get(&self, key: &StoreKey, value: &mut [u8]) -> StoreResult<bool> {
        match self.lock().get(key) {
            Some(v) if v.len() == value.len() => {
                value.copy_from_slice(v);
                Ok(true)
            }
            _ => Ok(false),
        }
    }
    fn put(&self, key: &StoreKey, value: &[u8]) -> StoreResult<()> {
        self.lock().insert(*key, value.to_vec());
        Ok(())
    }
    fn exists(&self, key: &StoreKey) -> StoreResult<bool> {
        Ok(self.lock().contains_key(key))
    }
    fn has_exists(&self) -> bool {
        true
    }
}

/// When blocks are written to the store (`PKV_STORE_WRITE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteMode {
    /// When a block is sealed into the prefix cache (the default).
    Through,
    /// When an offloaded block leaves the host tier.
    Back,
    /// Never: the store is only read.
    ReadOnly,
}

impl WriteMode {
    pub fn code(self) -> u32 {
        (match self {
            WriteMode::Through => sys::PKV_STORE_WRITE_THROUGH,
            WriteMode::Back => sys::PKV_STORE_WRITE_BACK,
            WriteMode::ReadOnly => sys::PKV_STORE_READ_ONLY,
        }) as u32
    }
}

/// An engine's store tier: `pkv_store_params` with the library's defaults, built by `file`,
/// `redis` or `callback`, then the setters. See pkv.h for each field.
#[derive(Clone)]
pub struct StoreParams {
    raw: sys::pkv_store_params,
    texts: [Option<CString>; 6], // path, host, username, password, key_prefix, model_id
    store: Option<Arc<dyn Store>>,
    lib: &'static Library,
}

macro_rules! store_setters {
    ($($(#[$doc:meta])* $name:ident: $t:ty => $field:ident;)*) => {$(
        $(#[$doc])*
        pub fn $name(mut self, value: $t) -> StoreParams {
            self.raw.$field = value;
            self
        }
    )*};
}

impl StoreParams {
    /// The defaults (`pkv_store_params_init`): kind `PKV_STORE_NONE`.
    pub fn new() -> Result<StoreParams> {
        StoreParams::with_library(library()?)
    }

    pub fn with_library(lib: &'static Library) -> Result<StoreParams> {
        let mut raw = sized!(sys::pkv_store_params);
        // SAFETY: raw is a pkv_store_params of the size passed.
        unsafe { call!(lib, pkv_store_params_init(&mut raw, raw.struct_size))? };
        Ok(StoreParams { raw, texts: Default::default(), store: None, lib })
    }

    /// A directory of block files (made if missing).
    pub fn file(path: impl AsRef<Path>) -> Result<StoreParams> {
        let path = path.as_ref().to_str().ok_or_else(|| text_error("path"))?;
        let mut p = StoreParams::new()?;
        p.raw.kind = sys::PKV_STORE_FILE as u32;
        p.text(0, path)
    }

    /// A Redis (or Valkey) server.
    pub fn redis(host: &str, port: u32) -> Result<StoreParams> {
        let mut p = StoreParams::new()?;
        p.raw.kind = sys::PKV_STORE_REDIS as u32;
        p.raw.port = port;
        p.text(1, host)
    }

    /// The host's own store, called by pkv until the engine is dropped.
    pub fn callback(store: Arc<dyn Store>) -> Result<StoreParams> {
        let mut p = StoreParams::new()?;
        p.raw.kind = sys::PKV_STORE_CALLBACK as u32;
        p.store = Some(store);
        Ok(p)
    }

    pub fn write_mode(mut self, mode: WriteMode) -> StoreParams {
        self.raw.write_mode = mode.code();
        self
    }
    pub fn username(self, user: &str) -> Result<StoreParams> {
        self.text(2, user)
    }
    pub fn password(self, password: &str) -> Result<StoreParams> {
        self.text(3, password)
    }
    pub fn key_prefix(self, prefix: &str) -> Result<StoreParams> {
        self.text(4, prefix)
    }
    /// The model's identity (pkv 0.4), in the fingerprint of every key and value: engines share
    /// blocks only when their ids (and KV shapes) are equal. Name it by the weights (a weights
    /// digest, or `"org/model@<commit>"`): two fine-tunes of one base model have the same KV
    /// shape, and only this keeps them from reading each other's KV. `pkv::hf_config_digest`
    /// gives one from a config.json. 1 ..= `sys::PKV_MAX_MODEL_ID_BYTES` bytes. Without one,
    /// any model of the same KV shape shares the blocks, and `Engine::store_error` says so.
    pub fn model_id(self, id: &str) -> Result<StoreParams> {
        self.text(5, id)
    }

    store_setters! {
        /// How long `allocate` / `resume` wait for the store, >= 1.
        lookup_timeout_ms: u32 => lookup_timeout_ms;
        /// Blocks waiting for the writer thread; a block finding it full is dropped and counted.
        write_queue_blocks: u32 => write_queue_blocks;
        /// FILE: size cap of the directory's blocks (LRU); 0 = none.
        max_bytes: u64 => max_bytes;
        /// REDIS: SELECT.
        database: u32 => database;
        /// REDIS: expiry of written blocks; 0 = none.
        ttl_seconds: u32 => ttl_seconds;
        connect_timeout_ms: u32 => connect_timeout_ms;
        io_timeout_ms: u32 => io_timeout_ms;
    }

    /// The C struct (its strings and callbacks are set only inside `Engine::with_store` and
    /// `StoreAdmin::open`).
    pub fn raw(&self) -> &sys::pkv_store_params {
        &self.raw
    }

    pub fn library(&self) -> &'static Library {
        self.lib
    }

    fn text(mut self, at: usize, s: &str) -> Result<StoreParams> {
        self.texts[at] = Some(CString::new(s).map_err(|_| text_error(s))?);
        Ok(self)
    }

    /// The C parameters for `pkv_engine_create` and what must outlive the engine.
    pub(crate) fn build(&self) -> (sys::pkv_store_params, Option<Box<Bridge>>) {
        let mut raw = self.raw;
        let text = |i: usize| self.texts[i].as_ref().map_or(ptr::null(), |s| s.as_ptr());
        raw.path = text(0);
        raw.host = text(1);
        raw.username = text(2);
        raw.password = text(3);
        raw.key_prefix = text(4);
        raw.model_id = text(5);
        let bridge = self.store.as_ref().map(|s| Bridge::new(s.clone()));
        raw.callbacks = bridge.as_ref().map_or(ptr::null(), |b| &b.callbacks as *const _);
        (raw, bridge)
    }
}

fn text_error(s: &str) -> Error {
    Error::new(Status::InvalidArgument, format!("{:?}: not a C string (UTF-8, no NUL)", s))
}

/// The callbacks of one engine's `Store`: boxed so `user` (pointing at `store`) never moves.
pub(crate) struct Bridge {
    store: Arc<dyn Store>,
    callbacks: sys::pkv_store_callbacks,
}

impl Bridge {
    fn new(store: Arc<dyn Store>) -> Box<Bridge> {
        let mut b = Box::new(Bridge { store, callbacks: sized!(sys::pkv_store_callbacks) });
        b.callbacks.user = &b.store as *const Arc<dyn Store> as *mut c_void;
        b.callbacks.get = Some(on_get);
        b.callbacks.put = Some(on_put);
        if b.store.has_exists() {
            b.callbacks.exists = Some(on_exists);
        }
        b
    }
}

/// Runs `f` on the store of `user`: 0, or 1 with the error's (or panic's) text in message.
unsafe fn guard(
    user: *mut c_void,
    message: *mut c_char,
    cap: u32,
    f: impl FnOnce(&dyn Store) -> StoreResult<()>,
) -> c_int {
    // SAFETY: user is the Bridge's &store, alive until the engine is destroyed.
    let store: &dyn Store = &**(user as *const Arc<dyn Store>);
    let text = match catch_unwind(AssertUnwindSafe(|| f(store))) {
        Ok(Ok(())) => return 0,
        Ok(Err(e)) => e.to_string(),
        Err(panic) => match panic.downcast_ref::<&str>() {
            Some(s) => format!("panic: {}", s),
            None => format!("panic: {}", panic.downcast_ref::<String>().map_or("?", |s| s.as_str())),
        },
    };
    if !message.is_null() && cap > 0 {
        let n = text.len().min(cap as usize - 1);
        ptr::copy_nonoverlapping(text.as_ptr() as *const c_char, message, n);
        *message.add(n) = 0;
    }
    1
}

unsafe fn keys<'a>(keys: *const sys::pkv_store_key, n: u32) -> &'a [sys::pkv_store_key] {
    if n == 0 {
        &[]
    } else {
        std::slice::from_raw_parts(keys, n as usize)
    }
}

unsafe extern "C" fn on_exists(
    user: *mut c_void,
    k: *const sys::pkv_store_key,
    n: u32,
    out: *mut u8,
    message: *mut c_char,
    cap: u32,
) -> c_int {
    guard(user, message, cap, |store| {
        for (i, key) in keys(k, n).iter().enumerate() {
            *out.add(i) = u8::from(store.exists(&key.bytes)?);
        }
        Ok(())
    })
}

#[allow(clippy::too_many_arguments)] // the C callback's
unsafe extern "C" fn on_get(
    user: *mut c_void,
    k: *const sys::pkv_store_key,
    n: u32,
    values: *mut c_void,
    value_bytes: u64,
    found: *mut u8,
    _timeout_ms: u32,
    message: *mut c_char,
    cap: u32,
) -> c_int {
    guard(user, message, cap, |store| {
        let size = value_bytes as usize;
        for (i, key) in keys(k, n).iter().enumerate() {
            // SAFETY: values holds n values of value_bytes each.
            let value = std::slice::from_raw_parts_mut((values as *mut u8).add(i * size), size);
            *found.add(i) = u8::from(store.get(&key.bytes, value)?);
        }
        Ok(())
    })
}

unsafe extern "C" fn on_put(
    user: *mut c_void,
    k: *const sys::pkv_store_key,
    n: u32,
    values: *const c_void,
    value_bytes: u64,
    message: *mut c_char,
    cap: u32,
) -> c_int {
    guard(user, message, cap, |store| {
        let size = value_bytes as usize;
        for (i, key) in keys(k, n).iter().enumerate() {
            let value = std::slice::from_raw_parts((values as *const u8).add(i * size), size);
            store.put(&key.bytes, value)?;
        }
        Ok(())
    })
}
