"""attention() checks every buffer's element type and length against the engine's model dtype
and shape before it calls pkv (issue 26, item 2): float32 arrays on a bf16 engine gave NaN."""
import array
import struct
import unittest
from unittest import mock

from _util import pkv, small_params
from test_mla import LATENT, Q_HEADS, WIDTH, mla_params

N = 3  # tokens of the step: [N][4 q heads][16], [N][2 kv heads][16]
Q, KV = N * 4 * 16, N * 2 * 16


def bf16_bits(x):
    """x as bf16 (its float32 bits' upper half, truncated: exact for the values used here)."""
    return struct.unpack('<I', struct.pack('<f', x))[0] >> 16


def from_bf16(bits):
    return struct.unpack('<f', struct.pack('<I', bits << 16))[0]


class Refusals(unittest.TestCase):
    def setUp(self):
        self.engine = pkv.Engine(small_params(dtype=pkv.DTYPE_BF16))
        self.seq = self.engine.allocate([1, 2, 3])
        self.batch = self.engine.batch([self.seq])

    def tearDown(self):
        self.engine.close()

    def refused(self, pattern, q, k, v, out):
        """attention refuses these buffers with InvalidArgumentError, before pkv is called."""
        called = []
        with mock.patch.object(pkv.lib, 'pkv_attention', lambda *a: called.append(a) or 0):
            with self.assertRaisesRegex(pkv.InvalidArgumentError, pattern) as ctx:
                self.batch.attention(0, q, k, v, out)
        self.assertEqual(called, [])
        return ctx.exception.message

    def test_float32_on_a_bf16_engine(self):
        q, kv = array.array('f', [0.5] * Q), array.array('f', [0.5] * KV)
        message = self.refused(': q: ', q, kv, kv, array.array('f', [0.0] * Q))
        self.assertIn("the engine's dtype is bf16", message)
        self.assertIn("uint16 bits (array('H'), numpy uint16)", message)
        self.assertIn('got float32', message)
        ok_q, ok_kv = array.array('H', [0] * Q), array.array('H', [0] * KV)
        self.refused(': k: .*got float32', ok_q, kv, ok_kv, array.array('H', [0] * Q))
        self.refused(': v: .*got float64', ok_q, ok_kv, array.array('d', [0.0] * KV),
                     array.array('H', [0] * Q))
        self.refused(': out: .*got float32', ok_q, ok_kv, ok_kv, array.array('f', [0.0] * Q))
        self.refused(': q: .*got int16', array.array('h', [0] * Q), ok_kv, ok_kv,
                     array.array('H', [0] * Q))

    def test_wrong_lengths(self):
        q, out = array.array('H', [0] * Q), array.array('H', [0] * Q)
        kv = array.array('H', [0] * KV)
        message = self.refused(': q: ', q[:-1], kv, kv, out)
        self.assertEqual(message, 'q: 191 uint16 elements, this step needs 192 '
                                  '(3 tokens x 4 q heads x 16)')
        self.refused(r': k: 95 uint16 elements, this step needs 96 \(3 tokens x 2 kv heads x 16\)',
                     q, kv[:-1], kv, out)
        self.refused(': v: 0 uint16 elements', q, kv, array.array('H'), out)
        self.refused(': out: 191 ', q, kv, kv, out[:-1])
        self.refused(r': k: 191 bytes, this step needs 192 \(3 tokens x 2 kv heads x 16, bf16: 2 '
                     r'bytes each\)', q, bytearray(2 * KV - 1), kv, out)

    def test_v_none_on_a_heads_engine(self):
        kv = array.array('H', [0] * KV)
        self.refused('v is None; only an MLA engine', array.array('H', [0] * Q), kv, None,
                     array.array('H', [0] * Q))

    def test_right_buffers_run(self):
        ones = [bf16_bits(1.0)] * Q
        q = array.array('H', ones)
        k = array.array('H', [bf16_bits(1.0)] * KV)
        v = array.array('H', [bf16_bits(0.25 * (1 + i % 16)) for i in range(KV)])
        for out in (array.array('H', [0] * Q), bytearray(2 * Q)):  # typed, or raw bytes
            for layer in range(2):
                self.batch.attention(layer, q, k, v, out)
            values = array.array('H', bytes(out)) if isinstance(out, bytearray) else out
            # every score is equal: each out is the mean of its context's v, here every token's
            # own values (v rows are the same for every token), 0.25 * (1 + d)
            self.assertEqual([from_bf16(b) for b in values[:16]],
                             [0.25 * (1 + d) for d in range(16)])
        self.batch.end()
        self.assertEqual(self.seq.info().num_computed_tokens, 3)


class OtherDtypes(unittest.TestCase):
    def test_f16_takes_its_bits_as_uint16(self):
        # (numpy float16 arrays too: test_engine's numpy test, where numpy is installed)
        with pkv.Engine(small_params(dtype=pkv.DTYPE_F16)) as engine:
            with engine.batch([engine.allocate([1, 2, 3])]) as batch:
                q, kv = array.array('H', [0] * Q), array.array('H', [0] * KV)
                batch.attention(0, q, kv, kv, array.array('H', q))
                with self.assertRaisesRegex(pkv.InvalidArgumentError, "dtype is f16.*got float32"):
                    batch.attention(1, array.array('f', [0.0] * Q), kv, kv, bytearray(2 * Q))
                batch.attention(1, q, kv, kv, bytearray(2 * Q))

    def test_f32_refuses_16_bit_elements(self):
        with pkv.Engine(small_params()) as engine:
            with engine.batch([engine.allocate([1, 2, 3])]) as batch:
                q, kv = array.array('f', [0.0] * Q), array.array('f', [0.0] * KV)
                with self.assertRaisesRegex(pkv.InvalidArgumentError, 'dtype is f32.*got uint16'):
                    batch.attention(0, q, array.array('H', [0] * 2 * KV), kv, array.array('f', q))
                with self.assertRaisesRegex(pkv.InvalidArgumentError, 'dtype is f32.*got int32'):
                    batch.attention(0, q, kv, array.array('i', [0] * KV), array.array('f', q))
                batch.attention(0, q, kv, kv, array.array('f', q))
                batch.attention(1, q, kv, kv, array.array('f', q))

    def test_mla_widths(self):
        n = 2
        with pkv.Engine(mla_params()) as engine:
            with engine.batch([engine.allocate([1, 2])]) as batch:
                q = array.array('f', [0.0] * (n * Q_HEADS * WIDTH))
                latents = array.array('f', [0.0] * (n * WIDTH))
                out = array.array('f', [0.0] * (n * Q_HEADS * LATENT))
                with self.assertRaisesRegex(pkv.InvalidArgumentError,
                                            r'^ERR_INVALID_ARGUMENT: k: 63 float32 elements, '
                                            r'this step needs 64 \(2 tokens x 32\)'):
                    batch.attention(0, q, latents[:-1], None, out)
                with self.assertRaisesRegex(pkv.InvalidArgumentError,
                                            r'out: 127 float32 elements, this step needs 128 '
                                            r'\(2 tokens x 4 q heads x 16\)'):
                    batch.attention(0, q, latents, None, out[:-1])
                with self.assertRaisesRegex(pkv.InvalidArgumentError, 'v must be None'):
                    batch.attention(0, q, latents, latents, out)
                for layer in range(2):
                    batch.attention(layer, q, latents, None, out)


if __name__ == '__main__':
    unittest.main()
