//! Continuous batching (submit, step, commit) and KV events through the safe API.
mod common;

use pkv::{FinishReason, KvEventKind, Request, Status};

#[test]
fn submit_step_commit_until_finished() {
    let e = pkv::Engine::new(&common::params(4, 32).kv_events(true)).unwrap();
    let short = Request { max_new_tokens: 3, ..Request::default() };
    let stop = Request {
        max_new_tokens: 10,
        stop_token: Some(7),
        priority: 1,
        cache_salt: b"x",
        ..Request::default()
    };
    let a = e.submit(&common::tokens(0, 9), &short).unwrap();
    let b = e.submit(&common::tokens(50, 5), &stop).unwrap();
    let mut finished = Vec::new();
    let mut steps = 0;
    while let Some(mut batch) = e.step().unwrap() {
        let n = batch.num_tokens();
        let (q, kv, mut out) = (vec![0.1f32; n * 64], vec![0.2f32; n * 32], vec![0f32; n * 64]);
        for layer in 0..2 {
            batch.attention(layer, &q, &kv, &kv, &mut out).unwrap();
        }
        // b samples 5, 6, 7 (its stop token); a samples 1, 2, 3.
        let view = batch.view();
        let sampled: Vec<i32> = view
            .seq_ids
            .iter()
            .map(|&id| if id == b.0 { 5 + e.seq_info(b).unwrap().num_generated_tokens as i32 } else { 1 })
            .collect();
        batch.commit(&sampled).unwrap();
        finished.extend(e.drain_finished().unwrap());
        steps += 1;
        assert!(steps < 20, "the scheduler does not finish");
    }
    finished.sort();
    assert_eq!(finished, vec![a, b]);
    let info = e.seq_info(b).unwrap();
    assert_eq!((info.num_generated_tokens, info.finish_reason), (3, Some(FinishReason::StopToken)));
    assert_eq!(e.tokens(b).unwrap()[5..], [5, 6, 7]);
    assert_eq!(e.seq_info(a).unwrap().finish_reason, Some(FinishReason::Length));
    e.release(a).unwrap();
    e.release(b).unwrap();
    let events = e.drain_kv_events().unwrap();
    assert!(events.iter().any(|ev| ev.kind == Some(KvEventKind::BlockStored)));
    e.reset_prefix_cache().unwrap();
    assert_eq!(e.stats().unwrap().num_cached_blocks, 0);
    e.check().unwrap();
    // A request that can never run is refused.
    let huge = common::tokens(0, 4 * 40);
    assert_eq!(e.submit(&huge, &Request::default()).unwrap_err().status(), Status::InvalidArgument);
}

/// The canonical chain of a salt-less prompt of `n_blocks` blocks of 4 tokens (0, 1, 2, ...):
/// [root, hash of block 0, hash of block 1, ...].
fn canonical_hashes(n_blocks: i32) -> Vec<u64> {
    let mut hashes = vec![pkv::block_hash_root(0, b"").unwrap()];
    for b in 0..n_blocks {
        let parent = *hashes.last().unwrap();
        hashes.push(pkv::block_hash(0, parent, &common::tokens(4 * b, 4)).unwrap());
    }
    hashes
}

#[test]
fn kv_events_carry_seq_numbers_and_canonical_hashes() {
    let e = pkv::Engine::new(&common::params(4, 16).kv_events(true)).unwrap();
    let a = e.allocate(&common::tokens(0, 9), None).unwrap();
    common::compute(&e, &[a.seq]);
    let events = e.drain_kv_events().unwrap();
    let hashes = canonical_hashes(2);
    let got: Vec<_> =
        events.iter().map(|ev| (ev.kind, ev.num_tokens, ev.seq_no, ev.parent_hash, ev.block_hash)).collect();
    let stored = Some(KvEventKind::BlockStored);
    assert_eq!(got, vec![(stored, 4, 1, hashes[0], hashes[1]), (stored, 4, 2, hashes[1], hashes[2])]);
    assert!(events.iter().all(|ev| pkv::Tier::of_event(ev) == Some(pkv::Tier::Device)), "{:?}", events);
    e.release(a.seq).unwrap();
    e.reset_prefix_cache().unwrap();
    let later = e.drain_kv_events().unwrap();
    assert!(!later.is_empty());
    assert!(later.iter().zip(3u64..).all(|(ev, want)| ev.seq_no == want), "{:?}", later);
    assert!(e.drain_kv_events().unwrap().is_empty());
}

/// What a binding generated from a later pkv.h sees: its larger pkv_kv_event is written at its
/// size, the fields this libpkv does not know zeroed.
#[test]
fn a_grown_kv_event_gets_zeros_past_the_known_fields() {
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Grown {
        known: pkv::sys::pkv_kv_event,
        added_later: u64,
    }
    let e = pkv::Engine::new(&common::params(4, 16).kv_events(true)).unwrap();
    let a = e.allocate(&common::tokens(0, 8), None).unwrap();
    common::compute(&e, &[a.seq]);
    let filler = Grown { known: unsafe { std::mem::zeroed() }, added_later: 0xdead_beef };
    let mut buf = [filler; 3];
    let mut len = 0u32;
    let drain = e.library().raw().pkv_drain_kv_events_sized.as_ref().unwrap();
    let size = std::mem::size_of::<Grown>() as u32;
    // SAFETY: buf holds 3 events of `size` bytes.
    let status =
        unsafe { drain(e.as_raw(), buf.as_mut_ptr() as *mut pkv::sys::pkv_kv_event, size, 3, &mut len) };
    assert_eq!((status, len), (pkv::sys::PKV_OK, 2));
    let hashes = canonical_hashes(2);
    let got: Vec<_> = buf.iter().map(|g| (g.known.seq_no, g.known.block_hash, g.added_later)).collect();
    assert_eq!(got, vec![(1, hashes[1], 0), (2, hashes[2], 0), (0, 0, 0xdead_beef)]);
}
