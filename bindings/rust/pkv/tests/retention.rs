//! Retention (pkv 0.8): a system prompt kept by its cache priority through a burst of unique
//! prompts (and evicted by plain LRU), evictions by priority, pins and their cap.
//!
//! Block size 4, a pool of 8 blocks. A prompt of 9 tokens holds 3 blocks while it runs;
//! released, its 2 full blocks stay cached and the third is free. The system prompt is 8 tokens
//! (2 blocks); each request is it plus one token of its own. (The decay on the test clock is
//! retention_clock.rs: it sets the process's environment.)
mod common;

use common::{burst, cached, check_sums, run, OTHER, SYSTEM};
use pkv::{Engine, Request, Retention, SeqKeys, Status, CACHE_PRIORITY_MAX, CACHE_PRIORITY_MIN};

fn with_suffix(prefix: &[i32]) -> Vec<i32> {
    let mut t = prefix.to_vec();
    t.push(1);
    t
}

/// (SYSTEM's and OTHER's cached tokens after 4 bursts, the stats): SYSTEM cached with
/// `priority` through its allocation, OTHER at 0 and then given it by cache_set_priority.
fn system_prompts_after_a_burst(priority: i32) -> ((u32, u32), pkv::Stats) {
    let e = common::engine(4, 8);
    run(&e, &with_suffix(&SYSTEM), Retention::priority(priority));
    run(&e, &with_suffix(&OTHER), Retention::default());
    if priority != 0 {
        assert_eq!(
            e.cache_set_priority(&OTHER, &SeqKeys::default(), Retention::priority(priority)).unwrap(),
            2
        );
    }
    assert_eq!(e.stats().unwrap().num_cached_blocks, 4);
    // 4 free blocks: the first burst takes 3 and frees 1 (6 of 8 cached); each later one needs
    // 1 (then 2, 2) more than is free: 5 evictions in all.
    burst(&e, 4, 5000);
    let found = (cached(&e, &SYSTEM), cached(&e, &OTHER));
    check_sums(&e);
    (found, e.stats().unwrap())
}

#[test]
fn high_priority_system_prompts_survive_a_burst() {
    let (found, s) = system_prompts_after_a_burst(CACHE_PRIORITY_MAX);
    assert_eq!(found, (8, 8));
    assert_eq!((s.num_evictions, s.num_evictions_normal, s.num_evictions_highest), (5, 5, 0));
}

#[test]
fn plain_lru_evicts_them() {
    let (found, s) = system_prompts_after_a_burst(0);
    assert_eq!(found, (0, 0)); // the 4 oldest blocks went first
    assert_eq!((s.num_evictions, s.num_evictions_normal), (5, 5));
}

#[test]
fn every_priority_counted() {
    let e = common::engine(4, 8);
    run(&e, &with_suffix(&SYSTEM), Retention::priority(CACHE_PRIORITY_MAX));
    run(&e, &with_suffix(&OTHER), Retention::priority(CACHE_PRIORITY_MIN));
    run(&e, &common::tokens(3000, 9), Retention::priority(1));
    run(&e, &common::tokens(0, 32), Retention::default()); // the whole pool: every cached block goes
    let s = e.stats().unwrap();
    let by_priority =
        (s.num_evictions_low, s.num_evictions_normal, s.num_evictions_high, s.num_evictions_highest);
    assert_eq!((by_priority, s.num_evictions), ((2, 0, 2, 2), 6));
    check_sums(&e);
}

#[test]
fn bad_priority_is_refused() {
    let e = common::engine(4, 8);
    run(&e, &with_suffix(&SYSTEM), Retention::default());
    let high = Retention::priority(CACHE_PRIORITY_MAX + 1);
    let err = e.cache_set_priority(&SYSTEM, &SeqKeys::default(), high).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("priority"), "{}", err.message());
    let low = Retention::priority(CACHE_PRIORITY_MIN - 1);
    let err = e.allocate_retained(&SYSTEM, &SeqKeys::default(), low).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    let request = Request { cache_retention: high, ..Request::default() };
    assert_eq!(e.submit(&SYSTEM, &request).unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(e.stats().unwrap().num_seqs, 0);
}

