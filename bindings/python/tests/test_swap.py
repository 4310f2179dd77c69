"""The host tier (pkv 0.2): its size in the budget, pool info and stats; swap_out / swap_in, the
copies the next batch lists by kind and Batch.copy(); refusals; the limits pkv.h names."""
import unittest

from _util import pkv, small_params

HOST_BLOCKS = 8


def compute(engine, seqs):
    with engine.batch(seqs) as batch:
        n = batch.view.num_tokens
        q, kv = bytearray(n * 4 * 16 * 4), bytearray(n * 2 * 16 * 4)
        for layer in range(2):
            batch.attention(layer, q, kv, kv, bytearray(len(q)))


class HostTier(unittest.TestCase):
    def test_budget_pool_and_stats(self):
        params = small_params(host_num_blocks=HOST_BLOCKS)
        with pkv.Engine(params) as engine:
            for budget in (pkv.profile(params), engine.budget()):
                self.assertEqual(budget.host_num_blocks, HOST_BLOCKS)
                self.assertEqual(budget.host_pool_bytes, HOST_BLOCKS * budget.block_bytes)
            pool = engine.pool_info()
            self.assertEqual(pool.host_num_blocks, HOST_BLOCKS)
            self.assertTrue(pool.host_k_base and pool.host_v_base)
            self.assertEqual(pool.host_layer_stride, HOST_BLOCKS * pool.block_stride)
            self.assertEqual(2 * pool.host_bytes_per_pool, engine.budget().host_pool_bytes)
            stats = engine.stats()
            self.assertEqual((stats.num_host_blocks, stats.num_host_free_blocks),
                             (HOST_BLOCKS, HOST_BLOCKS))
        with pkv.Engine(small_params()) as engine:  # no host tier: all 0
            self.assertEqual((engine.budget().host_num_blocks, engine.budget().host_pool_bytes), (0, 0))
            self.assertIsNone(engine.pool_info().host_k_base)
        by_bytes = pkv.profile(small_params(host_cache_bytes=3 * pkv.profile(params).block_bytes))
        self.assertEqual(by_bytes.host_num_blocks, 3)

    def test_swap_out_and_in(self):
        with pkv.Engine(small_params(host_num_blocks=HOST_BLOCKS)) as engine:
            a = engine.allocate(list(range(10)))  # 3 blocks of 4
            compute(engine, [a])
            table = a.block_table()
            self.assertEqual(a.info().kv_tier, pkv.TIER_DEVICE)
            a.swap_out()
            info = a.info()
            self.assertEqual((info.kv_tier, info.num_host_blocks, info.num_blocks,
                              info.num_computed_tokens), (pkv.TIER_HOST, 3, 0, 10))
            stats = engine.stats()
            self.assertEqual((stats.num_swapped_seqs, stats.num_swapped_out_blocks,
                              stats.num_host_free_blocks), (1, 3, HOST_BLOCKS - 3))
            with self.assertRaises(pkv.StateError):
                a.swap_out()  # not running
            with self.assertRaises(pkv.StateError):
                a.append([1])  # a swapped sequence cannot grow
            # The next batch (another sequence's) lists the swap-out copies; copy() does them.
            b = engine.allocate(list(range(100, 106)))
            with self.assertRaises(pkv.StateError):
                b.swap_in()  # not swapped
            with engine.batch([b]) as batch:
                view = batch.view
                self.assertEqual(view.copy_kind, [pkv.COPY_SWAP_OUT] * 3)
                self.assertEqual(sorted(view.copy_src), sorted(table))
                self.assertEqual(len(view.copy_dst), 3)
                batch.copy()
                batch.copy()  # done already: nothing more
            engine.check()
            a.swap_in()
            info = a.info()
            self.assertEqual((info.kv_tier, info.num_blocks, info.num_host_blocks),
                             (pkv.TIER_DEVICE, 3, 0))
            stats = engine.stats()
            self.assertEqual((stats.num_swapped_seqs, stats.num_swapped_in_blocks), (0, 3))
            a.append([10])
            with engine.batch([a]) as batch:
                self.assertEqual(batch.view.copy_kind, [pkv.COPY_SWAP_IN] * 3)
                self.assertEqual(sorted(batch.view.copy_dst), sorted(a.block_table()))
                batch.copy()
            self.assertEqual(engine.stats().num_host_free_blocks, HOST_BLOCKS)
            self.assertEqual(a.info().num_computed_tokens, 11)
            a.release()
            b.release()
            engine.check()

    def test_preemption_by_swapping_needs_the_host_tier(self):
        params = small_params(host_num_blocks=HOST_BLOCKS, preemption_mode=pkv.PREEMPT_SWAP)
        with pkv.Engine(params) as engine:
            self.assertEqual(engine.params.preemption_mode, pkv.PREEMPT_SWAP)
        with self.assertRaises(pkv.InvalidArgumentError):
            pkv.Engine(small_params(preemption_mode=pkv.PREEMPT_SWAP))

    def test_swap_out_needs_a_host_tier(self):
        with pkv.Engine(small_params()) as engine:
            seq = engine.allocate([1, 2, 3, 4, 5])
            compute(engine, [seq])
            with self.assertRaises(pkv.UnsupportedError) as caught:
                seq.swap_out()
            self.assertEqual(caught.exception.status, pkv.ERR_UNSUPPORTED)
            self.assertEqual(seq.info().kv_tier, pkv.TIER_DEVICE)

    def test_limits_and_kinds(self):
        self.assertEqual((pkv.COPY_COW, pkv.COPY_SWAP_OUT, pkv.COPY_SWAP_IN), (1, 2, 3))
        self.assertEqual((pkv.TIER_NONE, pkv.TIER_DEVICE, pkv.TIER_HOST), (0, 1, 2))
        self.assertEqual((pkv.ATTENTION_MAX_HEAD_DIM, pkv.CUDA_MAX_GRID), (256, 65535))
        pkv.profile(small_params(head_dim=pkv.MAX_HEAD_DIM))
        with self.assertRaises(pkv.InvalidArgumentError):
            pkv.profile(small_params(head_dim=pkv.MAX_HEAD_DIM + 1))
        with self.assertRaises(pkv.InvalidArgumentError):
            pkv.profile(small_params(reserved1=1))


if __name__ == '__main__':
    unittest.main()
