//! Recurrent state (pkv 0.6, issue 28 item 7): state layer specs round-trip through the Params
//! and pkv_profile, whose budget's state terms are checked against bytes computed here by hand;
//! an engine's state pool (pool_info), each state layer's parts in a slot (layer_info) and the
//! batch's state slots; the checkpoint params; refusals that name what was wrong. Prefix caching
//! of the state through the step loop: the checkpoints each policy takes, the restore of a shared
//! prefix from one, their copies in the batches, their events and the counters of `Stats`. A host
//! tier (pkv 0.6): host state slots in the budget and pool, swap's STATE_OUT / STATE_IN copies, a
//! checkpoint offloaded and restored.
mod common;

use pkv::{
    AttentionKind, CopyKind, Dtype, Engine, KvEventKind, LayerKind, LayerSpec, Params, Request, SeqInfo,
    StateCheckpointPolicy, StatePart, Stats, Status, Tier,
};

/// A Gated DeltaNet-like layer, small: a bf16 conv state of 96 channels x 3 taps (576 bytes,
/// 768 with its part rounded to 256) and an f32 delta-rule state of 2 heads x 16 x 16 (2048).
fn gdn() -> LayerSpec {
    LayerSpec::state([
        StatePart::new(Dtype::Bf16, &[96, 3]).unwrap(),
        StatePart::new(Dtype::F32, &[2, 16, 16]).unwrap(),
    ])
}
const CONV_BYTES: u64 = 96 * 3 * 2;
const SSM_BYTES: u64 = 2 * 16 * 16 * 4;
const LAYER_BYTES: u64 = 768 + SSM_BYTES; // each part at a 256-byte boundary
const SLOT_BYTES: u64 = 3 * LAYER_BYTES; // 8448, a multiple of 256
/// Layer 3, full attention: f32 K and V of 2 kv heads x 16, 4 tokens a block.
const BLOCK_BYTES: u64 = 2 * 2 * 16 * 4 * 4;

/// Three state layers then one attention layer (a 3 : 1 hybrid, as Qwen3-Next's), 8 sequences.
fn hybrid() -> Params {
    common::params(4, 32).num_layers(4).max_num_seqs(8).layer_specs(&[
        gdn(),
        gdn(),
        gdn(),
        LayerSpec::default(),
    ])
}

#[test]
fn a_state_spec_round_trips_through_the_params() {
    let specs = hybrid().get_layer_specs().unwrap();
    assert_eq!(specs[0], LayerSpec { attention: Some(AttentionKind::Full), ..gdn() });
    assert_eq!(specs[0].kind, Some(LayerKind::State));
    assert_eq!(specs[1].state[0].dims(), &[96, 3]);
    assert_eq!(specs[2].state[1].dims(), &[2, 16, 16]);
    assert_eq!(specs[2].state[1].dtype, Some(Dtype::F32));
    assert!(!specs[3].state[0].is_present() && !specs[3].state[1].is_present());
    let p = hybrid().state_checkpoint_policy(StateCheckpointPolicy::Every).state_checkpoint_interval(4);
    assert_eq!(p.get_state_checkpoint_policy(), Some(StateCheckpointPolicy::Every));
}

#[test]
fn the_budget_takes_the_state_pool_before_the_blocks() {
    // default checkpoints: max_num_seqs of them, beside the 8 working slots
    let b = hybrid().profile().unwrap();
    assert_eq!((b.num_state_layers, b.num_state_slots, b.num_state_checkpoints), (3, 8, 8));
    assert_eq!(b.state_bytes_per_seq, SLOT_BYTES);
    assert_eq!(b.state_pool_bytes, 16 * SLOT_BYTES);
    assert_eq!(b.block_bytes, BLOCK_BYTES); // the state layers hold no K and V
                                            // a budget in bytes: the state pool (8 + 4 slots) first, then whole blocks of what is left
    let state = 12 * SLOT_BYTES;
    let p = hybrid().num_blocks(0).kv_cache_bytes(state + 40 * BLOCK_BYTES + 100).num_state_checkpoints(4);
    let b = p.profile().unwrap();
    assert_eq!((b.num_state_slots, b.num_state_checkpoints, b.state_pool_bytes), (8, 4, state));
    assert_eq!((b.num_blocks, b.pool_bytes), (40, 40 * BLOCK_BYTES));
    // policy NONE keeps no checkpoints
    let b = hybrid().state_checkpoint_policy(StateCheckpointPolicy::None).profile().unwrap();
    assert_eq!((b.num_state_checkpoints, b.state_pool_bytes), (0, 8 * SLOT_BYTES));
    // no state layers: every state term 0
    let b = common::params(4, 32).profile().unwrap();
    assert_eq!(
        (b.num_state_layers, b.num_state_slots, b.state_bytes_per_seq, b.state_pool_bytes),
        (0, 0, 0, 0)
    );
}

