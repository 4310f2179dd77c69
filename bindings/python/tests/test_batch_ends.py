"""No sequence of Batch calls strands an open batch (issue 26, item 1): a batch of Engine.step
ended the wrong way stays open and can be aborted or committed; a failed end keeps the batch; a
batch left in a with-block without commit, or dropped, is aborted. After each, step() works."""
import gc
import unittest
from unittest import mock

from _util import pkv, small_params
from test_scheduler import run_scheduled


def scheduled_engine():
    engine = pkv.Engine(small_params(num_blocks=32))
    engine.submit([1, 2, 3], max_new_tokens=2)
    return engine


class StepBatchEnds(unittest.TestCase):
    def assertStepWorks(self, engine):
        """The engine plans again: the request's prompt is still to run, then its decode."""
        batch = engine.step()
        self.assertIsNotNone(batch, 'no batch: the last one is still open')
        self.assertEqual(batch.num_tokens, 3)  # the whole prompt: nothing became computed
        run_scheduled(engine, batch)
        batch = engine.step()
        self.assertEqual(batch.num_tokens, 1)
        run_scheduled(engine, batch)
        self.assertEqual(len(engine.drain_finished()), 1)
        engine.check()

    def test_end_is_refused_and_the_batch_kept_then_aborted(self):
        # the sequence: submit, step, end
        with scheduled_engine() as engine:
            batch = engine.step()
            self.assertTrue(batch.scheduled)
            with self.assertRaisesRegex(pkv.StateError,
                                        r'commit\(sampled_tokens\), or abort') as ctx:
                batch.end()
            self.assertIn('still open', ctx.exception.message)
            self.assertFalse(batch.closed)
            self.assertEqual(batch.num_tokens, 3)  # the handle still works
            with self.assertRaisesRegex(pkv.StateError, 'already open'):
                engine.step()  # pkv's own rule: one batch at a time
            batch.abort()
            self.assertTrue(batch.closed)
            self.assertStepWorks(engine)

    def test_end_is_refused_then_commit_ends_it(self):
        with scheduled_engine() as engine:
            batch = engine.step()
            with self.assertRaises(pkv.StateError):
                batch.end()
            run_scheduled(engine, batch)  # attention per layer, then commit
            self.assertTrue(batch.closed)
            decode = engine.step()
            self.assertEqual(decode.num_tokens, 1)
            run_scheduled(engine, decode)
            self.assertEqual(len(engine.drain_finished()), 1)

    def test_pkv_keeps_a_step_batch_that_pkv_batch_end_refuses(self):
        # the C rule the binding relies on (issue 26's decision for item 1)
        with scheduled_engine() as engine:
            batch = engine.step()
            self.assertEqual(pkv.lib.pkv_batch_end(batch._handle), pkv.ERR_STATE)
            self.assertIn('pkv_commit', pkv._lib.text(pkv.lib.pkv_last_error()))
            self.assertEqual(batch.num_tokens, 3)
            batch.abort()
            self.assertStepWorks(engine)

    def test_with_block_without_commit_aborts(self):
        with scheduled_engine() as engine:
            with self.assertRaisesRegex(pkv.StateError, 'without commit.*aborted'):
                with engine.step() as batch:
                    self.assertEqual(batch.num_tokens, 3)
            self.assertTrue(batch.closed)
            self.assertStepWorks(engine)

    def test_with_block_left_by_an_exception_aborts(self):
        with scheduled_engine() as engine:
            with self.assertRaises(KeyError):
                with engine.step():
                    raise KeyError('the model failed')
            self.assertStepWorks(engine)

    def test_with_block_with_commit(self):
        with scheduled_engine() as engine:
            with engine.step() as batch:
                run_scheduled(engine, batch)
            self.assertTrue(batch.closed)

    def test_dropped_batch_is_aborted(self):
        with scheduled_engine() as engine:
            engine.step()  # not kept
            self.assertStepWorks(engine)
        with scheduled_engine() as engine:
            batch = engine.step()
            view = batch.view  # a view refers to its batch weakly: no cycle delays the abort
            del batch
            with self.assertRaisesRegex(ValueError, 'ended, aborted'):
                view.slot_mapping
            self.assertStepWorks(engine)

    def test_engine_closed_under_a_batch(self):
        engine = scheduled_engine()
        batch = engine.step()
        engine.close()  # pkv_engine_destroy frees the batch
        self.assertTrue(batch.closed)
        batch.abort()  # nothing left to do
        with self.assertRaisesRegex(ValueError, 'ended, aborted'):
            batch.commit([1])
        del batch
        gc.collect()


class BeginBatchEnds(unittest.TestCase):
    def test_failed_end_keeps_the_batch(self):
        with pkv.Engine(small_params()) as engine:
            seq = engine.allocate([1, 2, 3])
            batch = engine.batch([seq])
            self.assertFalse(batch.scheduled)
            with mock.patch.object(pkv.lib, 'pkv_batch_end', lambda b: pkv.ERR_INTERNAL):
                with self.assertRaises(pkv.InternalError):
                    batch.end()
            self.assertFalse(batch.closed)
            batch.end()  # pkv kept it: it ends now
            self.assertEqual(seq.info().num_computed_tokens, 3)

    def test_with_block_whose_end_fails_aborts(self):
        with pkv.Engine(small_params()) as engine:
            seq = engine.allocate([1, 2, 3])
            with mock.patch.object(pkv.lib, 'pkv_batch_end', lambda b: pkv.ERR_INTERNAL):
                with self.assertRaises(pkv.InternalError):
                    with engine.batch([seq]) as batch:
                        pass
            self.assertTrue(batch.closed)
            self.assertEqual(seq.info().in_batch, 0)
            with engine.batch([seq]):
                pass
            self.assertEqual(seq.info().num_computed_tokens, 3)

    def test_dropped_batch_is_aborted(self):
        with pkv.Engine(small_params()) as engine:
            seq = engine.allocate([1, 2, 3])
            engine.batch([seq]).view  # dropped, its view too
            self.assertEqual((seq.info().in_batch, seq.info().num_computed_tokens), (0, 0))
            seq.append([4])  # refused while a batch held it
            engine.check()


if __name__ == '__main__':
    unittest.main()
