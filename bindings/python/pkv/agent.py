"""The UCX transfer agent (pkv 0.12, pkv_agent_*): KV moved between engines in different
processes (or in one) by pkv itself, over UCX: a consumer's agent pulls a producer's held
sequence into one of its receiving requests with one-sided reads, then ends both sides.

    producer_agent = pkv.Agent(producer)                  # listens on 127.0.0.1, a free port
    address = producer_agent.address()                    # '127.0.0.1:PORT': tell the consumer
    ...                                                   # the producer progresses in its loop

    agent = pkv.Agent(consumer, listen_address=None)      # only connects
    peer = agent.connect(address)                         # blocks until the handshake is done
    seq = consumer.submit(prompt, num_remote_tokens=n)
    consumer.step()                                       # admits it RECEIVING
    for s in consumer.drain_receiving():
        agent.pull(peer, remote_seq_id, s)
    for done in agent.progress(wait_ms=10):               # AgentCompletion: seq, outcome, ...
        ...
"""
import ctypes
import dataclasses
import threading

from . import _raw
from ._lib import lib
from ._owner import Owner
from .engine import Engine, _uint32
from .enums import TransferOutcome
from .errors import make_error
from .params import check  # raises with pkv_last_error(): agent calls have no engine error
from .records import AgentCompletion, AgentStats, record
from .sequence import Sequence

# pkv_agent_params_init's defaults (tests/test_agent.py checks them against the library's)
DEFAULT_LISTEN_ADDRESS = '127.0.0.1:0'
DEFAULT_TIMEOUT_MS = 30000
DEFAULT_MAX_INFLIGHT_BYTES = 64 << 20

_ADDRESS_BYTES = 64  # an "ipv4:port" and its NUL fit


class _Handle:
    """The pkv_agent handle and the lock its calls run under. The Agent and its Engine both
    hold it, so whichever closes first destroys the agent (once), before the engine goes."""

    __slots__ = ('handle', 'lock')

    def __init__(self, handle):
        self.handle, self.lock = handle, threading.RLock()

    def destroy(self):
        with self.lock:  # waits for a call in flight on another thread
            if self.handle is not None:
                lib.pkv_agent_destroy(self.handle)  # fails its pulls in flight first
                self.handle = None