#[test]
fn bad_state_specs_are_refused_by_name() {
    let err = StatePart::new(Dtype::F32, &[1, 2, 3, 4, 5]).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("1 to 4 dimensions"), "{}", err.message());
    assert_eq!(StatePart::new(Dtype::F32, &[8, 0]).unwrap_err().status(), Status::InvalidArgument);
    // pkv's rules: a state layer has no attention fields, and one part at least
    let heads = LayerSpec { num_kv_heads: 2, ..gdn() };
    let err = hybrid().layer_specs(&[heads, gdn(), gdn(), LayerSpec::default()]).profile().unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("num_kv_heads"), "{}", err.message());
    let empty = LayerSpec::state(Default::default());
    let err = hybrid().layer_specs(&[gdn(), empty, gdn(), LayerSpec::default()]).profile().unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("layer_specs[1]"), "{}", err.message());
    let err = hybrid().state_checkpoint_interval(3).profile().unwrap_err(); // interval without EVERY
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("state_checkpoint_interval"), "{}", err.message());
}

#[test]
fn an_engine_says_where_each_sequences_state_is() {
    let e = Engine::new(&hybrid().num_state_checkpoints(4)).unwrap();
    let pool = e.pool_info();
    assert!(!pool.state_base.is_null());
    assert_eq!((pool.state_slot_bytes, pool.num_state_slots), (SLOT_BYTES, 12));
    for layer in 0..3u32 {
        let info = e.layer_info(layer).unwrap();
        assert_eq!(info.kind, Some(LayerKind::State));
        assert!(info.k_base.is_null() && info.v_base.is_null());
        let base = u64::from(layer) * LAYER_BYTES;
        assert_eq!((info.state[0].offset, info.state[0].bytes), (base, CONV_BYTES));
        assert_eq!((info.state[1].offset, info.state[1].bytes), (base + 768, SSM_BYTES));
        assert_eq!(info.state[0].part, gdn().state[0]);
    }
    assert_eq!(e.layer_info(3).unwrap().state, [pkv::StatePartInfo::default(); 2]);
    // each running sequence its own working slot
    let a = e.allocate(&common::tokens(1, 6), None).unwrap();
    let b = e.allocate(&common::tokens(50, 5), None).unwrap();
    let mut batch = e.batch(&[a.seq, b.seq], None).unwrap();
    let slots = batch.view().state_slots.to_vec();
    assert_eq!(slots.len(), 2);
    assert_ne!(slots[0], slots[1]);
    assert!(slots.iter().all(|&s| (0..8).contains(&s)), "{:?}", slots);
    let (q, kv, mut out) = (vec![0f32; 11 * 64], vec![0f32; 11 * 32], vec![0f32; 11 * 64]);
    let err = batch.attention(0, &q, &kv, &kv, &mut out).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("state layer"), "{}", err.message());
    batch.end().map_err(|e| e.into_parts().0).unwrap(); // the host ran every layer itself
                                                        // a fork takes a slot of its own, its parent's state copied into it before the step
    let c = e.fork(a.seq).unwrap();
    e.append(c, &[7]).unwrap();
    let batch = e.batch(&[c], None).unwrap();
    let v = batch.view();
    let slot = v.state_slots[0];
    assert!(!slots.contains(&slot) && (0..8).contains(&slot), "{} {:?}", slot, slots);
    let copy = (0..v.copy_kind.len()).find(|&i| CopyKind::from_code(v.copy_kind[i]) == Some(CopyKind::State));
    let i = copy.unwrap_or_else(|| panic!("no state copy in {:?}", v.copy_kind));
    assert_eq!((v.copy_src[i], v.copy_dst[i]), (slots[0], slot));
    batch.abort();
}

