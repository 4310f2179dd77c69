//! Shared by the integration tests: the library (PKV_LIBRARY or libpkv.so.1) and small engines.
#![allow(dead_code)]
use pkv::{Device, Dtype, Engine, Params};

pub mod transfer_model;

/// The demo's shape on the CPU: 2 layers, 4 q heads, 2 kv heads, head_dim 16, f32.
pub fn params(block_size: u32, num_blocks: u32) -> Params {
    Params::new()
        .expect("load libpkv (set PKV_LIBRARY)")
        .num_layers(2)
        .num_q_heads(4)
        .num_kv_heads(2)
        .head_dim(16)
        .dtype(Dtype::F32)
        .block_size(block_size)
        .num_blocks(num_blocks)
        .device(Device::Cpu)
        .num_threads(1)
}

pub fn engine(block_size: u32, num_blocks: u32) -> Engine {
    Engine::new(&params(block_size, num_blocks)).expect("create a CPU engine")
}

/// Runs one step over `seqs` with constant q/k/v (every layer) and ends it.
pub fn compute(engine: &Engine, seqs: &[pkv::Seq]) {
    let mut batch = engine.batch(seqs, None).expect("batch_begin");
    let n = batch.num_tokens();
    let (q, kv, mut out) = (vec![0.25f32; n * 64], vec![0.5f32; n * 32], vec![0f32; n * 64]);
    for layer in 0..2 {
        batch.attention(layer, &q, &kv, &kv, &mut out).expect("attention");
    }
    batch.end().expect("batch_end");
}

pub fn tokens(start: i32, n: usize) -> Vec<i32> {
    (0..n as i32).map(|i| start + i).collect()
}

/// The retention tests' system prompts: 8 tokens (2 blocks of 4) each.
pub const SYSTEM: [i32; 8] = [1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007];
pub const OTHER: [i32; 8] = [2000, 2001, 2002, 2003, 2004, 2005, 2006, 2007];

/// Allocates `tokens` with `retention`, computes them and releases them.
pub fn run(engine: &Engine, tokens: &[i32], retention: pkv::Retention) {
    let a = engine.allocate_retained(tokens, &pkv::SeqKeys::default(), retention).expect("allocate");
    compute(engine, &[a.seq]);
    engine.release(a.seq).expect("release");
}

/// `count` unique 9-token prompts of priority 0, one after another, from `first`.
pub fn burst(engine: &Engine, count: i32, first: i32) {
    for i in 0..count {
        run(engine, &tokens(first + 100 * i, 9), pkv::Retention::default());
    }
}

/// Tokens of `prefix` (and one more) the cache would serve now.
pub fn cached(engine: &Engine, prefix: &[i32]) -> u32 {
    let mut t = prefix.to_vec();
    t.push(1);
    engine.allocate_query(&t, None).expect("allocate_query").num_cached_tokens
}

/// The evictions by priority sum to num_evictions; the engine's invariants hold.
pub fn check_sums(engine: &Engine) {
    let s = engine.stats().expect("stats");
    let sum = s.num_evictions_low + s.num_evictions_normal + s.num_evictions_high + s.num_evictions_highest;
    assert_eq!(sum, s.num_evictions);
    engine.check().expect("pkv_engine_check");
}
