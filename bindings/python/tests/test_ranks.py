"""Ranks (since 0.10.0): one engine holding every tensor-parallel rank's pool (params.ranks
Ranks.ALL: Batch.rank, Engine.rank_pool_info, Engine.set_rank_stream), and a decider's plan
carried to a rank's pool engine (Ranks.POOL: Batch.export_plan, Engine.import_plan)."""
import array
import unittest

from _util import pkv

TP, DIM, Q_PER_RANK, KV_PER_RANK = 2, 8, 2, 1


def rank_params(ranks, tp_rank=0):
    """2 layers, 4 q heads, 2 kv heads, tp_size 2: each rank holds 2 q heads and 1 kv head."""
    return pkv.Params(num_layers=2, num_q_heads=4, num_kv_heads=2, head_dim=DIM,
                      dtype=pkv.DTYPE_F32, block_size=4, num_blocks=32, device=pkv.DEVICE_CPU,
                      num_threads=1, tp_size=TP, tp_rank=tp_rank, ranks=ranks)


def rank_attention(batch, layer, fill=0.5):
    """attention() of one rank's heads: q, out [tokens][2][8], k, v [tokens][1][8]. Returns out."""
    n = batch.num_tokens
    q = array.array('f', [0.25] * (n * Q_PER_RANK * DIM))
    kv = array.array('f', [fill] * (n * KV_PER_RANK * DIM))
    out = array.array('f', [0.0] * (n * Q_PER_RANK * DIM))
    batch.attention(layer, q, kv, kv, out)
    return out


class RanksAll(unittest.TestCase):
    def test_each_rank_runs_its_heads_on_its_pool(self):
        with pkv.Engine(rank_params(pkv.Ranks.ALL)) as engine:
            self.assertIs(engine.params.ranks, pkv.Ranks.ALL)
            self.assertEqual(engine.budget().num_ranks, TP)
            for r in range(TP):
                info = engine.rank_pool_info(r)
                self.assertIsInstance(info, pkv.PoolInfo)
                self.assertEqual((info.rank, info.num_ranks, info.tp_rank, info.pp_rank),
                                 (r, TP, r, 0))
                self.assertEqual((info.first_layer, info.end_layer), (0, 2))
                self.assertEqual(info.device_id, -1)  # the CPU
            self.assertNotEqual(engine.rank_pool_info(0).k_base, engine.rank_pool_info(1).k_base)
            with self.assertRaisesRegex(pkv.InvalidArgumentError, 'rank') as ctx:
                engine.rank_pool_info(TP)
            self.assertEqual(ctx.exception.status, pkv.ERR_INVALID_ARGUMENT)
            seq = engine.allocate([1, 2, 3, 4, 5])
            batch = engine.batch([seq])
            self.assertEqual(batch.num_tokens, 5)
            # the batch's own handle names no rank: refused with pkv's message, nothing run
            with self.assertRaises(pkv.InvalidArgumentError) as ctx:
                rank_attention(batch, 0)
            self.assertIn('pkv_batch_rank', ctx.exception.message)
            handles = [batch.rank(r) for r in range(TP)]
            self.assertEqual([h.rank_index for h in handles], [0, 1])
            self.assertIs(handles[1].batch, batch)
            self.assertEqual(handles[1].num_tokens, 5)  # the batch's plan
            for layer in range(2):
                for r, h in enumerate(handles):
                    out = rank_attention(h, layer, fill=0.5 + r)
                    # every key's V is 0.5 + r: the softmax-weighted sum is that, per head
                    self.assertEqual(len(out), 5 * Q_PER_RANK * DIM)
                    for x in out:
                        self.assertAlmostEqual(x, 0.5 + r, places=5)
            with self.assertRaises(pkv.InvalidArgumentError):
                batch.rank(TP)
            with self.assertRaises(pkv.InvalidArgumentError):
                handles[0].rank(0)  # a rank's handle has no ranks of its own
            handles[1].end()  # ends the batch, every rank's
            self.assertTrue(batch.closed)
            self.assertTrue(handles[0].closed)
            with self.assertRaises(ValueError):
                rank_attention(handles[0], 0)
            info = seq.info()
            self.assertEqual(info.num_computed_tokens, 5)
            engine.check()

    def test_rank_streams(self):
        with pkv.Engine(rank_params(pkv.Ranks.ALL)) as engine:
            engine.set_rank_stream(0, None)
            engine.set_rank_stream(1, None)
            with self.assertRaisesRegex(pkv.InvalidArgumentError, 'stream'):
                engine.set_rank_stream(1, 16)  # a CPU engine takes no stream
            with self.assertRaises(pkv.InvalidArgumentError):
                engine.set_rank_stream(TP, None)


    def test_rank_device_ids(self):
        p = rank_params(pkv.Ranks.ALL)
        self.assertIsNone(p.rank_device_ids)
        p.rank_device_ids = [0, 1]
        self.assertEqual(p.copy().rank_device_ids, [0, 1])
        with self.assertRaisesRegex(pkv.InvalidArgumentError, 'CPU engine'):
            pkv.Engine(p)  # every rank's pool is in host memory: pkv refuses the devices
        p.rank_device_ids = [0]
        with self.assertRaisesRegex(pkv.InvalidArgumentError, 'tp_size x pp_size is 2'):
            pkv.Engine(p)  # one per rank, checked before pkv reads the array


class Plans(unittest.TestCase):
    def test_a_decider_plan_runs_on_a_pool_engine_once(self):
        decider = pkv.Engine(rank_params(pkv.Ranks.ONE, tp_rank=0))
        pool = pkv.Engine(rank_params(pkv.Ranks.POOL, tp_rank=1))
        with decider, pool:
            self.assertIs(pool.params.ranks, pkv.Ranks.POOL)
            with self.assertRaises(pkv.StateError):
                pool.allocate([1, 2, 3])  # a pool engine decides nothing
            seq = decider.allocate([1, 2, 3, 4, 5, 6])
            batch = decider.batch([seq])
            plan = batch.export_plan()
            self.assertIsInstance(plan, bytes)
            self.assertGreater(len(plan), 0)
            self.assertEqual(batch.export_plan(), plan)  # one plan per batch
            imported = pool.import_plan(plan)
            self.assertEqual(imported.num_tokens, 6)
            self.assertEqual(imported.positions, batch.positions)
            self.assertEqual(imported.slot_mapping, batch.slot_mapping)
            with self.assertRaises(pkv.StateError):
                imported.export_plan()  # an imported batch is not exported again
            for layer in range(2):
                for x in rank_attention(imported, layer, fill=1.5):  # rank 1's heads
                    self.assertAlmostEqual(x, 1.5, places=5)
                rank_attention(batch, layer)  # rank 0's, on the decider
            imported.end()
            batch.end()
            with self.assertRaises(pkv.StateError) as ctx:
                pool.import_plan(plan)  # the same plan again: stale
            self.assertEqual(ctx.exception.status, pkv.ERR_STATE)
            self.assertIn('stale', ctx.exception.message)
            with self.assertRaises(pkv.InvalidArgumentError):
                pool.import_plan(b'not a plan')
            with self.assertRaises(pkv.StateError):
                decider.import_plan(plan)  # an engine that decides imports nothing
            pool.check()


if __name__ == '__main__':
    unittest.main()
