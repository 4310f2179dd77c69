"""Recurrent state (pkv 0.6, issue 28 item 7): state layer specs round-trip through the Params and
pkv.profile, whose budget's state terms are checked against bytes computed here by hand; an
engine's state pool (pool_info), each state layer's parts in a slot (layer_info) and the batch's
state slots; the checkpoint params; refusals that name what was wrong. Prefix caching of the
state through the step loop: the checkpoints each policy takes, the restore of a shared prefix
from one, their copies in the batches, their events and the stats' counters. A host tier (since
0.6.0): host state slots in the budget and pool, swap's STATE_OUT / STATE_IN copies, a checkpoint
offloaded and restored. The same model and requests as the other bindings' state tests."""
import unittest

from _util import pkv, small_params

# A Gated DeltaNet-like layer, small: a bf16 conv state of 96 channels x 3 taps (576 bytes, 768
# with its part rounded to 256) and an f32 delta-rule state of 2 heads x 16 x 16 (2048).
CONV_BYTES = 96 * 3 * 2
SSM_BYTES = 2 * 16 * 16 * 4
LAYER_BYTES = 768 + SSM_BYTES  # each part at a 256-byte boundary
SLOT_BYTES = 3 * LAYER_BYTES  # 8448, a multiple of 256
BLOCK_BYTES = 2 * 2 * 16 * 4 * 4  # layer 3: f32 K and V of 2 kv heads x 16, 4 tokens a block


def gdn():
    return pkv.LayerSpec.state(conv=(96, 3), ssm=(2, 16, 16), conv_dtype=pkv.Dtype.BF16)


def hybrid(**fields):
    """Three state layers then one attention layer (3 : 1, as Qwen3-Next's), 8 sequences."""
    p = small_params(num_layers=4, num_blocks=32, max_num_seqs=8,
                     layer_specs=[gdn(), gdn(), gdn(), pkv.LayerSpec()])
    for name, value in fields.items():
        setattr(p, name, value)
    return p


class StateSpecs(unittest.TestCase):
    def test_a_state_spec_round_trips_through_the_params(self):
        p = hybrid()
        specs = p.layer_specs
        self.assertEqual(specs[0], gdn())
        self.assertIs(specs[1].kind, pkv.LayerKind.STATE)
        self.assertEqual(specs[2].state_shape, ((96, 3), (2, 16, 16)))
        self.assertEqual(specs[2].state_dtype, (pkv.Dtype.BF16, pkv.Dtype.F32))
        self.assertEqual(specs[3].state_shape, ((), ()))
        self.assertEqual(p.layer_spec_size, 104)  # 0.7's pkv_layer_spec (0.6's was 88)
        self.assertEqual(p.copy().layer_specs, specs)
        p.state_checkpoint_policy = pkv.StateCheckpointPolicy.EVERY
        self.assertIs(p.state_checkpoint_policy, pkv.StateCheckpointPolicy.EVERY)
        # lists and fewer parts are one spelling of the same spec
        self.assertEqual(pkv.LayerSpec(kind=pkv.LayerKind.STATE, state_shape=[[4, 2]],
                                       state_dtype=[pkv.Dtype.F16]).state_shape, ((4, 2), ()))

    def test_the_budget_takes_the_state_pool_before_the_blocks(self):
        # default checkpoints: max_num_seqs of them, beside the 8 working slots
        b = pkv.profile(hybrid())
        self.assertEqual((b.num_state_layers, b.num_state_slots, b.num_state_checkpoints),
                         (3, 8, 8))
        self.assertEqual(b.state_bytes_per_seq, SLOT_BYTES)
        self.assertEqual(b.state_pool_bytes, 16 * SLOT_BYTES)
        self.assertEqual(b.block_bytes, BLOCK_BYTES)  # the state layers hold no K and V
        # a budget in bytes: the state pool (8 + 4 slots) first, then whole blocks of the rest
        state = 12 * SLOT_BYTES
        b = pkv.profile(hybrid(num_blocks=0, kv_cache_bytes=state + 40 * BLOCK_BYTES + 100,
                               num_state_checkpoints=4))
        self.assertEqual((b.num_state_slots, b.num_state_checkpoints, b.state_pool_bytes),
                         (8, 4, state))
        self.assertEqual((b.num_blocks, b.pool_bytes), (40, 40 * BLOCK_BYTES))
        b = pkv.profile(hybrid(state_checkpoint_policy=pkv.StateCheckpointPolicy.NONE))
        self.assertEqual((b.num_state_checkpoints, b.state_pool_bytes), (0, 8 * SLOT_BYTES))
        b = pkv.profile(small_params())  # no state layers: every state term 0
        self.assertEqual((b.num_state_layers, b.num_state_slots, b.state_bytes_per_seq,
                          b.state_pool_bytes), (0, 0, 0, 0))

    def test_bad_state_specs_are_refused_by_name(self):
        p = hybrid()
        for bad, said in (([(1, 2, 3, 4, 5)], r'state_shape\[0\] is \(1, 2, 3, 4, 5\)'),
                          ([(8, 0)], r'state_shape\[0\] is \(8, 0\)'),
                          ([(), (), (4,)], r'state_shape is .*a tuple of at most 2 parts')):
            with self.assertRaisesRegex(pkv.InvalidArgumentError, r'layer_specs\[1\]\.' + said):
                p.layer_specs = [gdn(), pkv.LayerSpec(kind=pkv.LayerKind.STATE, state_shape=bad)]
        with self.assertRaisesRegex(pkv.InvalidArgumentError, r'state_dtype is 2: give a tuple'):
            p.layer_specs = [pkv.LayerSpec(kind=pkv.LayerKind.STATE, state_shape=[(4,)], state_dtype=2)]
        with self.assertRaisesRegex(pkv.InvalidArgumentError, r'state_dtype\[1\] is .*pkv.Dtype'):
            p.layer_specs = [pkv.LayerSpec.state(conv=(4,), ssm=(4,), ssm_dtype='bf16')]
        self.assertEqual(p.layer_specs[0], gdn())  # a refusal changed nothing
        # pkv's rules: a state layer has no attention fields, and one part at least
        p.layer_specs = [pkv.LayerSpec.state(conv=(96, 3), num_kv_heads=2), gdn(), gdn(),
                         pkv.LayerSpec()]
        with self.assertRaisesRegex(pkv.InvalidArgumentError, 'num_kv_heads'):
            pkv.profile(p)
        p.layer_specs = [gdn(), pkv.LayerSpec.state(), gdn(), pkv.LayerSpec()]
        with self.assertRaisesRegex(pkv.InvalidArgumentError, r'layer_specs\[1\]'):
            pkv.profile(p)
        with self.assertRaisesRegex(pkv.InvalidArgumentError, 'state_checkpoint_interval'):
            pkv.profile(hybrid(state_checkpoint_interval=3))  # an interval without EVERY


