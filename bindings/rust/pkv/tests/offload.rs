//! Offload to the host tier (pkv 0.2, `Params::host_offload`): a cached block evicted from the
//! pool is copied to the host tier (`CopyKind::Offload`, a stored event of medium `Tier::Host`)
//! and a later prefix hit loads it back (`CopyKind::Load`); the per-tier stats; host_offload off
//! drops evicted blocks.
mod common;

use pkv::{CopyKind, Engine, KvEvent, KvEventKind, Tier};

const HOST_BLOCKS: u32 = 8;

/// 3 full blocks of 4 + 1 token: 3 blocks sealed.
fn first() -> Vec<i32> {
    common::tokens(1, 13)
}
/// 4 blocks: the whole pool, evicting `first`'s cached blocks.
fn other() -> Vec<i32> {
    common::tokens(100, 16)
}

fn engine(host_offload: bool) -> Engine {
    let params = common::params(4, 4).host_num_blocks(HOST_BLOCKS).kv_events(true).host_offload(host_offload);
    let e = Engine::new(&params).unwrap();
    assert_eq!(e.params().raw().host_offload, u32::from(host_offload));
    e
}

/// The sorted block hashes of the events of one type and medium.
fn hashes(events: &[KvEvent], kind: KvEventKind, tier: Tier) -> Vec<u64> {
    let mut out: Vec<u64> = events
        .iter()
        .filter(|ev| ev.kind == Some(kind) && ev.medium == Some(tier))
        .map(|ev| ev.block_hash)
        .collect();
    out.sort_unstable();
    out
}

#[test]
fn on_by_default_with_its_codes() {
    let p = common::params(4, 4);
    assert_eq!(p.raw().host_offload, 1);
    assert_eq!((CopyKind::Offload.code(), CopyKind::Load.code()), (4, 5));
    assert_eq!(CopyKind::from_code(5), Some(CopyKind::Load));
    // a plain Copy struct of its fields: 0.5 added lora_id and num_extra_keys
    assert_eq!(std::mem::size_of::<KvEvent>(), 48);
}

#[test]
fn evicted_blocks_go_to_the_host_tier_and_come_back() {
    let (stored, removed) = (KvEventKind::BlockStored, KvEventKind::BlockRemoved);
    let mut first_hashes = Vec::new();
    let mut h = pkv::block_hash_root(0, &[]).unwrap();
    for block in first()[..12].chunks(4) {
        h = pkv::block_hash(0, h, block).unwrap();
        first_hashes.push(h);
    }
    first_hashes.sort_unstable();
    let e = engine(true);
    let a = e.allocate(&first(), None).unwrap().seq;
    common::compute(&e, &[a]);
    e.release(a).unwrap();
    assert_eq!(hashes(&e.drain_kv_events().unwrap(), stored, Tier::Device), first_hashes);
    // `other` takes every pool block: first's 3 cached ones are offloaded, and its batch lists
    // the copies out (pool -> host tier) before anything is written.
    let b = e.allocate(&other(), None).unwrap().seq;
    let st = e.stats().unwrap();
    assert_eq!(
        (st.num_evictions, st.num_offloaded_blocks, st.num_host_cached_blocks, st.num_host_evictions),
        (3, 3, 3, 0)
    );
    {
        let batch = e.batch(&[b], None).unwrap(); // dropped: aborted
        let v = batch.view();
        assert_eq!(v.copy_kind, &[CopyKind::Offload.code(); 3]);
        let mut dst = v.copy_dst.to_vec();
        dst.sort_unstable();
        assert_eq!(dst, vec![0, 1, 2]); // host-tier blocks
    }
    common::compute(&e, &[b]);
    e.release(b).unwrap();
    let events = e.drain_kv_events().unwrap();
    assert_eq!(hashes(&events, stored, Tier::Host), first_hashes, "{:?}", events);
    assert_eq!(hashes(&events, removed, Tier::Device), first_hashes, "{:?}", events);
    // `first` again: its 12 tokens of sealed blocks are a prefix hit served by the host tier.
    let q = e.allocate_query(&first(), None).unwrap();
    assert_eq!((q.num_blocks, q.num_cached_tokens), (4, 12));
    let alloc = e.allocate(&first(), None).unwrap();
    assert_eq!(alloc.num_cached_tokens, 12);
    let st = e.stats().unwrap();
    assert_eq!(
        (st.prefix_hit_tokens, st.host_hit_tokens, st.device_hit_tokens, st.num_loaded_blocks),
        (12, 12, 0, 3)
    );
    assert_eq!(st.num_offloaded_blocks, 7); // other's 4 blocks made room
    let mut batch = e.batch(&[alloc.seq], None).unwrap();
    assert_eq!(batch.num_tokens(), 1); // only the last token is computed
    let v = batch.view();
    let kinds: Vec<_> = v.copy_kind.iter().map(|&k| CopyKind::from_code(k).unwrap()).collect();
    let loads: Vec<i32> =
        kinds.iter().zip(v.copy_dst).filter(|(&k, _)| k == CopyKind::Load).map(|(_, &d)| d).collect();
    assert_eq!(loads, e.block_table(alloc.seq).unwrap()[..3]);
    assert_eq!(kinds.iter().filter(|&&k| k == CopyKind::Offload).count(), 4);
    assert_eq!(kinds.len(), 7);
    batch.copy().unwrap();
    batch.end().unwrap();
    assert_eq!(e.seq_info(alloc.seq).unwrap().num_computed_tokens, 13);
    e.release(alloc.seq).unwrap();
    e.check().unwrap();
}

#[test]
fn host_offload_off_drops_evicted_blocks() {
    let e = engine(false);
    let a = e.allocate(&first(), None).unwrap().seq;
    common::compute(&e, &[a]);
    e.release(a).unwrap();
    let b = e.allocate(&other(), None).unwrap().seq;
    assert!(e.batch(&[b], None).unwrap().view().copy_kind.is_empty());
    common::compute(&e, &[b]);
    e.release(b).unwrap();
    let alloc = e.allocate(&first(), None).unwrap();
    assert_eq!(alloc.num_cached_tokens, 0);
    let st = e.stats().unwrap();
    assert_eq!(st.num_evictions, 7);
    assert_eq!(
        (st.num_offloaded_blocks, st.num_loaded_blocks, st.num_host_cached_blocks, st.host_hit_tokens),
        (0, 0, 0, 0)
    );
    let events = e.drain_kv_events().unwrap();
    assert!(events.iter().all(|ev| Tier::of_event(ev) == Some(Tier::Device)), "{:?}", events);
    e.release(alloc.seq).unwrap();
    e.check().unwrap();
}
