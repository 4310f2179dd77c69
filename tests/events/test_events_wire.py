#!/usr/bin/python3
"""Suite `events`: pkv's KV events on the wire, heard as a vLLM router hears vLLM.

A subscriber written against vLLM's protocol (subscriber.py beside this file; vLLM's event
classes as kv_events.py declares them in vllm_events.py, decoded as strictly as msgspec decodes
them) connects to an engine's PUB socket, decodes every message, checks every block hash against
pkv_block_hash, detects the gap a reconnect leaves and fills it from the replay socket, and ends
with exactly the events the engine queued in process (pkv_drain_kv_events), in order. Both
encodings are heard: the MAP one of vLLM 0.26+ (pkv's default) and the ARRAY one of older routers
(pkv_event_publisher_params.format), each event carrying every field vLLM declares. Also: a
windowed model's groups (group_idx, kv_cache_spec_kind, the window), an MLA model's kind, a
stalled subscriber (it loses messages, the engine does not wait, replay recovers them), a
multimodal prompt's extra_keys and a LoRA adapter's lora_id (pkv 0.5),
malformed replay requests, a custom topic and data-parallel rank, an unknown format refused.

Needs Debian's python3-zmq and python3-msgpack, and the pkv Python binding (bindings/python, found
through PYTHONPATH; the library through PKV_LIBRARY). Every socket is on 127.0.0.1, on ports the
kernel picks ('tcp://127.0.0.1:*', read back through pkv_event_publisher_info).
"""
import random
import sys
import time
import unittest

try:
    import msgpack
    import zmq
except ImportError as e:  # scripts/test.sh installs them; a bare machine says what is missing
    print('events suite needs python3-zmq and python3-msgpack (Debian): %s' % e)
    sys.exit(77)

import pkv
from subscriber import END_SEQ, Subscriber
from vllm_events import (LEGACY, AllBlocksCleared, BlockRemoved, BlockStored, DecodeError,
                         KVEventBatch, LegacyBlockStored, decode, encoded_names, field_names)

BS = 4
SEED = 11
MAP, ARRAY = pkv.EVENT_FORMAT_MAP, pkv.EVENT_FORMAT_ARRAY
FULL = ('full_attention', None)


def wire_events(batches):
    return [e for _, b, _, _ in batches for e in b.events]


def raw_events(batches, named):
    return [e for _, _, raw, _ in batches for e in (raw['events'] if named else raw[1])]


def flatten(events):
    """Wire events one per block: ('S', hash, parent or None, tokens, medium, group) /
    ('R', hash, medium, group) / ('C',)."""
    out = []
    for e in events:
        if isinstance(e, BlockStored):
            parent = e.parent_block_hash
            for i, h in enumerate(e.block_hashes):
                out.append(('S', h, parent, tuple(e.token_ids[i * e.block_size:(i + 1) * e.block_size]),
                            e.medium, e.group_idx))
                parent = h
        elif isinstance(e, BlockRemoved):
            out.extend(('R', h, e.medium, e.group_idx) for h in e.block_hashes)
        else:
            out.append(('C',))
    return out


MEDIUM = {pkv.TIER_DEVICE: 'CPU', pkv.TIER_HOST: 'CPU_HOST_TIER'}


