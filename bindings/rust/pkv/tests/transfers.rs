//! KV transfers between engines (pkv 0.12): a producer's holds (`Engine::hold`,
//! `Request::hold_on_finish`, `Engine::hold_end`, `Params::max_held_blocks`) and a consumer's
//! remote fills (`Request::num_remote_tokens`, `Engine::drain_receiving`, `Engine::receive_end`,
//! `Engine::seq_state_segment`): done (the consumer's received bytes and its next output are the
//! producer's), failed (the request computes its prompt itself), failed and finished; every
//! refusal. The "transport" copies the producer's segments into the consumer's with
//! `std::ptr::copy_nonoverlapping`.
mod common;
use common::transfer_model::{self as model, *};

use std::slice;

use pkv::{Dtype, Engine, FinishReason, LayerSpec, Params, Request, Segment};
use pkv::{Seq, StatePart, Status, Tier, TransferOutcome, TransferState};
use pkv::{TRANSFER_TIMEOUT_DEFAULT_MS, TRANSFER_TIMEOUT_NONE};

fn params(num_blocks: u32) -> Params {
    model::params(Dtype::F32, num_blocks)
}

fn engine(num_blocks: u32) -> Engine {
    Engine::new(&params(num_blocks)).unwrap()
}

/// A request sampling one token whose first `remote` prompt tokens' KV comes from elsewhere.
fn remote(remote: u32) -> Request<'static> {
    Request { max_new_tokens: 1, num_remote_tokens: remote, ..Request::default() }
}

/// The bytes a segment names (a CPU engine's host memory).
fn bytes_of(s: &Segment) -> &[u8] {
    // SAFETY: a CPU engine's segment is host memory of s.bytes bytes, alive while its engine is.
    unsafe { slice::from_raw_parts(s.base as *const u8, s.bytes as usize) }
}

/// The transport: producer sequence `ps`'s blocks `first .. first + n` into consumer sequence
/// `cs`'s same blocks, segment by segment, and its state segment (engines of one fingerprint).
/// Returns the bytes moved.
fn transfer(p: &Engine, ps: Seq, c: &Engine, cs: Seq, first: u32, n: u32) -> u64 {
    assert_eq!(p.layout_fingerprint(0).unwrap(), c.layout_fingerprint(0).unwrap());
    let from = p.seq_segments(0, ps, first, n).unwrap();
    let to = c.seq_segments(0, cs, first, n).unwrap();
    assert_eq!(from.len(), to.len());
    let state = (p.seq_state_segment(0, ps).unwrap(), c.seq_state_segment(0, cs).unwrap());
    let mut moved = 0;
    for (s, d) in from.iter().zip(&to).chain([(&state.0, &state.1)]) {
        assert_eq!(s.bytes, d.bytes);
        if d.base.is_null() {
            continue; // nothing to write: no state, or a block a window gave back
        }
        let (from, to, n) = (s.base as *const u8, d.base as *mut u8, d.bytes as usize);
        // SAFETY: two engines' host memory of equal bytes, each alive, not overlapping.
        unsafe { std::ptr::copy_nonoverlapping(from, to, n) };
        moved += d.bytes;
    }
    moved
}

