"""The canonical block hash (pkv_block_hash_root, pkv_block_hash; with extra keys and a LoRA
adapter since 0.5.0, pkv_block_hash_root_lora and pkv_block_hash_extra): how routers and KV
tiers name a block independently of pkv's internals."""
import ctypes

from . import _raw
from ._buffers import byte_string, int32_array
from ._lib import lib
from .extra_keys import key_array
from .params import check


def block_hash_root(seed=0, salt=None):
    """The hash a prompt's first block chains from: XXH3-64 of the salt (bytes or str; None =
    empty) with seed."""
    data, n = byte_string(salt)
    out = ctypes.c_uint64()
    check(lib.pkv_block_hash_root(seed, data, n, ctypes.byref(out)))
    return out.value


def block_hash(parent_hash, tokens, seed=0):
    """The hash of one block of tokens whose previous block (or root) hashes to parent_hash."""
    arr, n = int32_array(tokens)
    out = ctypes.c_uint64()
    check(lib.pkv_block_hash(seed, parent_hash, arr, n, ctypes.byref(out)))
    return out.value


def block_hash_root_lora(seed=0, salt=None, lora_id=0):
    """The root of a prompt computed with LoRA adapter lora_id (0 = none: block_hash_root's)."""
    data, n = byte_string(salt)
    out = ctypes.c_uint64()
    check(lib.pkv_block_hash_root_lora(seed, data, n, lora_id, ctypes.byref(out)))
    return out.value


def block_hash_extra(parent_hash, tokens, first_token, extra_keys=None, seed=0):
    """The hash of one block whose tokens are the prompt's [first_token, first_token +
    len(tokens)), with the prompt's extra keys (pkv.ExtraKeys, sorted, not overlapping: all of
    them may be given, those not touching the block are skipped). Without a key touching it,
    block_hash's."""
    arr, n = int32_array(tokens)
    keys, num_keys, keep = key_array(extra_keys)
    out = ctypes.c_uint64()
    check(lib.pkv_block_hash_extra(seed, parent_hash, arr, n, first_token, keys, num_keys,
                                   ctypes.sizeof(_raw.pkv_extra_key), ctypes.byref(out)))
    del keep
    return out.value


def block_hashes(blocks, seed=0, salt=None, extra_keys=None, lora_id=0):
    """[root, hash of block 0, hash of block 1, ...] of a prompt split into blocks, with its
    extra keys and adapter when given (as pkv_allocate's KV events name them)."""
    if not extra_keys and not lora_id:
        hashes = [block_hash_root(seed, salt)]
        for tokens in blocks:
            hashes.append(block_hash(hashes[-1], tokens, seed))
        return hashes
    hashes, first = [block_hash_root_lora(seed, salt, lora_id)], 0
    for tokens in blocks:
        tokens = list(tokens)
        hashes.append(block_hash_extra(hashes[-1], tokens, first, extra_keys, seed))
        first += len(tokens)
    return hashes
