"""Block descriptors (since 0.11.0): Engine.block_segments, Engine.seq_segments and
Engine.layout_fingerprint, the pieces a transport moves blocks by: a prompt computed on one
engine is moved into another of the same layout (other block counts) by copying segment i to
segment i."""
import array
import ctypes
import unittest

from _util import pkv

LAYERS, Q_HEADS, KV_HEADS, DIM, BS = 2, 4, 2, 8, 4


def params(num_blocks, dtype=pkv.DTYPE_F32):
    return pkv.Params(num_layers=LAYERS, num_q_heads=Q_HEADS, num_kv_heads=KV_HEADS,
                      head_dim=DIM, dtype=dtype, block_size=BS, num_blocks=num_blocks,
                      device=pkv.DEVICE_CPU, num_threads=1)


def page_params(num_blocks):
    p = params(num_blocks)
    p.block_layout = pkv.BlockLayout.PAGE
    return p


def compute(engine, seq):
    """One batch of seq's tokens, K and V of token t, layer l, value i being known numbers."""
    with engine.batch([seq]) as batch:
        n = batch.num_tokens
        q = array.array('f', [0.01 * i for i in range(n * Q_HEADS * DIM)])
        out = array.array('f', [0.0] * (n * Q_HEADS * DIM))
        for layer in range(LAYERS):
            k = array.array('f', [100.0 * t + 10.0 * layer + 0.001 * i
                                  for t in range(n) for i in range(KV_HEADS * DIM)])
            v = array.array('f', [-x for x in k])
            batch.attention(layer, q, k, v, out)


def read(segment):
    return ctypes.string_at(segment.base, segment.bytes)


class Segments(unittest.TestCase):
    def test_fingerprints(self):
        with pkv.Engine(params(16)) as a, pkv.Engine(params(24)) as b, \
                pkv.Engine(params(16, pkv.DTYPE_BF16)) as c:
            fa = a.layout_fingerprint()
            self.assertIsInstance(fa, bytes)
            self.assertEqual(len(fa), 32)
            self.assertNotEqual(fa, bytes(32))
            self.assertEqual(fa, b.layout_fingerprint(rank=0))  # other block counts, one layout
            self.assertNotEqual(fa, c.layout_fingerprint())  # another dtype
            with self.assertRaisesRegex(pkv.InvalidArgumentError, 'rank 1'):
                a.layout_fingerprint(1)

    def test_move_a_prompt_by_its_segments(self):
        prompt = list(range(100, 108))  # 8 tokens: 2 blocks
        with pkv.Engine(params(16)) as a, pkv.Engine(params(24)) as b:
            sa = a.allocate(prompt)
            compute(a, sa)
            b.allocate(list(range(900, 904)))  # b's blocks of the prompt at other ids
            sb = b.allocate(prompt)
            src = a.seq_segments(sa, 0, 2)
            dst = b.seq_segments(sb.id, 0, 2)
            self.assertEqual(len(src), 2 * LAYERS * 2)
            self.assertEqual(len(dst), len(src))
            block_bytes = BS * KV_HEADS * DIM * 4
            for s, d in zip(src, dst):
                self.assertIsInstance(s, pkv.Segment)
                self.assertEqual(s.bytes, block_bytes)
                self.assertEqual(d.bytes, s.bytes)
            self.assertNotEqual(read(src[0]), read(dst[0]))  # b's blocks not computed yet
            # layer 0's K of token 1, value 2: as compute() wrote it
            self.assertAlmostEqual(array.array('f', read(src[0]))[KV_HEADS * DIM + 2],
                                   100.002, places=4)
            for s, d in zip(src, dst):
                ctypes.memmove(d.base, s.base, s.bytes)
            self.assertEqual([read(d) for d in b.seq_segments(sb, 0, 2)],
                             [read(s) for s in src])
            # block 1 alone is the second half of the list
            self.assertEqual(a.seq_segments(sa, 1, 1), src[LAYERS * 2:])
            a.check()
            b.check()

    def test_block_segments_are_where_pool_info_says(self):
        with pkv.Engine(params(16)) as engine:
            info = engine.pool_info()
            block = info.block_stride * 4  # f32
            segments = engine.block_segments([1, 3], tier=pkv.Tier.DEVICE)
            self.assertEqual(len(segments), 2 * LAYERS * 2)
            self.assertEqual(segments[0], pkv.Segment(info.k_base + 1 * block, block))
            self.assertEqual(segments[1].base, info.v_base + 1 * block)
            self.assertEqual(segments[2].base, info.k_base + info.layer_stride * 4 + block)
            self.assertEqual(segments[4].base, info.k_base + 3 * block)
            self.assertEqual(engine.block_segments([]), [])

    def test_page_layout_is_one_segment_a_block(self):
        prompt = list(range(100, 108))
        with pkv.Engine(params(16)) as a, pkv.Engine(page_params(16)) as b:
            self.assertEqual(b.params.block_layout, pkv.BlockLayout.PAGE)
            self.assertNotEqual(a.layout_fingerprint(), b.layout_fingerprint())
            sa, sb = a.allocate(prompt), b.allocate(prompt)
            compute(a, sa)
            compute(b, sb)
            layers = a.seq_segments(sa, 0, 2)
            pages = b.seq_segments(sb, 0, 2)
            self.assertEqual(len(pages), 2)  # a block, one segment
            per = LAYERS * 2
            for i, page in enumerate(pages):  # the page: layer after layer, K then V
                self.assertEqual(read(page),
                                 b''.join(read(s) for s in layers[i * per:(i + 1) * per]))

    def test_refusals(self):
        with pkv.Engine(params(16)) as engine:
            with self.assertRaises(pkv.InvalidArgumentError) as ctx:
                engine.block_segments([1], tier=pkv.Tier.HOST)  # no host tier
            self.assertEqual(ctx.exception.status, pkv.ERR_INVALID_ARGUMENT)
            self.assertIn('no host tier', ctx.exception.message)
            with self.assertRaisesRegex(pkv.InvalidArgumentError, 'blocks\\[0\\] is 16'):
                engine.block_segments([16])
            seq = engine.allocate(list(range(8)))
            with self.assertRaisesRegex(pkv.InvalidArgumentError, 'it has 2 blocks'):
                engine.seq_segments(seq, 1, 2)
            with self.assertRaises(pkv.NotFoundError):
                engine.seq_segments(seq.id + 100, 0, 1)
            seq.preempt()
            with self.assertRaises(pkv.StateError):
                engine.seq_segments(seq, 0, 1)


if __name__ == '__main__':
    unittest.main()