#[test]
fn hold_a_computed_sequence() {
    let e = engine(32);
    let prompt = tokens(100, 10); // 3 blocks
    let (s, _) = computed(&e, &prompt);
    let before = e.stats().unwrap();
    assert_eq!(e.seq_info(s).unwrap().transfer, Some(TransferState::None));
    e.hold(s, TRANSFER_TIMEOUT_NONE).unwrap();
    let info = e.seq_info(s).unwrap();
    assert_eq!((info.transfer, info.kv_tier), (Some(TransferState::Holding), Some(Tier::Device)));
    let st = e.stats().unwrap();
    assert_eq!((st.num_held_seqs, st.num_held_blocks), (1, 3));
    assert_eq!(st.num_used_blocks, before.num_used_blocks, "nothing moved");
    // its bytes are readable; it cannot change, run or be released meanwhile
    assert_eq!(e.seq_segments(0, s, 0, 3).unwrap().len(), 3 * LAYERS as usize * 2);
    assert_eq!(e.release(s).unwrap_err().status(), Status::State);
    assert_eq!(e.append(s, &[1]).unwrap_err().status(), Status::State);
    assert_eq!(e.hold(s, 0).unwrap_err().status(), Status::State);
    assert_eq!(e.batch(&[s], None).err().unwrap().status(), Status::State);
    let err = e.hold_end(s, TransferOutcome::FailedFinish).unwrap_err(); // receive_end's only
    assert_eq!(err.status(), Status::InvalidArgument);
    assert_eq!(e.seq_info(s).unwrap().transfer, Some(TransferState::Holding), "nothing changed");
    // its sealed blocks stay in the prefix cache: another prompt shares them meanwhile
    let other = e.allocate(&prompt, None).unwrap();
    assert_eq!(other.num_cached_tokens, 8);
    e.release(other.seq).unwrap();
    e.check().unwrap();
    e.hold_end(s, TransferOutcome::Done).unwrap();
    let info = e.seq_info(s).unwrap();
    assert_eq!((info.transfer, info.kv_tier), (Some(TransferState::None), Some(Tier::None)));
    let st = e.stats().unwrap();
    assert_eq!((st.num_held_seqs, st.num_held_blocks, st.num_holds_done), (0, 0, 1));
    assert_eq!((st.num_used_blocks, st.num_holds_failed), (0, 0));
    let err = e.hold_end(s, TransferOutcome::Done).unwrap_err(); // ended once
    assert_eq!(err.status(), Status::State);
    assert_eq!(e.seq_segments(0, s, 0, 1).unwrap_err().status(), Status::State);
    e.release(s).unwrap();
    // FAILED is counted apart; timeout 0 is the default's
    let (s, _) = computed(&e, &prompt);
    e.hold(s, 0).unwrap();
    e.hold_end(s, TransferOutcome::Failed).unwrap();
    let st = e.stats().unwrap();
    assert_eq!((st.num_holds_done, st.num_holds_failed, st.num_holds_timed_out), (1, 1, 0));
    e.release(s).unwrap();
    e.check().unwrap();
    assert_eq!(TRANSFER_TIMEOUT_DEFAULT_MS, 480_000);
}

#[test]
fn hold_refusals_and_the_bound() {
    let e = engine(32);
    let prompt = tokens(100, 10);
    assert_eq!(e.hold(Seq(99), 0).unwrap_err().status(), Status::NotFound);
    assert_eq!(e.hold_end(Seq(99), TransferOutcome::Done).unwrap_err().status(), Status::NotFound);
    let s = e.allocate(&prompt, None).unwrap().seq; // not computed
    assert_eq!(e.hold(s, 0).unwrap_err().status(), Status::State);
    assert_eq!(e.hold_end(s, TransferOutcome::Done).unwrap_err().status(), Status::State);
    e.preempt(s).unwrap();
    assert_eq!(e.hold(s, 0).unwrap_err().status(), Status::State);
    e.release(s).unwrap();
    let r = e.submit(&prompt, &Request { max_new_tokens: 2, ..Request::default() }).unwrap();
    let err = e.hold(r, 0).unwrap_err();
    assert_eq!(err.status(), Status::State, "a request holds when it finishes");
    assert_eq!(e.stats().unwrap().num_held_seqs, 0);
    e.check().unwrap();

    // the bound: at most num_blocks, here 2
    let err = Engine::new(&params(32).max_held_blocks(33)).err().unwrap();
    assert_eq!(err.status(), Status::InvalidArgument);
    let e = Engine::new(&params(32).max_held_blocks(2)).unwrap();
    assert_eq!(e.params().raw().max_held_blocks, 2);
    let (s, _) = computed(&e, &prompt); // 3 blocks
    assert_eq!(e.hold(s, 0).unwrap_err().status(), Status::NoSpace);
    assert_eq!(e.seq_info(s).unwrap().transfer, Some(TransferState::None));
    let (small, _) = computed(&e, &prompt[..6]); // 2 blocks, 1 shared with s
    e.hold(small, 0).unwrap();
    assert_eq!(e.stats().unwrap().num_held_blocks, 2);
    e.check().unwrap();
}

