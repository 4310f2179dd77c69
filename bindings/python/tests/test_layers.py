"""The cache described per layer (pkv 0.5): Params.layer_specs (the binding owns the array for
the calls that read it), each KV group's bytes (kv_group_info), an engine's layers (layer_info),
attention sinks, attention on heterogeneous layers (each layer's own shape, K = V and shared
layers), and the specs a config gives (Params.from_hf_config_layers)."""
import array
import os
import unittest

from _util import TREE, pkv

CONFIGS = os.path.join(TREE, 'tools', 'configs')
Q_HEADS, N = 4, 5  # q heads; tokens of the prompt
F32 = 4


def mixed_params(**fields):
    """Four layers: 0 full (2 kv heads x 16), 1 sliding 8 with sinks, 2 full K = V (2 kv heads x
    32: the bytes of layer 0's K and V), 3 shared (reads layer 0)."""
    p = pkv.Params(num_layers=4, num_q_heads=Q_HEADS, num_kv_heads=2, head_dim=16,
                   dtype=pkv.DTYPE_F32, block_size=4, num_blocks=32, device=pkv.DEVICE_CPU,
                   num_threads=1,
                   layer_specs=[pkv.LayerSpec(), pkv.LayerSpec.sliding(8, sinks=True),
                                pkv.LayerSpec(head_dim=32, k_eq_v=True),
                                pkv.LayerSpec.shared(0)])
    for name, value in fields.items():
        setattr(p, name, value)
    return p


def values(n, seed):
    """n floats in [-1, 1), the same for a seed."""
    x, out = seed, array.array('f')
    for _ in range(n):
        x = (x * 1103515245 + 12345) % 2**31
        out.append(x / 2**30 - 1)
    return out