#[test]
fn a_request_keeps_its_priority() {
    let e = common::engine(4, 8);
    let request = Request {
        max_new_tokens: 1,
        cache_retention: Retention::priority(CACHE_PRIORITY_MAX),
        ..Request::default()
    };
    let seq = e.submit(&with_suffix(&SYSTEM), &request).unwrap();
    let mut batch = e.step().unwrap().expect("a step");
    let n = batch.num_tokens();
    let (q, kv, mut out) = (vec![0.25f32; n * 64], vec![0.5f32; n * 32], vec![0f32; n * 64]);
    for layer in 0..2 {
        batch.attention(layer, &q, &kv, &kv, &mut out).unwrap();
    }
    batch.commit(&[7]).unwrap();
    assert_eq!(e.drain_finished().unwrap(), vec![seq]);
    e.release(seq).unwrap();
    burst(&e, 4, 5000);
    assert_eq!(cached(&e, &SYSTEM), 8);
    check_sums(&e);
}

#[test]
fn a_pin_keeps_a_prefix_until_unpinned() {
    let e = common::engine(4, 8);
    run(&e, &with_suffix(&SYSTEM), Retention::default());
    let pin = e.cache_pin(&SYSTEM, &SeqKeys::default()).unwrap();
    assert_eq!(pin.num_tokens(), 8);
    assert_ne!(pin.id(), 0);
    let s = e.stats().unwrap();
    assert_eq!((s.num_pins, s.num_pinned_blocks), (1, 2));
    burst(&e, 4, 5000); // 6 blocks left to it: it evicts its own, never SYSTEM's
    assert_eq!(cached(&e, &SYSTEM), 8);
    let id = pin.into_id();
    e.cache_unpin(id).unwrap();
    let s = e.stats().unwrap();
    assert_eq!((s.num_pins, s.num_pinned_blocks), (0, 0));
    let err = e.cache_unpin(id).unwrap_err(); // the second unpin
    assert_eq!(err.status(), Status::NotFound);
    assert!(err.message().contains(&format!("no pin {}", id)), "{}", err.message());
    run(&e, &common::tokens(0, 32), Retention::default()); // the whole pool: SYSTEM goes too
    assert_eq!(cached(&e, &SYSTEM), 0);
    check_sums(&e);
}

#[test]
fn a_dropped_pin_unpins_once() {
    let e = common::engine(4, 8);
    run(&e, &with_suffix(&SYSTEM), Retention::default());
    {
        let _pin = e.cache_pin(&SYSTEM, &SeqKeys::default()).unwrap();
        assert_eq!(e.stats().unwrap().num_pins, 1);
    }
    assert_eq!(e.stats().unwrap().num_pins, 0);
    e.cache_pin(&SYSTEM, &SeqKeys::default()).unwrap().unpin().unwrap(); // no drop after it
    assert_eq!((e.stats().unwrap().num_pins, cached(&e, &SYSTEM)), (0, 8));
    e.check().unwrap();
}

#[test]
fn pins_past_their_share_are_refused() {
    let e: Engine = common::engine(4, 8);
    run(&e, &with_suffix(&SYSTEM), Retention::default());
    run(&e, &common::tokens(3000, 13), Retention::default()); // 3 cached blocks
    let pin = e.cache_pin(&SYSTEM, &SeqKeys::default()).unwrap();
    // 2 + 3 pinned blocks would pass MAX_PINNED_PERCENT (50) of 8
    assert_eq!(pkv::MAX_PINNED_PERCENT, 50);
    let err = e.cache_pin(&common::tokens(3000, 12), &SeqKeys::default()).unwrap_err();
    assert_eq!(err.status(), Status::NoSpace);
    assert!(err.message().contains("PKV_MAX_PINNED_PERCENT"), "{}", err.message());
    let s = e.stats().unwrap();
    assert_eq!((s.num_pins, s.num_pinned_blocks), (1, 2)); // nothing changed
    pin.unpin().unwrap();
    assert_eq!(e.cache_pin(&common::tokens(3000, 12), &SeqKeys::default()).unwrap().num_tokens(), 12);
    e.check().unwrap();
}
