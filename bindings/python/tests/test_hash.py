"""pkv.block_hash* against tests/data/hash_vectors.txt, and with adapters and extra keys (0.5)
against hash_vectors_extra.txt beside it."""
import os
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


def read_extra_vectors():
    """(seed, salt, lora_id, keys, blocks, expected) of hash_vectors_extra.txt."""
    cases = []
    with open(os.path.join(os.path.dirname(HASH_VECTORS), 'hash_vectors_extra.txt')) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith('#'):
                continue
            left, right = line.split('->')
            seed, salt, lora_id, keys, blocks = left.split()
            keys = [] if keys == '-' else [
                pkv.ExtraKey(int(start), int(end), bytes.fromhex(key))
                for start, end, key in (item.split(':') for item in keys.split(','))]
            cases.append((int(seed), None if salt == '-' else bytes.fromhex(salt), int(lora_id),
                          keys, [[int(t) for t in b.split(',')] for b in blocks.split(';')],
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

    def test_extra_vectors(self):
        cases = read_extra_vectors()
        self.assertGreaterEqual(len(cases), 5)
        for seed, salt, lora_id, keys, blocks, expected in cases:
            with self.subTest(seed=seed, lora_id=lora_id, keys=keys, blocks=blocks):
                got, first = [pkv.block_hash_root_lora(seed, salt, lora_id)], 0
                for tokens in blocks:  # every key with every block: those apart add nothing
                    got.append(pkv.block_hash_extra(got[-1], tokens, first, keys, seed))
                    first += len(tokens)
                self.assertEqual(got, expected)
                self.assertEqual(pkv.block_hashes(blocks, seed, salt, keys, lora_id), expected)

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
