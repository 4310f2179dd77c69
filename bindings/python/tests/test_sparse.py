"""Sparse attention (pkv 0.7, DeepSeek V3.2 / GLM-5): an MLA layer with an indexer, its keys
written and read back from layer_info's layout, the top-k of a context longer than index_topk
checked against the answer computed here, sparse MLA attention against an fp64 reference over the
selected latents, and a layer without an indexer refused."""
import array
import ctypes
import math
import random
import unittest

from _util import pkv

LATENT, ROPE, Q_HEADS, SCALE = 16, 8, 2, 0.25
WIDTH = LATENT + ROPE
INDEX_DIM, INDEX_HEADS, TOPK = 8, 2, 4
N = 10  # one prompt step: a context longer than TOPK
# Key s's first value: distinct integers, so its score under the query e0 is known and unique.
SCORES = [3, 9, 1, 7, 5, 10, 2, 8, 4, 6]


def sparse_params():
    """Layer 0 is MLA with an indexer, layer 1 plain MLA (the refusal's)."""
    specs = [pkv.LayerSpec.indexed(INDEX_DIM, INDEX_HEADS, TOPK, softmax_scale=SCALE),
             pkv.LayerSpec(kind=pkv.LayerKind.MLA, softmax_scale=SCALE)]
    return pkv.Params(num_layers=2, num_q_heads=Q_HEADS, num_kv_heads=1, head_dim=WIDTH,
                      kv_layout=pkv.KvLayout.MLA, kv_lora_rank=LATENT, qk_rope_head_dim=ROPE,
                      dtype=pkv.DTYPE_F32, softmax_scale=SCALE, block_size=4, num_blocks=16,
                      device=pkv.DEVICE_CPU, num_threads=1, layer_specs=specs)


def expected_topk(t):
    """Token t's top keys: the TOPK highest scores of positions 0..t, ascending, -1 padded."""
    best = sorted(sorted(range(t + 1), key=lambda s: -SCORES[s])[:TOPK])
    return best + [-1] * (TOPK - len(best))


def index_inputs(rng):
    """Keys [N][INDEX_DIM] whose first value is SCORES[s] (the largest: it sets the fp8 scale),
    queries [N][INDEX_HEADS][INDEX_DIM]: head 0 e0, head 1 -e0 (relu makes it 0), weights 1."""
    keys = array.array('f')
    for s in range(N):
        keys.extend([float(SCORES[s])] + [rng.uniform(-0.9, 0.9) for _ in range(INDEX_DIM - 1)])
    head = [1.0] + [0.0] * (INDEX_DIM - 1)
    q = array.array('f', (head + [-x for x in head]) * N)
    return keys, q, array.array('f', [1.0] * (N * INDEX_HEADS))


def reference(q, latents, rows):
    """Absorbed MLA in fp64, token t attending over the positions rows[t] (-1 skipped)."""
    out = []
    for t, row in enumerate(rows):
        keys = [j for j in row if 0 <= j <= t]
        for h in range(Q_HEADS):
            qt = q[(t * Q_HEADS + h) * WIDTH:(t * Q_HEADS + h + 1) * WIDTH]
            scores = [SCALE * sum(a * b for a, b in zip(qt, latents[j * WIDTH:(j + 1) * WIDTH]))
                      for j in keys]
            top = max(scores)
            w = [math.exp(s - top) for s in scores]
            out += [sum(wj * latents[j * WIDTH + d] for j, wj in zip(keys, w)) / sum(w)
                    for d in range(LATENT)]
    return out


def rows_of(flat):
    return [list(flat[t * TOPK:(t + 1) * TOPK]) for t in range(N)]


