"""A router's subscriber of pkv's KV events, as vLLM's example subscriber
(examples/online_serving/kv_events_subscriber.py) subscribes to vLLM, made strict: every seq
accounted for, in order, a gap filled from the replay socket, every payload decoded with vLLM's
classes (vllm_events.decode) in the format the router reads."""
import time

import zmq

from vllm_events import decode

END_SEQ = (-1).to_bytes(8, 'big', signed=True)  # vLLM's end-of-replay marker


class Subscriber:
    """vLLM's example subscriber, made strict: every seq accounted for, in order; a gap is filled
    from the replay socket (a DEALER, so every reply of one request is read). named: it decodes
    the MAP encoding (vLLM 0.26+), else the ARRAY one."""

    def __init__(self, ctx, info, topic=b'kv-events', named=True):
        self.ctx, self.info, self.topic, self.named = ctx, info, topic, named
        self.last_seq = -1
        self.batches = []  # (seq, KVEventBatch, raw batch, payload)
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
        batch, raw = decode(payload, self.named)
        self.batches.append((seq, batch, raw, payload))
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
