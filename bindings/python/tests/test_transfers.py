"""KV transfers between engines (since 0.12.0), as tests/unit/test_transfers.c: a producer's
holds (Engine.hold, submit(hold_on_finish=True), Engine.hold_end, their timeout on the engine's
clock, the bound params.max_held_blocks) and a consumer's remote fills (submit(num_remote_tokens=
N), Engine.drain_receiving, Engine.receive_end DONE, FAILED and FAILED_FINISH), the recurrent
state's segment (Engine.seq_state_segment), and the refusals. The transport is ctypes.memmove
between the two engines' segments (equal layout fingerprints); the consumer then computes what
the producer computed."""
import array
import ctypes
import os
import unittest
from unittest import mock

from _util import pkv
from test_state import SLOT_BYTES, hybrid

LAYERS, Q_HEADS, KV_HEADS, DIM, BS = 2, 4, 2, 8, 4
NEVER = None  # a hold without a timeout (UINT32_MAX)


def params(num_blocks=64, **fields):
    p = pkv.Params(num_layers=LAYERS, num_q_heads=Q_HEADS, num_kv_heads=KV_HEADS, head_dim=DIM,
                   dtype=pkv.DTYPE_F32, block_size=BS, num_blocks=num_blocks,
                   device=pkv.DEVICE_CPU, num_threads=1, debug_flags=pkv.DEBUG_TEST_CLOCK)
    for name, value in fields.items():
        setattr(p, name, value)
    return p


def qkv(pos, layer, q_heads, kv_heads):
    """Q, K and V of position pos in a layer: the same on every engine, so two engines computing
    the same tokens write the same bytes and get the same outputs."""
    q = [0.01 * ((i + pos + layer) % 13) for i in range(q_heads * DIM)]
    k = [((pos * 7 + layer * 3 + i) % 17) * 0.125 - 1.0 for i in range(kv_heads * DIM)]
    return q, k, [-0.5 * x for x in k]


def run_layers(engine, batch):
    """Every layer of an open batch with qkv's values; each layer's last row of output."""
    q_heads = engine.params.num_q_heads // engine.params.tp_size
    kv_heads = engine.budget().kv_heads_per_rank
    positions, last = batch.positions, []
    for layer in range(LAYERS):
        q, k, v = array.array('f'), array.array('f'), array.array('f')
        for pos in positions:
            rows = qkv(pos, layer, q_heads, kv_heads)
            q.extend(rows[0])
            k.extend(rows[1])
            v.extend(rows[2])
        out = array.array('f', bytes(len(q) * 4))
        batch.attention(layer, q, k, v, out)
        last.append(list(out[-q_heads * DIM:]))
    return last


def computed(engine, prompt):
    """An allocate() sequence of prompt computed in one batch, and its last row's outputs."""
    seq = engine.allocate(prompt)
    with engine.batch([seq]) as batch:
        out = run_layers(engine, batch)
    return seq, out


def step_one(engine, seq):
    """One step of engine that runs seq alone: its last row's outputs (a token sampled)."""
    batch = engine.step()
    assert batch is not None and batch.seq_ids == [seq.id], batch and batch.seq_ids
    with batch:
        out = run_layers(engine, batch)
        batch.commit([7])
    engine.check()
    return out


def read(segment):
    return ctypes.string_at(segment.base, segment.bytes)


def transfer(src_engine, src, dst_engine, dst, first, count):
    """The transport: src's blocks [first, first + count) into dst's, segment by segment, and
    the recurrent state's segment; the bytes moved."""
    assert src_engine.layout_fingerprint() == dst_engine.layout_fingerprint()
    froms = src_engine.seq_segments(src, first, count)
    tos = dst_engine.seq_segments(dst, first, count)
    assert len(froms) == len(tos)
    pairs = list(zip(froms, tos)) + [(src_engine.seq_state_segment(src),
                                      dst_engine.seq_state_segment(dst))]
    moved = 0
    for f, t in pairs:
        if t.base is None:  # a window's given-back block, or no state: nothing to write
            continue
        assert f.bytes == t.bytes
        ctypes.memmove(t.base, f.base, t.bytes)
        moved += t.bytes
    return moved


