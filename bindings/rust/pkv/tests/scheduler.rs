//! Continuous batching (submit, step, commit) and KV events through the safe API.
mod common;

use pkv::{Request, Status};

#[test]
fn submit_step_commit_until_finished() {
    let e = pkv::Engine::new(&common::params(4, 32).kv_events(true)).unwrap();
    let short = Request { max_new_tokens: 3, ..Request::default() };
    let stop = Request { max_new_tokens: 10, stop_token: Some(7), priority: 1, cache_salt: b"x" };
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
    assert_eq!((info.num_generated_tokens, info.finish_reason), (3, pkv::sys::PKV_FINISH_STOP_TOKEN));
    assert_eq!(e.tokens(b).unwrap()[5..], [5, 6, 7]);
    assert_eq!(e.seq_info(a).unwrap().finish_reason, pkv::sys::PKV_FINISH_LENGTH);
    e.release(a).unwrap();
    e.release(b).unwrap();
    let events = e.drain_kv_events().unwrap();
    assert!(events.iter().any(|ev| ev.type_ == pkv::sys::PKV_EVENT_BLOCK_STORED));
    e.reset_prefix_cache().unwrap();
    assert_eq!(e.stats().unwrap().num_cached_blocks, 0);
    e.check().unwrap();
    // A request that can never run is refused.
    let huge = common::tokens(0, 4 * 40);
    assert_eq!(e.submit(&huge, &Request::default()).unwrap_err().status(), Status::InvalidArgument);
}
