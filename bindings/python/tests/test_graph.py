"""Batch.plan_graph (pkv_batch_plan_graph, since 0.9.0) and the CUDA step counters on a CPU
engine: the call reaches pkv, which refuses it (a CPU engine has no CUDA graphs) with
UnsupportedError carrying its message; the batch stays open and usable (attention, then end
computes the decode token); pkv_stats.num_host_waits and num_device_allocs read 0."""
import array
import unittest

from _util import pkv, small_params

def run_layers(batch, layers=2):
    """attention() for every layer, f32 buffers of the batch's rows: q, out 4 heads, k, v 2."""
    n = batch.num_tokens
    q = array.array('f', [0.25] * (n * 4 * 16))
    kv = array.array('f', [0.5] * (n * 2 * 16))
    for layer in range(layers):
        out = array.array('f', [0.0] * (n * 4 * 16))
        batch.attention(layer, q, kv, kv, out)


def decoding_engine():
    """An engine with one sequence whose 3-token prompt is computed and one token appended: the
    next batch is a decode step (one new token)."""
    engine = pkv.Engine(small_params(max_num_seqs=8))
    seq = engine.allocate([1, 2, 3])
    with engine.batch([seq]) as prefill:
        run_layers(prefill)
    seq.append([4])
    return engine, seq


class PlanGraph(unittest.TestCase):
    def test_a_cpu_engine_refuses_it_and_the_batch_stays_usable(self):
        engine, seq = decoding_engine()
        with engine:
            batch = engine.batch([seq])
            self.assertEqual(batch.num_tokens, 1)
            with self.assertRaises(pkv.UnsupportedError) as ctx:
                batch.plan_graph(1)
            self.assertIsInstance(ctx.exception, NotImplementedError)
            self.assertEqual(ctx.exception.status, pkv.ERR_UNSUPPORTED)
            self.assertIn('pkv_batch_plan_graph', ctx.exception.message)
            self.assertIn('CUDA graphs', ctx.exception.message)
            self.assertFalse(batch.closed)
            run_layers(batch)  # not planned by the refused call: attention runs eagerly
            batch.end()
            info = seq.info()
            self.assertEqual((info.num_tokens, info.num_computed_tokens), (4, 4))
            self.assertFalse(info.in_batch)
            engine.check()

    def test_a_step_batch_refuses_it_and_commits(self):
        with pkv.Engine(small_params(max_num_seqs=8)) as engine:
            engine.submit([1, 2, 3], max_new_tokens=2)
            for _ in range(2):  # the prefill (3 tokens), then the decode (1)
                batch = engine.step()
                with self.assertRaisesRegex(pkv.UnsupportedError, 'CUDA graphs'):
                    batch.plan_graph(8)
                run_layers(batch)
                batch.commit([7] * batch.num_seqs)
            finished = engine.drain_finished()
            self.assertEqual(len(finished), 1)
            self.assertEqual(engine.step(), None)

    def test_a_bucket_that_is_no_uint32_is_refused_before_pkv(self):
        engine, seq = decoding_engine()
        with engine:
            batch = engine.batch([seq])
            # ctypes would wrap these to 4294967295 and 5: refused, not passed on
            for bucket in (-1, 1 << 32 | 5, 1.0, True, '1', None):
                with self.assertRaisesRegex(pkv.InvalidArgumentError,
                                            'plan_graph: bucket must be a sequence count'):
                    batch.plan_graph(bucket)
            batch.abort()
            with self.assertRaises(ValueError):  # an ended batch: as every other call
                batch.plan_graph(1)
            self.assertEqual(seq.info().num_computed_tokens, 3)

    def test_the_step_counters_read_0_on_a_cpu_engine(self):
        engine, seq = decoding_engine()
        with engine:
            with engine.batch([seq]) as batch:
                run_layers(batch)
            stats = engine.stats()
            self.assertEqual((stats.num_host_waits, stats.num_device_allocs), (0, 0))
            self.assertEqual(stats.num_seqs, 1)  # the same struct reads the other counters


if __name__ == '__main__':
    unittest.main()