/// A request of `hold_on_finish` finishes and is listed as any, its blocks held; one past the
/// bound finishes without a hold.
#[test]
fn a_request_holds_when_it_finishes() {
    let e = Engine::new(&params(32).max_held_blocks(5)).unwrap();
    let prompt = tokens(100, 10);
    let hold = Request { max_new_tokens: 1, hold_on_finish: true, ..Request::default() };
    let r = e.submit(&prompt, &hold).unwrap();
    let plain = e.submit(&prompt, &Request { max_new_tokens: 1, ..Request::default() }).unwrap();
    let big = e.submit(&tokens(500, 20), &hold).unwrap(); // 5 blocks: past the bound once r holds 3
    let mut steps = 0;
    while let Some(mut batch) = e.step().unwrap() {
        run_layers(&mut batch);
        batch.commit(&[1, 2, 3, 4]).unwrap();
        e.check().unwrap();
        steps += 1;
        assert!(steps < 5, "the requests do not finish");
    }
    let mut done = e.drain_finished().unwrap();
    done.sort();
    assert_eq!(done, vec![r, plain, big]);
    let info = e.seq_info(r).unwrap();
    assert_eq!(info.transfer, Some(TransferState::Holding));
    assert_eq!(info.finish_reason, Some(FinishReason::Length));
    assert_eq!((info.num_tokens, info.num_computed_tokens), (11, 10));
    assert_eq!(e.seq_info(plain).unwrap().transfer, Some(TransferState::None));
    assert_eq!(e.seq_info(big).unwrap().transfer, Some(TransferState::None), "refused: the bound");
    let st = e.stats().unwrap();
    assert_eq!((st.num_holds_refused, st.num_held_seqs, st.num_held_blocks), (1, 1, 3));
    assert_eq!(st.num_finished_requests, 3);
    assert_eq!(e.seq_segments(0, r, 0, 3).unwrap().len(), 3 * LAYERS as usize * 2);
    assert_eq!(e.release(r).unwrap_err().status(), Status::State);
    e.hold_end(r, TransferOutcome::Done).unwrap();
    for seq in [r, plain, big] {
        e.release(seq).unwrap();
    }
    assert_eq!(e.stats().unwrap().num_used_blocks, 0);
    e.check().unwrap();
}

/// A producer computes a prompt and holds it; a consumer receives its first 12 tokens' KV (the
/// producer's bytes copied into the blocks it reserved), then its step computes the last prompt
/// token and gets the producer's output.
#[test]
fn a_remote_fill_between_two_engines() {
    let (p, c) = (engine(64), engine(48)); // other block counts, one layout
    let prompt = tokens(300, 13);
    let (ps, want) = computed(&p, &prompt);
    p.hold(ps, TRANSFER_TIMEOUT_NONE).unwrap();
    let cs = c.submit(&prompt, &remote(12)).unwrap();
    assert!(c.step().unwrap().is_none(), "nothing to run: it receives");
    assert_eq!(c.drain_receiving().unwrap(), vec![cs]);
    assert_eq!(c.drain_receiving().unwrap(), vec![], "listed once");
    let info = c.seq_info(cs).unwrap();
    assert_eq!(info.transfer, Some(TransferState::Receiving));
    assert_eq!(info.num_computed_tokens, 0);
    let (first, n) = (info.remote_first_block, info.remote_num_blocks);
    assert_eq!((first, n, info.num_remote_tokens), (0, 3, 12));
    let st = c.stats().unwrap();
    assert_eq!((st.num_receiving_requests, st.num_receiving_blocks), (1, 3));
    assert_eq!(c.release(cs).unwrap_err().status(), Status::State);
    assert!(c.step().unwrap().is_none(), "still receiving: never run");
    c.check().unwrap();
    // no state layers: an empty state segment
    let none = Segment { base: std::ptr::null_mut(), bytes: 0 };
    assert_eq!(c.seq_state_segment(0, cs).unwrap(), none);
    let block_bytes = (BLOCK_SIZE * ROW * 4) as u64;
    let moved = transfer(&p, ps, &c, cs, first, n);
    assert_eq!(moved, 3 * u64::from(LAYERS) * 2 * block_bytes);
    let (from, to) = (p.seq_segments(0, ps, 0, 3).unwrap(), c.seq_segments(0, cs, 0, 3).unwrap());
    for (i, (s, d)) in from.iter().zip(&to).enumerate() {
        assert_eq!(bytes_of(s), bytes_of(d), "segment {}", i);
    }
    c.receive_end(cs, TransferOutcome::Done).unwrap();
    let info = c.seq_info(cs).unwrap();
    assert_eq!((info.transfer, info.num_computed_tokens), (Some(TransferState::None), 12));
    assert_eq!((info.remote_num_blocks, info.num_remote_tokens), (0, 0));
    let st = c.stats().unwrap();
    assert_eq!((st.num_receives_done, st.received_tokens, st.num_receiving_requests), (1, 12, 0));
    assert_eq!(c.receive_end(cs, TransferOutcome::Done).unwrap_err().status(), Status::State);
    c.check().unwrap();
    // the received blocks are in the prefix cache, as if computed
    assert_eq!(c.allocate_query(&prompt, None).unwrap().num_cached_tokens, 12);
    // the step computes the last prompt token only, on the received KV: the producer's output
    let (got, computed) = step_one(&c, cs);
    assert_eq!(computed, 1);
    assert_close(&got, &want);
    assert_eq!(c.drain_finished().unwrap(), vec![cs]);
    c.release(cs).unwrap();
    p.hold_end(ps, TransferOutcome::Done).unwrap();
    p.check().unwrap();
}