def prompt_of(n, first=300):
    return list(range(first, first + n))


class Holds(unittest.TestCase):
    def test_hold_then_end(self):
        with pkv.Engine(params(32)) as e:
            prompt = prompt_of(10, 100)
            seq, _ = computed(e, prompt)
            used = e.stats().num_used_blocks
            e.hold(seq, timeout_ms=NEVER)
            info = seq.info()
            self.assertIs(info.transfer, pkv.TransferState.HOLDING)
            self.assertIs(info.kv_tier, pkv.Tier.DEVICE)
            stats = e.stats()
            self.assertEqual((stats.num_held_seqs, stats.num_held_blocks), (1, 3))
            self.assertEqual(stats.num_used_blocks, used)  # nothing moved
            # its bytes are readable; it cannot change, run or be released meanwhile
            self.assertEqual(len(e.seq_segments(seq, 0, 3)), 3 * LAYERS * 2)
            with self.assertRaises(pkv.StateError) as ctx:
                seq.release()
            self.assertEqual(ctx.exception.status, pkv.ERR_STATE)
            with self.assertRaises(pkv.StateError):
                seq.append([1])
            with self.assertRaises(pkv.StateError):
                e.hold(seq.id)  # held already
            with self.assertRaises(pkv.StateError):
                e.batch([seq])
            with self.assertRaises(pkv.InvalidArgumentError):
                e.hold_end(seq, 7)
            e.check()
            # its sealed blocks stay in the prefix cache: another prompt shares them
            with e.allocate(prompt) as other:
                self.assertEqual(other.num_cached_tokens, 8)
            e.hold_end(seq, pkv.TransferOutcome.DONE)
            info = seq.info()
            self.assertIs(info.transfer, pkv.TransferState.NONE)
            self.assertIs(info.kv_tier, pkv.Tier.NONE)
            stats = e.stats()
            self.assertEqual((stats.num_held_seqs, stats.num_held_blocks, stats.num_holds_done,
                              stats.num_holds_failed, stats.num_used_blocks), (0, 0, 1, 0, 0))
            with self.assertRaises(pkv.StateError):
                e.hold_end(seq, pkv.TRANSFER_DONE)  # ended once
            with self.assertRaises(pkv.StateError):
                e.seq_segments(seq, 0, 1)
            seq.release()
            # FAILED is counted apart
            seq, _ = computed(e, prompt)
            e.hold(seq)
            e.hold_end(seq.id, pkv.TransferOutcome.FAILED)
            self.assertEqual((e.stats().num_holds_done, e.stats().num_holds_failed), (1, 1))
            seq.release()
            e.check()

    def test_timeouts_on_the_engines_clock(self):
        with mock.patch.dict(os.environ, {'PKV_TEST_CLOCK_MS': '1000'}), \
                pkv.Engine(params(32)) as e:
            prompt = prompt_of(10, 100)
            a, b, c = (computed(e, prompt[i:])[0] for i in range(3))
            e.hold(a, 500)  # until 1500
            e.hold(b)  # the default: until 1000 + TRANSFER_TIMEOUT_DEFAULT_MS
            e.hold(c, NEVER)
            self.assertEqual(pkv.TRANSFER_TIMEOUT_DEFAULT_MS, 480000)
            os.environ['PKV_TEST_CLOCK_MS'] = '1499'
            self.assertEqual(e.stats().num_held_seqs, 3)
            os.environ['PKV_TEST_CLOCK_MS'] = '1500'
            stats = e.stats()  # any call reads the clock
            self.assertEqual((stats.num_held_seqs, stats.num_holds_timed_out), (2, 1))
            self.assertIs(a.info().transfer, pkv.TransferState.NONE)
            with self.assertRaises(pkv.StateError):
                e.hold_end(a, pkv.TransferOutcome.DONE)  # too late
            os.environ['PKV_TEST_CLOCK_MS'] = '480999'
            self.assertEqual(e.stats().num_held_seqs, 2)
            os.environ['PKV_TEST_CLOCK_MS'] = '481000'
            self.assertEqual(e.stats().num_held_seqs, 1)
            os.environ['PKV_TEST_CLOCK_MS'] = '999999999'
            stats = e.stats()
            self.assertEqual((stats.num_held_seqs, stats.num_holds_timed_out), (1, 2))  # not c
            e.check()
            a.release()
            b.release()
            e.hold_end(c, pkv.TransferOutcome.DONE)
            c.release()
            self.assertEqual(e.stats().num_used_blocks, 0)

    def test_a_request_holds_when_it_finishes(self):
        with pkv.Engine(params(32, max_held_blocks=5)) as e:
            self.assertEqual(e.params.max_held_blocks, 5)
            prompt = prompt_of(10, 100)
            r = e.submit(prompt, max_new_tokens=1, hold_on_finish=True)
            plain = e.submit(prompt, max_new_tokens=1)
            # 5 blocks: past the bound once r holds 3
            big = e.submit(prompt_of(20, 500), max_new_tokens=1, hold_on_finish=True,
                           hold_timeout_ms=NEVER)
            for _ in range(4):
                batch = e.step()
                if batch is None:
                    break
                with batch:
                    run_layers(e, batch)
                    batch.commit([1] * batch.num_seqs)
                e.check()
            self.assertEqual(set(e.drain_finished()), {r, plain, big})
            info = r.info()
            self.assertIs(info.transfer, pkv.TransferState.HOLDING)
            self.assertIs(info.finish_reason, pkv.FinishReason.LENGTH)
            self.assertEqual((info.num_tokens, info.num_computed_tokens), (11, 10))
            self.assertIs(plain.info().transfer, pkv.TransferState.NONE)
            self.assertIs(big.info().transfer, pkv.TransferState.NONE)  # refused: the bound
            stats = e.stats()
            self.assertEqual((stats.num_holds_refused, stats.num_held_blocks,
                              stats.num_finished_requests), (1, 3, 3))
            self.assertEqual(len(e.seq_segments(r, 0, 3)), 3 * LAYERS * 2)
            with self.assertRaises(pkv.StateError):
                r.release()
            e.hold_end(r, pkv.TransferOutcome.DONE)
            for seq in (r, plain, big):
                seq.release()
            self.assertEqual(e.stats().num_used_blocks, 0)
            e.check()


