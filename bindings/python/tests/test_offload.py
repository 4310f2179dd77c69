"""Offload to the host tier (pkv 0.2, Params.host_offload): a cached block evicted from the pool is
copied to the host tier (COPY_OFFLOAD, a STORED event of medium TIER_HOST) and a later prefix hit
loads it back (COPY_LOAD); the per-tier stats; host_offload=0 drops evicted blocks."""
import ctypes
import unittest

from _util import pkv, small_params
from test_swap import compute

FIRST = list(range(1, 14))     # 3 full blocks of 4 + 1 token: 3 blocks sealed
OTHER = list(range(100, 116))  # 4 blocks: the whole pool, evicting FIRST's cached blocks


def offload_engine(host_offload):
    return pkv.Engine(small_params(num_blocks=4, host_num_blocks=8, enable_kv_events=1,
                                   host_offload=host_offload))


def copies(view):
    return list(zip(view.copy_kind, view.copy_src, view.copy_dst))


class Offload(unittest.TestCase):
    def test_on_by_default(self):
        self.assertEqual(pkv.Params().host_offload, 1)
        self.assertEqual((pkv.COPY_OFFLOAD, pkv.COPY_LOAD), (4, 5))
        self.assertEqual(ctypes.sizeof(pkv._raw.pkv_kv_event), 56)  # drained at this size (0.5)

    def test_evicted_blocks_go_to_the_host_tier_and_come_back(self):
        first_hashes = pkv.block_hashes([FIRST[0:4], FIRST[4:8], FIRST[8:12]])[1:]
        with offload_engine(1) as engine:
            self.assertEqual(engine.params.host_offload, 1)
            a = engine.allocate(FIRST)
            compute(engine, [a])
            a.release()
            self.assertEqual([(e.type, e.medium) for e in engine.drain_kv_events()],
                             [(pkv.EVENT_BLOCK_STORED, pkv.TIER_DEVICE)] * 3)
            # OTHER takes every pool block: FIRST's 3 cached ones are offloaded, and its batch
            # lists the copies out (pool -> host tier) before anything is written.
            b = engine.allocate(OTHER)
            self.assertEqual(b.num_cached_tokens, 0)
            stats = engine.stats()
            self.assertEqual((stats.num_evictions, stats.num_offloaded_blocks,
                              stats.num_host_cached_blocks, stats.num_host_evictions), (3, 3, 3, 0))
            with engine.batch([b]) as batch:
                self.assertEqual(batch.view.copy_kind, [pkv.COPY_OFFLOAD] * 3)
                self.assertEqual(sorted(batch.view.copy_dst), [0, 1, 2])  # host-tier blocks
                n = batch.view.num_tokens
                q, kv = bytearray(n * 4 * 16 * 4), bytearray(n * 2 * 16 * 4)
                for layer in range(2):
                    batch.attention(layer, q, kv, kv, bytearray(len(q)))
            b.release()
            events = engine.drain_kv_events()
            stored_host = [e.block_hash for e in events
                           if (e.type, e.medium) == (pkv.EVENT_BLOCK_STORED, pkv.TIER_HOST)]
            removed_device = [e.block_hash for e in events
                              if (e.type, e.medium) == (pkv.EVENT_BLOCK_REMOVED, pkv.TIER_DEVICE)]
            self.assertEqual(sorted(stored_host), sorted(first_hashes))
            self.assertEqual(sorted(removed_device), sorted(first_hashes))
            # FIRST again: its 12 tokens of sealed blocks are a prefix hit served by the host tier.
            self.assertEqual(engine.allocate_query(FIRST), (4, 12))
            a = engine.allocate(FIRST)
            self.assertEqual(a.num_cached_tokens, 12)
            stats = engine.stats()
            self.assertEqual((stats.prefix_hit_tokens, stats.host_hit_tokens,
                              stats.device_hit_tokens, stats.num_loaded_blocks), (12, 12, 0, 3))
            self.assertEqual(stats.num_offloaded_blocks, 7)  # OTHER's 4 blocks made room
            with engine.batch([a]) as batch:
                view = batch.view
                self.assertEqual(view.num_tokens, 1)  # only the last token is computed
                loads = [dst for kind, _, dst in copies(view) if kind == pkv.COPY_LOAD]
                self.assertEqual(loads, a.block_table()[:3])
                self.assertEqual(sorted(view.copy_kind), [pkv.COPY_OFFLOAD] * 4 + [pkv.COPY_LOAD] * 3)
                batch.copy()
            self.assertEqual(a.info().num_computed_tokens, 13)
            a.release()
            engine.check()

    def test_off_drops_evicted_blocks(self):
        with offload_engine(0) as engine:
            self.assertEqual(engine.params.host_offload, 0)
            a = engine.allocate(FIRST)
            compute(engine, [a])
            a.release()
            b = engine.allocate(OTHER)
            with engine.batch([b]) as batch:
                self.assertEqual(batch.view.copy_kind, [])
            b.release()
            a = engine.allocate(FIRST)
            self.assertEqual(a.num_cached_tokens, 0)
            stats = engine.stats()
            self.assertEqual((stats.num_evictions, stats.num_offloaded_blocks, stats.num_loaded_blocks,
                              stats.num_host_cached_blocks, stats.host_hit_tokens), (7, 0, 0, 0, 0))
            self.assertEqual({e.medium for e in engine.drain_kv_events()}, {pkv.TIER_DEVICE})
            a.release()
            engine.check()


if __name__ == '__main__':
    unittest.main()