/// A prompt of 14 tokens (3 whole blocks of 4 and 2 more): the 8 every prompt here shares (a
/// system prompt of two blocks), then 6 of its own.
fn shared_prompt(own: i32) -> Vec<i32> {
    let mut prompt = common::tokens(0, 8);
    prompt.extend(common::tokens(100 * own, 6));
    prompt
}

/// A state copy of a batch (`CopyKind::State`): slot `src` into slot `dst`.
type StateCopy = (i32, i32);
/// A request's info when it finished, and the state copies of its batches.
type Run = (SeqInfo, Vec<StateCopy>);

/// One request of `prompt` sampling one token, through the step loop until it finishes; the host
/// runs no kernel (pkv's checkpoints and counters do not read the state). Returns its info and
/// the state copies its batches listed.
fn run(e: &Engine, prompt: &[i32]) -> Run {
    let seq = e.submit(prompt, &Request { max_new_tokens: 1, ..Request::default() }).unwrap();
    let mut copies = Vec::new();
    let mut steps = 0;
    while let Some(batch) = e.step().unwrap() {
        steps += 1;
        assert!(steps < 10, "the scheduler does not finish");
        let v = batch.view();
        for (i, &kind) in v.copy_kind.iter().enumerate() {
            if CopyKind::from_code(kind) == Some(CopyKind::State) {
                copies.push((v.copy_src[i], v.copy_dst[i]));
            }
        }
        let sampled = vec![1; v.num_seqs as usize];
        batch.commit(&sampled).map_err(|e| e.into_parts().0).unwrap();
    }
    assert_eq!(e.drain_finished().unwrap(), vec![seq]);
    let info = e.seq_info(seq).unwrap();
    e.release(seq).unwrap();
    (info, copies)
}

/// Three requests sharing `shared_prompt`'s first two blocks, one after the other, on the hybrid
/// model (8 working slots, ids 0..8; 8 checkpoints, 8..16) under `policy`: each one's info and
/// state copies, then the engine's stats.
fn three_requests(policy: StateCheckpointPolicy, interval: u32) -> (Engine, Vec<Run>, Stats) {
    let p = hybrid().kv_events(true).state_checkpoint_policy(policy).state_checkpoint_interval(interval);
    let e = Engine::new(&p).unwrap();
    let runs: Vec<_> = (1..=3).map(|own| run(&e, &shared_prompt(own))).collect();
    let stats = e.stats().unwrap();
    e.check().unwrap();
    (e, runs, stats)
}

const CHECKPOINT: std::ops::Range<i32> = 8..16;
const WORKING: std::ops::Range<i32> = 0..8;

#[test]
fn a_shared_prefix_is_restored_from_the_checkpoint_its_second_request_left() {
    let (e, runs, st) = three_requests(StateCheckpointPolicy::PromptEnd, 0);
    let cached: Vec<u32> = runs.iter().map(|(info, _)| info.num_cached_tokens).collect();
    // A: nothing cached. B: A's two blocks of KV, but no checkpoint at their end: from token 0.
    // C: the checkpoint B left where its cached KV ended (the branch point).
    assert_eq!(cached, [0, 0, 8]);
    let (a, b, c) = (&runs[0].1, &runs[1].1, &runs[2].1);
    // A checkpoints at its prompt's last boundary (12); B at the branch point (8), then at 12
    let is_capture = |&(src, dst): &StateCopy| WORKING.contains(&src) && CHECKPOINT.contains(&dst);
    assert!(a.len() == 1 && a.iter().all(is_capture), "A's state copies {:?}", a);
    assert!(b.len() == 2 && b.iter().all(is_capture), "B's state copies {:?}", b);
    // C's working slot starts from B's checkpoint at 8, before any write, then checkpoints at 12
    assert_eq!(c.len(), 2, "C's state copies {:?}", c);
    assert_eq!(c[0].0, b[0].1, "C restores from {} (B's checkpoints {:?})", c[0].0, b);
    assert!(WORKING.contains(&c[0].1) && is_capture(&c[1]) && c[1].0 == c[0].1, "{:?}", c);
    let counters = (st.num_state_checkpoints_taken, st.num_state_restores, st.num_state_checkpoints_held);
    assert_eq!(counters, (4, 1, 4), "{:?}", st);
    assert_eq!((st.state_fallback_tokens, st.num_state_checkpoint_evictions), (8, 0), "{:?}", st);
    assert_eq!(st.prefix_hit_tokens, 8);
    // each checkpoint is a BlockStored of its block's hash in the state "group" (after the KV's)
    let groups = e.kv_groups().unwrap().group_window.len() as u32;
    let stored: Vec<_> = e.drain_kv_events().unwrap().into_iter().filter(|ev| ev.group == groups).collect();
    assert_eq!(stored.len(), 4, "{:?}", stored);
    let device_store =
        |ev: &pkv::KvEvent| ev.kind == Some(KvEventKind::BlockStored) && ev.medium == Some(Tier::Device);
    assert!(stored.iter().all(device_store), "{:?}", stored);
    let root = pkv::block_hash_root(0, b"").unwrap();
    let block0 = pkv::block_hash(0, root, &common::tokens(0, 4)).unwrap();
    let branch = pkv::block_hash(0, block0, &common::tokens(4, 4)).unwrap(); // B's checkpoint at 8
    assert_eq!(stored.iter().filter(|ev| ev.block_hash == branch).count(), 1, "{:?}", stored);
}

