"""The store tier (pkv 0.2): an engine writes its sealed prefix blocks to a store, a second engine
on the same store gets them back as cached tokens; the host's own store (a Python object called
from pkv's threads), a failing one (a miss with its message, never an error) and a file store."""
import hashlib
import os
import tempfile
import unittest

from _util import TREE, pkv, small_params
from test_swap import compute

PROMPT = list(range(1, 14))  # 3 full blocks of 4 + 1 token: 3 blocks sealed and written
MODEL = 'pkv-tests/small@1'  # the model id: engines share blocks only under the same one


def store_engine(store, model_id=MODEL):
    """An engine on store: StoreParams (their own model_id) or the host's store object."""
    if not isinstance(store, pkv.StoreParams):
        store = pkv.StoreParams.callback(store, model_id=model_id)
    return pkv.Engine(small_params(host_num_blocks=8), store=store)


def share(test, store):
    """Engine A computes PROMPT into store, engine B finds its 12 tokens there."""
    with store_engine(store) as a:
        s = a.allocate(PROMPT)
        compute(a, [s])
    # closed: its queued writes are done
    with store_engine(store) as b:
        s = b.allocate(PROMPT)
        test.assertEqual(s.num_cached_tokens, 12)
        stats = b.stats()
        test.assertEqual((stats.store_hit_tokens, stats.num_store_lookups, stats.num_store_hits,
                          stats.num_store_errors), (12, 3, 3, 0))
        test.assertEqual(b.store_error(), '')
        compute(b, [s])  # the loads, then the last token
        test.assertEqual(s.info().num_computed_tokens, 13)
        b.check()


class FailingStore(pkv.DictStore):
    def get(self, key):
        raise ConnectionError('the test store is down')


class Store(unittest.TestCase):
    def test_params(self):
        p = pkv.StoreParams()
        self.assertEqual((p.kind, p.write_mode, p.lookup_timeout_ms), (pkv.STORE_NONE, 0, 200))
        self.assertEqual(pkv.StoreParams.redis(port=6380, password='x').port, 6380)
        with self.assertRaises(AttributeError):
            p.no_such_field = 1
        self.assertTrue(issubclass(pkv.StoreError, pkv.PkvError))
        self.assertEqual(pkv.StoreError.status, pkv.ERR_STORE)
        with pkv.Engine(small_params()) as e:
            self.assertEqual(e.store_error(), '')
            self.assertEqual(e.stats().num_store_lookups, 0)

    def test_callback_store_shared_between_engines(self):
        store = pkv.DictStore()
        share(self, store)
        self.assertEqual(len(store), 3)
        self.assertTrue(all(len(k) == 32 for k in store.values))

    def test_failing_store_is_a_miss_with_its_message(self):
        store = FailingStore()
        with store_engine(store) as a:
            compute(a, [a.allocate(PROMPT)])
        self.assertEqual(len(store), 3)  # put works
        with store_engine(store) as b:
            s = b.allocate(PROMPT)
            self.assertEqual(s.num_cached_tokens, 0)
            stats = b.stats()
            self.assertEqual((stats.num_store_errors, stats.num_store_hits), (3, 0))
            self.assertIn('the test store is down', b.store_error())
            self.assertIn('ConnectionError', b.store_error())
            b.check()

    def test_bad_store_params_are_refused(self):
        with self.assertRaises(pkv.InvalidArgumentError) as ctx:
            pkv.Engine(small_params(), store=pkv.DictStore())  # no host tier
        self.assertIn('host tier', str(ctx.exception))
        with self.assertRaises(pkv.InvalidArgumentError):
            pkv.Engine(small_params(host_num_blocks=8), store=pkv.StoreParams(kind=pkv.STORE_FILE))

    def test_file_store(self):
        with tempfile.TemporaryDirectory() as tmp:
            share(self, pkv.StoreParams.file(tmp, write_mode=pkv.STORE_WRITE_THROUGH,
                                             model_id=MODEL))

    def test_model_ids(self):
        store = pkv.DictStore()
        with store_engine(store, model_id=None) as a:  # none: a warning, no error
            self.assertIn('model_id', a.store_error())
            compute(a, [a.allocate(PROMPT)])
        with store_engine(store, model_id='pkv-tests/other@1') as b:  # another model: no hit
            self.assertEqual(b.allocate(PROMPT).num_cached_tokens, 0)
            self.assertEqual(b.store_error(), '')
        self.assertEqual(pkv.StoreParams.file('/tmp', model_id='m').model_id, 'm')
        with self.assertRaises(pkv.InvalidArgumentError):
            store_engine(pkv.DictStore(), model_id='x' * (pkv.MAX_MODEL_ID_BYTES + 1))

    def test_config_digest(self):
        path = os.path.join(TREE, 'tools', 'configs', 'llama-3-8b.json')
        with open(path, 'rb') as f:
            text = f.read()
        digest = pkv.hf_config_digest(path)
        self.assertEqual(digest, 'config-sha256:' + hashlib.sha256(text).hexdigest())
        self.assertEqual(pkv.hf_config_digest(text), digest)
        self.assertNotEqual(pkv.hf_config_digest(os.path.join(TREE, 'tools', 'configs',
                                                               'mistral-7b.json')), digest)
        with self.assertRaises(pkv.InvalidArgumentError):
            pkv.hf_config_digest('{')


if __name__ == '__main__':
    unittest.main()
