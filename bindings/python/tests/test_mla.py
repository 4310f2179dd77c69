"""Multi-head latent attention (pkv 0.3): an MLA engine's params, its V-less attention checked
against a reference computed here, its pool without V, V-less fp8 scales, and a DeepSeek-V3
config profiled as MLA."""
import array
import math
import os
import random
import unittest

from _util import TREE, pkv

LATENT, ROPE, Q_HEADS, SCALE = 16, 16, 4, 0.2
WIDTH = LATENT + ROPE  # the latent's width: the engine's head_dim


def mla_params(**fields):
    p = pkv.Params(num_layers=2, num_q_heads=Q_HEADS, num_kv_heads=1, head_dim=WIDTH,
                   kv_layout=pkv.KvLayout.MLA, kv_lora_rank=LATENT, qk_rope_head_dim=ROPE,
                   dtype=pkv.DTYPE_F32, softmax_scale=SCALE, block_size=4, num_blocks=16,
                   device=pkv.DEVICE_CPU, num_threads=1)
    for name, value in fields.items():
        setattr(p, name, value)
    return p


def reference(q, latents, n):
    """Absorbed attention of one sequence's n new tokens (positions 0..n-1) in fp64:
    out[t][h] = sum_j softmax_j(SCALE * q[t][h] . latent[j]) * latent[j][:LATENT], j <= t."""
    out = []
    for t in range(n):
        for h in range(Q_HEADS):
            qt = q[(t * Q_HEADS + h) * WIDTH:(t * Q_HEADS + h + 1) * WIDTH]
            scores = [SCALE * sum(a * b for a, b in zip(qt, latents[j * WIDTH:(j + 1) * WIDTH]))
                      for j in range(t + 1)]
            top = max(scores)
            weights = [math.exp(s - top) for s in scores]
            total = sum(weights)
            out += [sum(w * latents[j * WIDTH + d] for j, w in enumerate(weights)) / total
                    for d in range(LATENT)]
    return out


class Mla(unittest.TestCase):
    def test_params_read_back(self):
        p = mla_params()
        self.assertIs(p.kv_layout, pkv.KvLayout.MLA)
        self.assertEqual((p.kv_lora_rank, p.qk_rope_head_dim), (LATENT, ROPE))
        self.assertIs(pkv.Params().kv_layout, pkv.KvLayout.HEADS)
        self.assertEqual(p.as_dict()['kv_layout'], pkv.KvLayout.MLA)
        budget = p.profile()
        self.assertIs(budget.kv_layout, pkv.KvLayout.MLA)
        self.assertEqual(budget.block_bytes, 1 * 2 * 4 * 1 * WIDTH * 4)  # one latent, no V
        with pkv.Engine(p) as engine:
            self.assertTrue(engine.mla)
            self.assertIs(engine.params.kv_layout, pkv.KvLayout.MLA)
            self.assertEqual(engine.params.kv_lora_rank, LATENT)
            self.assertIs(engine.budget().kv_layout, pkv.KvLayout.MLA)
        with self.assertRaises(pkv.InvalidArgumentError):  # MLA caches one latent
            pkv.Engine(mla_params(num_kv_heads=2, num_q_heads=4))

    def test_attention_without_v(self):
        rng = random.Random(7)
        n = 10
        with pkv.Engine(mla_params()) as engine:
            info = engine.pool_info()
            self.assertIsNotNone(info.k_base)
            self.assertIsNone(info.v_base)  # no V: NULL, no crash
            self.assertIsNone(info.host_v_base)
            self.assertEqual((info.kv_heads, info.head_dim), (1, WIDTH))
            seq = engine.allocate(list(range(1, n + 1)))
            with engine.batch([seq]) as batch:
                self.assertEqual(batch.num_tokens, n)
                for layer in range(2):
                    q = array.array('f', [rng.uniform(-1, 1) for _ in range(n * Q_HEADS * WIDTH)])
                    latents = array.array('f', [rng.uniform(-1, 1) for _ in range(n * WIDTH)])
                    out = array.array('f', [0.0] * (n * Q_HEADS * LATENT))  # kv_lora_rank per head
                    if layer == 0:  # a V on an MLA engine is refused, and changes nothing
                        with self.assertRaisesRegex(pkv.InvalidArgumentError, 'no V'):
                            batch.attention(layer, q, latents, latents, out)
                    batch.attention(layer, q, latents, None, out)
                    want = reference(q, latents, n)
                    errors = [abs(g - w) for g, w in zip(out, want)]
                    self.assertLessEqual(max(errors), 1e-4, 'layer %d' % layer)
            self.assertEqual(seq.info().num_computed_tokens, n)
            engine.check()

    def test_fp8_scales_without_v(self):
        with pkv.Engine(mla_params(kv_dtype=pkv.DTYPE_FP8_E4M3)) as engine:
            self.assertEqual(engine.budget().kv_scale_bytes, 1 * 2 * 1 * 4)  # one scale per layer
            engine.set_kv_scales(0, [0.5])  # v_scales None: NULL
            engine.set_kv_scales(1, [0.25], None)
            with self.assertRaises(pkv.InvalidArgumentError):
                engine.set_kv_scales(0, [0.0])
        with pkv.Engine(mla_params()) as engine:  # f32: no scales
            with self.assertRaisesRegex(pkv.InvalidArgumentError, 'not fp8'):
                engine.set_kv_scales(0, [1.0])

    def test_deepseek_v3_config(self):
        path = os.path.join(TREE, 'tools', 'configs', 'deepseek-v3.json')
        p = pkv.Params.from_hf_config(path, device=pkv.DEVICE_CPU, memory_total_bytes=80 << 30,
                                      memory_used_bytes=0)
        self.assertIs(p.kv_layout, pkv.KvLayout.MLA)
        self.assertEqual((p.kv_lora_rank, p.qk_rope_head_dim), (512, 64))
        self.assertEqual((p.num_kv_heads, p.head_dim), (1, 576))
        mscale = 0.1 * 1.0 * math.log(40) + 1  # yarn: factor 40, mscale_all_dim 1
        self.assertAlmostEqual(p.softmax_scale, mscale * mscale / math.sqrt(128 + 64), places=6)
        budget = pkv.profile(p)
        self.assertIs(budget.kv_layout, pkv.KvLayout.MLA)
        self.assertEqual(budget.kv_heads_per_rank, 1)
        self.assertEqual(budget.bytes_per_token, 61 * 576 * 2)  # one bf16 latent per layer


if __name__ == '__main__':
    unittest.main()