/// Half the bytes arrive, then the peer is gone: nothing of it is used, the request computes its
/// prompt itself (and gets the producer's output). FAILED_FINISH ends a request instead.
#[test]
fn a_failed_fill() {
    let (p, c) = (engine(64), engine(64));
    let prompt = tokens(300, 13);
    let (ps, want) = computed(&p, &prompt);
    p.hold(ps, TRANSFER_TIMEOUT_NONE).unwrap();
    let cs = c.submit(&prompt, &remote(12)).unwrap();
    assert!(c.step().unwrap().is_none());
    assert_eq!(c.drain_receiving().unwrap(), vec![cs]);
    assert!(transfer(&p, ps, &c, cs, 0, 1) > 0);
    let before = c.stats().unwrap();
    c.receive_end(cs, TransferOutcome::Failed).unwrap();
    let st = c.stats().unwrap();
    assert_eq!((st.num_receives_failed, st.num_receives_done, st.received_tokens), (1, 0, 0));
    assert_eq!(st.num_prefix_nodes, before.num_prefix_nodes, "nothing sealed");
    assert_eq!(st.num_used_blocks, 0);
    assert_eq!(c.allocate_query(&prompt, None).unwrap().num_cached_tokens, 0);
    let info = c.seq_info(cs).unwrap();
    assert_eq!((info.transfer, info.is_preempted), (Some(TransferState::None), true));
    c.check().unwrap();
    let (got, computed) = step_one(&c, cs);
    assert_eq!(computed, 13, "its whole prompt");
    assert_close(&got, &want);
    assert_eq!(c.stats().unwrap().num_receives_done, 0);
    assert_eq!(c.seq_info(cs).unwrap().finish_reason, Some(FinishReason::Length));

    // FAILED_FINISH: it ends, listed as finished
    let cs2 = c.submit(&prompt[1..], &remote(11)).unwrap();
    if let Some(mut batch) = c.step().unwrap() {
        run_layers(&mut batch); // cs's decode token, if any
        batch.commit(&[1, 1]).unwrap();
    }
    assert_eq!(c.seq_info(cs2).unwrap().transfer, Some(TransferState::Receiving));
    c.receive_end(cs2, TransferOutcome::FailedFinish).unwrap();
    let info = c.seq_info(cs2).unwrap();
    assert_eq!(info.finish_reason, Some(FinishReason::TransferFailed));
    assert_eq!((info.transfer, info.kv_tier), (Some(TransferState::None), Some(Tier::None)));
    assert_eq!(c.drain_finished().unwrap().last(), Some(&cs2));
    assert_eq!(c.stats().unwrap().num_receives_failed, 2);
    c.release(cs2).unwrap();
    c.check().unwrap();
    p.hold_end(ps, TransferOutcome::Failed).unwrap();
    assert_eq!(p.stats().unwrap().num_holds_failed, 1);
}

/// A local prefix hit that covers the remote tokens runs as any request, never listed; a hit of
/// fewer leaves the blocks past it to receive.
#[test]
fn a_local_hit_is_subtracted() {
    let c = engine(64);
    let prompt = tokens(300, 13);
    let (pre, _) = computed(&c, &prompt[..6]); // one whole block cached
    c.release(pre).unwrap();
    let r = c.submit(&prompt[..6], &remote(4)).unwrap();
    let cs = c.submit(&prompt, &remote(12)).unwrap();
    let mut batch = c.step().unwrap().expect("r runs");
    assert_eq!(batch.view().seq_ids, &[r.0]);
    run_layers(&mut batch);
    batch.commit(&[1]).unwrap();
    assert_eq!(c.drain_receiving().unwrap(), vec![cs]);
    assert_eq!(c.seq_info(r).unwrap().transfer, Some(TransferState::None));
    let info = c.seq_info(cs).unwrap();
    assert_eq!(info.transfer, Some(TransferState::Receiving));
    let (first, n) = (info.remote_first_block, info.remote_num_blocks);
    assert_eq!((info.num_computed_tokens, first, n), (4, 1, 2));
    assert_eq!(c.seq_segments(0, cs, first, n).unwrap().len(), 2 * LAYERS as usize * 2);
    assert_eq!(c.stats().unwrap().num_receiving_blocks, 2);
    c.receive_end(cs, TransferOutcome::FailedFinish).unwrap();
    c.check().unwrap();
}

