"""The Python examples: demo.py prints exactly what the C demo prints; serve.py what it should."""
import os
import subprocess
import sys
import unittest

from _util import BINDING, c_demo


class Demo(unittest.TestCase):
    def check_seed(self, seed):
        want = subprocess.run([c_demo(), str(seed)], check=True, capture_output=True).stdout
        got = subprocess.run([sys.executable, os.path.join(BINDING, 'examples', 'demo.py'),
                              str(seed)], check=True, capture_output=True).stdout
        self.assertTrue(want.startswith(b'pkv '))
        self.assertEqual(got.decode(), want.decode())

    def test_seed_42(self):
        self.check_seed(42)

    def test_seed_7(self):
        self.check_seed(7)

    def test_serve(self):
        # examples/serve.py: the scheduler's loop on a bf16 engine with a FILE store, then the
        # store administered (its blocks listed, verified and cleared)
        got = subprocess.run([sys.executable, os.path.join(BINDING, 'examples', 'serve.py')],
                             check=True, capture_output=True).stdout.decode()
        self.assertEqual(got, 'step 1: 2 seqs, 29 tokens\nstep 2: 2 seqs, 2 tokens\n'
                              'step 3: 1 seqs, 1 tokens\nrequest 1: LENGTH after 2 tokens\n'
                              'request 0: LENGTH after 3 tokens\nstore: 4 blocks\n'
                              'listed: 4 blocks of 4 tokens\nverify: 4 good, 0 bad\ncleared: 4\n')


if __name__ == '__main__':
    unittest.main()