#[test]
fn every_policy_checkpoints_its_boundaries_and_none_takes_none() {
    // EVERY 1: A leaves checkpoints at 4, 8 and 12; B and C each restore at 8, checkpoint at 12
    let (_, runs, st) = three_requests(StateCheckpointPolicy::Every, 1);
    let cached: Vec<u32> = runs.iter().map(|(info, _)| info.num_cached_tokens).collect();
    assert_eq!(cached, [0, 8, 8]);
    let counters = (st.num_state_checkpoints_taken, st.num_state_restores, st.state_fallback_tokens);
    assert_eq!(counters, (5, 2, 0), "{:?}", st);
    assert_eq!(st.num_state_checkpoints_held, 5);
    // NONE: no checkpoint and no hit: every prompt from token 0, no fallback counted
    let (_, runs, st) = three_requests(StateCheckpointPolicy::None, 0);
    assert!(runs.iter().all(|(info, copies)| info.num_cached_tokens == 0 && copies.is_empty()), "{:?}", runs);
    let counters = (st.num_state_checkpoints_taken, st.num_state_restores, st.num_state_checkpoints_held);
    assert_eq!(counters, (0, 0, 0), "{:?}", st);
    assert_eq!((st.state_fallback_tokens, st.prefix_hit_tokens), (0, 0), "{:?}", st);
}

#[test]
fn a_full_set_of_checkpoints_evicts_the_least_recently_used() {
    // 2 checkpoint slots: B's at 12 evicts A's (the oldest); C's restore touches B's at 8, so C's
    // at 12 evicts B's at 12
    let p = hybrid().kv_events(true).num_state_checkpoints(2);
    let e = Engine::new(&p).unwrap();
    let cached: Vec<u32> = (1..=3).map(|own| run(&e, &shared_prompt(own)).0.num_cached_tokens).collect();
    assert_eq!(cached, [0, 0, 8]);
    let st = e.stats().unwrap();
    let counters = (st.num_state_checkpoints_taken, st.num_state_checkpoint_evictions, st.num_state_restores);
    assert_eq!(counters, (4, 2, 1), "{:?}", st);
    assert_eq!(st.num_state_checkpoints_held, 2);
    let groups = e.kv_groups().unwrap().group_window.len() as u32;
    let events: Vec<_> = e.drain_kv_events().unwrap().into_iter().filter(|ev| ev.group == groups).collect();
    let of =
        |kind| events.iter().filter(|ev| ev.kind == Some(kind)).map(|ev| ev.block_hash).collect::<Vec<_>>();
    let (stored, removed) = (of(KvEventKind::BlockStored), of(KvEventKind::BlockRemoved));
    // stored: A's at 12, B's at 8, B's at 12, C's at 12
    assert_eq!((stored.len(), removed), (4, vec![stored[0], stored[2]]), "{:?}", events);
    e.check().unwrap();
}

