#!/usr/bin/python3
"""Suite `events`: pkv's KV events on the wire, heard as a vLLM router hears vLLM.

A subscriber written against vLLM's protocol (examples/online_serving/kv_events_subscriber.py in
vLLM: its event classes are declared below as that example declares them) connects to an engine's
PUB socket, decodes every message into those classes, checks every block hash against
pkv_block_hash, detects the gap a reconnect leaves and fills it from the replay socket, and ends
with exactly the events the engine queued in process (pkv_drain_kv_events), in order. Also: a
sliding-window engine's group_idx, a stalled subscriber (it loses messages, the engine does not
wait, replay recovers them), malformed replay requests, a custom topic and data-parallel rank.

Needs Debian's python3-zmq and python3-msgpack, and the pkv Python binding (bindings/python, found
through PYTHONPATH; the library through PKV_LIBRARY). Every socket is on 127.0.0.1, on ports the
kernel picks ('tcp://127.0.0.1:*', read back through pkv_event_publisher_info).
"""
import dataclasses
import random
import sys
import time
import unittest
from typing import Any, List, Optional

try:
    import msgpack
    import zmq
except ImportError as e:  # scripts/test.sh installs them; a bare machine says what is missing
    print('events suite needs python3-zmq and python3-msgpack (Debian): %s' % e)
    sys.exit(77)

import pkv

BS = 4
SEED = 11
END_SEQ = (-1).to_bytes(8, 'big', signed=True)


# ------------------------------------------------------------------ vLLM's classes, as its
# example subscriber declares them (msgspec array_like, tagged): EventBatch(ts, events),
# BlockStored(block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium),
# BlockRemoved(block_hashes, medium), AllBlocksCleared(). The decoder below does what msgspec's
# Decoder(type=KVEventBatch) does with them: positional fields, the tag first, type checks,
# trailing fields the class does not declare ignored.
@dataclasses.dataclass
class EventBatch:
    ts: float
    events: List[Any]


@dataclasses.dataclass
class KVCacheEvent:
    """Base class for all KV cache-related events"""


@dataclasses.dataclass
class BlockStored(KVCacheEvent):
    block_hashes: List[int]
    parent_block_hash: Optional[int]
    token_ids: List[int]
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str]


@dataclasses.dataclass
class BlockRemoved(KVCacheEvent):
    block_hashes: List[int]
    medium: Optional[str]


@dataclasses.dataclass
class AllBlocksCleared(KVCacheEvent):
    pass


@dataclasses.dataclass
class KVEventBatch(EventBatch):
    events: List[Any]  # BlockStored | BlockRemoved | AllBlocksCleared


TAGS = {'BlockStored': BlockStored, 'BlockRemoved': BlockRemoved,
        'AllBlocksCleared': AllBlocksCleared}


def _check_type(value, annotation, where):
    ok = {
        float: lambda v: isinstance(v, float),
        int: lambda v: isinstance(v, int) and not isinstance(v, bool),
        str: lambda v: isinstance(v, str),
        Optional[int]: lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
        Optional[str]: lambda v: v is None or isinstance(v, str),
        List[int]: lambda v: isinstance(v, list) and all(
            isinstance(x, int) and not isinstance(x, bool) for x in v),
        List[Any]: lambda v: isinstance(v, list),
    }[annotation]
    if not ok(value):
        raise ValueError('%s: %r is not %s' % (where, value, annotation))


