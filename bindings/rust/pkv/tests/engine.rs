//! Sequences, batches, the prefix cache and the parameters through the safe API.
mod common;

use pkv::{Params, Status};

#[test]
fn prefix_cache_salt_fork_and_batch_view() {
    let e = common::engine(4, 16);
    let prompt = common::tokens(10, 10);
    let a = e.allocate(&prompt, None).unwrap();
    assert_eq!(a.num_cached_tokens, 0);
    assert_eq!(e.tokens(a.seq).unwrap(), prompt);
    let table = e.block_table(a.seq).unwrap();
    assert_eq!(table.len(), 3);
    {
        let batch = e.batch(&[a.seq], None).unwrap();
        let v = batch.view();
        assert_eq!((v.num_seqs, v.num_tokens, v.block_size), (1, 10, 4));
        assert_eq!(v.seq_ids, &[a.seq.0]);
        assert_eq!(v.query_start, &[0, 10]);
        assert_eq!(v.positions, &common::tokens(0, 10)[..]);
        assert_eq!(v.context_lens, &[10]);
        assert_eq!(v.block_indptr, &[0, 3]);
        assert_eq!(v.block_indices, &table[..]);
        assert_eq!(v.last_block_len, &[2]);
        assert_eq!(v.slot_mapping[4], i64::from(table[1]) * 4);
        assert!(e.seq_info(a.seq).unwrap().in_batch);
    } // dropped: aborted, nothing computed
    assert_eq!(e.seq_info(a.seq).unwrap().num_computed_tokens, 0);
    common::compute(&e, &[a.seq]);
    assert_eq!(e.seq_info(a.seq).unwrap().num_computed_tokens, 10);
    // The same prompt again: its 2 full blocks are cached; another salt shares nothing.
    let q = e.allocate_query(&prompt, None).unwrap();
    assert_eq!(q.num_cached_tokens, 8);
    let b = e.allocate(&prompt, None).unwrap();
    assert_eq!(b.num_cached_tokens, 8);
    assert_eq!(e.block_table(b.seq).unwrap()[..2], table[..2]);
    let c = e.allocate(&prompt, Some(b"tenant-b")).unwrap();
    assert_eq!(c.num_cached_tokens, 0);
    assert_eq!(e.seq_info(c.seq).unwrap().cache_salt_len, 8);
    // Fork shares every block; appending to the shared, partly filled last block copies it.
    let child = e.fork(a.seq).unwrap();
    assert_eq!(e.block_table(child).unwrap(), table);
    e.append(child, &[99]).unwrap();
    assert_ne!(e.block_table(child).unwrap()[2], table[2]);
    let batch = e.batch(&[child], Some(&[1])).unwrap();
    assert_eq!(batch.view().copy_src, &[table[2]]);
    batch.end().unwrap();
    assert_eq!(e.stats().unwrap().num_cow_copies, 1);
    // Preempt gives back the blocks and keeps the tokens; resume finds its prefix cached.
    e.preempt(child).unwrap();
    assert!(e.seq_info(child).unwrap().is_preempted);
    assert_eq!(e.resume(child).unwrap(), 8);
    for seq in [a.seq, b.seq, c.seq, child] {
        e.release(seq).unwrap();
    }
    e.check().unwrap();
    let st = e.stats().unwrap();
    assert_eq!((st.num_seqs, st.num_free_blocks), (0, 16));
}

#[test]
fn a_short_buffer_reports_the_length_needed() {
    let e = common::engine(4, 16);
    let a = e.allocate(&common::tokens(0, 10), None).unwrap();
    let lib = e.library();
    let (mut buf, mut len) = ([0i32; 4], 0u32);
    let code = unsafe { lib.raw().pkv_seq_tokens(e.as_raw(), a.seq.0, buf.as_mut_ptr(), 4, &mut len) };
    assert_eq!((Status::from_code(code), len), (Some(Status::InvalidArgument), 10));
}

#[test]
fn params_defaults_hf_config_and_profile() {
    let p = Params::new().unwrap();
    let raw = p.raw();
    assert_eq!((raw.block_size, raw.num_blocks, raw.enable_prefix_caching), (16, 0, 1));
    assert_eq!(p.get_dtype(), Some(pkv::Dtype::Bf16));
    assert_eq!(p.get_device(), Some(pkv::Device::Auto));
    let json = r#"{"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                   "hidden_size": 4096, "torch_dtype": "float16", "max_position_embeddings": 8192}"#;
    let p = Params::from_hf_config(json).unwrap();
    let raw = p.raw();
    assert_eq!((raw.num_layers, raw.num_q_heads, raw.num_kv_heads, raw.head_dim), (32, 32, 8, 128));
    assert_eq!((p.get_dtype(), raw.max_model_len), (Some(pkv::Dtype::F16), 8192));
    let budget =
        pkv::profile(&p.device(pkv::Device::Cpu).memory_total_bytes(16 << 30).memory_used_bytes(0)).unwrap();
    // 2 (K,V) * 32 layers * 16 tokens * 8 heads * 128 dims * 2 bytes
    assert_eq!(budget.block_bytes, 2 * 32 * 16 * 8 * 128 * 2);
    assert_eq!(budget.num_blocks, budget.budget_bytes / budget.block_bytes);
    let e = common::engine(16, 8);
    assert_eq!(e.budget().unwrap().num_blocks, 8);
    assert_eq!(e.params().raw().num_blocks, 8);
    assert_eq!(e.pool_info().kv_heads, 2);
}

#[test]
fn truncate_keeps_the_first_tokens() {
    let e = common::engine(4, 16);
    let a = e.allocate(&common::tokens(1, 14), None).unwrap();
    common::compute(&e, &[a.seq]);
    e.truncate(a.seq, 6).unwrap();
    let info = e.seq_info(a.seq).unwrap();
    assert_eq!((info.num_tokens, info.num_computed_tokens, info.num_blocks), (6, 6, 2));
    assert_eq!(e.truncate(a.seq, 0).unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(e.truncate(a.seq, 7).unwrap_err().status(), Status::InvalidArgument);
    e.release(a.seq).unwrap();
    e.check().unwrap();
}
