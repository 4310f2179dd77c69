//! Shared by the integration tests: the library (PKV_LIBRARY or libpkv.so.1) and small engines.
#![allow(dead_code)]
use pkv::{Device, Dtype, Engine, Params};

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