def decode(payload):
    """A KVEventBatch from one message's payload, as msgspec decodes vLLM's."""
    raw = msgpack.unpackb(payload, raw=False, strict_map_key=True)
    if not isinstance(raw, list) or len(raw) < 2:
        raise ValueError('a KVEventBatch is an array [ts, events, ...], got %r' % (raw,))
    _check_type(raw[0], float, 'ts')
    _check_type(raw[1], List[Any], 'events')
    events = []
    for e in raw[1]:
        if not isinstance(e, list) or not e or e[0] not in TAGS:
            raise ValueError('an event is an array tagged by its class, got %r' % (e,))
        cls = TAGS[e[0]]
        fields = dataclasses.fields(cls)
        if len(e) - 1 < len(fields):
            raise ValueError('%s has %d fields, got %r' % (cls.__name__, len(fields), e))
        for f, v in zip(fields, e[1:]):
            _check_type(v, f.type, '%s.%s' % (cls.__name__, f.name))
        events.append(cls(*e[1:1 + len(fields)]))
    batch = KVEventBatch(raw[0], events)
    batch.extra = raw[2:]  # vLLM's data_parallel_rank, pkv sends it
    return batch, raw


# ------------------------------------------------------------------ the subscriber
class Subscriber:
    """vLLM's example subscriber, made strict: every seq accounted for, in order; a gap is filled
    from the replay socket (a DEALER, so every reply of one request is read)."""

    def __init__(self, ctx, info, topic=b'kv-events'):
        self.ctx, self.info, self.topic = ctx, info, topic
        self.last_seq = -1
        self.batches = []  # (seq, KVEventBatch, raw array)
        self.gaps = []     # (first missed, first received)
        self.sub = None
        self.connect()
        self.replay = ctx.socket(zmq.DEALER)
        self.replay.setsockopt(zmq.LINGER, 0)
        self.replay.connect(info.replay_endpoint)

    def connect(self):
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.connect(self.info.endpoint)
        self.sub.setsockopt(zmq.SUBSCRIBE, self.topic)

    def disconnect(self):
        self.sub.close(0)
        self.sub = None

    def take(self, seq, payload):
        batch, raw = decode(payload)
        self.batches.append((seq, batch, raw))
        self.last_seq = seq

    def request_replay(self, start, stop):
        """Fills [start, stop) from the replay socket; the reply ends with vLLM's END_SEQ."""
        self.replay.send_multipart([b'', start.to_bytes(8, 'big')])
        while True:
            if not self.replay.poll(5000):
                raise AssertionError('no replay reply (asked from seq %d)' % start)
            frames = self.replay.recv_multipart()
            assert frames[0] == b'' and len(frames) == 3, frames
            seq_bytes, payload = frames[1], frames[2]
            if seq_bytes == END_SEQ:
                assert payload == b''
                break
            seq = int.from_bytes(seq_bytes, 'big')
            if self.last_seq + 1 <= seq < stop:
                assert seq == self.last_seq + 1, 'replay skipped from %d to %d' % (self.last_seq, seq)
                self.take(seq, payload)
        assert self.last_seq == stop - 1, 'replay ended at %d, %d wanted' % (self.last_seq, stop - 1)

    def poll(self, timeout_ms):
        """Receives what arrives within timeout_ms; False when nothing did."""
        if self.sub is None or not self.sub.poll(timeout_ms):
            return False
        while self.sub.poll(0):
            topic, seq_bytes, payload = self.sub.recv_multipart()
            assert topic == self.topic, topic
            assert len(seq_bytes) == 8
            seq = int.from_bytes(seq_bytes, 'big')
            if seq <= self.last_seq:
                continue  # replayed already
            if seq > self.last_seq + 1:
                self.gaps.append((self.last_seq + 1, seq))
                self.request_replay(self.last_seq + 1, seq)
            self.take(seq, payload)
        return True

    def wait_for(self, engine, timeout=20.0):
        """Until every batch the engine published so far is here."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            info = engine.event_publisher_info()
            if info.events_queued == 0 and self.last_seq + 1 >= info.next_seq:
                return
            if not self.poll(50) and info.events_queued == 0 and info.next_seq > self.last_seq + 1:
                # batches were sent while we were not subscribed and nothing newer comes:
                self.request_replay(self.last_seq + 1, info.next_seq)
        raise AssertionError('missing batches: have up to %d, engine at %d' %
                             (self.last_seq, engine.event_publisher_info().next_seq))

    def close(self):
        if self.sub is not None:
            self.sub.close(0)
        self.replay.close(0)


def wire_events(batches):
    return [e for _, b, _ in batches for e in b.events]


def flatten(events):
    """Wire events one per block: ('S', hash, parent or None, tokens, medium, group) /
    ('R', hash, medium, group) / ('C',)."""
    out = []
    for e, group in events:
        if isinstance(e, BlockStored):
            parent = e.parent_block_hash
            for i, h in enumerate(e.block_hashes):
                out.append(('S', h, parent, tuple(e.token_ids[i * e.block_size:(i + 1) * e.block_size]),
                            e.medium, group))
                parent = h
        elif isinstance(e, BlockRemoved):
            out.extend(('R', h, e.medium, group) for h in e.block_hashes)
        else:
            out.append(('C',))
    return out


def with_groups(batches):
    """(event, group_idx) pairs: group_idx is the trailing field pkv adds for groups other than 0
    (vLLM's newer BlockStored: lora_name, extra_keys, group_idx; BlockRemoved: group_idx)."""
    out = []
    for _, b, raw in batches:
        for e, r in zip(b.events, raw[1]):
            if isinstance(e, BlockStored):
                group = r[9] if len(r) > 9 else 0
            elif isinstance(e, BlockRemoved):
                group = r[3] if len(r) > 3 else 0
            else:
                group = 0
            out.append((e, group))
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

    # -------------------------------------------------------------------------------- tests
    def test_router_hears_everything_across_a_reconnect(self):
        salts = (None, b'tenant-a')
        engine = self.engine(self.publisher(), host_num_blocks=12)
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
        seqs = [s for s, _, _ in sub.batches]
        self.assertEqual(seqs, list(range(len(seqs))))
        self.assertEqual(seqs[-1] + 1, engine.event_publisher_info().next_seq)

        wire = flatten(with_groups(sub.batches))
        self.check_against_engine(wire, self.in_process(engine), salts)
        kinds = {w[0] for w in wire}
        self.assertEqual(kinds, {'S', 'R', 'C'})
        self.assertIn('CPU_HOST_TIER', {w[4] for w in wire if w[0] == 'S'}, 'nothing offloaded')
        for _, b, _ in sub.batches:
            self.assertIsInstance(b, KVEventBatch)
            self.assertEqual(b.extra, [0])  # data_parallel_rank
            self.assertAlmostEqual(b.ts, time.time(), delta=120)
            for e in b.events:
                if isinstance(e, BlockStored):
                    self.assertEqual(e.block_size, BS)
                    self.assertIsNone(e.lora_id)
                    self.assertEqual(len(e.token_ids), BS * len(e.block_hashes))
        # Runs of one chain are one BlockStored.
        self.assertTrue(any(isinstance(e, BlockStored) and len(e.block_hashes) > 1
                            for e in wire_events(sub.batches)))
        info = engine.event_publisher_info()
        self.assertEqual(info.events_dropped, 0)
        self.assertGreaterEqual(info.replay_requests, 1)
        self.assertEqual(info.events_published, len(wire))
        sub.close()
        engine.close()

    def test_kv_groups_carry_group_idx(self):
        engine = self.engine(self.publisher(), layer_windows=[0, 8])
        sub = Subscriber(self.ctx, engine.event_publisher_info())
        self.workload(engine, random.Random(9), 60)
        sub.wait_for(engine)
        wire = flatten(with_groups(sub.batches))
        self.check_against_engine(wire, self.in_process(engine), (None,))
        self.assertEqual({w[-1] for w in wire if w[0] in 'SR'}, {0, 1})
        sub.close()
        engine.close()

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
        wire = flatten(with_groups(late.batches))
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
            self.assertEqual(batch.extra, [3])
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
