"""The UCX transfer agent (since 0.12.0), as tests/agent/test_agent_procs.c but in one process:
a producer engine holds a computed prompt and its agent listens, progressed by a thread (a
connect() blocks until the listening agent answers); the consumer's agent connects, pulls the
held sequence into a receiving request and progresses until the pull ends. Then the consumer
computes the rest and gets the producer's output. Also: engines of another dtype refused at the
handshake, a pull of a sequence not held, the refusals, and the agent's lifetime against its
engine's. Skipped when libpkv was built without UCX."""
import ctypes
import gc
import inspect
import threading
import time
import unittest
from unittest import mock

from _util import pkv
from test_transfers import BS, DIM, KV_HEADS, LAYERS, computed, params, prompt_of, read, step_one

N = 13  # the prompt: 12 tokens (3 whole blocks) pulled, the last computed by the consumer
NEVER = None
WAIT_S = 20  # at most, for a completion


def _ucx():
    """None when this libpkv has the agent, else why not."""
    with pkv.Engine(params(8)) as e:
        try:
            pkv.Agent(e).close()
        except pkv.UnsupportedError as err:
            return str(err)
    return None


NO_UCX = _ucx()


class Serving:
    """A thread progressing `agent` (1 ms waits) until the with-block ends, keeping what
    completed: the listening agent must answer a connect() while the main thread blocks in it,
    and a pull while the main thread progresses the other agent. An exception of the thread is
    raised at the block's end.

    The agent connected to it is closed inside the block: libpkv 0.12.0's pkv_agent_destroy
    waits, without bound, for a live peer to answer its closing (agent_ucx.cpp, close_all),
    and a peer in this process that nobody progresses never does."""

    def __init__(self, agent):
        self.agent, self.completions, self.error = agent, [], None
        self._stop, self._changed = threading.Event(), threading.Condition()
        self._thread = threading.Thread(target=self._run, name='pkv-agent-progress', daemon=True)

    def _run(self):
        try:
            while not self._stop.is_set():
                got = self.agent.progress(1)
                if got:
                    with self._changed:
                        self.completions += got
                        self._changed.notify_all()
        except BaseException as e:  # noqa: B902  reported by __exit__
            self.error = e

    def wait(self, count):
        """The first `count` completions, once they are there (AssertionError after WAIT_S)."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.completions) >= count, WAIT_S):
                raise AssertionError('%d completions after %d s: %r'
                                     % (len(self.completions), WAIT_S, self.completions))
            return self.completions[:count]

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        if self.error is not None and exc[0] is None:
            raise self.error


def wait_one(agent):
    """Progresses agent until one pull ends: that completion."""
    stop = time.monotonic() + WAIT_S
    while time.monotonic() < stop:
        got = agent.progress(10)
        if got:
            assert len(got) == 1, got
            return got[0]
    raise AssertionError('no completion in %d s' % WAIT_S)


def receiving(engine, prompt, remote):
    """A request of prompt whose first `remote` tokens come from afar, admitted RECEIVING."""
    seq = engine.submit(prompt, max_new_tokens=2, num_remote_tokens=remote)
    assert engine.step() is None
    assert engine.drain_receiving() == [seq]
    assert seq.info().transfer is pkv.TransferState.RECEIVING
    return seq


@unittest.skipIf(NO_UCX, 'libpkv without UCX: %s' % NO_UCX)
class Pulls(unittest.TestCase):
    def test_a_held_sequence_pulled_into_a_receiving_request(self):
        prompt = prompt_of(N)
        blocks = -(-N // BS)
        with pkv.Engine(params()) as p, pkv.Engine(params()) as c, pkv.Agent(p) as pa:
            ps, want = computed(p, prompt)
            p.hold(ps, NEVER)
            sent = [read(s) for s in p.seq_segments(ps, 0, blocks)]  # its bytes while held
            address = pa.address()
            self.assertRegex(address, r'^127\.0\.0\.1:[1-9][0-9]*$')
            # (the consumer's agent closes while the producer's is progressed: see Serving)
            with Serving(pa) as server, pkv.Agent(c, listen_address=None) as ca:
                with self.assertRaises(pkv.StateError):
                    ca.address()  # it does not listen
                peer = ca.connect(address)
                self.assertEqual(peer, 0)
                self.assertEqual(ca.stats().num_peers, 1)
                cs = receiving(c, prompt, N - 1)
                # refusals first: no such peer, no such sequence, one that is not receiving
                with self.assertRaises(pkv.InvalidArgumentError):
                    ca.pull(7, ps, cs)
                with self.assertRaises(pkv.NotFoundError):
                    ca.pull(peer, ps, 999)
                with c.allocate(prompt_of(3, 900)) as plain:
                    with self.assertRaises(pkv.StateError):
                        ca.pull(peer, ps, plain)
                for bad in ((-1, ps, cs), (peer, -1, cs), (peer, ps, 2**64), (peer, ps, 1.5)):
                    with self.subTest(bad=bad), self.assertRaises(pkv.InvalidArgumentError):
                        ca.pull(*bad)
                ca.pull(peer, ps.id, cs)
                with self.assertRaises(pkv.StateError):
                    ca.pull(peer, ps, cs)  # one pull into it at a time
                done = wait_one(ca)
                want_bytes = (N - 1) // BS * LAYERS * 2 * BS * KV_HEADS * DIM * 4  # K, V, f32
                self.assertEqual(done, pkv.AgentCompletion(seq=cs, outcome=pkv.TRANSFER_DONE,
                                                           served=False, bytes=want_bytes))
                self.assertIs(done.outcome, pkv.TransferOutcome.DONE)
                self.assertIsInstance(done.seq, pkv.Sequence)
                # the producer's side: its hold was served, and ended DONE
                (served,) = server.wait(1)
                self.assertEqual(served, pkv.AgentCompletion(seq=ps, outcome=pkv.TRANSFER_DONE,
                                                             served=True, bytes=want_bytes))
                self.assertIs(served.seq.engine, p)
                stats = ca.stats()
                self.assertIsInstance(stats, pkv.AgentStats)
                self.assertEqual((stats.num_peers, stats.pulls_in_flight, stats.pulls_done,
                                  stats.pulls_failed, stats.bytes_pulled, stats.served_done),
                                 (1, 0, 1, 0, want_bytes, 0))
            stats = pa.stats()
            self.assertEqual((stats.served_done, stats.served_failed, stats.bytes_served,
                              stats.pulls_done), (1, 0, want_bytes, 0))
            self.assertIs(ps.info().transfer, pkv.TransferState.NONE)
            pstats = p.stats()
            self.assertEqual((pstats.num_holds_done, pstats.num_held_seqs), (1, 0))
            p.check()
            # the consumer: its tokens computed, their blocks cached, the rest computed here
            info = cs.info()
            self.assertIs(info.transfer, pkv.TransferState.NONE)
            self.assertEqual(info.num_computed_tokens, N - 1)
            self.assertEqual(c.stats().num_receives_done, 1)
            self.assertEqual(c.allocate_query(prompt)[1], N - 1)
            got = step_one(c, cs)
            self.assertEqual([read(s) for s in c.seq_segments(cs, 0, blocks)], sent)
            for layer in range(LAYERS):
                for g, w in zip(got[layer], want[layer]):
                    self.assertAlmostEqual(g, w, delta=1e-5 * (1 + abs(w)))
            c.check()

    def test_a_sequence_not_held_fails_and_the_request_computes(self):
        prompt = prompt_of(N)
        with pkv.Engine(params()) as p, pkv.Engine(params()) as c, pkv.Agent(p) as pa:
            ps, want = computed(p, prompt)  # computed, not held
            with Serving(pa), pkv.Agent(c, listen_address=None) as ca:
                peer = ca.connect(pa.address())
                cs = receiving(c, prompt, N - 1)
                ca.pull(peer, ps, cs)
                done = wait_one(ca)
                self.assertEqual(ca.stats().pulls_failed, 1)
            self.assertEqual((done.seq, done.outcome, done.served), (cs, pkv.TRANSFER_FAILED,
                                                                     False))
            self.assertEqual(pa.stats().served_done, 0)
            info = cs.info()
            self.assertIs(info.transfer, pkv.TransferState.NONE)
            self.assertIs(info.is_preempted, True)
            self.assertEqual(c.stats().num_receives_failed, 1)
            c.check()
            got = step_one(c, cs)  # it computes its prompt itself: the same output
            for layer in range(LAYERS):
                for g, w in zip(got[layer], want[layer]):
                    self.assertAlmostEqual(g, w, delta=1e-5 * (1 + abs(w)))
            self.assertIs(ps.info().transfer, pkv.TransferState.NONE)
            p.check()

    def test_on_failure_finish(self):
        prompt = prompt_of(N)
        with pkv.Engine(params()) as p, pkv.Engine(params()) as c, pkv.Agent(p) as pa:
            ps, _ = computed(p, prompt)
            with Serving(pa), pkv.Agent(c, listen_address=None,
                                        on_failure=pkv.TransferOutcome.FAILED_FINISH) as ca:
                peer = ca.connect(pa.address())
                cs = receiving(c, prompt, N - 1)
                ca.pull(peer, ps, cs)
                done = wait_one(ca)
            self.assertIs(done.outcome, pkv.TransferOutcome.FAILED_FINISH)
            self.assertIs(cs.info().finish_reason, pkv.FinishReason.TRANSFER_FAILED)
            self.assertEqual(c.drain_finished(), [cs])
            cs.release()
            c.check()

    def test_engines_of_another_dtype_are_refused(self):
        with pkv.Engine(params(dtype=pkv.DTYPE_BF16)) as p, pkv.Engine(params()) as c, \
                pkv.Agent(p) as pa, pkv.Agent(c) as ca:
            ps = p.allocate(prompt_of(N))
            with p.batch([ps]):
                pass  # computed, as far as pkv knows (bf16 needs no values here)
            p.hold(ps, NEVER)
            with Serving(pa):
                # A race of libpkv 0.12.0 (agent_ucx.cpp): the listening agent force-closes
                # the connection right after its answer, and the connecting one may see the
                # reset before the answer (DeviceError 'connection lost', nothing counted), one
                # try in ten or so here. Each try is a new handshake: the first that reads the
                # answer is the refusal this test is about.
                for tries in range(1, 11):
                    try:
                        ca.connect(pa.address())
                    except pkv.DeviceError as e:
                        self.assertIn('connection lost', str(e))
                        continue
                    except pkv.InvalidArgumentError as e:
                        refused = e
                        break
                    self.fail('engines of another dtype connected')
                else:
                    self.fail('no try read the refusal')
                self.assertEqual(refused.status, pkv.ERR_INVALID_ARGUMENT)
                self.assertIn('fingerprints differ', str(refused))
            stats = ca.stats()
            self.assertEqual((stats.fingerprint_mismatches, stats.num_peers), (1, 0))
            # refused on both sides: the listening agent counts each try's
            self.assertEqual(pa.stats().fingerprint_mismatches, tries)
            with self.assertRaises(pkv.StateError):
                ca.pull(0, ps, 1)  # that peer is gone
            self.assertIs(ps.info().transfer, pkv.TransferState.HOLDING)  # nothing served
            self.assertEqual(pa.stats().served_done, 0)


@unittest.skipIf(NO_UCX, 'libpkv without UCX: %s' % NO_UCX)
class Refusals(unittest.TestCase):
    def test_addresses(self):
        with pkv.Engine(params()) as e, pkv.Agent(e, timeout_ms=2000) as a:
            # nobody listens where a closed agent listened
            with pkv.Agent(e) as other:
                gone = other.address()
            with self.assertRaises(pkv.DeviceError):
                a.connect(gone)
            for bad in ('localhost:1', '127.0.0.1', '127.0.0.1:99999', '', ':1', '127.0.0.1:x'):
                with self.subTest(address=bad), self.assertRaises(pkv.InvalidArgumentError):
                    a.connect(bad)
            for bad in (None, 5, b'127.0.0.1:1', '127.0.0.1:1\0junk'):
                with self.subTest(address=bad), self.assertRaises(pkv.InvalidArgumentError):
                    a.connect(bad)  # refused before pkv reads it
            self.assertEqual(a.stats().num_peers, 0)
            with pkv.Agent(e, listen_address=None) as quiet:
                with self.assertRaises(pkv.StateError) as ctx:
                    quiet.address()
                self.assertEqual(ctx.exception.status, pkv.ERR_STATE)

    def test_params(self):
        with pkv.Engine(params()) as e:
            for bad in ({'listen_address': 'nowhere:1'}, {'listen_address': '127.0.0.1'},
                        {'listen_address': 7}, {'rank': 1}, {'rank': -1},
                        {'on_failure': pkv.TransferOutcome.DONE}, {'on_failure': 3},
                        {'on_failure': -1}, {'timeout_ms': 0}, {'timeout_ms': 2**32},
                        {'timeout_ms': 1.5}, {'max_inflight_bytes': 0},
                        {'max_inflight_bytes': -1}, {'max_inflight_bytes': 2**64}):
                with self.subTest(**bad), self.assertRaises(pkv.InvalidArgumentError):
                    pkv.Agent(e, **bad)
            with self.assertRaises(TypeError):
                pkv.Agent(params())
            with self.assertRaises(pkv.InvalidArgumentError):
                pkv.Agent(e).progress(-1)
        with self.assertRaises(ValueError):
            pkv.Agent(e)  # a closed engine


@unittest.skipIf(NO_UCX, 'libpkv without UCX: %s' % NO_UCX)
class Lifetime(unittest.TestCase):
    def test_the_engine_closes_its_agents_first(self):
        e = pkv.Engine(params())
        a, b = pkv.Agent(e), pkv.Agent(e, listen_address=None)
        b.close()
        self.assertTrue(b.closed)
        b.close()  # idempotent
        with self.assertRaises(ValueError):
            b.stats()
        self.assertEqual(len(e._agents), 1)
        e.close()
        self.assertTrue(a.closed)
        with self.assertRaises(ValueError) as ctx:
            a.address()
        self.assertIn('closed', str(ctx.exception))
        a.close()
        self.assertIn('closed', repr(a))

    def test_an_agent_keeps_its_engine(self):
        a = pkv.Agent(pkv.Engine(params()))
        gc.collect()
        self.assertFalse(a.engine.closed)
        self.assertEqual(a.stats().num_peers, 0)
        engine = a.engine
        del a
        gc.collect()
        self.assertEqual(engine._agents, set())  # dropped: destroyed
        engine.close()

    def test_the_defaults_are_pkvs(self):
        c = pkv._raw.pkv_agent_params()
        pkv.lib.pkv_agent_params_init(ctypes.byref(c), ctypes.sizeof(c))
        got = {name: value.default for name, value in
               inspect.signature(pkv.Agent).parameters.items() if name != 'engine'}
        self.assertEqual(got, {'rank': c.rank, 'listen_address': c.listen_address.decode(),
                               'timeout_ms': c.timeout_ms, 'on_failure': c.on_failure,
                               'max_inflight_bytes': c.max_inflight_bytes})


class WithoutUcx(unittest.TestCase):
    def test_unsupported(self):
        """A libpkv without UCX refuses pkv_agent_create: UnsupportedError (NotImplementedError
        too), as the skips above read it."""
        with pkv.Engine(params(8)) as e, \
                mock.patch.object(pkv.lib, 'pkv_agent_create', return_value=pkv.ERR_UNSUPPORTED):
            with self.assertRaises(pkv.UnsupportedError):
                pkv.Agent(e)
            with self.assertRaises(NotImplementedError):
                pkv.Agent(e)
            self.assertEqual(e._agents, set())


if __name__ == '__main__':
    unittest.main()
