"""Extra keys and a LoRA adapter in block identity (pkv 0.5): two prompts of the same
placeholder tokens and different item keys never hit each other's blocks, the same keys do; other
adapters never hit; the events carry lora_id and num_extra_keys, and their hashes are
block_hashes' with the same keys; bad keys are refused saying which."""
import unittest

from _util import pkv, small_params

BLOCK = 4  # small_params' block_size
PROMPT = [7] * 8 + [1, 2, 3, 4, 5]  # 8 image placeholders, then text: 3 blocks sealed
IMAGE_A = pkv.ExtraKey(0, 8, b'sha256-of-image-a')
IMAGE_B = pkv.ExtraKey(0, 8, b'sha256-of-image-b')


def computed(engine, tokens, **identity):
    """A sequence of tokens with its blocks computed and cached (the batch ended)."""
    seq = engine.allocate(tokens, **identity)
    with engine.batch([seq]) as batch:
        batch.copy()
    return seq


class ExtraKeys(unittest.TestCase):
    def test_keys_and_adapter_decide_hits(self):
        with pkv.Engine(small_params()) as engine:
            first = computed(engine, PROMPT, extra_keys=[IMAGE_A])
            self.assertEqual(first.num_cached_tokens, 0)
            self.assertEqual(engine.allocate_query(PROMPT, extra_keys=[IMAGE_B])[1], 0)
            self.assertEqual(engine.allocate_query(PROMPT)[1], 0)  # no key: another prompt
            same = engine.allocate(PROMPT, extra_keys=[(0, 8, b'sha256-of-image-a')])  # a tuple
            self.assertEqual(same.num_cached_tokens, 12)  # the image's blocks and the text after
            same.release()
            self.assertEqual(engine.allocate_query(PROMPT, extra_keys=[IMAGE_A], lora_id=5)[1], 0)
            lora = computed(engine, PROMPT, extra_keys=[IMAGE_A], lora_id=5)
            self.assertEqual(engine.allocate_query(PROMPT, extra_keys=[IMAGE_A], lora_id=5)[1], 12)
            lora.release()
            # a key over the text only: the image-free prefix block stays shared
            text = [9, 9, 9, 9, 5, 6, 7, 8, 1]
            computed(engine, text).release()
            self.assertEqual(engine.allocate_query(text, extra_keys=[pkv.ExtraKey(4, 8, 'b')])[1], 4)
            engine.check()

    def test_submit_takes_them_too(self):
        with pkv.Engine(small_params()) as engine:
            computed(engine, PROMPT, extra_keys=[IMAGE_A], lora_id=2).release()
            engine.submit(PROMPT, max_new_tokens=1, extra_keys=[IMAGE_A], lora_id=2)
            with engine.step() as batch:
                self.assertEqual(batch.num_tokens, 1)  # the 3 sealed blocks hit
                batch.commit([0])

    def test_events_carry_them_and_hash_as_block_hashes(self):
        with pkv.Engine(small_params(enable_kv_events=1)) as engine:
            computed(engine, PROMPT, extra_keys=[IMAGE_A], lora_id=3)
            events = engine.drain_kv_events()
            self.assertEqual([e.num_extra_keys for e in events], [1, 1, 0])  # the image's 2 blocks
            self.assertEqual({e.lora_id for e in events}, {3})
            blocks = [PROMPT[i:i + BLOCK] for i in range(0, 12, BLOCK)]
            want = pkv.block_hashes(blocks, extra_keys=[IMAGE_A], lora_id=3)
            self.assertEqual([e.block_hash for e in events], want[1:])
            self.assertEqual(events[0].parent_hash, want[0])

    def test_hashes_without_keys_are_the_old_ones(self):
        tokens = [1, 2, 3, 4]
        root = pkv.block_hash_root(0, 'tenant')
        self.assertEqual(pkv.block_hash_root_lora(0, 'tenant', 0), root)
        self.assertNotEqual(pkv.block_hash_root_lora(0, 'tenant', 1), root)
        self.assertEqual(pkv.block_hash_extra(root, tokens, 0), pkv.block_hash(root, tokens))
        # a key that does not touch the block is skipped
        self.assertEqual(pkv.block_hash_extra(root, tokens, 0, [pkv.ExtraKey(4, 6, b'k')]),
                         pkv.block_hash(root, tokens))
        self.assertNotEqual(pkv.block_hash_extra(root, tokens, 0, [pkv.ExtraKey(3, 6, b'k')]),
                            pkv.block_hash(root, tokens))

    def test_bad_keys_are_refused(self):
        with pkv.Engine(small_params()) as engine:
            for keys, why in (([pkv.ExtraKey(4, 8, b'a'), pkv.ExtraKey(0, 4, b'b')], r'\b1\b'),
                              ([pkv.ExtraKey(0, 99, b'a')], r'\b0\b'),
                              ([pkv.ExtraKey(0, 4, b'')], r'\b0\b')):
                with self.assertRaisesRegex(pkv.InvalidArgumentError, why):
                    engine.allocate(PROMPT, extra_keys=keys)
            with self.assertRaisesRegex(pkv.InvalidArgumentError, r'extra_keys\[0\]\.key is 5'):
                engine.allocate(PROMPT, extra_keys=[pkv.ExtraKey(0, 4, 5)])
            with self.assertRaisesRegex(pkv.InvalidArgumentError, r'extra_keys\[0\] is 3'):
                engine.allocate(PROMPT, extra_keys=[3])
            with self.assertRaisesRegex(pkv.InvalidArgumentError, 'lora_id is -1'):
                engine.allocate(PROMPT, lora_id=-1)
            stats = engine.stats()
            self.assertEqual((stats.num_seqs, stats.num_used_blocks), (0, 0))  # nothing admitted


if __name__ == '__main__':
    unittest.main()
