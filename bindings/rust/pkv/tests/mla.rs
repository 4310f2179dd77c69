//! Multi-head latent attention (pkv 0.3): an MLA engine's params, its V-less attention checked
//! against a reference computed here, its pool without V, V-less fp8 scales, and a DeepSeek-V3
//! config profiled as MLA.
mod common;

use pkv::{Device, Dtype, Engine, KvLayout, Params, Status};

const LATENT: usize = 16;
const ROPE: usize = 16;
const WIDTH: usize = LATENT + ROPE; // the latent's width: the engine's head_dim
const Q_HEADS: usize = 4;
const SCALE: f32 = 0.2;

fn mla_params() -> Params {
    common::params(4, 16).num_q_heads(Q_HEADS as u32).mla(LATENT as u32, ROPE as u32).softmax_scale(SCALE)
}

/// Values in [-1, 1) from a small LCG: the same on every run.
fn values(seed: &mut u64, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((*seed >> 40) as f64 / (1u64 << 24) as f64 * 2.0 - 1.0) as f32
        })
        .collect()
}

/// Absorbed attention of one sequence's n new tokens (positions 0..n) in f64:
/// out[t][h] = sum over j <= t of softmax_j(SCALE * q[t][h] . latent[j]) * latent[j][..LATENT].
fn reference(q: &[f32], latents: &[f32], n: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(n * Q_HEADS * LATENT);
    for t in 0..n {
        for h in 0..Q_HEADS {
            let qt = &q[(t * Q_HEADS + h) * WIDTH..][..WIDTH];
            let scores: Vec<f64> = (0..=t)
                .map(|j| {
                    let lj = &latents[j * WIDTH..][..WIDTH];
                    SCALE as f64 * qt.iter().zip(lj).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>()
                })
                .collect();
            let top = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
            let total: f64 = weights.iter().sum();
            for d in 0..LATENT {
                out.push(
                    weights.iter().enumerate().map(|(j, w)| w * latents[j * WIDTH + d] as f64).sum::<f64>()
                        / total,
                );
            }
        }
    }
    out
}

#[test]
fn params_read_back() {
    let p = mla_params();
    assert_eq!(p.get_kv_layout(), Some(KvLayout::Mla));
    assert_eq!(p.get_mla_dims(), (LATENT as u32, ROPE as u32));
    assert_eq!((p.raw().num_kv_heads, p.raw().head_dim), (1, WIDTH as u32));
    assert_eq!(Params::new().unwrap().get_kv_layout(), Some(KvLayout::Heads));
    let b = p.profile().unwrap();
    assert_eq!(KvLayout::of(&b), Some(KvLayout::Mla));
    assert_eq!(b.block_bytes, (2 * 4 * WIDTH * 4) as u64); // one latent per token per layer, no V
    let e = Engine::new(&p).unwrap();
    assert_eq!(e.kv_layout(), Some(KvLayout::Mla));
    assert_eq!(e.params().get_mla_dims(), (LATENT as u32, ROPE as u32));
    assert_eq!(KvLayout::of(&e.budget().unwrap()), Some(KvLayout::Mla));
    let two_heads = mla_params().num_kv_heads(2); // MLA caches one latent
    assert_eq!(Engine::new(&two_heads).err().map(|e| e.status()), Some(Status::InvalidArgument));
}

#[test]
fn attention_without_v() {
    let e = Engine::new(&mla_params()).unwrap();
    let pool = e.pool_info();
    assert!(!pool.k_base.is_null());
    assert!(pool.v_base.is_null() && pool.host_v_base.is_null()); // no V
    assert_eq!((pool.kv_heads, pool.head_dim), (1, WIDTH as u32));
    let n = 10;
    let a = e.allocate(&common::tokens(1, n), None).unwrap();
    let mut batch = e.batch(&[a.seq], None).unwrap();
    assert_eq!(batch.num_tokens(), n);
    let mut seed = 7u64;
    for layer in 0..2 {
        let q = values(&mut seed, n * Q_HEADS * WIDTH);
        let latents = values(&mut seed, n * WIDTH);
        let mut out = vec![0f32; n * Q_HEADS * LATENT]; // kv_lora_rank per head
        if layer == 0 {
            // a V on an MLA engine is refused, and changes nothing
            let err = batch.attention(layer, &q, &latents, &latents, &mut out).unwrap_err();
            assert_eq!(err.status(), Status::InvalidArgument);
            assert!(err.message().contains("no V"), "{}", err);
        }
        batch.attention_mla(layer, &q, &latents, &mut out).unwrap();
        let want = reference(&q, &latents, n);
        let worst = out.iter().zip(&want).map(|(&g, &w)| (g as f64 - w).abs()).fold(0.0, f64::max);
        assert!(worst <= 1e-4, "layer {}: max error {}", layer, worst);
    }
    let short = vec![0f32; n * Q_HEADS * LATENT - 1];
    let err = batch.attention_mla(0, &short, &short, &mut short.clone()).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    batch.end().unwrap();
    assert_eq!(e.seq_info(a.seq).unwrap().num_computed_tokens, n as u32);
    e.check().unwrap();
}

#[test]
fn fp8_scales_without_v() {
    let e = Engine::new(&mla_params().kv_dtype(Dtype::Fp8E4m3)).unwrap();
    assert_eq!(e.budget().unwrap().kv_scale_bytes, 2 * 4); // one scale per layer
    e.set_mla_scales(0, &[0.5]).unwrap();
    e.set_mla_scales(1, &[0.25]).unwrap();
    assert_eq!(e.set_mla_scales(0, &[0.0]).unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(e.set_mla_scales(0, &[1.0, 1.0]).unwrap_err().status(), Status::InvalidArgument);
    let f32_engine = Engine::new(&mla_params()).unwrap();
    let err = f32_engine.set_mla_scales(0, &[1.0]).unwrap_err();
    assert!(err.status() == Status::InvalidArgument && err.message().contains("not fp8"), "{}", err);
}

#[test]
fn deepseek_v3_config() {
    let path = format!("{}/../../../tools/configs/deepseek-v3.json", env!("CARGO_MANIFEST_DIR"));
    let json = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {}", path, e));
    let p = Params::from_hf_config(&json).unwrap().device(Device::Cpu).memory_total_bytes(80 << 30);
    assert_eq!(p.get_kv_layout(), Some(KvLayout::Mla));
    assert_eq!(p.get_mla_dims(), (512, 64));
    assert_eq!((p.raw().num_kv_heads, p.raw().head_dim), (1, 576));
    let mscale = 0.1 * 40f64.ln() + 1.0; // yarn: factor 40, mscale_all_dim 1
    assert!((p.raw().softmax_scale as f64 - mscale * mscale / 192f64.sqrt()).abs() < 1e-6);
    let b = p.profile().unwrap();
    assert_eq!(KvLayout::of(&b), Some(KvLayout::Mla));
    assert_eq!((b.kv_heads_per_rank, b.bytes_per_token), (1, 61 * 576 * 2)); // one bf16 latent
}
