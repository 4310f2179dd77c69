"""StoreAdmin (issue 26, item 9): a FILE store written by an engine, then administered with no
engine: info, the listing, verify (a damaged block found, then removed), clear, and refusals."""
import glob
import os
import tempfile
import unittest

from _util import pkv, small_params
from test_store import PROMPT
from test_swap import compute


def fill(path):
    """An engine computes PROMPT into a FILE store at path: 3 sealed blocks of 4 tokens."""
    with pkv.Engine(small_params(host_num_blocks=8), store=pkv.StoreParams.file(path)) as engine:
        compute(engine, [engine.allocate(PROMPT)])
    # closed: its queued writes are done


class StoreAdminFile(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.path = self.tmp.name
        fill(self.path)
        self.files = sorted(glob.glob(os.path.join(self.path, '*', '*.blk')))
        self.assertEqual(len(self.files), 3)

    def tearDown(self):
        self.tmp.cleanup()

    def test_info_and_list(self):
        with pkv.StoreAdmin(pkv.StoreParams.file(self.path)) as store:
            info = store.info()
            self.assertIsInstance(info, pkv.StoreInfo)
            self.assertIs(info.kind, pkv.StoreKind.FILE)
            self.assertEqual(info.num_blocks, 3)
            self.assertEqual(info.total_bytes, sum(os.path.getsize(f) for f in self.files))
            entries = list(store.list(page=2))  # two pages
            self.assertEqual(len(entries), 3)
            for e in entries:
                self.assertIsInstance(e, pkv.StoreEntry)
                self.assertIs(e.state, pkv.StoreValueState.GOOD)
                self.assertEqual((e.num_tokens, e.problem, len(e.key)), (4, '', 32))
                self.assertTrue(e.payload_bytes > 0 and e.value_bytes > e.payload_bytes)
            self.assertEqual(sorted(e.key.hex() + '.blk' for e in entries),
                             sorted(os.path.basename(f) for f in self.files))
            keys = {e.key for e in entries}
            self.assertEqual(sum(e.parent in keys for e in entries), 2)  # one chain of 3 blocks
            self.assertEqual(len({e.fingerprint for e in entries}), 1)
            quick = list(store)  # iterating is list(): values read
            self.assertEqual(len(quick), 3)
            keys_only = list(store.list(keys_only=True))
            self.assertEqual({e.state for e in keys_only}, {pkv.StoreValueState.UNREAD})
            self.assertEqual({e.key for e in keys_only}, keys)

    def test_verify_finds_then_removes_a_damaged_block(self):
        damaged = self.files[1]
        with open(damaged, 'r+b') as f:  # flip a byte of the payload, past the header
            f.seek(os.path.getsize(damaged) - 8)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0xff]))
        with pkv.StoreAdmin(pkv.StoreParams.file(self.path)) as store:
            result = store.verify()
            self.assertIsInstance(result, pkv.StoreVerifyResult)
            self.assertEqual((result.num_blocks, result.num_good, result.num_bad,
                              result.num_removed), (3, 2, 1, 0))
            self.assertEqual(result.first_bad_key.hex() + '.blk', os.path.basename(damaged))
            self.assertTrue(result.first_bad_problem)
            bad = [e for e in store.list() if e.state == pkv.StoreValueState.BAD]
            self.assertEqual([e.problem for e in bad], [result.first_bad_problem])
            self.assertTrue(os.path.exists(damaged))  # verify alone removes nothing
            result = store.verify(remove_bad=True)
            self.assertEqual((result.num_bad, result.num_removed), (1, 1))
            self.assertFalse(os.path.exists(damaged))
            self.assertEqual(store.verify().num_bad, 0)
            self.assertEqual(store.clear(), 2)
            self.assertEqual(store.info().num_blocks, 0)
            self.assertEqual(list(store.list()), [])

    def test_read_only_refuses_removals(self):
        params = pkv.StoreParams.file(self.path, write_mode=pkv.STORE_READ_ONLY)
        with pkv.StoreAdmin(params) as store:
            self.assertEqual(store.verify().num_good, 3)
            with self.assertRaises(pkv.StateError) as ctx:
                store.clear()
            self.assertEqual(ctx.exception.removed, 0)
            with self.assertRaises(pkv.StateError):
                store.verify(remove_bad=True)
            self.assertEqual(store.info().num_blocks, 3)

    def test_close(self):
        store = pkv.StoreAdmin(pkv.StoreParams.file(self.path))
        listing = store.list()
        self.assertEqual(next(listing).state, pkv.StoreValueState.GOOD)
        store.close()
        store.close()  # idempotent
        self.assertTrue(store.closed)
        for call in (store.info, store.verify, store.clear, lambda: next(store.list())):
            with self.assertRaisesRegex(ValueError, 'StoreAdmin is closed'):
                call()


class StoreAdminRefusals(unittest.TestCase):
    def test_refused_opens(self):
        with tempfile.TemporaryDirectory() as tmp:
            missing = os.path.join(tmp, 'none')
            with self.assertRaisesRegex(pkv.StoreError, 'none') as ctx:
                pkv.StoreAdmin(pkv.StoreParams.file(missing))
            self.assertTrue(ctx.exception.message)
            self.assertFalse(os.path.exists(missing))  # never made by an administrator
        with self.assertRaises(pkv.UnsupportedError):
            pkv.StoreAdmin(pkv.StoreParams.callback(pkv.DictStore()))
        with self.assertRaisesRegex(TypeError, 'StoreParams'):
            pkv.StoreAdmin('/tmp')
        with tempfile.TemporaryDirectory() as tmp:
            with pkv.StoreAdmin(pkv.StoreParams.file(tmp)) as store:
                with self.assertRaisesRegex(pkv.InvalidArgumentError, 'page is 0'):
                    next(store.list(page=0))


if __name__ == '__main__':
    unittest.main()
