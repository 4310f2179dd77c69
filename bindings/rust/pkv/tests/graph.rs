//! `OpenBatch::plan_graph` (`pkv_batch_plan_graph`, pkv 0.9) and the CUDA step counters on a CPU
//! engine: the call reaches pkv, which refuses it (a CPU engine has no CUDA graphs) with
//! `Status::Unsupported` and its message; the batch stays open and usable (attention, then end
//! computes the decode token); `Stats::num_host_waits` and `num_device_allocs` read 0.
mod common;

use pkv::{Engine, OpenBatch, Request, Result, Seq, Status};

/// An engine whose one sequence has its 3-token prompt computed and one token appended: its next
/// batch is a decode step.
fn decoding_engine() -> (Engine, Seq) {
    let e = Engine::new(&common::params(4, 16).max_num_seqs(8)).expect("create a CPU engine");
    let seq = e.allocate(&[1, 2, 3], None).unwrap().seq;
    common::compute(&e, &[seq]);
    e.append(seq, &[4]).unwrap();
    (e, seq)
}

fn run_layers(batch: &mut OpenBatch<'_>) {
    let n = batch.num_tokens();
    let (q, kv, mut out) = (vec![0.25f32; n * 64], vec![0.5f32; n * 32], vec![0f32; n * 64]);
    for layer in 0..2 {
        batch.attention(layer, &q, &kv, &kv, &mut out).unwrap();
    }
}

fn expect_no_graphs(result: Result<()>) {
    let err = result.expect_err("plan_graph on a CPU engine");
    assert_eq!(err.status(), Status::Unsupported, "{}", err);
    let msg = err.message();
    assert!(msg.contains("pkv_batch_plan_graph") && msg.contains("CUDA graphs"), "{:?}", msg);
}

#[test]
fn plan_graph_on_a_cpu_engine_keeps_the_batch() {
    let (e, seq) = decoding_engine();
    let mut batch = e.batch(&[seq], None).unwrap();
    assert_eq!(batch.num_tokens(), 1);
    expect_no_graphs(batch.plan_graph(1));
    run_layers(&mut batch); // not planned by the refused call: attention runs eagerly
    batch.end().unwrap();
    let info = e.seq_info(seq).unwrap();
    assert_eq!((info.num_tokens, info.num_computed_tokens, info.in_batch), (4, 4, false));
    e.check().unwrap();
}

#[test]
fn plan_graph_on_a_step_batch_then_commit() {
    let e = Engine::new(&common::params(4, 16).max_num_seqs(8)).expect("create a CPU engine");
    e.submit(&[1, 2, 3], &Request { max_new_tokens: 2, ..Request::default() }).unwrap();
    for _ in 0..2 {
        // the prefill (3 tokens), then the decode (1)
        let mut batch = e.step().unwrap().expect("a batch");
        expect_no_graphs(batch.plan_graph(8));
        run_layers(&mut batch);
        let tokens = vec![7; batch.view().num_seqs as usize];
        batch.commit(&tokens).unwrap();
    }
    assert_eq!(e.drain_finished().unwrap().len(), 1);
    assert!(e.step().unwrap().is_none());
}

#[test]
fn step_counters_on_a_cpu_engine() {
    let (e, seq) = decoding_engine();
    common::compute(&e, &[seq]);
    let s = e.stats().unwrap();
    assert_eq!((s.num_host_waits, s.num_device_allocs, s.num_seqs), (0, 0, 1));
}