class StateEngine(unittest.TestCase):
    def test_an_engine_says_where_each_sequences_state_is(self):
        with pkv.Engine(hybrid(num_state_checkpoints=4)) as e:
            pool = e.pool_info()
            self.assertIsNotNone(pool.state_base)
            self.assertEqual((pool.state_slot_bytes, pool.num_state_slots), (SLOT_BYTES, 12))
            for layer in range(3):
                info = e.layer_info(layer)
                self.assertIs(info.kind, pkv.LayerKind.STATE)
                self.assertEqual((info.k_base, info.v_base), (None, None))
                base = layer * LAYER_BYTES
                self.assertEqual(info.state_offset, (base, base + 768))
                self.assertEqual(info.state_bytes, (CONV_BYTES, SSM_BYTES))
                self.assertEqual(info.state_shape, ((96, 3), (2, 16, 16)))
                self.assertEqual(info.state_dtype, (pkv.Dtype.BF16, pkv.Dtype.F32))
            self.assertEqual(e.layer_info(3).state_bytes, (0, 0))
            a = e.allocate(list(range(1, 7)))
            b = e.allocate(list(range(50, 55)))
            batch = e.batch([a, b])
            slots = batch.state_slots
            self.assertEqual(len(slots), 2)
            self.assertNotEqual(slots[0], slots[1])
            self.assertTrue(all(0 <= s < 8 for s in slots), slots)
            with self.assertRaisesRegex(pkv.InvalidArgumentError, 'layer 0 is a STATE layer'):
                batch.attention(0, bytes(11 * 256), bytes(11 * 128), bytes(11 * 128),
                                bytearray(11 * 256))
            batch.end()  # the host ran every layer itself
            # a fork takes a slot of its own, its parent's state copied into it before the step
            c = a.fork()
            c.append([7])
            batch = e.batch([c])
            slot = batch.state_slots[0]
            self.assertTrue(slot not in slots and 0 <= slot < 8, (slot, slots))
            kinds = batch.copy_kind
            self.assertIn(pkv.CopyKind.STATE, kinds)
            i = kinds.index(pkv.CopyKind.STATE)
            self.assertEqual((batch.copy_src[i], batch.copy_dst[i]), (slots[0], slot))
            batch.abort()


# Working slots are ids 0..8 (max_num_seqs), checkpoints 8..16 (num_state_checkpoints' default).
WORKING, CHECKPOINTS = range(0, 8), range(8, 16)


def shared_prompt(own):
    """14 tokens (3 whole blocks of 4 and 2 more): the 8 every prompt here shares (a system
    prompt of two blocks), then 6 of its own."""
    return list(range(8)) + list(range(100 * own, 100 * own + 6))


