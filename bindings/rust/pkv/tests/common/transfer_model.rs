//! The model of the transfer tests (`transfers.rs`, `agent.rs`): two engines computing one
//! prompt with q, K and V a function of the position and the layer write the same bytes and get
//! the same outputs.
use pkv::{Device, Dtype, Engine, OpenBatch, Params, Seq};

pub const LAYERS: u32 = 2;
pub const Q_HEADS: usize = 4;
pub const KV_HEADS: usize = 2;
pub const DIM: usize = 8;
pub const BLOCK_SIZE: usize = 4;
pub const ROW: usize = KV_HEADS * DIM;
pub const QROW: usize = Q_HEADS * DIM;

/// The tests' engine shape: LAYERS layers of Q_HEADS x KV_HEADS heads of DIM, BLOCK_SIZE tokens.
pub fn params(dtype: Dtype, num_blocks: u32) -> Params {
    Params::new()
        .expect("libpkv")
        .num_layers(LAYERS)
        .num_q_heads(Q_HEADS as u32)
        .num_kv_heads(KV_HEADS as u32)
        .head_dim(DIM as u32)
        .dtype(dtype)
        .block_size(BLOCK_SIZE as u32)
        .num_blocks(num_blocks)
        .device(Device::Cpu)
        .num_threads(1)
}

pub fn tokens(start: i32, n: usize) -> Vec<i32> {
    (0..n as i32).map(|i| start + i).collect()
}

/// Runs every layer of an open batch with q, K and V a function of the position and the layer
/// only, so two engines computing one prompt write the same bytes and get the same outputs.
/// Returns the last row's output of each layer (`[LAYERS][QROW]`).
pub fn run_layers(batch: &mut OpenBatch<'_>) -> Vec<f32> {
    let positions = batch.view().positions.to_vec();
    let n = positions.len();
    let mut last = Vec::new();
    for layer in 0..LAYERS {
        let (mut q, mut k) = (Vec::with_capacity(n * QROW), Vec::with_capacity(n * ROW));
        for &p in &positions {
            let (p, l) = (p as usize, layer as usize);
            q.extend((0..QROW).map(|i| 0.01 * ((i + p + l) % 13) as f32));
            k.extend((0..ROW).map(|i| ((p * 7 + l * 3 + i) % 17) as f32 * 0.125 - 1.0));
        }
        let v: Vec<f32> = k.iter().map(|x| -0.5 * x).collect();
        let mut out = vec![0f32; n * QROW];
        batch.attention(layer, &q, &k, &v, &mut out).unwrap();
        last.extend_from_slice(&out[(n - 1) * QROW..]);
    }
    last
}

/// An `allocate`d sequence of `prompt`, computed in one batch, and its last row's outputs.
pub fn computed(e: &Engine, prompt: &[i32]) -> (Seq, Vec<f32>) {
    let seq = e.allocate(prompt, None).unwrap().seq;
    let mut batch = e.batch(&[seq], None).unwrap();
    let out = run_layers(&mut batch);
    batch.end().unwrap();
    (seq, out)
}

/// Steps `e` once: the step must run `seq` alone. Returns its last row's outputs and the tokens
/// the step computed.
pub fn step_one(e: &Engine, seq: Seq) -> (Vec<f32>, usize) {
    let mut batch = e.step().unwrap().expect("a step to run");
    assert_eq!(batch.view().seq_ids, &[seq.0]);
    let (out, n) = (run_layers(&mut batch), batch.num_tokens());
    batch.commit(&[7]).unwrap();
    e.check().unwrap();
    (out, n)
}

pub fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "output {}: {} against {}", i, g, w);
    }
}
