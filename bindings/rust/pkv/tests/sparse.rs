//! Sparse attention (pkv 0.7, DeepSeek V3.2 / GLM-5): an MLA layer with an indexer, its fp8
//! scales read back where `LayerInfo::indexer` says they are, the top-k of a context longer than
//! `topk` checked against the answer computed here (positions and slots), sparse MLA attention
//! against an f64 reference over the selected latents, and a layer without an indexer refused.
mod common;

use pkv::{Dtype, Engine, IndexerSpec, LayerKind, LayerSpec, Params, Status, TopkKind, INDEXER_SCALE_UE8M0};

const LATENT: usize = 16;
const ROPE: usize = 8;
const WIDTH: usize = LATENT + ROPE;
const Q_HEADS: usize = 2;
const SCALE: f32 = 0.25;
const INDEX_DIM: usize = 8;
const INDEX_HEADS: usize = 2;
const TOPK: usize = 4;
const N: usize = 10; // one prompt step: a context longer than TOPK
/// Key s's first value: distinct integers, so its score under the query e0 is known and unique.
const SCORES: [f32; N] = [3.0, 9.0, 1.0, 7.0, 5.0, 10.0, 2.0, 8.0, 4.0, 6.0];

/// Layer 0 is MLA with an indexer, layer 1 plain MLA (the refusal's).
fn sparse_params() -> Params {
    let indexed = LayerSpec {
        softmax_scale: SCALE,
        ..LayerSpec::indexed(IndexerSpec::fp8(INDEX_DIM as u32, INDEX_HEADS as u32, TOPK as u32))
    };
    let plain = LayerSpec { kind: Some(LayerKind::Mla), softmax_scale: SCALE, ..LayerSpec::default() };
    common::params(4, 16)
        .num_q_heads(Q_HEADS as u32)
        .mla(LATENT as u32, ROPE as u32)
        .softmax_scale(SCALE)
        .layer_specs(&[indexed, plain])
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

/// Keys [N][INDEX_DIM] whose first value is SCORES[s] (the largest: it sets the fp8 scale),
/// queries [N][INDEX_HEADS][INDEX_DIM] (head 0 e0, head 1 -e0: relu makes it 0), weights 1.
fn index_inputs(seed: &mut u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let mut keys = values(seed, N * INDEX_DIM); // in [-1, 1): below every score
    let mut q = vec![0f32; N * INDEX_HEADS * INDEX_DIM];
    for s in 0..N {
        keys[s * INDEX_DIM] = SCORES[s];
        q[s * INDEX_HEADS * INDEX_DIM] = 1.0;
        q[(s * INDEX_HEADS + 1) * INDEX_DIM] = -1.0;
    }
    (keys, q, vec![1f32; N * INDEX_HEADS])
}

/// Token t's top keys: the TOPK highest scores of positions 0..=t, ascending, then -1.
fn expected(t: usize) -> Vec<i32> {
    let mut pos: Vec<i32> = (0..=t as i32).collect();
    pos.sort_by(|&a, &b| SCORES[b as usize].partial_cmp(&SCORES[a as usize]).unwrap());
    pos.truncate(TOPK);
    pos.sort_unstable();
    pos.resize(TOPK, -1);
    pos
}

/// Absorbed MLA in f64, token t attending over the positions of its row of `indices`.
fn reference(q: &[f32], latents: &[f32], indices: &[i32]) -> Vec<f64> {
    let mut out = Vec::with_capacity(N * Q_HEADS * LATENT);
    for t in 0..N {
        let keys: Vec<usize> = indices[t * TOPK..][..TOPK]
            .iter()
            .filter(|&&j| j >= 0 && j as usize <= t)
            .map(|&j| j as usize)
            .collect();
        for h in 0..Q_HEADS {
            let qt = &q[(t * Q_HEADS + h) * WIDTH..][..WIDTH];
            let scores: Vec<f64> = keys
                .iter()
                .map(|&j| {
                    let lj = &latents[j * WIDTH..][..WIDTH];
                    SCALE as f64 * qt.iter().zip(lj).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>()
                })
                .collect();
            let top = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
            let total: f64 = w.iter().sum();
            for d in 0..LATENT {
                out.push(
                    keys.iter().zip(&w).map(|(&j, wj)| wj * latents[j * WIDTH + d] as f64).sum::<f64>()
                        / total,
                );
            }
        }
    }
    out
}

/// The fp32 scale of the key in `slot` (4-token blocks), read where the layer's info says.
fn scale_of(info: &pkv::IndexerInfo, slot: i64) -> f32 {
    let at = (slot / 4) as usize * info.block_bytes as usize + 4 * (slot % 4) as usize;
    // SAFETY: inside the open engine's pool: block slot / 4's page, token slot % 4's scale.
    unsafe { std::ptr::read_unaligned((info.scale_base as *const u8).add(at) as *const f32) }
}

#[test]
fn layer_info_and_specs() {
    let e = Engine::new(&sparse_params()).unwrap();
    let l = e.layer_info(0).unwrap();
    let x = l.indexer.expect("layer 0 has an indexer");
    assert_eq!(x.spec, IndexerSpec::fp8(INDEX_DIM as u32, INDEX_HEADS as u32, TOPK as u32));
    assert_eq!(x.block_bytes, e.budget().unwrap().block_bytes); // the page
                                                                // a page holds the block's 4 f32 latents, then their 4 fp8 keys, then their 4 scales
    assert_eq!(x.base as usize, l.k_base as usize + 4 * WIDTH * 4);
    assert_eq!(x.scale_base as usize, x.base as usize + 4 * INDEX_DIM);
    assert!(x.host_base.is_null() && x.host_scale_base.is_null());
    assert_eq!(e.layer_info(1).unwrap().indexer, None);
    let specs = e.params().get_layer_specs().unwrap();
    assert_eq!(specs[0].indexer, Some(IndexerSpec::fp8(INDEX_DIM as u32, INDEX_HEADS as u32, TOPK as u32)));
    assert_eq!((specs[1].indexer, pkv::INDEXER_MAX_HEAD_DIM), (None, 256));
    assert_eq!(TopkKind::from_code(1), Some(TopkKind::Slots));
}

#[test]
fn topk_and_sparse_attention() {
    let e = Engine::new(&sparse_params()).unwrap();
    let info = e.layer_info(0).unwrap();
    let x = info.indexer.unwrap();
    let a = e.allocate(&common::tokens(1, N), None).unwrap();
    let mut batch = e.batch(&[a.seq], None).unwrap();
    // its KV group's slots: layer 1 has another group
    let slots = batch.view().group_slots(info.group).to_vec();
    assert_ne!(slots, batch.view().group_slots(e.layer_info(1).unwrap().group));
    let mut seed = 29u64;
    let (keys, iq, weights) = index_inputs(&mut seed);
    batch.indexer_write(0, &keys, INDEXER_SCALE_UE8M0).unwrap();
    assert_eq!(scale_of(&x, slots[0]), 2f32.powf((3.0f64 / 448.0).log2().ceil() as f32));
    batch.indexer_write(0, &keys, 0).unwrap();
    for s in 0..N {
        assert!((scale_of(&x, slots[s]) as f64 - SCORES[s] as f64 / 448.0).abs() < 1e-7, "scale {}", s);
    }
    let mut top = vec![0i32; N * TOPK];
    batch.indexer_topk(0, &iq, &weights, TopkKind::Positions, &mut top).unwrap();
    for t in 0..N {
        assert_eq!(&top[t * TOPK..][..TOPK], &expected(t)[..], "token {}", t);
    }
    let mut by_slot = vec![0i32; N * TOPK];
    batch.indexer_topk(0, &iq, &weights, TopkKind::Slots, &mut by_slot).unwrap();
    let want: Vec<i32> = top.iter().map(|&p| if p < 0 { -1 } else { slots[p as usize] as i32 }).collect();
    assert_eq!(by_slot, want);
    let (q, latents) = (values(&mut seed, N * Q_HEADS * WIDTH), values(&mut seed, N * WIDTH));
    let mut out = vec![0f32; N * Q_HEADS * LATENT];
    batch.sparse_mla_attention(0, &q, &latents, &top, &mut out).unwrap();
    let want = reference(&q, &latents, &top);
    let worst = out.iter().zip(&want).map(|(&g, &w)| (g as f64 - w).abs()).fold(0.0, f64::max);
    assert!(worst <= 1e-4, "sparse MLA: max error {}", worst);
    batch.end().unwrap();
    assert_eq!(e.seq_info(a.seq).unwrap().num_computed_tokens, N as u32);
    e.check().unwrap();
}

#[test]
fn a_layer_without_an_indexer_is_refused() {
    let e = Engine::new(&sparse_params()).unwrap();
    let a = e.allocate(&common::tokens(1, N), None).unwrap();
    let mut batch = e.batch(&[a.seq], None).unwrap();
    let (keys, iq, weights) = index_inputs(&mut 3u64);
    let mut top = vec![0i32; N * TOPK];
    for err in [
        batch.indexer_topk(1, &iq, &weights, TopkKind::Positions, &mut top).unwrap_err(),
        batch.indexer_write(1, &keys, 0).unwrap_err(),
    ] {
        assert_eq!(err.status(), Status::InvalidArgument);
        assert!(err.message().contains("layer 1 has no indexer"), "{}", err); // pkv's own message
    }
    let err = batch.indexer_topk(0, &iq, &weights[..3], TopkKind::Positions, &mut top).unwrap_err();
    assert!(err.message().contains("weights has 3 elements, 20 expected"), "{}", err); // before pkv
    let err = batch.indexer_write(0, &vec![pkv::Bf16::default(); N * INDEX_DIM], 0).unwrap_err();
    assert!(err.status() == Status::InvalidArgument && err.message().contains("model dtype"), "{}", err);
    assert_eq!(e.params().get_dtype(), Some(Dtype::F32));
}
