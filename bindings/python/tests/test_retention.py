"""Retention (since 0.8.0): a system prompt kept by its cache priority through a burst of unique
prompts (and evicted by plain LRU), evictions by priority, pins and their cap, a retention that
decays on the engine's test clock.

Block size 4, a pool of 8 blocks. A prompt of 9 tokens holds 3 blocks while it runs; released,
its 2 full blocks stay cached and the third is free. The system prompt is SYSTEM (8 tokens, 2
blocks); each request is it plus one token of its own."""
import os
import unittest
from unittest import mock

from _util import pkv, small_params
from test_engine import run_step

SYSTEM = list(range(1000, 1008))
OTHER = list(range(2000, 2008))  # a second tenant's system prompt


def run(engine, tokens, **retention):
    """Allocates tokens (with retention keywords), computes them and releases them."""
    seq = engine.allocate(tokens, **retention)
    run_step(engine, [seq])
    seq.release()


def burst(engine, count, first=5000):
    """count unique 9-token prompts of priority 0, one after another."""
    for i in range(count):
        run(engine, list(range(first + 100 * i, first + 100 * i + 9)))


def cached(engine, tokens):
    return engine.allocate_query(tokens + [1])[1]


def check_sums(test, engine):
    s = engine.stats()
    test.assertEqual(s.num_evictions_low + s.num_evictions_normal + s.num_evictions_high +
                     s.num_evictions_highest, s.num_evictions)
    engine.check()


class Priority(unittest.TestCase):
    def system_prompts_after_a_burst(self, priority):
        """(SYSTEM's and OTHER's cached tokens after 4 bursts, stats): SYSTEM cached with
        `priority` through its seq params, OTHER at 0 and then given `priority` by
        cache_set_priority."""
        with pkv.Engine(small_params(num_blocks=8)) as engine:
            run(engine, SYSTEM + [1], cache_priority=priority)
            run(engine, OTHER + [1])
            if priority:
                self.assertEqual(engine.cache_set_priority(OTHER, priority), 2)
            self.assertEqual(engine.stats().num_cached_blocks, 4)
            # 4 free blocks: the first burst takes 3 and frees 1 (cached 6 of 8); each later one
            # needs 1 (then 2, 2) more than is free: 5 evictions in all
            burst(engine, 4)
            found = cached(engine, SYSTEM), cached(engine, OTHER)
            check_sums(self, engine)
            return found, engine.stats()

    def test_high_priority_system_prompts_survive_a_burst(self):
        (system, other), s = self.system_prompts_after_a_burst(pkv.CACHE_PRIORITY_MAX)
        self.assertEqual((system, other), (8, 8))
        self.assertEqual((s.num_evictions, s.num_evictions_normal, s.num_evictions_highest),
                         (5, 5, 0))

    def test_plain_lru_evicts_them(self):
        (system, other), s = self.system_prompts_after_a_burst(0)
        self.assertEqual((system, other), (0, 0))  # the 4 oldest blocks went first
        self.assertEqual((s.num_evictions, s.num_evictions_normal), (5, 5))

    def test_every_priority_counted(self):
        with pkv.Engine(small_params(num_blocks=8)) as engine:
            run(engine, SYSTEM + [1], cache_priority=pkv.CACHE_PRIORITY_MAX)
            run(engine, OTHER + [1], cache_priority=pkv.CACHE_PRIORITY_MIN)
            run(engine, list(range(3000, 3009)), cache_priority=1)
            run(engine, list(range(32)))  # the whole pool: every cached block goes
            s = engine.stats()
            self.assertEqual((s.num_evictions_low, s.num_evictions_normal, s.num_evictions_high,
                              s.num_evictions_highest, s.num_evictions), (2, 0, 2, 2, 6))
            check_sums(self, engine)

    def test_bad_priority_is_refused(self):
        with pkv.Engine(small_params(num_blocks=8)) as engine:
            run(engine, SYSTEM + [1])
            with self.assertRaisesRegex(pkv.InvalidArgumentError, 'priority'):
                engine.cache_set_priority(SYSTEM, pkv.CACHE_PRIORITY_MAX + 1)
            with self.assertRaisesRegex(pkv.InvalidArgumentError, 'priority'):
                engine.allocate(SYSTEM, cache_priority=pkv.CACHE_PRIORITY_MIN - 1)
            with self.assertRaisesRegex(pkv.InvalidArgumentError, 'cache_retention_ms'):
                engine.submit(SYSTEM, cache_retention_ms=-1)
            # values the C types cannot hold are refused here, before ctypes would wrap them
            for bad in (2**31, True, 1.0):
                with self.assertRaisesRegex(pkv.InvalidArgumentError, 'cache_priority is'):
                    engine.cache_set_priority(SYSTEM, bad)
            with self.assertRaisesRegex(pkv.InvalidArgumentError, 'cache_retention_ms is'):
                engine.allocate(SYSTEM, cache_priority=1, cache_retention_ms=2**32)
            self.assertEqual(engine.stats().num_seqs, 0)

    def test_request_keeps_its_priority(self):
        with pkv.Engine(small_params(num_blocks=8)) as engine:
            seq = engine.submit(SYSTEM + [1], max_new_tokens=1,
                                cache_priority=pkv.CACHE_PRIORITY_MAX)
            run_step_scheduled(engine.step())
            self.assertEqual([s.id for s in engine.drain_finished()], [seq.id])
            seq.release()
            burst(engine, 4)
            self.assertEqual(cached(engine, SYSTEM), 8)
            check_sums(self, engine)


