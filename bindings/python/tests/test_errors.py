"""Every status maps to its exception class, with pkv's message."""
import json
import unittest

from _util import pkv, small_params


class StatusClasses(unittest.TestCase):
    def test_every_status_has_a_class(self):
        for name, value, message in pkv._raw.STATUSES:
            self.assertEqual(getattr(pkv, name), value)
            self.assertEqual(pkv.status_string(value), message)
            if value == pkv.OK:
                continue
            cls = pkv.error_class(value)
            self.assertTrue(issubclass(cls, pkv.PkvError), name)
            self.assertIs(getattr(pkv, cls.__name__), cls)
            err = cls('the message')
            self.assertEqual((err.status, err.status_name, err.message),
                             (value, name, 'the message'))
            self.assertIn('the message', str(err))
        self.assertIs(pkv.error_class(-2), pkv.NoSpaceError)
        self.assertIs(pkv.error_class(-1000), pkv.PkvError)
        self.assertTrue(issubclass(pkv.InvalidArgumentError, ValueError))
        self.assertTrue(issubclass(pkv.OutOfMemoryError, MemoryError))
        self.assertEqual(pkv.status_string(-1000), 'unknown status')


class RaisedByCalls(unittest.TestCase):
    """Each status pkv can be made to return from here, raised as its class with a message."""

    def assertRaisesStatus(self, cls, fn, *args):
        with self.assertRaises(cls) as ctx:
            fn(*args)
        self.assertEqual(ctx.exception.status, cls.status)
        self.assertTrue(ctx.exception.message, 'no message for %s' % cls.__name__)
        return ctx.exception

    def setUp(self):
        self.engine = pkv.Engine(small_params())

    def tearDown(self):
        self.engine.close()

    def test_invalid_argument(self):
        self.assertRaisesStatus(pkv.InvalidArgumentError, self.engine.allocate, [])
        self.assertRaisesStatus(pkv.InvalidArgumentError, pkv.Engine, small_params(num_kv_heads=3))
        self.assertRaisesStatus(pkv.InvalidArgumentError, pkv.Params.from_hf_config, '{')
        seq = self.engine.allocate([1, 2])
        self.assertRaisesStatus(pkv.InvalidArgumentError, self.engine.batch, [seq, seq])

    def test_no_space(self):
        self.assertRaisesStatus(pkv.NoSpaceError, self.engine.allocate, list(range(4 * 17)))

    def test_not_found(self):
        self.assertRaisesStatus(pkv.NotFoundError, self.engine.sequence(12345).release)

    def test_state(self):
        seq = self.engine.allocate([1, 2, 3, 4, 5])
        self.assertRaisesStatus(pkv.StateError, seq.fork)  # its tokens are not computed
        with self.engine.batch([seq]):
            self.assertRaisesStatus(pkv.StateError, seq.append, [6])

    def test_unsupported(self):
        with pkv.Engine(small_params(head_dim=12)) as engine:
            seq = engine.allocate([1, 2, 3])
            with engine.batch([seq]) as batch:
                buf = bytearray(3 * 4 * 12 * 4)
                self.assertRaisesStatus(pkv.UnsupportedError, batch.attention, 0, buf, buf, buf,
                                        bytearray(len(buf)))
                batch.abort()

    def test_no_device_or_cuda(self):
        try:
            pkv.Engine(small_params(device=pkv.DEVICE_CUDA)).close()
        except pkv.NoDeviceError as e:  # a build without CUDA, or no GPU
            self.assertTrue(e.message)

    def test_out_of_memory(self):
        p = small_params(num_blocks=0, kv_cache_bytes=100, max_model_len=4096)
        err = self.assertRaisesStatus(pkv.OutOfMemoryError, pkv.profile, p)
        self.assertGreater(err.budget.shortfall_bytes, 0)
        self.assertRaisesStatus(pkv.OutOfMemoryError, pkv.Engine, p)

    def test_hf_config(self):
        cfg = {'num_hidden_layers': 3, 'num_attention_heads': 8, 'num_key_value_heads': 2,
               'hidden_size': 256, 'torch_dtype': 'float16', 'max_position_embeddings': 1024}
        for given in (cfg, json.dumps(cfg), json.dumps(cfg).encode()):
            p = pkv.Params.from_hf_config(given, num_blocks=8)
            self.assertEqual((p.num_layers, p.num_q_heads, p.num_kv_heads, p.head_dim, p.dtype,
                              p.max_model_len, p.num_blocks), (3, 8, 2, 32, pkv.DTYPE_F16, 1024, 8))
        err = self.assertRaisesStatus(pkv.InvalidArgumentError, pkv.Params.from_hf_config, {})
        self.assertIn('num_hidden_layers', err.message)


if __name__ == '__main__':
    unittest.main()