def run(engine, prompt):
    """One request of prompt sampling one token, through the step loop until it finishes; the
    host runs no kernel (pkv's checkpoints and counters do not read the state). Its info and the
    state copies (src, dst) its batches listed."""
    seq = engine.submit(prompt, max_new_tokens=1)
    copies, steps = [], 0
    while True:
        batch = engine.step()
        if batch is None:
            break
        steps += 1
        assert steps < 10, 'the scheduler does not finish'
        listed = zip(batch.copy_kind, batch.copy_src, batch.copy_dst)
        copies += [(src, dst) for kind, src, dst in listed if kind == pkv.CopyKind.STATE]
        batch.commit([1] * batch.view.num_seqs)
    assert [s.id for s in engine.drain_finished()] == [seq.id]
    info = seq.info()
    seq.release()
    return info, copies


def three_requests(engine):
    """Three requests sharing shared_prompt's first two blocks, one after the other: each one's
    info and state copies, then the engine's stats."""
    runs = [run(engine, shared_prompt(own)) for own in (1, 2, 3)]
    engine.check()
    return runs, engine.stats()


class StateCheckpoints(unittest.TestCase):
    def test_a_shared_prefix_is_restored_from_the_checkpoint_its_second_request_left(self):
        with pkv.Engine(hybrid(enable_kv_events=1)) as e:
            runs, st = three_requests(e)
            # A: nothing cached. B: A's two blocks of KV, but no checkpoint at their end: from
            # token 0. C: the checkpoint B left where its cached KV ended (the branch point).
            self.assertEqual([info.num_cached_tokens for info, _ in runs], [0, 0, 8])
            a, b, c = (copies for _, copies in runs)

            def capture(copy):
                return copy[0] in WORKING and copy[1] in CHECKPOINTS
            # A checkpoints at its prompt's last boundary (12); B at the branch point (8), then 12
            self.assertTrue(len(a) == 1 and all(map(capture, a)), a)
            self.assertTrue(len(b) == 2 and all(map(capture, b)), b)
            # C's working slot starts from B's checkpoint at 8, before any write, then
            # checkpoints at 12
            self.assertEqual(len(c), 2, c)
            self.assertEqual(c[0][0], b[0][1], (c, b))
            self.assertTrue(c[0][1] in WORKING and capture(c[1]) and c[1][0] == c[0][1], c)
            self.assertEqual((st.num_state_checkpoints_taken, st.num_state_restores,
                              st.num_state_checkpoints_held), (4, 1, 4), st)
            self.assertEqual((st.state_fallback_tokens, st.num_state_checkpoint_evictions),
                             (8, 0), st)
            self.assertEqual(st.prefix_hit_tokens, 8)
            # each checkpoint is a BlockStored of its block's hash in the state "group", after
            # the KV groups
            groups = e.kv_groups().num_groups
            stored = [ev for ev in e.drain_kv_events() if ev.group == groups]
            self.assertEqual(len(stored), 4, stored)
            self.assertTrue(all(ev.type is pkv.EventType.BLOCK_STORED
                                and ev.medium is pkv.Tier.DEVICE for ev in stored), stored)
            branch = pkv.block_hashes([range(4), range(4, 8)])[2]  # B's checkpoint at 8
            self.assertEqual([ev.block_hash for ev in stored].count(branch), 1, stored)

    def test_every_policy_checkpoints_its_boundaries_and_none_takes_none(self):
        # EVERY 1: A leaves checkpoints at 4, 8 and 12; B and C each restore at 8, checkpoint at 12
        with pkv.Engine(hybrid(state_checkpoint_policy=pkv.StateCheckpointPolicy.EVERY,
                               state_checkpoint_interval=1)) as e:
            runs, st = three_requests(e)
            self.assertEqual([info.num_cached_tokens for info, _ in runs], [0, 8, 8])
            self.assertEqual((st.num_state_checkpoints_taken, st.num_state_restores,
                              st.state_fallback_tokens, st.num_state_checkpoints_held),
                             (5, 2, 0, 5), st)
        # NONE: no checkpoint and no hit: every prompt from token 0, no fallback counted
        with pkv.Engine(hybrid(state_checkpoint_policy=pkv.StateCheckpointPolicy.NONE)) as e:
            runs, st = three_requests(e)
            self.assertEqual([(info.num_cached_tokens, copies) for info, copies in runs],
                             [(0, [])] * 3)
            self.assertEqual((st.num_state_checkpoints_taken, st.num_state_restores,
                              st.num_state_checkpoints_held), (0, 0, 0), st)
            self.assertEqual((st.state_fallback_tokens, st.prefix_hit_tokens), (0, 0), st)

    def test_a_full_set_of_checkpoints_evicts_the_least_recently_used(self):
        # 2 checkpoint slots: B's at 12 evicts A's (the oldest); C's restore touches B's at 8, so
        # C's at 12 evicts B's at 12
        with pkv.Engine(hybrid(num_state_checkpoints=2, enable_kv_events=1)) as e:
            runs, st = three_requests(e)
            self.assertEqual([info.num_cached_tokens for info, _ in runs], [0, 0, 8])
            self.assertEqual((st.num_state_checkpoints_taken, st.num_state_checkpoint_evictions,
                              st.num_state_restores, st.num_state_checkpoints_held),
                             (4, 2, 1, 2), st)
            groups = e.kv_groups().num_groups
            events = [ev for ev in e.drain_kv_events() if ev.group == groups]
            stored = [ev.block_hash for ev in events if ev.type is pkv.EventType.BLOCK_STORED]
            removed = [ev.block_hash for ev in events if ev.type is pkv.EventType.BLOCK_REMOVED]
            # stored: A's at 12, B's at 8, B's at 12, C's at 12
            self.assertEqual((len(stored), removed), (4, [stored[0], stored[2]]), events)