def run_step_scheduled(batch):
    view = batch.view
    q, kv = bytearray(view.num_tokens * 4 * 16 * 4), bytearray(view.num_tokens * 2 * 16 * 4)
    for layer in range(2):
        batch.attention(layer, q, kv, kv, bytearray(len(q)))
    batch.commit([7] * view.num_seqs)


class Pins(unittest.TestCase):
    def test_pin_keeps_a_prefix_until_unpinned(self):
        with pkv.Engine(small_params(num_blocks=8)) as engine:
            run(engine, SYSTEM + [1])
            with engine.cache_pin(SYSTEM) as pin:
                self.assertEqual(pin.num_tokens, 8)
                self.assertNotEqual(pin.id, 0)
                s = engine.stats()
                self.assertEqual((s.num_pins, s.num_pinned_blocks), (1, 2))
                burst(engine, 4)  # 6 blocks left to it: it evicts its own, never SYSTEM's
                self.assertEqual(cached(engine, SYSTEM), 8)
            self.assertTrue(pin.unpinned)
            s = engine.stats()
            self.assertEqual((s.num_pins, s.num_pinned_blocks), (0, 0))
            with self.assertRaisesRegex(pkv.NotFoundError, 'no pin %d' % pin.id):
                pin.unpin()  # the second unpin
            run(engine, list(range(32)))  # the whole pool: SYSTEM goes too
            self.assertEqual(cached(engine, SYSTEM), 0)
            check_sums(self, engine)

    def test_pins_past_their_share_are_refused(self):
        with pkv.Engine(small_params(num_blocks=8)) as engine:
            run(engine, SYSTEM + [1])
            run(engine, list(range(3000, 3013)))  # 3 cached blocks
            pin = engine.cache_pin(SYSTEM)
            # 2 + 3 pinned blocks would pass MAX_PINNED_PERCENT (50) of 8
            self.assertEqual(pkv.MAX_PINNED_PERCENT, 50)
            with self.assertRaisesRegex(pkv.NoSpaceError, 'PKV_MAX_PINNED_PERCENT'):
                engine.cache_pin(list(range(3000, 3012)))
            s = engine.stats()
            self.assertEqual((s.num_pins, s.num_pinned_blocks), (1, 2))  # nothing changed
            engine.cache_unpin(pin.id)
            with self.assertRaises(pkv.NotFoundError):
                engine.cache_unpin(pin)
            self.assertEqual(engine.cache_pin(list(range(3000, 3012))).num_tokens, 12)
            engine.check()

    def test_pin_of_nothing_cached(self):
        with pkv.Engine(small_params(num_blocks=8)) as engine:
            with engine.cache_pin(OTHER) as pin:
                self.assertEqual(pin.num_tokens, 0)
                self.assertEqual(engine.stats().num_pins, 1)

    def test_pin_outlived_by_nothing(self):
        engine = pkv.Engine(small_params(num_blocks=8))
        run(engine, SYSTEM + [1])
        with engine.cache_pin(SYSTEM) as pin:
            engine.close()  # ends every pin: leaving the block asks nothing of a closed engine
        self.assertFalse(pin.unpinned)
        with self.assertRaisesRegex(ValueError, 'closed'):
            pin.unpin()


class Decay(unittest.TestCase):
    def test_retention_decays_on_the_test_clock(self):
        params = small_params(num_blocks=8, debug_flags=pkv.DEBUG_TEST_CLOCK)
        with mock.patch.dict(os.environ, {'PKV_TEST_CLOCK_MS': '1000'}), \
                pkv.Engine(params) as engine:
            run(engine, SYSTEM + [1], cache_priority=pkv.CACHE_PRIORITY_MAX,
                cache_retention_ms=500)  # highest until 1500
            burst(engine, 4)
            self.assertEqual(cached(engine, SYSTEM), 8)
            os.environ['PKV_TEST_CLOCK_MS'] = '1500'  # decayed: the oldest normal blocks
            burst(engine, 1, first=9000)  # 1 free block, then 2 evictions: SYSTEM's
            self.assertEqual(cached(engine, SYSTEM), 0)
            s = engine.stats()
            self.assertEqual((s.num_evictions_highest, s.num_evictions_normal),
                             (0, s.num_evictions))
            check_sums(self, engine)


if __name__ == '__main__':
    unittest.main()
