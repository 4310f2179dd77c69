"""The Python example prints exactly what the C demo prints."""
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


if __name__ == '__main__':
    unittest.main()
