"""Engine, Sequence and Batch: lifetimes, refusals, all-or-nothing, buffers, threads."""
import array
import ctypes
import threading
import unittest

from _util import pkv, small_params


def run_step(engine, seqs, dtype_bytes=4):
    with engine.batch(seqs) as batch:
        n = batch.view.num_tokens
        q, kv = bytearray(n * 4 * 16 * dtype_bytes), bytearray(n * 2 * 16 * dtype_bytes)
        for layer in range(2):
            batch.attention(layer, q, kv, kv, bytearray(len(q)))


class Lifetimes(unittest.TestCase):
    def test_closed_engine_is_refused(self):
        engine = pkv.Engine(small_params())
        seq = engine.allocate([1, 2, 3])
        engine.close()
        engine.close()  # idempotent
        self.assertTrue(engine.closed)
        for call in (engine.stats, lambda: engine.allocate([1]), seq.release, seq.info,
                     lambda: engine.batch([seq]), engine.check):
            with self.assertRaisesRegex(ValueError, 'closed'):
                call()
        self.assertEqual(engine.last_error, '')

    def test_batch_handle_refused_after_end_or_close(self):
        engine = pkv.Engine(small_params())
        seq = engine.allocate([1, 2, 3])
        batch = engine.batch([seq])
        batch.end()
        with self.assertRaises(ValueError):
            batch.end()
        with self.assertRaises(ValueError):
            batch.view
        batch.abort()  # accepted, does nothing
        batch = engine.batch([engine.allocate([4, 5])])
        engine.close()  # frees the open batch
        with self.assertRaises(ValueError):
            batch.attention(0, bytearray(1024), bytearray(1024), bytearray(1024), bytearray(1024))

    def test_batch_context_manager(self):
        with pkv.Engine(small_params()) as engine:
            seq = engine.allocate(list(range(10)))
            with self.assertRaises(RuntimeError):
                with engine.batch([seq]):
                    raise RuntimeError('the step failed')
            self.assertEqual(seq.info().num_computed_tokens, 0)  # aborted
            run_step(engine, [seq])
            self.assertEqual(seq.info().num_computed_tokens, 10)
            engine.check()
        self.assertTrue(engine.closed)


class AllOrNothing(unittest.TestCase):
    def test_no_space_changes_nothing(self):
        with pkv.Engine(small_params()) as engine:
            seq = engine.allocate(list(range(40)))  # 10 of 16 blocks
            run_step(engine, [seq])
            before, table = engine.stats(), seq.block_table()
            with self.assertRaises(pkv.NoSpaceError):
                engine.allocate(list(range(100, 128)))  # 7 blocks
            with self.assertRaises(pkv.NoSpaceError):
                seq.append(list(range(30)))
            self.assertEqual(engine.stats(), before)
            self.assertEqual(seq.block_table(), table)
            self.assertEqual(seq.info().num_tokens, 40)
            engine.check()


class Sequences(unittest.TestCase):
    def test_sequence_calls(self):
        with pkv.Engine(small_params()) as engine:
            prompt = list(range(1, 10))
            self.assertEqual(engine.allocate_query(prompt), (3, 0))
            seq = engine.allocate(array.array('i', prompt))
            self.assertEqual(seq.tokens(), prompt)
            self.assertEqual(len(seq.block_table()), 3)
            run_step(engine, [seq])
            child = seq.fork()
            self.assertEqual(child.tokens(), prompt)
            seq.preempt()
            self.assertEqual(seq.info().is_preempted, 1)
            self.assertEqual(seq.resume(), 8)  # two full blocks still cached
            with engine.allocate(prompt, salt='tenant-b') as salted:
                self.assertEqual(salted.num_cached_tokens, 0)
                self.assertEqual(salted.info().cache_salt_len, 8)
            self.assertEqual(engine.stats().num_seqs, 2)
            view_ids = []
            with engine.batch([seq], num_new_tokens=[1]) as batch:
                view = batch.view
                view_ids = view.seq_ids
                self.assertEqual((view.num_seqs, view.num_tokens, view.query_start),
                                 (1, 1, [0, 1]))
                self.assertEqual(view.block_indices, seq.block_table())
                # the batch's own attributes, as in the other bindings, are the view's fields
                self.assertEqual((batch.num_seqs, batch.num_tokens, batch.seq_ids), (1, 1, [seq.id]))
                for name in pkv.batch._COUNTS + tuple(pkv.BatchView._ARRAYS):
                    self.assertEqual(getattr(batch, name), getattr(view, name), name)
                self.assertEqual(batch.group_tables(0), view.group_tables(0))
                self.assertEqual(batch.group_slots(0), view.slot_mapping)
                batch.abort()
                with self.assertRaises(ValueError):
                    batch.slot_mapping
            self.assertEqual(view_ids, [seq.id])
            budget = engine.budget()
            self.assertEqual((budget.num_blocks, budget.kv_heads_per_rank), (16, 2))
            pool = engine.pool_info()
            self.assertEqual((pool.device, pool.num_blocks, pool.head_dim), (pkv.DEVICE_CPU, 16, 16))
            engine.set_stream(None)


    def test_truncate(self):
        with pkv.Engine(small_params()) as engine:
            seq = engine.allocate(list(range(1, 15)))
            run_step(engine, [seq])
            seq.truncate(6)
            info = seq.info()
            self.assertEqual((info.num_tokens, info.num_computed_tokens, info.num_blocks), (6, 6, 2))
            with self.assertRaises(pkv.InvalidArgumentError):
                seq.truncate(0)
            with self.assertRaises(pkv.InvalidArgumentError):
                seq.truncate(7)
            seq.release()
            engine.check()


