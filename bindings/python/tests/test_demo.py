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
        # store administered (its blocks listed, verified and cleared). How the scheduler splits
        # the work into steps is its policy: only the steps' form is checked.
        got = subprocess.run([sys.executable, os.path.join(BINDING, 'examples', 'serve.py')],
                             check=True, capture_output=True).stdout.decode().splitlines()
        steps = [line for line in got if line.startswith('step ')]
        self.assertTrue(steps)
        for i, line in enumerate(steps):
            self.assertRegex(line, r'^step %d: [12] seqs, \d+ tokens$' % (i + 1))
        self.assertEqual(sorted(got[len(steps):len(steps) + 2]),
                         ['request 0: LENGTH after 3 tokens', 'request 1: LENGTH after 2 tokens'])
        self.assertEqual(got[len(steps) + 2:], ['store: 4 blocks', 'listed: 4 blocks of 4 tokens',
                                                'verify: 4 good, 0 bad', 'cleared: 4'])

if __name__ == '__main__':
    unittest.main()
