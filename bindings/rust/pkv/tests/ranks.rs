//! Ranks (pkv 0.10): one engine holding every tensor-parallel rank's pool (`Ranks::All`:
//! `OpenBatch::rank`, `Engine::rank_pool_info`, `Engine::set_rank_stream`), and a decider's plan
//! carried to a rank's pool engine (`Ranks::Pool`: `OpenBatch::export_plan`,
//! `Engine::import_plan`).
use std::ptr;

use pkv::{Device, Dtype, Engine, OpenBatch, Params, Ranks, Result, Status};

const DIM: usize = 8;

/// 2 layers, 4 q heads, 2 kv heads, tp_size 2: each rank holds 2 q heads and 1 kv head.
fn rank_params(ranks: Ranks, tp_rank: u32) -> Params {
    Params::new()
        .expect("libpkv")
        .num_layers(2)
        .num_q_heads(4)
        .num_kv_heads(2)
        .head_dim(DIM as u32)
        .dtype(Dtype::F32)
        .block_size(4)
        .num_blocks(32)
        .device(Device::Cpu)
        .num_threads(1)
        .tensor_parallel(2, tp_rank)
        .ranks(ranks)
}

/// One rank's heads of a layer: q, out [tokens][2][8], k, v [tokens][1][8], every V value
/// `fill`: each head's output is then `fill`.
fn rank_attention(batch: &mut OpenBatch<'_>, layer: u32, fill: f32) -> Result<Vec<f32>> {
    let n = batch.num_tokens();
    let (q, kv) = (vec![0.25f32; n * 2 * DIM], vec![fill; n * DIM]);
    let mut out = vec![0f32; q.len()];
    batch.attention(layer, &q, &kv, &kv, &mut out)?;
    Ok(out)
}

fn assert_filled(out: &[f32], fill: f32) {
    assert!(!out.is_empty());
    for (i, x) in out.iter().enumerate() {
        assert!((x - fill).abs() < 1e-5, "out[{}] = {}, want {} (the rank's V)", i, x, fill);
    }
}

#[test]
fn ranks_all_runs_each_ranks_heads() {
    let e = Engine::new(&rank_params(Ranks::All, 0)).unwrap();
    assert_eq!(e.params().get_ranks(), Some(Ranks::All));
    assert_eq!(e.budget().unwrap().num_ranks, 2);
    for r in 0..2 {
        let info = e.rank_pool_info(r).unwrap();
        assert_eq!((info.rank, info.num_ranks, info.tp_rank, info.pp_rank), (r, 2, r, 0));
        assert_eq!((info.first_layer, info.end_layer, info.device_id), (0, 2, -1));
    }
    assert_ne!(e.rank_pool_info(0).unwrap().k_base, e.rank_pool_info(1).unwrap().k_base);
    assert_eq!(e.rank_pool_info(2).unwrap_err().status(), Status::InvalidArgument);

    let seq = e.allocate(&[1, 2, 3, 4, 5], None).unwrap().seq;
    let mut batch = e.batch(&[seq], None).unwrap();
    // The batch's own handle names no rank: refused with pkv's message.
    let err = rank_attention(&mut batch, 0, 0.5).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("pkv_batch_rank"), "{:?}", err.message());
    {
        let mut ranks = [batch.rank(0).unwrap(), batch.rank(1).unwrap()];
        assert_eq!((ranks[0].rank_index(), ranks[1].rank_index()), (0, 1));
        assert_eq!(ranks[1].num_tokens(), 5); // the batch's plan
        for layer in 0..2 {
            for (r, rank) in ranks.iter_mut().enumerate() {
                let fill = 0.5 + r as f32;
                assert_filled(&rank_attention(rank, layer, fill).unwrap(), fill);
            }
        }
        assert_eq!(batch.rank(2).err().map(|e| e.status()), Some(Status::InvalidArgument));
        // a rank's handle has no ranks of its own
        assert_eq!(ranks[0].rank(0).err().map(|e| e.status()), Some(Status::InvalidArgument));
    } // dropping the rank handles changes nothing: the batch is still open
    batch.end().unwrap();
    assert_eq!(e.seq_info(seq).unwrap().num_computed_tokens, 5);
    e.check().unwrap();
}

#[test]
fn rank_streams() {
    let e = Engine::new(&rank_params(Ranks::All, 0)).unwrap();
    // SAFETY: NULL is the default stream; a non-NULL one is refused on a CPU engine unread.
    unsafe {
        e.set_rank_stream(0, ptr::null_mut()).unwrap();
        e.set_rank_stream(1, ptr::null_mut()).unwrap();
        let err = e.set_rank_stream(1, 16 as *mut _).unwrap_err();
        assert_eq!(err.status(), Status::InvalidArgument);
        assert!(err.message().contains("stream"), "{:?}", err.message());
        let err = e.set_rank_stream(2, ptr::null_mut()).unwrap_err();
        assert_eq!(err.status(), Status::InvalidArgument);
    }
}

#[test]
fn rank_device_ids() {
    let p = rank_params(Ranks::All, 0).rank_device_ids(&[0]);
    let err = Engine::new(&p).err().expect("one device for two ranks");
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("tp_size x pp_size is 2"), "{:?}", err.message());
    let p = p.rank_device_ids(&[0, 1]);
    assert_eq!(p.get_rank_device_ids(), Some(&[0, 1][..]));
    let err = Engine::new(&p).err().expect("devices on a CPU engine");
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("rank_device_ids"), "{:?}", err.message());
}

#[test]
fn plan_exported_runs_on_a_pool_engine_once() {
    let decider = Engine::new(&rank_params(Ranks::One, 0)).unwrap();
    let pool = Engine::new(&rank_params(Ranks::Pool, 1)).unwrap();
    assert_eq!(pool.params().get_ranks(), Some(Ranks::Pool));
    assert_eq!(pool.allocate(&[1, 2, 3], None).unwrap_err().status(), Status::State);

    let seq = decider.allocate(&[1, 2, 3, 4, 5, 6], None).unwrap().seq;
    let mut batch = decider.batch(&[seq], None).unwrap();
    let plan = batch.export_plan().unwrap();
    assert!(!plan.is_empty());
    assert_eq!(batch.export_plan().unwrap(), plan, "one plan per batch");
    let mut imported = pool.import_plan(&plan).unwrap();
    assert_eq!(imported.num_tokens(), 6);
    assert_eq!(imported.view().slot_mapping, batch.view().slot_mapping);
    assert_eq!(imported.export_plan().unwrap_err().status(), Status::State); // not again
    for layer in 0..2 {
        assert_filled(&rank_attention(&mut imported, layer, 1.5).unwrap(), 1.5); // rank 1's heads
        assert_filled(&rank_attention(&mut batch, layer, 0.5).unwrap(), 0.5); // rank 0's
    }
    imported.end().unwrap();
    batch.end().unwrap();
    let err = pool.import_plan(&plan).err().expect("the same plan again");
    assert_eq!(err.status(), Status::State);
    assert!(err.message().contains("stale"), "{:?}", err.message());
    let err = pool.import_plan(b"not a plan").err().expect("bytes that are no plan");
    assert_eq!(err.status(), Status::InvalidArgument);
    assert_eq!(decider.import_plan(&plan).err().map(|e| e.status()), Some(Status::State));
    pool.check().unwrap();
}
