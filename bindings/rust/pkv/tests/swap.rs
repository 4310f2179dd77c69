//! The host tier (pkv 0.2): its size in the budget, pool info and stats; swap_out / swap_in, the
//! copies the next batch lists by kind and `Batch::copy`; refusals; the limits pkv.h names.
mod common;

use pkv::{sys, CopyKind, Engine, Status, Tier};

const HOST_BLOCKS: u32 = 8;

fn sorted(v: &[i32]) -> Vec<i32> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v
}

#[test]
fn budget_pool_and_stats_report_the_host_tier() {
    let params = common::params(4, 16).host_num_blocks(HOST_BLOCKS);
    let e = Engine::new(&params).unwrap();
    for budget in [params.profile().unwrap(), e.budget().unwrap()] {
        assert_eq!(budget.host_num_blocks, u64::from(HOST_BLOCKS));
        assert_eq!(budget.host_pool_bytes, u64::from(HOST_BLOCKS) * budget.block_bytes);
    }
    let pool = e.pool_info();
    assert_eq!(pool.host_num_blocks, u64::from(HOST_BLOCKS));
    assert!(!pool.host_k_base.is_null() && !pool.host_v_base.is_null());
    assert_eq!(pool.host_layer_stride, u64::from(HOST_BLOCKS) * pool.block_stride);
    assert_eq!(2 * pool.host_bytes_per_pool, e.budget().unwrap().host_pool_bytes);
    let st = e.stats().unwrap();
    assert_eq!((st.num_host_blocks, st.num_host_free_blocks), (8, 8));
    assert_eq!(e.params().raw().host_num_blocks, HOST_BLOCKS);
    // No host tier: every host term is 0. host_cache_bytes sizes it in bytes.
    let none = common::engine(4, 16);
    let b = none.budget().unwrap();
    assert_eq!((b.host_num_blocks, b.host_pool_bytes), (0, 0));
    assert!(none.pool_info().host_k_base.is_null());
    let by_bytes = common::params(4, 16).host_cache_bytes(3 * b.block_bytes).profile().unwrap();
    assert_eq!(by_bytes.host_num_blocks, 3);
}

#[test]
fn swap_out_and_in_through_listed_copies() {
    let e = Engine::new(&common::params(4, 16).host_num_blocks(HOST_BLOCKS)).unwrap();
    let a = e.allocate(&common::tokens(0, 10), None).unwrap().seq; // 3 blocks of 4
    common::compute(&e, &[a]);
    let table = e.block_table(a).unwrap();
    assert_eq!(Tier::of(&e.seq_info(a).unwrap()), Some(Tier::Device));
    e.swap_out(a).unwrap();
    let info = e.seq_info(a).unwrap();
    assert_eq!(Tier::of(&info), Some(Tier::Host));
    assert_eq!((info.num_host_blocks, info.num_blocks, info.num_computed_tokens), (3, 0, 10));
    let st = e.stats().unwrap();
    assert_eq!((st.num_swapped_seqs, st.num_swapped_out_blocks), (1, 3));
    assert_eq!(st.num_host_free_blocks, u64::from(HOST_BLOCKS) - 3);
    // Not running any more, and a swapped sequence cannot grow.
    assert_eq!(e.swap_out(a).unwrap_err().status(), Status::State);
    assert_eq!(e.append(a, &[1]).unwrap_err().status(), Status::State);
    // The next batch (another sequence's) lists the swap-out copies; copy() does them.
    let b = e.allocate(&common::tokens(100, 6), None).unwrap().seq;
    assert_eq!(e.swap_in(b).unwrap_err().status(), Status::State); // not swapped
    let mut batch = e.batch(&[b], None).unwrap();
    let v = batch.view();
    let kinds: Vec<_> = v.copy_kind.iter().map(|&k| CopyKind::from_code(k)).collect();
    assert_eq!(kinds, vec![Some(CopyKind::SwapOut); 3]);
    assert_eq!(sorted(v.copy_src), sorted(&table));
    assert_eq!(v.copy_dst.len(), 3);
    batch.copy().unwrap();
    batch.copy().unwrap(); // done already: nothing more
    batch.end().unwrap();
    e.check().unwrap();
    // Back in: the next batch of a lists the swap-in copies into its new blocks.
    e.swap_in(a).unwrap();
    let info = e.seq_info(a).unwrap();
    assert_eq!(Tier::of(&info), Some(Tier::Device));
    assert_eq!((info.num_blocks, info.num_host_blocks), (3, 0));
    let st = e.stats().unwrap();
    assert_eq!((st.num_swapped_seqs, st.num_swapped_in_blocks), (0, 3));
    e.append(a, &[10]).unwrap();
    let mut batch = e.batch(&[a], None).unwrap();
    assert_eq!(batch.view().copy_kind, &[CopyKind::SwapIn.code(); 3]);
    assert_eq!(sorted(batch.view().copy_dst), sorted(&e.block_table(a).unwrap()));
    batch.copy().unwrap();
    batch.end().unwrap();
    assert_eq!(e.stats().unwrap().num_host_free_blocks, u64::from(HOST_BLOCKS));
    assert_eq!(e.seq_info(a).unwrap().num_computed_tokens, 11);
    e.release(a).unwrap();
    e.release(b).unwrap();
    e.check().unwrap();
}

#[test]
fn swap_out_without_a_host_tier_is_unsupported() {
    let e = common::engine(4, 16);
    let a = e.allocate(&common::tokens(1, 5), None).unwrap().seq;
    common::compute(&e, &[a]);
    assert_eq!(e.swap_out(a).unwrap_err().status(), Status::Unsupported);
    assert_eq!(Tier::of(&e.seq_info(a).unwrap()), Some(Tier::Device));
}

#[test]
fn codes_and_limits() {
    for t in [Tier::None, Tier::Device, Tier::Host] {
        assert_eq!(Tier::from_code(t.code()), Some(t));
    }
    assert_eq!((Tier::Host.code(), CopyKind::SwapIn.code()), (2, 3));
    assert_eq!((CopyKind::from_code(1), CopyKind::from_code(0)), (Some(CopyKind::Cow), None));
    assert_eq!((sys::PKV_ATTENTION_MAX_HEAD_DIM, sys::PKV_CUDA_MAX_GRID), (256, 65535));
    common::params(4, 16).head_dim(sys::PKV_MAX_HEAD_DIM).profile().unwrap();
    let too_big = common::params(4, 16).head_dim(sys::PKV_MAX_HEAD_DIM + 1).profile();
    assert_eq!(too_big.unwrap_err().status(), Status::InvalidArgument);
    let mut p = common::params(4, 16);
    p.raw_mut().reserved1 = 1;
    assert_eq!(p.profile().unwrap_err().status(), Status::InvalidArgument);
}

#[test]
fn preemption_by_swapping_needs_the_host_tier() {
    let swap = sys::PKV_PREEMPT_SWAP as u32;
    let e = Engine::new(&common::params(4, 16).host_num_blocks(HOST_BLOCKS).preemption_mode(swap)).unwrap();
    assert_eq!(e.params().raw().preemption_mode, swap);
    let err = Engine::new(&common::params(4, 16).preemption_mode(swap)).err().unwrap();
    assert_eq!(err.status(), Status::InvalidArgument);
}
