#!/usr/bin/env python3
"""The demo job of bindings/DEMO.md in Python; prints what examples/demo.c prints.

Usage: demo.py [seed]   (default 42)
"""
import array
import os
import sys

# In a pkv checkout, the package next to this example; elsewhere (a copy of it), the installed one.
_BINDING = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
if os.path.isfile(os.path.join(_BINDING, 'pkv', '__init__.py')):
    sys.path.insert(0, _BINDING)
import pkv  # noqa: E402  (checks pkv_abi_version() as it loads libpkv)

LAYERS, Q_HEADS, KV_HEADS, HEAD_DIM, SYSTEM_LEN, REQUESTS, DECODE_STEPS = 2, 4, 2, 16, 32, 3, 4
MASK = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def token(self):
        return self.next() % 1000

    def values(self, n):  # (float)(next >> 40) / 2^24 - 0.5 is exact in f32 and in f64
        return array.array('f', [(self.next() >> 40) / 16777216.0 - 0.5 for _ in range(n)])


def step(engine, rng, seqs):
    """One step over seqs: random q/k/v, pkv_attention on every layer; the sum of the outputs."""
    total = 0.0
    with engine.batch(seqs) as batch:
        n = batch.num_tokens
        out = array.array('f', bytes(4 * n * Q_HEADS * HEAD_DIM))
        for layer in range(LAYERS):
            q = rng.values(n * Q_HEADS * HEAD_DIM)
            k = rng.values(n * KV_HEADS * HEAD_DIM)
            v = rng.values(n * KV_HEADS * HEAD_DIM)
            batch.attention(layer, q, k, v, out)
            for x in out:
                total += x
    return total


def main():
    rng = SplitMix64(int(sys.argv[1]) if len(sys.argv) > 1 else 42)
    params = pkv.Params(num_layers=LAYERS, num_q_heads=Q_HEADS, num_kv_heads=KV_HEADS,
                        head_dim=HEAD_DIM, dtype=pkv.DTYPE_F32, block_size=16, num_blocks=64,
                        device=pkv.DEVICE_CPU, num_threads=1)
    with pkv.Engine(params) as engine:
        print('pkv %d abi %d' % (pkv.version(), pkv.abi_version()))
        system = [rng.token() for _ in range(SYSTEM_LEN)]
        seqs, checksum, cached = [], 0.0, []
        for _ in range(REQUESTS):
            length = SYSTEM_LEN + 5 + rng.next() % 10
            seq = engine.allocate(system + [rng.token() for _ in range(SYSTEM_LEN, length)])
            cached.append(seq.num_cached_tokens)
            seqs.append(seq)
            checksum += step(engine, rng, [seq])  # prefill
        print('cached tokens: ' + ' '.join(map(str, cached)))
        for _ in range(DECODE_STEPS):
            for seq in seqs:
                seq.append([rng.token()])
            checksum += step(engine, rng, seqs)
        child = seqs[0].fork()
        child.append([rng.token()])
        checksum += step(engine, rng, [child])
        seqs.append(child)

        st = engine.stats()
        print('prefix: %d of %d tokens cached' % (st.prefix_hit_tokens, st.prefix_query_tokens))
        print('blocks used: %d of %d, copy-on-write copies: %d'
              % (st.num_used_blocks, st.num_blocks, st.num_cow_copies))
        print('attention checksum: %.6g' % checksum)
        for seq in seqs:
            seq.release()
        st = engine.stats()
        print('after release: %d blocks free, %d of them cached'
              % (st.num_free_blocks, st.num_cached_blocks))


if __name__ == '__main__':
    main()
