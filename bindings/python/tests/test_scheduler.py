"""The scheduler (submit / step / commit / drain_finished) and KV events."""
import ctypes
import unittest
from unittest import mock

from _util import pkv, small_params
from test_engine import run_step


def run_scheduled(engine, batch, token=7):
    view = batch.view
    q, kv = bytearray(view.num_tokens * 4 * 16 * 4), bytearray(view.num_tokens * 2 * 16 * 4)
    for layer in range(2):
        batch.attention(layer, q, kv, kv, bytearray(len(q)))
    batch.commit([token] * view.num_seqs)


class Scheduler(unittest.TestCase):
    def test_requests_run_to_their_end(self):
        with pkv.Engine(small_params(num_blocks=32)) as engine:
            a = engine.submit(list(range(1, 11)), max_new_tokens=3)
            b = engine.submit(list(range(20, 26)), max_new_tokens=5, stop_token=9, priority=1)
            finished, steps = [], 0
            while True:
                batch = engine.step()
                if batch is None:
                    break
                steps += 1
                run_scheduled(engine, batch, token=9 if steps == 3 else 5)
                finished += engine.drain_finished()
            self.assertEqual(sorted(s.id for s in finished), sorted([a.id, b.id]))
            info = a.info()
            self.assertEqual((info.is_request, info.num_prompt_tokens, info.num_generated_tokens,
                              info.finish_reason), (1, 10, 3, pkv.FINISH_LENGTH))
            self.assertEqual(b.info().finish_reason, pkv.FINISH_STOP_TOKEN)
            self.assertEqual(b.tokens()[-1], 9)
            for s in finished:
                s.release()
            self.assertEqual(engine.stats().num_seqs, 0)
            engine.check()

    def test_step_batch_refused_after_commit(self):
        with pkv.Engine(small_params()) as engine:
            engine.submit([1, 2, 3], max_new_tokens=1)
            batch = engine.step()
            run_scheduled(engine, batch)
            with self.assertRaises(ValueError):
                batch.commit([1])
            self.assertIsNone(engine.step())
            with self.assertRaises(pkv.InvalidArgumentError):
                engine.submit(list(range(100)), max_new_tokens=1)  # more blocks than the pool


class KvEvents(unittest.TestCase):
    def test_stored_and_cleared(self):
        with pkv.Engine(small_params(enable_kv_events=1)) as engine:
            seq = engine.allocate(list(range(9)))
            run_step(engine, [seq])
            events = engine.drain_kv_events()
            self.assertEqual([e.type for e in events], [pkv.EVENT_BLOCK_STORED] * 2)
            self.assertEqual([e.seq_no for e in events], [1, 2])
            self.assertEqual([e.num_tokens for e in events], [4, 4])
            hashes = pkv.block_hashes([range(4), range(4, 8)])  # the canonical chain
            self.assertEqual([(e.parent_hash, e.block_hash) for e in events],
                             [(hashes[0], hashes[1]), (hashes[1], hashes[2])])
            seq.release()
            engine.reset_prefix_cache()
            self.assertEqual(engine.stats().num_cached_blocks, 0)
            later = engine.drain_kv_events()
            self.assertTrue(later)
            self.assertEqual([e.seq_no for e in later], list(range(3, 3 + len(later))))
            self.assertEqual(engine.drain_kv_events(), [])

    def test_drained_at_this_bindings_sizeof(self):
        sizes, sized = [], pkv._lib.lib.pkv_drain_kv_events_sized

        def spy(handle, out, event_size, cap, out_len):
            sizes.append(event_size)
            return sized(handle, out, event_size, cap, out_len)
        with pkv.Engine(small_params(enable_kv_events=1)) as engine, \
                mock.patch.object(pkv._lib.lib, 'pkv_drain_kv_events_sized', spy), \
                mock.patch.object(pkv._lib.lib, 'pkv_drain_kv_events', None):
            seq = engine.allocate(list(range(4)))
            run_step(engine, [seq])
            self.assertEqual([e.seq_no for e in engine.drain_kv_events()], [1])
        self.assertEqual(sizes, [ctypes.sizeof(pkv._raw.pkv_kv_event)])

    def test_a_grown_event_struct_gets_zeros_past_the_known_fields(self):
        # a binding generated from a later pkv.h, whose pkv_kv_event has one more field
        class Grown(ctypes.Structure):
            _fields_ = pkv._raw.pkv_kv_event._fields_ + [('added_later', ctypes.c_uint64)]
        with pkv.Engine(small_params(enable_kv_events=1)) as engine:
            seq = engine.allocate(list(range(8)))
            run_step(engine, [seq])
            buf, got = (Grown * 3)(), ctypes.c_uint32()
            for ev in buf:
                ev.added_later = 0xdeadbeef
            engine._call(pkv._lib.lib.pkv_drain_kv_events_sized,
                         ctypes.cast(buf, ctypes.POINTER(pkv._raw.pkv_kv_event)),
                         ctypes.sizeof(Grown), len(buf), ctypes.byref(got))
            hashes = pkv.block_hashes([range(4), range(4, 8)])
            self.assertEqual(got.value, 2)
            self.assertEqual([(ev.seq_no, ev.block_hash, ev.added_later) for ev in buf],
                             [(1, hashes[1], 0), (2, hashes[2], 0), (0, 0, 0xdeadbeef)])

if __name__ == '__main__':
    unittest.main()