class Specs(unittest.TestCase):
    def test_params_keep_and_copy_the_specs(self):
        p = mixed_params()
        specs = p.layer_specs
        self.assertEqual(len(specs), 4)
        self.assertIs(specs[1].attention, pkv.AttentionKind.SLIDING)
        self.assertEqual((specs[1].window, specs[1].sinks), (8, True))
        self.assertIs(specs[3].kind, pkv.LayerKind.SHARED)
        self.assertEqual(p.layer_spec_size, 104)  # sizeof(pkv_layer_spec) (0.7), set with the specs
        specs[0].head_dim = 99  # a copy: the Params' array is its own
        self.assertEqual(p.layer_specs[0].head_dim, 0)
        self.assertEqual(p.copy().layer_specs, p.layer_specs)
        self.assertEqual(p.as_dict()['layer_specs'], p.layer_specs)
        p.layer_specs = [dict(attention=pkv.ATTENTION_CHUNKED, window=16)] * 4  # dicts too
        self.assertIs(p.layer_specs[2].attention, pkv.AttentionKind.CHUNKED)
        p.layer_specs = None
        self.assertEqual((p.layer_specs, p.layer_spec_size), (None, 0))
        with self.assertRaisesRegex(AttributeError, 'layer_specs'):
            p.layer_spec_size = 48

    def test_bad_specs_are_refused_before_pkv(self):
        p = mixed_params()
        with self.assertRaisesRegex(pkv.InvalidArgumentError, r'layer_specs\[1\]\.window is -1'):
            p.layer_specs = [pkv.LayerSpec(), pkv.LayerSpec.sliding(-1)]
        with self.assertRaisesRegex(pkv.InvalidArgumentError, r'layer_specs\[0\]\.sinks'):
            p.layer_specs = [pkv.LayerSpec(sinks=2)]
        with self.assertRaisesRegex(pkv.InvalidArgumentError, r'layer_specs\[0\]: .*head_dims'):
            p.layer_specs = [{'head_dims': 8}]
        self.assertEqual(len(p.layer_specs), 4)  # a refusal changed nothing
        p.num_layers = 3
        for call in (pkv.Engine, pkv.profile, pkv.kv_groups, lambda q: pkv.kv_group_info(q, 0)):
            with self.assertRaisesRegex(pkv.InvalidArgumentError, 'layer_specs has 4 entries, '
                                        'num_layers is 3'):
                call(p)

    def test_groups_and_their_bytes(self):
        # what holds however layers of one window but other shapes are grouped (pkv.h: by
        # attention and window; DESIGN §12: also by bytes per token)
        p = mixed_params()
        groups = p.kv_groups()
        g = groups.layer_group
        self.assertEqual(g[3], g[0])  # the shared layer: its source's group
        self.assertNotIn(g[1], (g[0], g[2]))  # the windowed layer's own
        self.assertEqual(groups.group_window[g[1]], 8)
        self.assertEqual([groups.group_window[g[l]] for l in (0, 2)], [0, 0])
        self.assertEqual(groups.group_window[0], 0)  # full groups first
        infos = pkv.kv_group_infos(p)
        self.assertEqual(len(infos), groups.num_groups)
        self.assertIsInstance(infos[0], pkv.KvGroupInfo)
        sliding = infos[g[1]]
        self.assertIs(sliding.attention, pkv.AttentionKind.SLIDING)
        self.assertEqual((sliding.window, sliding.num_layers), (8, 1))
        self.assertEqual(sliding.bytes_per_token, 2 * 16 * 2 * F32)
        self.assertEqual(p.kv_group_info(g[1]), sliding)
        self.assertTrue(all(i.attention is pkv.AttentionKind.FULL for i in infos if i != sliding))
        self.assertEqual(sum(i.num_layers for i in infos), 3)  # the shared layer has no cache
        model_bytes = (2 * 16 * 2 * 2 + 2 * 32) * F32  # K and V of layers 0 and 1, K of layer 2
        self.assertEqual(sum(i.bytes_per_token for i in infos), model_bytes)
        with self.assertRaises(pkv.InvalidArgumentError):
            pkv.kv_group_info(p, groups.num_groups)
        budget = p.profile()
        self.assertEqual(budget.num_cached_layers, 3)
        self.assertEqual(budget.model_bytes_per_token, model_bytes)

    def test_engine_layers(self):
        with pkv.Engine(mixed_params()) as engine:
            self.assertEqual([(s.kind, s.attention, s.window, s.sinks)  # kept past create
                              for s in engine.params.layer_specs],
                             [(s.kind, s.attention, s.window, s.sinks)
                              for s in mixed_params().layer_specs])
            infos = [engine.layer_info(layer) for layer in range(4)]
            self.assertEqual(engine.kv_group_info(infos[1].group).window, 8)
            self.assertIsInstance(infos[0], pkv.LayerInfo)
            self.assertEqual([i.kind for i in infos], [pkv.LayerKind.ATTENTION] * 3 +
                             [pkv.LayerKind.SHARED])
            self.assertEqual([i.group for i in infos], engine.kv_groups().layer_group)
            self.assertEqual(infos[3].group, infos[0].group)
            self.assertEqual([i.source_layer for i in infos], [0, 1, 2, 0])
            self.assertEqual([(i.kv_heads, i.head_dim, i.v_head_dim) for i in infos],
                             [(2, 16, 16), (2, 16, 16), (2, 32, 32), (2, 16, 16)])
            self.assertEqual([i.k_eq_v for i in infos], [False, False, True, False])
            self.assertEqual([i.sinks for i in infos], [False, True, False, False])
            self.assertAlmostEqual(infos[2].softmax_scale, 32 ** -0.5, places=6)
            self.assertEqual(infos[2].v_base, infos[2].k_base)  # V is K
            self.assertEqual(infos[3].k_base, infos[0].k_base)  # the shared layer reads layer 0
            with self.assertRaises(pkv.InvalidArgumentError):
                engine.layer_info(4)
            pool = engine.pool_info()  # unequal layers: one range of pages
            self.assertEqual((pool.num_layers, pool.v_base), (1, None))

    def test_sinks(self):
        with pkv.Engine(mixed_params()) as engine:
            with self.assertRaises(pkv.InvalidArgumentError):  # layer 0 has no sinks
                engine.set_attention_sinks(0, [0.0] * Q_HEADS)
            with self.assertRaises(pkv.InvalidArgumentError):  # one per q head
                engine.set_attention_sinks(1, [0.0] * (Q_HEADS - 1))
            with self.assertRaises(pkv.InvalidArgumentError):
                engine.set_attention_sinks(1, [float('nan')] * Q_HEADS)
            seq = engine.allocate(list(range(1, N + 1)))
            with engine.batch([seq]) as batch:  # sinks never set: refused, not ignored
                with self.assertRaises(pkv.StateError):
                    batch.attention(1, values(N * Q_HEADS * 16, 1), values(N * 32, 2),
                                    values(N * 32, 3), array.array('f', [0] * (N * Q_HEADS * 16)))
                batch.abort()
            with self.assertRaises(pkv.StateError):  # too late: a sequence was made
                engine.set_attention_sinks(1, [0.5] * Q_HEADS)

    def test_attention_on_heterogeneous_layers(self):
        with pkv.Engine(mixed_params()) as engine:
            engine.set_attention_sinks(1, [0.5, -1.0, 2.0, 0.0])
            seq = engine.allocate(list(range(1, N + 1)))
            q16, k16, v16 = values(N * Q_HEADS * 16, 4), values(N * 32, 5), values(N * 32, 6)
            out = {layer: array.array('f', [0] * (N * Q_HEADS * (32 if layer == 2 else 16)))
                   for layer in range(4)}
            with engine.batch([seq]) as batch:
                batch.attention(0, q16, k16, v16, out[0])
                batch.attention(1, q16, k16, v16, out[1])  # layer 0's inputs; its window holds all
                k32 = values(N * 2 * 32, 7)
                with self.assertRaisesRegex(pkv.InvalidArgumentError, 'K = V|k_eq_v'):
                    batch.attention(2, values(N * Q_HEADS * 32, 8), k32, k32, out[2])
                with self.assertRaisesRegex(pkv.InvalidArgumentError, 'q: .* this step needs'):
                    batch.attention(2, q16, k32, None, out[2])  # q is 32 wide on layer 2
                batch.attention(2, values(N * Q_HEADS * 32, 8), k32, None, out[2])
                with self.assertRaisesRegex(pkv.InvalidArgumentError, 'SHARED .* layer 0'):
                    batch.attention(3, q16, k16, None, out[3])
                batch.attention(3, q16, None, None, out[3])
            # the shared layer attends over layer 0's K and V with layer 0's q: the same output
            self.assertEqual(out[3], out[0])
            # K = V: the first token sees only itself, so q head 0's output is kv head 0's K
            self.assertLessEqual(max(abs(a - b) for a, b in zip(out[2][:32], k32[:32])), 1e-6)
            # the sinks take weight and add nothing: each output of layer 1 is layer 0's scaled
            # by a factor below 1 (the same keys, values and window)
            self.assertNotEqual(out[1], out[0])
            self.assertTrue(all(abs(a) <= abs(b) + 1e-6 for a, b in zip(out[1], out[0])))
            engine.check()

    def test_fp8_scales_per_layer(self):
        p = pkv.Params(num_layers=3, num_q_heads=Q_HEADS, num_kv_heads=2, head_dim=16,
                       dtype=pkv.DTYPE_F32, kv_dtype=pkv.DTYPE_FP8_E4M3, block_size=4,
                       num_blocks=16, device=pkv.DEVICE_CPU, num_threads=1,
                       layer_specs=[pkv.LayerSpec(), pkv.LayerSpec(num_kv_heads=1, k_eq_v=True),
                                    pkv.LayerSpec.shared(0)])
        with pkv.Engine(p) as engine:
            engine.set_kv_scales(0, [0.5, 0.25], [2.0, 1.0])
            engine.set_kv_scales(1, [0.5])  # K = V: its one kv head, no V scales
            with self.assertRaisesRegex(pkv.InvalidArgumentError, 'k_scales needs 1 values'):
                engine.set_kv_scales(1, [0.5, 0.5])  # the layer's heads, not the flat field's
            with self.assertRaises(pkv.InvalidArgumentError):  # a shared layer has its source's
                engine.set_kv_scales(2, [0.5, 0.5], [0.5, 0.5])

    def test_chunked_and_sliding_layers_mask_their_keys(self):
        # q = 0 makes every score equal: each token's output is the mean of the V it sees
        n, heads, dim = 6, 2, 8
        p = pkv.Params(num_layers=2, num_q_heads=heads, num_kv_heads=heads, head_dim=dim,
                       dtype=pkv.DTYPE_F32, block_size=4, num_blocks=16, device=pkv.DEVICE_CPU,
                       num_threads=1, layer_specs=[pkv.LayerSpec.chunked(4),
                                                   pkv.LayerSpec.sliding(3)])
        seen = {0: lambda t: range(t // 4 * 4, t + 1), 1: lambda t: range(max(0, t - 2), t + 1)}
        with pkv.Engine(p) as engine:
            seq = engine.allocate(list(range(1, n + 1)))
            q, k, v = array.array('f', [0] * (n * heads * dim)), values(n * heads * dim, 9), \
                values(n * heads * dim, 10)
            with engine.batch([seq]) as batch:
                for layer in (0, 1):
                    out = array.array('f', [0] * (n * heads * dim))
                    batch.attention(layer, q, k, v, out)
                    for t in range(n):
                        for i in range(heads * dim):
                            want = sum(v[j * heads * dim + i] for j in seen[layer](t)) / \
                                len(seen[layer](t))
                            self.assertAlmostEqual(out[t * heads * dim + i], want, places=5,
                                                   msg='layer %d token %d' % (layer, t))


class Configs(unittest.TestCase):
    def test_gpt_oss_sinks_and_windows(self):
        p = pkv.Params.from_hf_config_layers(os.path.join(CONFIGS, 'gpt-oss-20b.json'))
        specs = p.layer_specs
        self.assertEqual(len(specs), p.num_layers)
        self.assertTrue(all(s.sinks for s in specs))
        self.assertEqual([s.window for s in specs[:4]], [128, 0, 128, 0])
        self.assertEqual((p.sliding_window, p.layer_windows), (0, None))
        with self.assertRaisesRegex(pkv.UnsupportedError, 'from_hf_config_layers'):
            pkv.Params.from_hf_config(os.path.join(CONFIGS, 'gpt-oss-20b.json'))

    def test_gemma2_softcap_and_flat_models(self):
        p = pkv.Params.from_hf_config_layers(os.path.join(CONFIGS, 'gemma-2-9b.json'),
                                             device=pkv.DEVICE_CPU)
        self.assertEqual({s.logit_softcap for s in p.layer_specs}, {50.0})
        self.assertIs(p.device, pkv.Device.CPU)  # fields set by name after the config
        llama = pkv.Params.from_hf_config_layers(os.path.join(CONFIGS, 'llama-3-8b.json'))
        self.assertIsNone(llama.layer_specs)  # the flat fields say it all
        self.assertEqual(llama.num_layers, 32)


if __name__ == '__main__':
    unittest.main()