class Buffers(unittest.TestCase):
    def test_buffer_checks(self):
        with pkv.Engine(small_params()) as engine:
            seq = engine.allocate([1, 2, 3])
            with engine.batch([seq]) as batch:
                q, kv = bytearray(3 * 64 * 4), array.array('f', [0.0] * 3 * 32)
                with self.assertRaisesRegex(ValueError, 'q: .* needs'):
                    batch.attention(0, q[:-4], kv, kv, bytearray(len(q)))
                with self.assertRaisesRegex(TypeError, 'writable'):
                    batch.attention(0, q, kv, kv, bytes(len(q)))
                with self.assertRaises(TypeError):
                    batch.attention(0, 'text', kv, kv, bytearray(len(q)))
                out = memoryview(bytearray(len(q)))
                batch.attention(0, bytes(q), memoryview(kv), kv, out)
                batch.attention(1, q, kv, kv, out)

    def test_numpy_when_available(self):
        try:
            import numpy as np
        except ImportError:
            self.skipTest('numpy is optional')
        with pkv.Engine(small_params()) as engine:
            seq = engine.allocate(np.arange(5, dtype=np.int32))
            with engine.batch([seq]) as batch:
                q = np.random.rand(5, 4, 16).astype(np.float32)
                kv = np.random.rand(5, 2, 16).astype(np.float32)
                out = np.zeros_like(q)
                for layer in range(2):
                    batch.attention(layer, q, kv, kv, out)
                self.assertTrue(np.isfinite(out).all() and out.any())
        with pkv.Engine(small_params(dtype=pkv.DTYPE_F16)) as engine:  # float16, or its bits
            with engine.batch([engine.allocate([1, 2])]) as batch:
                q, kv = np.ones((2, 4, 16), np.float16), np.ones((2, 2, 16), np.float16)
                batch.attention(0, q, kv, kv.view(np.uint16), np.zeros_like(q))
                with self.assertRaisesRegex(pkv.InvalidArgumentError, 'f16.*got float32'):
                    batch.attention(1, q.astype(np.float32), kv, kv, np.zeros_like(q))
        with pkv.Engine(small_params(dtype=pkv.DTYPE_BF16)) as engine:  # bits only
            with engine.batch([engine.allocate([1, 2])]) as batch:
                q, kv = np.zeros((2, 4, 16), np.uint16), np.zeros((2, 2, 16), np.uint16)
                batch.attention(0, q, kv, kv, np.zeros_like(q))
                with self.assertRaisesRegex(pkv.InvalidArgumentError, 'bf16.*got float16'):
                    batch.attention(1, q.view(np.float16), kv, kv, np.zeros_like(q))


class Structs(unittest.TestCase):
    def test_sizes_match_clang(self):
        for name, size in pkv._raw.SIZES.items():
            self.assertEqual(ctypes.sizeof(getattr(pkv._raw, name)), size, name)


class Threads(unittest.TestCase):
    def test_concurrent_use(self):
        errors = []
        with pkv.Engine(small_params(num_blocks=64)) as engine:
            def work(seed):
                try:
                    for i in range(200):
                        try:
                            seq = engine.allocate([seed, i, 1, 2, 3])
                        except pkv.NoSpaceError:
                            continue
                        seq.append([4])
                        try:
                            engine.sequence(10**9).release()
                        except pkv.NotFoundError as e:
                            assert 'sequence' in e.message, e.message
                        seq.release()
                except Exception as e:  # reported below
                    errors.append(e)
            threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            engine.check()
            self.assertEqual(engine.stats().num_seqs, 0)
        self.assertEqual(errors, [])


if __name__ == '__main__':
    unittest.main()