/// The copies of `kind` a batch lists, as (src, dst).
fn copies_of(v: &pkv::BatchView, kind: CopyKind) -> Vec<StateCopy> {
    let listed = 0..v.copy_kind.len();
    listed
        .filter(|&i| CopyKind::from_code(v.copy_kind[i]) == Some(kind))
        .map(|i| (v.copy_src[i], v.copy_dst[i]))
        .collect()
}

/// The hybrid with a host tier (pkv 0.6): 8 working slots and `checkpoints` checkpoint slots.
fn with_host(checkpoints: u32) -> Params {
    hybrid().host_num_blocks(16).num_state_checkpoints(checkpoints)
}

#[test]
fn a_host_tier_holds_swapped_states_and_offloaded_checkpoints() {
    // host state slots: one per sequence (swap) and one per checkpoint (offload)
    let e = Engine::new(&with_host(4)).unwrap();
    for b in [with_host(4).profile().unwrap(), e.budget().unwrap()] {
        assert_eq!((b.num_host_state_slots, b.host_state_bytes), (8 + 4, 12 * SLOT_BYTES), "{:?}", b);
    }
    let pool = e.pool_info();
    assert!(!pool.host_state_base.is_null());
    assert_eq!(pool.num_host_state_slots, 12);
    let st = e.stats().unwrap();
    let offload = (
        st.num_host_state_checkpoints_held,
        st.num_state_checkpoints_offloaded,
        st.num_state_restores_from_host,
    );
    assert_eq!(offload, (0, 0, 0), "{:?}", st);
    // no host tier: no host state
    let b = hybrid().profile().unwrap();
    assert_eq!((b.num_host_state_slots, b.host_state_bytes), (0, 0));
    assert!(Engine::new(&hybrid()).unwrap().pool_info().host_state_base.is_null());
}

#[test]
fn swap_moves_the_working_state_through_a_host_state_slot() {
    assert_eq!((CopyKind::StateOut.code(), CopyKind::from_code(8)), (7, Some(CopyKind::StateIn)));
    let e = Engine::new(&with_host(4)).unwrap();
    let a = e.allocate(&common::tokens(1, 6), None).unwrap().seq;
    let batch = e.batch(&[a], None).unwrap();
    let slot = batch.view().state_slots[0];
    batch.end().map_err(|e| e.into_parts().0).unwrap();
    e.swap_out(a).unwrap();
    // the next batch (another sequence's) copies a's working slot out to a host state slot
    let b = e.allocate(&common::tokens(50, 5), None).unwrap().seq;
    let batch = e.batch(&[b], None).unwrap();
    let out = copies_of(&batch.view(), CopyKind::StateOut);
    assert_eq!(out.len(), 1, "{:?}", batch.view().copy_kind);
    assert_eq!(out[0].0, slot);
    assert!((0..12).contains(&out[0].1), "host state slot {}", out[0].1);
    batch.end().map_err(|e| e.into_parts().0).unwrap();
    // back in: a working slot again, the state copied in from the host slot before the step
    e.swap_in(a).unwrap();
    e.append(a, &[7]).unwrap();
    let batch = e.batch(&[a], None).unwrap();
    let v = batch.view();
    assert_eq!(copies_of(&v, CopyKind::StateIn), vec![(out[0].1, v.state_slots[0])], "{:?}", v.copy_kind);
    batch.end().map_err(|e| e.into_parts().0).unwrap();
    e.check().unwrap();
}

#[test]
fn a_checkpoint_evicted_from_the_device_is_offloaded_then_restored() {
    // one checkpoint slot: B's checkpoint at 12 evicts A's, which moves to the host; A's prompt
    // again finds its KV on the device and its checkpoint on the host
    let e = Engine::new(&with_host(1)).unwrap();
    let (a, b) = (common::tokens(0, 14), common::tokens(500, 14));
    run(&e, &a);
    run(&e, &b);
    let st = e.stats().unwrap();
    assert_eq!((st.num_state_checkpoints_offloaded, st.num_host_state_checkpoints_held), (1, 1), "{:?}", st);
    let (info, _) = run(&e, &a);
    assert_eq!(info.num_cached_tokens, 12);
    let st = e.stats().unwrap();
    assert_eq!((st.num_state_restores, st.num_state_restores_from_host), (1, 1), "{:?}", st);
    e.check().unwrap();
}