#[test]
fn fill_refusals() {
    let c = engine(64);
    let prompt = tokens(300, 13);
    // the last prompt token is computed here
    let all = Request { num_remote_tokens: 13, ..Request::default() };
    assert_eq!(c.submit(&prompt, &all).unwrap_err().status(), Status::InvalidArgument);
    let past = Request { num_remote_tokens: 20, ..Request::default() };
    assert_eq!(c.submit(&prompt, &past).unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(c.stats().unwrap().num_waiting_requests, 0, "nothing queued");
    assert_eq!(c.drain_receiving().unwrap(), vec![]);
    let err = c.receive_end(Seq(42), TransferOutcome::Done).unwrap_err();
    assert_eq!(err.status(), Status::NotFound);
    let plain = c.allocate(&prompt, None).unwrap().seq;
    assert_eq!(c.receive_end(plain, TransferOutcome::Done).unwrap_err().status(), Status::State);
    assert_eq!(c.receive_end(plain, TransferOutcome::Failed).unwrap_err().status(), Status::State);
    let state = c.seq_state_segment(0, plain).unwrap(); // no state layers: nothing to move
    assert!(state.base.is_null() && state.bytes == 0);
    assert_eq!(c.seq_state_segment(1, plain).unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(c.seq_state_segment(0, Seq(42)).unwrap_err().status(), Status::NotFound);
    // the outcome codes are pkv.h's
    assert_eq!(TransferOutcome::from_code(2), Some(TransferOutcome::FailedFinish));
    assert_eq!(TransferOutcome::from_code(3), None);
    assert_eq!(TransferState::Receiving.code(), pkv::sys::PKV_TRANSFER_RECEIVING as u32);
    c.check().unwrap();
}

/// With state layers a sequence's recurrent state moves too: `seq_state_segment` is its working
/// slot on both engines, and the transport copies it beside the blocks.
#[test]
fn the_state_moves_with_the_blocks() {
    let ssm = StatePart::new(Dtype::F32, &[2, 16, 16]).unwrap();
    let specs = [LayerSpec::state([ssm, StatePart::default()]), LayerSpec::default()];
    let hybrid = || params(32).max_num_seqs(4).layer_specs(&specs); // a state layer, attention
    let (p, c) = (Engine::new(&hybrid()).unwrap(), Engine::new(&hybrid()).unwrap());
    let pool = p.pool_info();
    let prompt = tokens(300, 9);
    let ps = p.allocate(&prompt[..8], None).unwrap().seq; // the 8 tokens whose KV and state move
    let batch = p.batch(&[ps], None).unwrap();
    let slot = batch.view().state_slots[0];
    batch.end().map_err(|e| e.into_parts().0).unwrap(); // the host ran every layer itself
    let state = p.seq_state_segment(0, ps).unwrap();
    let at = pool.state_base as usize + slot as usize * pool.state_slot_bytes as usize;
    assert_eq!((state.base as usize, state.bytes), (at, pool.state_slot_bytes));
    // SAFETY: the slot is host memory of state.bytes bytes, alive while the engine is.
    let written = unsafe { slice::from_raw_parts_mut(state.base as *mut u8, state.bytes as usize) };
    written.iter_mut().enumerate().for_each(|(i, b)| *b = (i % 251) as u8);
    p.hold(ps, TRANSFER_TIMEOUT_NONE).unwrap();
    assert_eq!(p.seq_state_segment(0, ps).unwrap(), state, "held: the same slot");
    let cs = c.submit(&prompt, &remote(8)).unwrap();
    assert!(c.step().unwrap().is_none());
    assert_eq!(c.drain_receiving().unwrap(), vec![cs]);
    let info = c.seq_info(cs).unwrap();
    let target = c.seq_state_segment(0, cs).unwrap();
    assert!(!target.base.is_null() && target.bytes == state.bytes);
    let (first, n) = (info.remote_first_block, info.remote_num_blocks);
    assert_eq!((first, n), (0, 2));
    assert!(transfer(&p, ps, &c, cs, first, n) > state.bytes);
    assert_eq!(bytes_of(&target), bytes_of(&state));
    c.receive_end(cs, TransferOutcome::Done).unwrap();
    assert_eq!(c.seq_info(cs).unwrap().num_computed_tokens, 8);
    p.hold_end(ps, TransferOutcome::Done).unwrap();
    let err = p.seq_state_segment(0, ps).unwrap_err();
    assert_eq!(err.status(), Status::State, "finished: no slot");
    p.check().unwrap();
    c.check().unwrap();
}