def host_tier(checkpoints):
    """The hybrid with a host tier (since 0.6.0): 8 working slots, `checkpoints` checkpoints."""
    return hybrid(host_num_blocks=16, num_state_checkpoints=checkpoints)


def copies_of(batch, kind):
    """The copies of `kind` a batch lists, as (src, dst)."""
    listed = zip(batch.copy_kind, batch.copy_src, batch.copy_dst)
    return [(src, dst) for k, src, dst in listed if k == kind]


class StateHostTier(unittest.TestCase):
    def test_a_host_tier_holds_swapped_states_and_offloaded_checkpoints(self):
        # host state slots: one per sequence (swap) and one per checkpoint (offload)
        with pkv.Engine(host_tier(4)) as e:
            for b in (pkv.profile(host_tier(4)), e.budget()):
                self.assertEqual((b.num_host_state_slots, b.host_state_bytes),
                                 (8 + 4, 12 * SLOT_BYTES), b)
            pool = e.pool_info()
            self.assertIsNotNone(pool.host_state_base)
            self.assertEqual(pool.num_host_state_slots, 12)
            st = e.stats()
            self.assertEqual((st.num_host_state_checkpoints_held,
                              st.num_state_checkpoints_offloaded,
                              st.num_state_restores_from_host), (0, 0, 0), st)
        # no host tier: no host state
        b = pkv.profile(hybrid())
        self.assertEqual((b.num_host_state_slots, b.host_state_bytes), (0, 0))
        with pkv.Engine(hybrid()) as e:
            self.assertEqual((e.pool_info().host_state_base, e.pool_info().num_host_state_slots),
                             (None, 0))

    def test_swap_moves_the_working_state_through_a_host_state_slot(self):
        self.assertEqual((int(pkv.CopyKind.STATE_OUT), pkv.CopyKind(8)),
                         (7, pkv.CopyKind.STATE_IN))
        with pkv.Engine(host_tier(4)) as e:
            a = e.allocate(list(range(1, 7)))
            batch = e.batch([a])
            slot = batch.state_slots[0]
            batch.end()
            a.swap_out()
            # the next batch (another sequence's) copies a's working slot out to a host state slot
            b = e.allocate(list(range(50, 55)))
            batch = e.batch([b])
            out = copies_of(batch, pkv.CopyKind.STATE_OUT)
            self.assertEqual(len(out), 1, batch.copy_kind)
            self.assertEqual(out[0][0], slot)
            self.assertIn(out[0][1], range(12))
            batch.end()
            # back in: a working slot again, the state copied in from the host slot before the step
            a.swap_in()
            a.append([7])
            batch = e.batch([a])
            self.assertEqual(copies_of(batch, pkv.CopyKind.STATE_IN),
                             [(out[0][1], batch.state_slots[0])], batch.copy_kind)
            batch.end()
            e.check()

    def test_a_checkpoint_evicted_from_the_device_is_offloaded_then_restored(self):
        # one checkpoint slot: B's checkpoint at 12 evicts A's, which moves to the host; A's
        # prompt again finds its KV on the device and its checkpoint on the host
        with pkv.Engine(host_tier(1)) as e:
            a, b = list(range(14)), list(range(500, 514))
            run(e, a)
            run(e, b)
            st = e.stats()
            self.assertEqual((st.num_state_checkpoints_offloaded,
                              st.num_host_state_checkpoints_held), (1, 1), st)
            info, _ = run(e, a)
            self.assertEqual(info.num_cached_tokens, 12)
            st = e.stats()
            self.assertEqual((st.num_state_restores, st.num_state_restores_from_host), (1, 1), st)
            e.check()


if __name__ == '__main__':
    unittest.main()