class Sparse(unittest.TestCase):
    def test_layer_info_and_specs(self):
        with pkv.Engine(sparse_params()) as engine:
            info = engine.layer_info(0)
            self.assertEqual((info.index_head_dim, info.index_n_heads, info.index_topk),
                             (INDEX_DIM, INDEX_HEADS, TOPK))
            self.assertIs(info.index_dtype, pkv.Dtype.FP8_E4M3)
            self.assertEqual(info.index_block_bytes, engine.budget().block_bytes)  # the page
            self.assertIsNotNone(info.index_base)
            self.assertIsNotNone(info.index_scale_base)
            self.assertEqual((info.host_index_base, info.host_index_scale_base), (None, None))
            plain = engine.layer_info(1)
            self.assertEqual((plain.index_head_dim, plain.index_topk, plain.index_base), (0, 0, None))
            spec = engine.params.layer_specs[0]
            self.assertEqual((spec.index_head_dim, spec.index_n_heads, spec.index_topk),
                             (INDEX_DIM, INDEX_HEADS, TOPK))
            self.assertEqual(engine.params.layer_spec_size, 104)  # 0.7's pkv_layer_spec

    def test_topk_and_sparse_attention(self):
        rng = random.Random(29)
        keys, iq, weights = index_inputs(rng)
        q = array.array('f', [rng.uniform(-1, 1) for _ in range(N * Q_HEADS * WIDTH)])
        latents = array.array('f', [rng.uniform(-1, 1) for _ in range(N * WIDTH)])
        with pkv.Engine(sparse_params()) as engine:
            info = engine.layer_info(0)
            seq = engine.allocate(list(range(1, N + 1)))
            with engine.batch([seq]) as batch:
                slots = batch.group_slots(info.group)  # its KV group's: layer 1 has another
                self.assertNotEqual(slots, batch.group_slots(engine.layer_info(1).group))
                batch.indexer_write(0, keys, pkv.IndexerFlags.SCALE_UE8M0)
                self.assertEqual(scale_of(info, slots[0]), 2.0 ** math.ceil(math.log2(3 / 448)))
                batch.indexer_write(0, keys)
                for s in range(N):  # a key's largest value is the fp8 code 448 (0x7e) times s
                    self.assertAlmostEqual(scale_of(info, slots[s]), SCORES[s] / 448, places=6)
                    self.assertEqual(code_of(info, slots[s]), 0x7E)
                top = batch.indexer_topk(0, iq, weights)
                self.assertEqual(rows_of(top), [expected_topk(t) for t in range(N)])
                by_slot = array.array('i', [0] * (N * TOPK))
                self.assertIs(batch.indexer_topk(0, iq, weights, by_slot, pkv.TopkKind.SLOTS),
                              by_slot)
                self.assertEqual(rows_of(by_slot), [[slots[s] if s >= 0 else -1 for s in row]
                                                    for row in rows_of(top)])
                out = array.array('f', [0.0] * (N * Q_HEADS * LATENT))
                batch.sparse_mla_attention(0, q, latents, top, out)
                want = reference(q, latents, rows_of(top))
                self.assertLessEqual(max(abs(g - w) for g, w in zip(out, want)), 1e-4)
            self.assertEqual(seq.info().num_computed_tokens, N)
            engine.check()

    def test_a_layer_without_an_indexer_is_refused(self):
        rng = random.Random(3)
        keys, iq, weights = index_inputs(rng)
        with pkv.Engine(sparse_params()) as engine:
            seq = engine.allocate(list(range(1, N + 1)))
            with engine.batch([seq]) as batch:
                with self.assertRaisesRegex(pkv.InvalidArgumentError, 'layer 1 has no indexer'):
                    batch.indexer_topk(1, iq, weights)
                with self.assertRaisesRegex(pkv.InvalidArgumentError, 'layer 1 has no indexer'):
                    batch.indexer_write(1, keys)
                with self.assertRaisesRegex(pkv.InvalidArgumentError, 'weights: 3 float32'):
                    batch.indexer_topk(0, iq, array.array('f', [1.0] * 3))
                batch.abort()


def scale_of(info, slot):
    """The fp32 scale of the key in `slot`, read where layer_info says it is."""
    block, offset = divmod(slot, 4)
    address = info.index_scale_base + block * info.index_block_bytes + 4 * offset
    return ctypes.c_float.from_address(address).value


def code_of(info, slot):
    """The first fp8 code of the key in `slot`."""
    block, offset = divmod(slot, 4)
    address = info.index_base + block * info.index_block_bytes + INDEX_DIM * offset
    return ctypes.c_uint8.from_address(address).value


if __name__ == '__main__':
    unittest.main()