class EventsWireTest(unittest.TestCase):
    def setUp(self):
        self.ctx = zmq.Context()

    def tearDown(self):
        self.ctx.term()

    def engine(self, publisher, **fields):
        params = pkv.Params(num_layers=2, num_q_heads=4, num_kv_heads=2, head_dim=8,
                            dtype=pkv.DTYPE_F32, device=pkv.DEVICE_CPU, block_size=BS,
                            num_blocks=24, hash_seed=SEED, enable_kv_events=1,
                            kv_events_capacity=1 << 20, num_threads=1)
        for name, value in fields.items():
            setattr(params, name, value)
        return pkv.Engine(params, event_publisher=publisher)

    @staticmethod
    def publisher(**fields):
        return pkv.EventPublisherParams(endpoint='tcp://127.0.0.1:*',
                                        replay_endpoint='tcp://127.0.0.1:*', **fields)

    @staticmethod
    def workload(engine, rng, rounds, salts=(None,)):
        """Prompts sharing prefixes under a few salts; some stay, most are released; pressure
        evicts (and offloads, with a host tier)."""
        held = []
        for r in range(rounds):
            salt = salts[r % len(salts)]
            prefix = [1, 2, 3, 4, 5, 6, 7, 8][:rng.choice([0, 4, 8])]
            tokens = prefix + [rng.randrange(6) for _ in range(rng.randrange(1, 20))]
            try:
                seq = engine.allocate(tokens, salt=salt)
            except pkv.NoSpaceError:
                for s in held:
                    s.release()
                held.clear()
                continue
            with engine.batch([seq]):
                pass
            if rng.random() < 0.3:
                held.append(seq)
            else:
                seq.release()
            if len(held) > 3:
                held.pop(0).release()
        for s in held:
            s.release()

    def in_process(self, engine):
        """The engine's own events, one per block, in the wire's shape."""
        out = []
        while True:
            got = engine.drain_kv_events(4096)
            for ev in got:
                self.assertNotEqual(ev.type, pkv.EVENT_OVERFLOW)
                if ev.type == pkv.EVENT_BLOCK_STORED:
                    out.append(('S', ev.block_hash, ev.parent_hash, MEDIUM[ev.medium], ev.group))
                elif ev.type == pkv.EVENT_BLOCK_REMOVED:
                    out.append(('R', ev.block_hash, MEDIUM[ev.medium], ev.group))
                else:
                    out.append(('C',))
            if len(got) < 4096:
                return out

    def check_against_engine(self, wire, mine, salts):
        """The wire's events are the in-process ones, in order; each stored hash is
        pkv_block_hash of its parent (or its salt's root) and its tokens."""
        roots = {pkv.block_hash_root(SEED, s) for s in salts}
        self.assertEqual(len(wire), len(mine))
        for w, m in zip(wire, mine):
            self.assertEqual(w[0], m[0])
            if w[0] == 'S':
                _, h, parent, tokens, medium, group = w
                self.assertEqual((h, medium, group), (m[1], m[3], m[4]))
                self.assertEqual(len(tokens), BS)
                if parent is None:
                    self.assertIn(m[2], roots, 'nil parent_block_hash for a block not first under a root')
                    self.assertEqual(h, pkv.block_hash(m[2], tokens, SEED))
                else:
                    self.assertEqual(parent, m[2])
                    self.assertNotIn(parent, roots)
                    self.assertEqual(h, pkv.block_hash(parent, tokens, SEED))
            elif w[0] == 'R':
                self.assertEqual(w[1:], m[1:])

    def check_fields(self, batches, named, specs):
        """Every event carries every field vLLM declares for its class, in declaration order (a
        decoder of any vLLM version then finds what it looks for), with pkv's values: lora_id,
        lora_name and extra_keys nil, each group's kv_cache_spec_kind and window as specs
        ({group_idx: (kind, window or None)}) says."""
        for _, b, raw, _ in batches:
            self.assertIsInstance(b, KVEventBatch)
            if named:
                self.assertEqual(list(raw), ['ts', 'events', 'data_parallel_rank'])
            else:
                self.assertEqual(len(raw), 3)
            self.assertAlmostEqual(b.ts, time.time(), delta=120)
        for e, r in zip(wire_events(batches), raw_events(batches, named)):
            self.assertEqual(encoded_names(r, named), ['type'] + field_names(type(e)))
            self.assertEqual(len(r), 1 + len(field_names(type(e))))
            if isinstance(e, BlockStored):
                self.assertEqual(e.block_size, BS)
                self.assertEqual((e.lora_id, e.lora_name, e.extra_keys), (None, None, None))
                self.assertEqual(len(e.token_ids), BS * len(e.block_hashes))
                self.assertEqual((e.kv_cache_spec_kind, e.kv_cache_spec_sliding_window),
                                 specs[e.group_idx])
            elif isinstance(e, BlockRemoved):
                self.assertIn(e.group_idx, specs)

    def hear(self, engine, rounds, named=True, seed=9, **workload):
        """A subscriber's batches of a workload of rounds, checked against the engine."""
        sub = Subscriber(self.ctx, engine.event_publisher_info(), named=named)
        self.workload(engine, random.Random(seed), rounds, **workload)
        sub.wait_for(engine)
        sub.close()
        wire = flatten(wire_events(sub.batches))
        self.check_against_engine(wire, self.in_process(engine), workload.get('salts', (None,)))
        return sub.batches, wire

    # -------------------------------------------------------------------------------- tests
    def test_router_hears_everything_across_a_reconnect(self):
        salts = (None, b'tenant-a')
        engine = self.engine(self.publisher(), host_num_blocks=12)  # the default: MAP
        info = engine.event_publisher_info()
        self.assertTrue(info.endpoint.startswith('tcp://127.0.0.1:'), info.endpoint)
        sub = Subscriber(self.ctx, info)
        rng = random.Random(5)
        # The subscription takes a moment: what is sent before it is replayed from seq 0.
        self.workload(engine, rng, 40, salts)
        sub.wait_for(engine)
        self.assertTrue(sub.batches)
        # A router that drops off and comes back misses batches; its first new one shows the gap.
        gaps_before = len(sub.gaps)
        sub.disconnect()
        self.workload(engine, rng, 40, salts)
        engine.reset_prefix_cache()
        sub.connect()
        deadline = time.time() + 20
        while not sub.poll(50):
            self.assertLess(time.time(), deadline, 'no message after reconnecting')
            self.workload(engine, rng, 2, salts)
        self.workload(engine, rng, 40, salts)
        sub.wait_for(engine)
        self.assertGreater(len(sub.gaps), gaps_before, 'the reconnect left no gap')
        seqs = [s for s, _, _, _ in sub.batches]
        self.assertEqual(seqs, list(range(len(seqs))))
        self.assertEqual(seqs[-1] + 1, engine.event_publisher_info().next_seq)

        wire = flatten(wire_events(sub.batches))
        self.check_against_engine(wire, self.in_process(engine), salts)
        self.assertEqual({w[0] for w in wire}, {'S', 'R', 'C'})
        self.assertIn('CPU_HOST_TIER', {w[4] for w in wire if w[0] == 'S'}, 'nothing offloaded')
        self.check_fields(sub.batches, True, {0: FULL})
        self.assertEqual({b.data_parallel_rank for _, b, _, _ in sub.batches}, {0})
        # Runs of one chain are one BlockStored.
        self.assertTrue(any(isinstance(e, BlockStored) and len(e.block_hashes) > 1
                            for e in wire_events(sub.batches)))
        info = engine.event_publisher_info()
        self.assertEqual(info.events_dropped, 0)
        self.assertGreaterEqual(info.replay_requests, 1)
        self.assertEqual(info.events_published, len(wire))
        sub.close()
        engine.close()

    def test_array_format_for_older_routers(self):
        """format ARRAY: vLLM's classes positionally, every field carried (a decoder written
        since lora_name refuses a BlockStored without it), so both a current array decoder and
        vLLM's older example subscriber hear the same events."""
        engine = self.engine(self.publisher(format=ARRAY), host_num_blocks=12)
        batches, wire = self.hear(engine, 60, named=False, salts=(None, b'tenant-b'))
        self.assertEqual({w[0] for w in wire}, {'S', 'R'})
        self.check_fields(batches, False, {0: FULL})
        for _, b, raw, payload in batches:
            legacy, _ = decode(payload, named=False, classes=LEGACY)
            self.assertEqual(len(legacy.events), len(b.events))
            for old, new in zip(legacy.events, b.events):
                if isinstance(old, LegacyBlockStored):
                    self.assertEqual((old.block_hashes, old.parent_block_hash, old.token_ids, old.medium),
                                     (new.block_hashes, new.parent_block_hash, new.token_ids, new.medium))
            with self.assertRaises(DecodeError):  # a 0.26 router does not take arrays
                decode(payload, named=True)
        engine.close()

    def test_items_and_adapters_on_the_wire(self):
        """A prompt with an image's key over its placeholders and a LoRA adapter: its BlockStored
        carries lora_id and, per block, extra_keys (nil before the image; then [key, start, end,
        item_start] of the image's part in the block), and its hashes are pkv_block_hash_extra's
        from pkv_block_hash_root_lora; a plain prompt's stay nil. Both encodings."""
        image = pkv.ExtraKey(6, 18, b'image-A')
        tokens = [100 + i for i in range(6)] + [151655] * 12
        for fmt in (MAP, ARRAY):
            engine = self.engine(self.publisher(format=fmt))
            sub = Subscriber(self.ctx, engine.event_publisher_info(), named=fmt == MAP)
            for extra, lora in (([image], 5), (None, 0)):
                seq = engine.allocate(tokens if extra else tokens[:8], extra_keys=extra, lora_id=lora)
                with engine.batch([seq]):
                    pass
            sub.wait_for(engine)
            sub.close()
            stored = [e for e in wire_events(sub.batches) if isinstance(e, BlockStored)]
            self.assertEqual(len(stored), 2)
            keyed, plain = stored
            blocks = [tokens[i:i + BS] for i in range(0, 16, BS)]
            want = pkv.block_hashes(blocks, SEED, extra_keys=[image], lora_id=5)
            self.assertIsNone(keyed.parent_block_hash)
            self.assertEqual(keyed.block_hashes, want[1:])
            self.assertNotEqual(want[0], pkv.block_hash_root(SEED))
            self.assertEqual(keyed.lora_id, 5)
            self.assertEqual(keyed.extra_keys, [None, [[b'image-A', 2, 4, 0]],
                                                [[b'image-A', 0, 4, 2]], [[b'image-A', 0, 4, 6]]])
            self.assertEqual((plain.lora_id, plain.extra_keys), (None, None))
            self.assertEqual(plain.block_hashes, pkv.block_hashes(blocks[:2], SEED)[1:])
            mine = [ev for ev in engine.drain_kv_events(64) if ev.type == pkv.EVENT_BLOCK_STORED]
            self.assertEqual([(ev.lora_id, ev.num_extra_keys) for ev in mine],
                             [(5, 0), (5, 1), (5, 1), (5, 1), (0, 0), (0, 0)])
            engine.close()

    def test_windowed_models_name_their_groups(self):
        """Each event's group: group_idx, and on BlockStored its kind and window, in both
        encodings. layer_windows [0, 8]: group 0 full attention, group 1 a window of 8; a window
        in every layer makes group 0 the windowed one; an MLA cache (pkv refuses windows on it)
        is vLLM's mla_attention; a hybrid model's checkpoints of its recurrent state are the group
        after its KV groups, vLLM's mamba."""
        hybrid = dict(layer_specs=[pkv.LayerSpec(), pkv.LayerSpec.state(ssm=(2, 4, 4))],
                      max_num_seqs=8)
        mla = dict(num_q_heads=4, num_kv_heads=1, head_dim=16, kv_layout=pkv.KvLayout.MLA,
                   kv_lora_rank=8, qk_rope_head_dim=8, softmax_scale=0.25)
        cases = [
            ('mixed', dict(layer_windows=[0, 8]), {0: FULL, 1: ('sliding_window', 8)}),
            ('all windowed', dict(sliding_window=12), {0: ('sliding_window', 12)}),
            ('mla', mla, {0: ('mla_attention', None)}),
            ('hybrid', hybrid, {0: FULL, 1: ('mamba', None)}),
        ]
        for fmt in (MAP, ARRAY):
            for name, fields, specs in cases:
                with self.subTest(format=fmt, model=name):
                    engine = self.engine(self.publisher(format=fmt), **fields)
                    batches, wire = self.hear(engine, 60, named=fmt == MAP)
                    self.assertEqual({w[-1] for w in wire if w[0] in 'SR'}, set(specs))
                    self.assertIn('R', {w[0] for w in wire}, 'no BlockRemoved heard')
                    self.check_fields(batches, fmt == MAP, specs)
                    engine.close()

    def test_decoders_refuse_what_older_pkv_sent(self):
        """pkv 0.3.0 sent a group-0 BlockStored as vLLM's example declares it, without lora_name:
        a decoder of vLLM's current classes refuses it (the bug this suite now catches); the
        example's own classes take it."""
        old = msgpack.packb([1.5, [['BlockStored', [7], None, [1, 2, 3, 4], BS, None, 'CPU']], 0])
        with self.assertRaisesRegex(DecodeError, 'lora_name'):
            decode(old, named=False)
        batch, _ = decode(old, named=False, classes=LEGACY)
        self.assertEqual(batch.events[0].block_hashes, [7])
        no_lora_name = {'type': 'BlockStored', 'block_hashes': [7], 'parent_block_hash': None,
                        'token_ids': [1, 2, 3, 4], 'block_size': BS, 'lora_id': None, 'medium': 'CPU'}
        with self.assertRaisesRegex(DecodeError, 'lora_name'):
            decode(msgpack.packb({'ts': 1.5, 'events': [no_lora_name]}))
        wrong_type = dict(no_lora_name, lora_name=None, group_idx='0')
        with self.assertRaisesRegex(DecodeError, 'group_idx'):
            decode(msgpack.packb({'ts': 1.5, 'events': [wrong_type]}))
        batch, _ = decode(msgpack.packb({'ts': 1.5, 'events': [dict(no_lora_name, lora_name=None)]}))
        self.assertIsNone(batch.events[0].group_idx)  # omitted defaults are the defaults
        self.assertIsInstance(decode(msgpack.packb({'ts': 1.5, 'events': [{'type': 'AllBlocksCleared'}]}))[0]
                              .events[0], AllBlocksCleared)

    def test_unknown_format_refused(self):
        with self.assertRaisesRegex(pkv.InvalidArgumentError, 'event_publisher->format'):
            self.engine(self.publisher(format=2))
        self.assertEqual(self.publisher().format, MAP)  # pkv_event_publisher_params_init's default

    def test_stalled_subscriber_loses_messages_not_the_engine(self):
        engine = self.engine(self.publisher(send_hwm=4, max_batch_events=2))
        info = engine.event_publisher_info()
        stalled = self.ctx.socket(zmq.SUB)
        stalled.setsockopt(zmq.RCVHWM, 4)
        stalled.setsockopt(zmq.RCVBUF, 4096)  # small kernel buffers: the losses come soon
        stalled.setsockopt(zmq.LINGER, 0)
        stalled.connect(info.endpoint)
        stalled.setsockopt(zmq.SUBSCRIBE, b'')
        time.sleep(0.2)
        rng = random.Random(3)
        self.workload(engine, rng, 2000)  # never read: the engine must not wait for it
        deadline = time.time() + 10
        while engine.event_publisher_info().events_queued and time.time() < deadline:
            time.sleep(0.01)
        info = engine.event_publisher_info()
        self.assertGreater(info.next_seq, 50)
        # The stalled one holds what its queues and socket buffers took, fewer than were sent:
        # the rest were dropped for it, and its seqs jump.
        got = []
        while stalled.poll(200):
            got.append(int.from_bytes(stalled.recv_multipart()[1], 'big'))
        self.assertLess(len(got), info.next_seq)
        self.assertTrue(any(b > a + 1 for a, b in zip(got, got[1:])) or got[-1] < info.next_seq - 1)
        # A router that stalled catches up from the replay socket (the buffer keeps them all).
        late = Subscriber(self.ctx, info)
        late.request_replay(0, info.next_seq)
        wire = flatten(wire_events(late.batches))
        self.check_against_engine(wire, self.in_process(engine), (None,))
        stalled.close(0)
        late.close()
        engine.close()

    def test_replay_window_and_bad_requests(self):
        engine = self.engine(self.publisher(replay_buffer_batches=5, max_batch_events=1, topic='pkv-test',
                                            data_parallel_rank=3))
        info = engine.event_publisher_info()
        sub = Subscriber(self.ctx, info, topic=b'pkv-test')
        # Malformed requests are ignored; the socket still answers the next good one.
        for frames in ([b'', b'short'], [b'', b'x' * 9], [b'a', b'b', b'c', b'd']):
            sub.replay.send_multipart(frames)
        self.workload(engine, random.Random(4), 30)
        deadline = time.time() + 10
        while engine.event_publisher_info().events_queued and time.time() < deadline:
            time.sleep(0.01)
        n = engine.event_publisher_info().next_seq
        self.assertGreater(n, 5)
        # Only the last 5 batches are kept: a request from 0 gets those, then END_SEQ.
        sub.replay.send_multipart([b'', (0).to_bytes(8, 'big')])
        seqs = []
        while True:
            self.assertTrue(sub.replay.poll(5000))
            frames = sub.replay.recv_multipart()
            if frames[1] == END_SEQ:
                break
            seqs.append(int.from_bytes(frames[1], 'big'))
            batch, _ = decode(frames[2])
            self.assertEqual(batch.data_parallel_rank, 3)
        self.assertEqual(seqs, list(range(n - 5, n)))
        # A REQ socket (vLLM's example) gets the first reply of its request.
        req = self.ctx.socket(zmq.REQ)
        req.setsockopt(zmq.LINGER, 0)
        req.connect(info.replay_endpoint)
        req.send((n - 1).to_bytes(8, 'big'))
        self.assertTrue(req.poll(5000))
        seq_bytes, payload = req.recv_multipart()
        self.assertEqual(int.from_bytes(seq_bytes, 'big'), n - 1)
        decode(payload)
        req.close(0)
        self.assertEqual(engine.event_publisher_info().replay_requests, 2)
        sub.close()
        engine.close()


if __name__ == '__main__':
    unittest.main(verbosity=2)