class RemoteFills(unittest.TestCase):
    def fill(self, n, remote, preload):
        """The producer computes prompt_of(n) and holds it; the consumer (which may cache the
        first `preload` tokens already) receives its first `remote` tokens, then computes the
        rest in one step: its blocks' bytes and its output are the producer's."""
        prompt = prompt_of(n)
        with pkv.Engine(params()) as p, pkv.Engine(params()) as c:
            ps, want = computed(p, prompt)
            p.hold(ps, NEVER)
            hit = 0
            if preload:
                computed(c, prompt[:preload])[0].release()
                hit = preload // BS * BS
            cs = c.submit(prompt, max_new_tokens=2, num_remote_tokens=remote)  # runs on
            self.assertIsNone(c.step())  # nothing to run: it receives
            self.assertEqual(c.drain_receiving(), [cs])
            self.assertEqual(c.drain_receiving(), [])  # listed once
            info = cs.info()
            self.assertIs(info.transfer, pkv.TransferState.RECEIVING)
            self.assertEqual((info.num_computed_tokens, info.remote_first_block,
                              info.remote_num_blocks, info.num_remote_tokens),
                             (hit, hit // BS, -(-remote // BS) - hit // BS, remote))
            stats = c.stats()
            self.assertEqual((stats.num_receiving_requests, stats.num_receiving_blocks),
                             (1, info.remote_num_blocks))
            with self.assertRaises(pkv.StateError):
                cs.release()
            self.assertIsNone(c.step())  # still receiving: never run
            c.check()
            self.assertEqual(c.seq_state_segment(cs), pkv.Segment(None, 0))  # no STATE layers
            moved = transfer(p, ps, c, cs, info.remote_first_block, info.remote_num_blocks)
            self.assertEqual(moved, info.remote_num_blocks * LAYERS * 2 * BS * KV_HEADS * DIM * 4)
            c.receive_end(cs, pkv.TransferOutcome.DONE)
            info = cs.info()
            self.assertIs(info.transfer, pkv.TransferState.NONE)
            self.assertEqual(info.num_computed_tokens, remote)
            stats = c.stats()
            self.assertEqual((stats.num_receives_done, stats.received_tokens,
                              stats.num_receiving_requests), (1, remote - hit, 0))
            c.check()
            # the received full blocks are in the prefix cache, as if computed
            self.assertEqual(c.allocate_query(prompt)[1], min(remote, n - 1) // BS * BS)
            # its step computes the rest: the producer's bytes and output
            got = step_one(c, cs)
            blocks = -(-n // BS)
            self.assertEqual([read(s) for s in c.seq_segments(cs, 0, blocks)],
                             [read(s) for s in p.seq_segments(ps, 0, blocks)])
            for layer in range(LAYERS):
                for g, w in zip(got[layer], want[layer]):
                    self.assertAlmostEqual(g, w, delta=1e-5 * (1 + abs(w)))
            p.hold_end(ps, pkv.TransferOutcome.DONE)
            p.check()

    def test_done(self):
        for n, remote, preload in ((10, 9, 0),    # a partial last block
                                   (13, 12, 0),   # whole blocks
                                   (13, 12, 6)):  # a local hit of one block first
            with self.subTest(n=n, remote=remote, preload=preload):
                self.fill(n, remote, preload)

    def test_failed_then_failed_finish(self):
        prompt = prompt_of(13)
        with pkv.Engine(params()) as p, pkv.Engine(params()) as c:
            ps, want = computed(p, prompt)
            p.hold(ps, NEVER)
            cs = c.submit(prompt, max_new_tokens=1, num_remote_tokens=12)
            self.assertIsNone(c.step())
            self.assertEqual(c.drain_receiving(), [cs])
            # half the bytes arrive, then the peer is gone: nothing of it may be used
            self.assertGreater(transfer(p, ps, c, cs, 0, 1), 0)
            before = c.stats()
            c.receive_end(cs, pkv.TransferOutcome.FAILED)
            stats = c.stats()
            self.assertEqual((stats.num_receives_failed, stats.num_receives_done), (1, 0))
            self.assertEqual(stats.num_prefix_nodes, before.num_prefix_nodes)  # nothing sealed
            self.assertEqual(stats.num_used_blocks, 0)
            self.assertEqual(c.allocate_query(prompt)[1], 0)
            info = cs.info()
            self.assertIs(info.transfer, pkv.TransferState.NONE)
            self.assertIs(info.is_preempted, True)
            c.check()
            # it computes its prompt itself, and gets the same output
            got = step_one(c, cs)
            for layer in range(LAYERS):
                for g, w in zip(got[layer], want[layer]):
                    self.assertAlmostEqual(g, w, delta=1e-5 * (1 + abs(w)))
            self.assertEqual(c.stats().num_receives_done, 0)
            # FAILED_FINISH: it ends, listed as finished
            cs2 = c.submit(prompt[1:], max_new_tokens=1, num_remote_tokens=11)
            batch = c.step()
            if batch is not None:
                with batch:
                    run_layers(c, batch)
                    batch.commit([1] * batch.num_seqs)
            self.assertEqual(c.drain_receiving(), [cs2])
            self.assertIs(cs2.info().transfer, pkv.TransferState.RECEIVING)
            c.receive_end(cs2, pkv.TransferOutcome.FAILED_FINISH)
            info = cs2.info()
            self.assertIs(info.finish_reason, pkv.FinishReason.TRANSFER_FAILED)
            self.assertIs(info.kv_tier, pkv.Tier.NONE)
            self.assertEqual(c.drain_finished()[-1], cs2)
            self.assertEqual(c.stats().num_receives_failed, 2)
            cs2.release()
            c.check()
            p.hold_end(ps, pkv.TransferOutcome.FAILED)

    def test_a_hit_that_covers_them_runs_at_once_beside_one_receiving(self):
        prompt = prompt_of(13)
        with pkv.Engine(params()) as c:
            computed(c, prompt)[0].release()
            r = c.submit(prompt, max_new_tokens=1, num_remote_tokens=8)
            other = c.submit(prompt[3:9], max_new_tokens=1)
            recv = c.submit(prompt[2:], max_new_tokens=1, num_remote_tokens=10)
            batch = c.step()
            self.assertEqual(batch.seq_ids, [r.id, other.id])  # r's hit covers 8
            with batch:
                run_layers(c, batch)
                batch.commit([1, 1])
            self.assertEqual(c.drain_receiving(), [recv])
            self.assertIs(r.info().transfer, pkv.TransferState.NONE)
            self.assertIs(recv.info().transfer, pkv.TransferState.RECEIVING)
            c.check()
            c.receive_end(recv, pkv.TransferOutcome.FAILED_FINISH)


class StateSegments(unittest.TestCase):
    def test_the_recurrent_state_moves_with_the_blocks(self):
        prompt = prompt_of(9)
        with pkv.Engine(hybrid()) as p, pkv.Engine(hybrid()) as c:
            ps = p.allocate(prompt)
            with p.batch([ps]) as batch:  # the host runs every layer itself
                slot = batch.state_slots[0]
            pool = p.pool_info()
            state = p.seq_state_segment(ps)
            self.assertEqual(state, pkv.Segment(pool.state_base + slot * SLOT_BYTES, SLOT_BYTES))
            pattern = bytes(i % 251 for i in range(SLOT_BYTES))
            ctypes.memmove(state.base, pattern, SLOT_BYTES)  # the state after 9 tokens
            p.hold(ps, NEVER)
            self.assertEqual(p.seq_state_segment(ps, rank=0), state)  # held: still there
            cs = c.submit(prompt + [1], max_new_tokens=1, num_remote_tokens=9)
            self.assertIsNone(c.step())
            self.assertEqual(c.drain_receiving(), [cs])
            info = cs.info()
            into = c.seq_state_segment(cs)
            self.assertEqual(into.bytes, SLOT_BYTES)
            self.assertNotEqual(read(into), pattern)
            transfer(p, ps, c, cs, info.remote_first_block, info.remote_num_blocks)
            self.assertEqual(read(into), pattern)
            c.receive_end(cs, pkv.TransferOutcome.DONE)
            batch = c.step()
            self.assertEqual(batch.seq_ids, [cs.id])
            self.assertEqual(c.pool_info().state_base + batch.state_slots[0] * SLOT_BYTES,
                             into.base)  # it runs on from the state that arrived
            with batch:
                batch.commit([1])
            self.assertEqual(c.drain_finished(), [cs])
            with self.assertRaises(pkv.StateError):
                c.seq_state_segment(cs)  # finished: no working slot
            p.hold_end(ps, pkv.TransferOutcome.DONE)
            p.check()
            c.check()


class Refusals(unittest.TestCase):
    def test_requests(self):
        prompt = prompt_of(13)
        with pkv.Engine(params()) as c:
            with self.assertRaises(pkv.InvalidArgumentError) as ctx:
                c.submit(prompt, num_remote_tokens=13)  # the last token is computed here
            self.assertEqual(ctx.exception.status, pkv.ERR_INVALID_ARGUMENT)
            for bad in ({'num_remote_tokens': -1}, {'num_remote_tokens': 2**32},
                        {'hold_timeout_ms': -1}, {'hold_timeout_ms': 1.5}):
                with self.subTest(**bad), self.assertRaises(pkv.InvalidArgumentError):
                    c.submit(prompt, **bad)
            self.assertEqual(c.stats().num_waiting_requests, 0)
            self.assertEqual(c.drain_receiving(), [])
            with self.assertRaises(pkv.NotFoundError):
                c.receive_end(42, pkv.TransferOutcome.DONE)
            plain = c.allocate(prompt)
            with self.assertRaises(pkv.StateError):
                c.receive_end(plain, pkv.TransferOutcome.DONE)  # not receiving
            for outcome in (3, -1, None, 'DONE'):
                with self.subTest(outcome=outcome), self.assertRaises(pkv.InvalidArgumentError):
                    c.receive_end(plain, outcome)
            self.assertEqual(c.seq_state_segment(plain), pkv.Segment(None, 0))
            with self.assertRaises(pkv.InvalidArgumentError):
                c.seq_state_segment(plain, rank=1)
            with self.assertRaises(pkv.NotFoundError):
                c.seq_state_segment(42)
            c.check()

    def test_holds(self):
        prompt = prompt_of(10, 100)
        with pkv.Engine(params(32)) as e:
            with self.assertRaises(pkv.NotFoundError):
                e.hold(99)
            with self.assertRaises(pkv.NotFoundError):
                e.hold_end(99, pkv.TransferOutcome.DONE)
            seq = e.allocate(prompt)  # not computed
            with self.assertRaises(pkv.StateError):
                e.hold(seq)
            with self.assertRaises(pkv.StateError):
                e.hold_end(seq, pkv.TransferOutcome.DONE)
            with e.batch([seq]):
                with self.assertRaises(pkv.StateError):
                    e.hold(seq)  # in the open batch
            seq.preempt()
            with self.assertRaises(pkv.StateError):
                e.hold(seq)  # preempted
            seq.release()
            request = e.submit(prompt, max_new_tokens=2)
            with self.assertRaises(pkv.StateError):
                e.hold(request)  # a request holds when it finishes
            for timeout in (-1, 2**32, 1.0):
                with self.subTest(timeout=timeout), self.assertRaises(pkv.InvalidArgumentError):
                    e.hold(request, timeout)
            seq, _ = computed(e, prompt)
            e.hold(seq)
            with self.assertRaises(pkv.InvalidArgumentError):
                e.hold_end(seq, pkv.TransferOutcome.FAILED_FINISH)  # receive_end's only
            e.hold_end(seq, pkv.TransferOutcome.DONE)
            self.assertEqual(e.stats().num_held_seqs, 0)
            e.check()

    def test_the_bound(self):
        prompt = prompt_of(10, 100)
        with self.assertRaises(pkv.InvalidArgumentError):
            pkv.Engine(params(32, max_held_blocks=33))  # more than the pool
        with pkv.Engine(params(32, max_held_blocks=2)) as e:
            seq, _ = computed(e, prompt)  # 3 blocks
            with self.assertRaises(pkv.NoSpaceError):
                e.hold(seq)
            self.assertIs(seq.info().transfer, pkv.TransferState.NONE)
            small, _ = computed(e, prompt[:6])  # 2 blocks, 1 shared with seq
            e.hold(small)
            self.assertEqual(e.stats().num_held_blocks, 2)
            e.check()
        # a hold ends with its engine

    def test_no_timeout_on_one_rank_of_several(self):
        prompt = prompt_of(10, 100)
        with pkv.Engine(params(32, tp_size=2)) as e:
            seq, _ = computed(e, prompt)
            for timeout in (0, 1000):
                with self.subTest(timeout=timeout), self.assertRaises(pkv.UnsupportedError):
                    e.hold(seq, timeout)  # its ranks' clocks could disagree
            e.hold(seq, NEVER)
            with self.assertRaises(NotImplementedError):
                e.submit(prompt, hold_on_finish=True)
            e.submit(prompt, hold_on_finish=True, hold_timeout_ms=NEVER)
            e.check()


if __name__ == '__main__':
    unittest.main()
