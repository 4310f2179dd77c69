"""pkv.block_hash* against tests/data/hash_vectors.txt."""
import unittest

from _util import HASH_VECTORS, pkv


def read_vectors():
    cases = []
    with open(HASH_VECTORS) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith('#'):
                continue
            left, right = line.split('->')
            seed, salt, blocks = left.split()
            cases.append((int(seed), None if salt == '-' else bytes.fromhex(salt),
                          [[int(t) for t in b.split(',')] for b in blocks.split(';')],
                          [int(h, 16) for h in right.split()]))
    return cases


class HashVectors(unittest.TestCase):
    def test_vectors(self):
        cases = read_vectors()
        self.assertGreaterEqual(len(cases), 5)
        for seed, salt, blocks, expected in cases:
            with self.subTest(seed=seed, salt=salt, blocks=blocks):
                self.assertEqual(pkv.block_hashes(blocks, seed=seed, salt=salt), expected)
                root = pkv.block_hash_root(seed, salt)
                self.assertEqual(root, expected[0])
                self.assertEqual(pkv.block_hash(root, blocks[0], seed), expected[1])

    def test_buffer_kinds(self):
        import array
        tokens = [1, 2, 3, 4]
        want = pkv.block_hash(7, tokens)
        self.assertEqual(pkv.block_hash(7, array.array('i', tokens)), want)
        self.assertEqual(pkv.block_hash(7, memoryview(array.array('i', tokens))), want)
        self.assertEqual(pkv.block_hash(7, array.array('q', tokens)), want)  # converted
        self.assertEqual(pkv.block_hash(7, range(1, 5)), want)
        self.assertEqual(pkv.block_hash_root(0, 'tenant-a'), pkv.block_hash_root(0, b'tenant-a'))

    def test_bad_tokens(self):
        with self.assertRaises(OverflowError):
            pkv.block_hash(0, [2**31])
        with self.assertRaises(TypeError):
            pkv.block_hash(0, ['a'])


if __name__ == '__main__':
    unittest.main()
