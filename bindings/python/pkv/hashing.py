"""The canonical block hash (pkv_block_hash_root, pkv_block_hash): how routers and KV tiers
name a block independently of pkv's internals."""
import ctypes

from ._buffers import byte_string, int32_array
from ._lib import lib
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


def block_hashes(blocks, seed=0, salt=None):
    """[root, hash of block 0, hash of block 1, ...] of a prompt split into blocks."""
    hashes = [block_hash_root(seed, salt)]
    for tokens in blocks:
        hashes.append(block_hash(hashes[-1], tokens, seed))
    return hashes
