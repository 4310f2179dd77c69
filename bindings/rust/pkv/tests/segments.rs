//! Block descriptors (pkv 0.11): `Engine::block_segments`, `Engine::seq_segments` and
//! `Engine::layout_fingerprint`, what a transport moves blocks by: a prompt computed on one
//! engine is moved into another of the same layout (other block counts) by copying segment i to
//! segment i.
use std::slice;

use pkv::{BlockLayout, Device, Dtype, Engine, Params, Segment, Seq, Status, Tier};

const LAYERS: u32 = 2;
const Q_HEADS: usize = 4;
const KV_HEADS: usize = 2;
const DIM: usize = 8;
const BLOCK_SIZE: usize = 4;

fn params(num_blocks: u32, dtype: Dtype) -> Params {
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

/// One batch of `seq`'s tokens: K of token t, layer l, value i is 100t + 10l + 0.001i, V its
/// negative.
fn compute(e: &Engine, seq: Seq) {
    let mut batch = e.batch(&[seq], None).unwrap();
    let n = batch.num_tokens();
    let row = KV_HEADS * DIM;
    let q: Vec<f32> = (0..n * Q_HEADS * DIM).map(|i| 0.01 * i as f32).collect();
    let mut out = vec![0f32; q.len()];
    for layer in 0..LAYERS {
        let k: Vec<f32> = (0..n * row)
            .map(|i| (100 * (i / row)) as f32 + 10.0 * layer as f32 + 0.001 * (i % row) as f32)
            .collect();
        let v: Vec<f32> = k.iter().map(|x| -x).collect();
        batch.attention(layer, &q, &k, &v, &mut out).unwrap();
    }
    batch.end().unwrap();
}

/// The bytes a segment names (a CPU engine's host memory).
fn bytes_of(s: &Segment) -> &[u8] {
    // SAFETY: a CPU engine's segment is host memory of s.bytes bytes, alive while its engine is.
    unsafe { slice::from_raw_parts(s.base as *const u8, s.bytes as usize) }
}

#[test]
fn layout_fingerprints() {
    let a = Engine::new(&params(16, Dtype::F32)).unwrap();
    let b = Engine::new(&params(24, Dtype::F32)).unwrap();
    let c = Engine::new(&params(16, Dtype::Bf16)).unwrap();
    let fa = a.layout_fingerprint(0).unwrap();
    assert_ne!(fa, [0u8; 32]);
    assert_eq!(fa, b.layout_fingerprint(0).unwrap(), "other block counts, one layout");
    assert_ne!(fa, c.layout_fingerprint(0).unwrap(), "another dtype");
    assert_eq!(a.layout_fingerprint(1).unwrap_err().status(), Status::InvalidArgument);
}

#[test]
fn seq_segments_move_a_prompt() {
    let a = Engine::new(&params(16, Dtype::F32)).unwrap();
    let b = Engine::new(&params(24, Dtype::F32)).unwrap();
    let prompt: Vec<i32> = (100..108).collect(); // 2 blocks
    let sa = a.allocate(&prompt, None).unwrap().seq;
    compute(&a, sa);
    b.allocate(&[900, 901, 902, 903], None).unwrap(); // b's blocks of the prompt at other ids
    let sb = b.allocate(&prompt, None).unwrap().seq;
    let src = a.seq_segments(0, sa, 0, 2).unwrap();
    let dst = b.seq_segments(0, sb, 0, 2).unwrap();
    assert_eq!(src.len(), 2 * LAYERS as usize * 2);
    assert_eq!(dst.len(), src.len());
    let block_bytes = (BLOCK_SIZE * KV_HEADS * DIM * 4) as u64;
    for (s, d) in src.iter().zip(&dst) {
        assert_eq!((s.bytes, d.bytes), (block_bytes, block_bytes));
    }
    // layer 0's K of token 1, value 2, as compute wrote it
    let at = (KV_HEADS * DIM + 2) * 4;
    let k12 = f32::from_le_bytes(bytes_of(&src[0])[at..at + 4].try_into().unwrap());
    assert!((k12 - 100.002).abs() < 1e-4, "K[1][2] = {}", k12);
    assert_ne!(bytes_of(&src[0]), bytes_of(&dst[0]), "b holds a's bytes already");
    for (s, d) in src.iter().zip(&dst) {
        let (from, to) = (s.base as *const u8, d.base as *mut u8);
        // SAFETY: two engines' host memory of equal bytes, each alive, not overlapping.
        unsafe { std::ptr::copy_nonoverlapping(from, to, s.bytes as usize) };
    }
    let moved = b.seq_segments(0, sb, 0, 2).unwrap();
    assert_eq!(moved, dst);
    for (i, (s, d)) in src.iter().zip(&moved).enumerate() {
        assert_eq!(bytes_of(s), bytes_of(d), "segment {}", i);
    }
    // block 1 alone is the second half of the list
    assert_eq!(a.seq_segments(0, sa, 1, 1).unwrap(), src[LAYERS as usize * 2..]);
    a.check().unwrap();
    b.check().unwrap();
}

#[test]
fn block_segments_where_pool_info_says() {
    let e = Engine::new(&params(16, Dtype::F32)).unwrap();
    let info = e.pool_info();
    let block = info.block_stride as usize * 4; // f32
    let k = info.k_base as usize;
    let segs = e.block_segments(0, Tier::Device, &[1, 3]).unwrap();
    assert_eq!(segs.len(), 2 * LAYERS as usize * 2);
    assert_eq!((segs[0].base as usize, segs[0].bytes), (k + block, block as u64));
    assert_eq!(segs[1].base as usize, info.v_base as usize + block);
    assert_eq!(segs[2].base as usize, k + info.layer_stride as usize * 4 + block);
    assert_eq!(segs[4].base as usize, k + 3 * block);
    assert!(e.block_segments(0, Tier::Device, &[]).unwrap().is_empty());
}

#[test]
fn segments_refusals() {
    let e = Engine::new(&params(16, Dtype::F32)).unwrap();
    let err = e.block_segments(0, Tier::Host, &[1]).unwrap_err(); // no host tier
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("no host tier"), "{:?}", err.message());
    let err = e.block_segments(0, Tier::Device, &[16]).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    let seq = e.allocate(&(0..8).collect::<Vec<i32>>(), None).unwrap().seq;
    // past its 2 blocks
    assert_eq!(e.seq_segments(0, seq, 1, 2).unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(e.seq_segments(0, Seq(seq.0 + 100), 0, 1).unwrap_err().status(), Status::NotFound);
    e.preempt(seq).unwrap();
    assert_eq!(e.seq_segments(0, seq, 0, 1).unwrap_err().status(), Status::State);
}

/// With `BlockLayout::Page` a block is one segment: the page holds what the default layout keeps
/// in 2 x layers segments, layer after layer, K then V.
#[test]
fn page_layout_one_segment_a_block() {
    let a = Engine::new(&params(16, Dtype::F32)).unwrap();
    let b = Engine::new(&params(16, Dtype::F32).block_layout(BlockLayout::Page)).unwrap();
    assert_eq!(b.params().get_block_layout(), Some(BlockLayout::Page));
    assert_ne!(a.layout_fingerprint(0).unwrap(), b.layout_fingerprint(0).unwrap());
    let prompt: Vec<i32> = (100..108).collect();
    let sa = a.allocate(&prompt, None).unwrap().seq;
    let sb = b.allocate(&prompt, None).unwrap().seq;
    compute(&a, sa);
    compute(&b, sb);
    let layers = a.seq_segments(0, sa, 0, 2).unwrap();
    let pages = b.seq_segments(0, sb, 0, 2).unwrap();
    assert_eq!(pages.len(), 2, "a block, one segment");
    let per = LAYERS as usize * 2;
    for (i, page) in pages.iter().enumerate() {
        let want: Vec<u8> =
            layers[i * per..(i + 1) * per].iter().flat_map(|s| bytes_of(s).to_vec()).collect();
        assert_eq!(bytes_of(page), &want[..], "page {}", i);
    }
}
