"""The scheduler (submit / step / commit / drain_finished) and KV events."""
import unittest

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
            root = pkv.block_hash_root(0)
            self.assertEqual(events[0].block_hash, pkv.block_hash(root, range(4)))
            self.assertEqual(events[1].parent_hash, events[0].block_hash)
            seq.release()
            engine.reset_prefix_cache()
            self.assertEqual(engine.stats().num_cached_blocks, 0)
            self.assertTrue(engine.drain_kv_events())
            self.assertEqual(engine.drain_kv_events(), [])


if __name__ == '__main__':
    unittest.main()