class Agent(Owner):
    """A UCX transfer agent for rank `rank` of `engine` (pkv_agent_create): it moves that rank's
    KV to and from other engines' agents. Use it as a context manager, or call close(); a closed
    agent refuses every call with ValueError. It keeps its engine alive, and engine.close()
    closes it first (the engine must outlive its agent). Calls on one agent may come from
    several threads (the agent serializes them; connect() blocks others for its handshake).

    listen_address: the "ipv4:port" it accepts peers on (port 0: a free one; address() says
    which), or None: it does not listen, it only connects. timeout_ms: a handshake or a pull
    taking longer fails (1 .. 2^32-1). on_failure: what a failed pull does to its receiving
    request, TransferOutcome.FAILED (it computes its prompt itself) or FAILED_FINISH (it
    finishes, FinishReason.TRANSFER_FAILED). max_inflight_bytes: the bytes of reads in flight
    at once, over all pulls (one segment's go however small it is).

    Nothing moves but in connect() and progress(): both sides call progress() in their loops
    (the listening side too, to accept peers and answer their pulls; a connect() in the same
    process needs the listening agent progressed by another thread meanwhile).

    Errors: InvalidArgumentError for a rank not below the engine's ranks, an address that is no
    "ipv4:port", an on_failure other than those two, a timeout_ms or max_inflight_bytes of 0 (and
    for a negative or non-integer number, before pkv reads it); UnsupportedError for a libpkv
    built without UCX, or a CUDA engine; DeviceError when UCX fails (the address cannot be
    listened on, the pool cannot be registered)."""

    def __init__(self, engine, rank=0, listen_address=DEFAULT_LISTEN_ADDRESS,
                 timeout_ms=DEFAULT_TIMEOUT_MS, on_failure=TransferOutcome.FAILED,
                 max_inflight_bytes=DEFAULT_MAX_INFLIGHT_BYTES):
        if not isinstance(engine, Engine):
            raise TypeError('pkv.Agent takes a pkv.Engine, got %s' % type(engine).__name__)
        p = _raw.pkv_agent_params()
        check(lib.pkv_agent_params_init(ctypes.byref(p), ctypes.sizeof(p)))
        p.rank = _uint32(rank, 'rank')
        address = None if listen_address is None else _address(listen_address, 'listen_address')
        p.listen_address = address  # pkv copies what it needs at create
        p.timeout_ms = _uint32(timeout_ms, 'timeout_ms')
        p.on_failure = _uint32(on_failure, 'on_failure')
        p.max_inflight_bytes = _uint64(max_inflight_bytes, 'max_inflight_bytes')
        handle = ctypes.POINTER(_raw.pkv_agent)()
        self.engine = engine  # the engine lives as long as its agent
        with engine._lock:
            if engine._handle is None:
                raise ValueError('pkv engine is closed')
            check(lib.pkv_agent_create(engine._handle, ctypes.byref(p), ctypes.byref(handle)))
            self._slot = _Handle(handle)
            engine._agents.add(self._slot)  # engine.close() destroys it first

    @property
    def _handle(self):
        return self._slot.handle  # None once closed (Owner.closed)

    def close(self):
        """Destroys the agent (pkv_agent_destroy): each pull in flight fails first (its reads
        cancelled, its receiving request ended as on_failure says), then its peers are
        disconnected. Idempotent."""
        slot = getattr(self, '_slot', None)
        if slot is None:
            return
        slot.destroy()
        self.engine._agents.discard(slot)

    def _call(self, fn, *args):
        """fn(handle, *args) under the agent's lock; a failure raises with pkv_last_error(),
        which is this thread's."""
        slot = self._slot
        with slot.lock:
            if slot.handle is None:
                raise ValueError('pkv agent is closed')
            check(fn(slot.handle, *args))

    # ------------------------------------------------------------------ peers
    def address(self):
        """The address it listens on, "ipv4:port" (pkv_agent_address), the port resolved when
        listen_address gave 0: what a peer's connect() takes. StateError when it does not listen
        (listen_address None)."""
        out = ctypes.create_string_buffer(_ADDRESS_BYTES)
        self._call(lib.pkv_agent_address, out, len(out))
        return out.value.decode('ascii')

    def connect(self, address):
        """Connects to the agent listening at `address` ("ipv4:port") and waits for the handshake
        (pkv_agent_connect, up to timeout_ms); returns the peer's id, an int for pull(). The
        listening agent must be progressed meanwhile (by its process, or another thread).
        InvalidArgumentError for an address that is no "ipv4:port", or a peer whose layout
        fingerprint differs (refused on both sides: stats().fingerprint_mismatches);
        DeviceError when there is no connection (nobody listens there, the handshake timed
        out, UCX failed)."""
        data = _address(address, 'address')
        peer = ctypes.c_uint32()
        self._call(lib.pkv_agent_connect, data, ctypes.byref(peer))
        return peer.value

    # ------------------------------------------------------------------ pulls
    def pull(self, peer, remote_seq, local_seq):
        """Starts pulling peer `peer`'s held sequence `remote_seq` (its id on the peer's engine,
        or a Sequence of it) into `local_seq`, a receiving request of this agent's engine (a
        Sequence or its id; Engine.drain_receiving lists them): its blocks remote_first_block ..
        + remote_num_blocks - 1, and with STATE layers its state (pkv_agent_pull). It ends in
        progress(), which reports it: DONE, the request's tokens are computed and it runs on at
        the next step(), and the peer's hold ends DONE; else it failed as on_failure says, and
        the hold ends FAILED. InvalidArgumentError for no peer `peer`; NotFoundError for no
        sequence local_seq; StateError when local_seq is not receiving, a pull into it is in
        flight, or the peer is gone."""
        self._call(lib.pkv_agent_pull, ctypes.c_uint32(_uint32(peer, 'peer')),
                   ctypes.c_uint64(_id(remote_seq, 'remote_seq')),
                   ctypes.c_uint64(_id(local_seq, 'local_seq')))

    def progress(self, wait_ms=0):
        """Moves things along (pkv_agent_progress): accepts peers, answers their pulls, issues
        and completes reads, ends pulls (Engine.receive_end / hold_end, under the engine's lock)
        and fails those past their timeout. Waits up to wait_ms for something to end (0: returns
        at once). Returns the pulls that ended, as AgentCompletions: seq, this engine's Sequence
        (the receiving request of a pull of this agent, served False; or the held sequence a
        peer pulled, served True), outcome a TransferOutcome (DONE, or on_failure here, FAILED
        served) and the bytes read."""
        wait = _uint32(wait_ms, 'wait_ms')
        buf = (_raw.pkv_agent_completion * 64)()
        got, out = ctypes.c_uint32(), []
        while True:
            self._call(lib.pkv_agent_progress, ctypes.c_uint32(wait), buf, len(buf),
                       ctypes.byref(got))
            out += [dataclasses.replace(record(c), seq=Sequence(self.engine, c.seq, 0))
                    for c in buf[:got.value]]
            if got.value < len(buf):
                return out
            wait = 0  # more ended than fit: the rest at once

    def stats(self):
        """The agent's counters now (pkv_agent_stats_get), as AgentStats: num_peers and
        pulls_in_flight now; pulls_done / _failed, served_done / _failed (peers' pulls of this
        engine's holds), bytes_pulled, bytes_served and fingerprint_mismatches since creation."""
        out = _raw.pkv_agent_stats(struct_size=ctypes.sizeof(_raw.pkv_agent_stats))
        self._call(lib.pkv_agent_stats_get, ctypes.byref(out))
        return record(out)

    def __repr__(self):
        return '<pkv.Agent %s>' % ('closed' if self.closed else 'of %r' % self.engine)


def _uint64(value, name):
    """value checked: a uint64 (ctypes would wrap a negative one silently)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
        raise make_error(_raw.PKV_ERR_INVALID_ARGUMENT, '%s is %r: give an integer 0 .. 2^64-1'
                         % (name, value))
    return value


def _id(seq, name):
    """A Sequence's id, or an id given as an int (checked: a uint64)."""
    return seq.id if isinstance(seq, Sequence) else _uint64(seq, name)


def _address(address, name):
    """An "ipv4:port" str as the bytes pkv reads (pkv checks the form): InvalidArgumentError for
    no str, or one with a NUL (C would read a shorter one)."""
    if not isinstance(address, str) or '\0' in address:
        raise make_error(_raw.PKV_ERR_INVALID_ARGUMENT, '%s is %r: give "ipv4:port" as a str, '
                         'e.g. "127.0.0.1:5555"' % (name, address))
    return address.encode('utf-8')


__all__ = ['Agent', 'AgentCompletion', 'AgentStats']
