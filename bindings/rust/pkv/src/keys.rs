//! Extra keys and a LoRA adapter in block identity (pkv 0.5): a prompt's multimodal items (each
//! a content hash over its placeholder tokens) and the adapter its KV is computed with join the
//! canonical hash of every block they touch, and a cached block hits only under equal ones
//! (`Engine::allocate_keyed`, `Request::extra_keys`, `block_hash_root_lora`, `block_hash_extra`).
use std::os::raw::c_void;
use std::ptr;

use pkv_sys as sys;

use crate::engine::Engine;
use crate::error::Result;
use crate::library::{call, count, library, sized};
use crate::seq::{Allocation, AllocationQuery, Seq};

/// An extra key of a prompt (`pkv_extra_key`): `key`'s bytes (1 ..= `PKV_MAX_EXTRA_KEY_BYTES`,
/// e.g. an image's content hash) over the tokens `start_token .. end_token`. A prompt's keys
/// are sorted by `start_token` and do not overlap; pkv refuses others naming the index and rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExtraKey<'a> {
    pub start_token: u32,
    pub end_token: u32,
    pub key: &'a [u8],
}

/// What tells a prompt's blocks apart beyond its tokens: the cache salt (empty: none), the
/// extra keys (empty: none) and the LoRA adapter (0: none). `Default` is none of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SeqKeys<'a> {
    pub salt: &'a [u8],
    pub extra_keys: &'a [ExtraKey<'a>],
    pub lora_id: u64,
}

/// The C array of `keys`, borrowing their bytes.
pub(crate) fn raw_keys(keys: &[ExtraKey<'_>]) -> Result<Vec<sys::pkv_extra_key>> {
    keys.iter()
        .map(|k| {
            Ok(sys::pkv_extra_key {
                start_token: k.start_token,
                end_token: k.end_token,
                key: if k.key.is_empty() { ptr::null() } else { k.key.as_ptr() as *const c_void },
                key_len: count(k.key.len(), "extra key")?,
                reserved0: 0,
            })
        })
        .collect()
}

/// (array, count, element size) of a C array for pkv: NULL when empty.
pub(crate) fn keys_arg(raw: &[sys::pkv_extra_key]) -> Result<(*const sys::pkv_extra_key, u32, u32)> {
    let ptr = if raw.is_empty() { ptr::null() } else { raw.as_ptr() };
    Ok((ptr, count(raw.len(), "extra keys")?, std::mem::size_of::<sys::pkv_extra_key>() as u32))
}

impl Engine {
    /// `allocate` of a prompt with extra keys and a LoRA adapter (`pkv_allocate`): its blocks
    /// hit only blocks of equal tokens, extra keys and adapter; the blocks before the first key
    /// keep their text prefix shared. `Status::NoSpace`: nothing changed.
    pub fn allocate_keyed(&self, tokens: &[i32], keys: &SeqKeys<'_>) -> Result<Allocation> {
        let n = count(tokens.len(), "tokens")?;
        let raw = raw_keys(keys.extra_keys)?;
        let sp = self.keyed_params(keys, &raw)?;
        let (mut seq, mut cached) = (0u64, 0u32);
        // SAFETY: tokens has n elements; sp points at keys' salt and raw, which outlive the call.
        unsafe {
            call!(
                self.library(),
                pkv_allocate(self.as_raw(), tokens.as_ptr(), n, &sp, &mut seq, &mut cached)
            )?
        };
        Ok(Allocation { seq: Seq(seq), num_cached_tokens: cached })
    }

    /// What `allocate_keyed` would take now (`pkv_allocate_query`); changes nothing.
    pub fn allocate_query_keyed(&self, tokens: &[i32], keys: &SeqKeys<'_>) -> Result<AllocationQuery> {
        let n = count(tokens.len(), "tokens")?;
        let raw = raw_keys(keys.extra_keys)?;
        let sp = self.keyed_params(keys, &raw)?;
        let (mut blocks, mut cached) = (0u32, 0u32);
        // SAFETY: as in allocate_keyed.
        unsafe {
            call!(
                self.library(),
                pkv_allocate_query(self.as_raw(), tokens.as_ptr(), n, &sp, &mut blocks, &mut cached)
            )?
        };
        Ok(AllocationQuery { num_blocks: blocks, num_cached_tokens: cached })
    }

    pub(crate) fn keyed_params(
        &self,
        keys: &SeqKeys<'_>,
        raw: &[sys::pkv_extra_key],
    ) -> Result<sys::pkv_seq_params> {
        let mut sp = sized!(sys::pkv_seq_params);
        // SAFETY: sp is a full struct.
        unsafe { call!(self.library(), pkv_seq_params_init(&mut sp, sp.struct_size))? };
        sp.cache_salt_len = count(keys.salt.len(), "salt")?;
        if !keys.salt.is_empty() {
            sp.cache_salt = keys.salt.as_ptr() as *const c_void;
        }
        (sp.extra_keys, sp.num_extra_keys, sp.extra_key_size) = keys_arg(raw)?;
        sp.lora_id = keys.lora_id;
        Ok(sp)
    }
}

/// The root a prompt's first block chains from under a LoRA adapter
/// (`pkv_block_hash_root_lora`): `block_hash_root`'s when `lora_id` is 0.
pub fn block_hash_root_lora(seed: u64, salt: &[u8], lora_id: u64) -> Result<u64> {
    let lib = library()?;
    let len = count(salt.len(), "salt")?;
    let mut out = 0u64;
    // SAFETY: salt has len bytes.
    unsafe {
        call!(lib, pkv_block_hash_root_lora(seed, salt.as_ptr() as *const c_void, len, lora_id, &mut out))?
    };
    Ok(out)
}

/// The canonical hash of a block with extra keys (`pkv_block_hash_extra`): its tokens are the
/// prompt's `first_token ..`, `keys` all the prompt's (those not overlapping the block are
/// skipped). `block_hash`'s when none overlaps it.
pub fn block_hash_extra(
    seed: u64,
    parent_hash: u64,
    tokens: &[i32],
    first_token: u32,
    keys: &[ExtraKey<'_>],
) -> Result<u64> {
    let lib = library()?;
    let n = count(tokens.len(), "tokens")?;
    let raw = raw_keys(keys)?;
    let (keys_ptr, num_keys, key_size) = keys_arg(&raw)?;
    let mut out = 0u64;
    // SAFETY: tokens has n elements; keys_ptr num_keys keys whose bytes live in keys.
    unsafe {
        call!(
            lib,
            pkv_block_hash_extra(
                seed,
                parent_hash,
                tokens.as_ptr(),
                n,
                first_token,
                keys_ptr,
                num_keys,
                key_size,
                &mut out
            )
        )?
    };
    Ok(out)
}
