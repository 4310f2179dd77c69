//! Attention variants (pkv 0.2): fp8 KV and its scales, sliding windows and KV groups, a
//! config's per-layer windows, and what they add to the budget, the pool, the view and events.
mod common;

use pkv::{Dtype, Engine, Params, Status};

fn config(name: &str) -> String {
    let path = format!("{}/../../../tools/configs/{}", env!("CARGO_MANIFEST_DIR"), name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {}", path, e))
}

#[test]
fn gemma3_windows_and_groups_from_its_config() {
    let json = config("gemma-3-27b.json");
    let windows = pkv::hf_config_layer_windows(&json).unwrap();
    let want: Vec<u32> = (0..62).map(|l| if (l + 1) % 6 == 0 { 0 } else { 1024 }).collect();
    assert_eq!(windows, want);
    let p = Params::from_hf_config(&json).unwrap();
    assert_eq!((p.raw().num_layers, p.raw().sliding_window), (62, 0));
    assert_eq!(p.get_layer_windows(), Some(&want[..]));
    assert!(p.raw().layer_windows.is_null()); // kept by the Params, not the raw struct
    let g = p.kv_groups().unwrap();
    assert_eq!((g.num_groups(), g.group_layers), (7, 10));
    assert_eq!(g.group_window, [0, 1024, 1024, 1024, 1024, 1024, 1024]);
    let mut slots: Vec<(u32, u32)> =
        g.layer_group.iter().copied().zip(g.layer_slot.iter().copied()).collect();
    slots.sort_unstable();
    slots.dedup();
    assert_eq!(slots.len(), 62); // no (group, slot) twice
    let budget = p.device(pkv::Device::Cpu).memory_total_bytes(80 << 30).profile().unwrap();
    assert_eq!((budget.num_kv_groups, budget.group_layers, budget.padded_layers), (7, 10, 8));
    assert_eq!(budget.blocks_per_max_seq, 8192 + 6 * 65);
}

#[test]
fn gpt_oss_and_mistral_configs() {
    let gpt = pkv::hf_config_layer_windows(&config("gpt-oss-20b.json")).unwrap();
    assert_eq!(gpt, [128, 0].repeat(12));
    let mistral = Params::from_hf_config(&config("mistral-7b.json")).unwrap();
    assert_eq!((mistral.raw().sliding_window, mistral.get_layer_windows()), (4096, None));
    let bad = r#"{"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64,
                  "sliding_window": 8, "layer_types": ["sliding_attention", "chunked_attention"]}"#;
    let e = pkv::hf_config_layer_windows(bad).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("layer_types[1]"), "{}", e);
    assert_eq!(Params::from_hf_config(bad).unwrap_err().status(), Status::InvalidArgument);
}

#[test]
fn one_window_engine() {
    let e = Engine::new(&common::params(4, 16).sliding_window(8)).unwrap();
    assert_eq!(e.params().raw().sliding_window, 8);
    assert_eq!((e.budget().unwrap().num_kv_groups, e.pool_info().num_kv_groups), (1, 1));
    assert_eq!(e.kv_groups().unwrap().group_window, [8]);
    let a = e.allocate(&common::tokens(1, 10), None).unwrap();
    assert_eq!(e.group_block_table(a.seq, 0).unwrap(), e.block_table(a.seq).unwrap());
    assert_eq!(e.group_block_table(a.seq, 1).unwrap_err().status(), Status::InvalidArgument);
    let mut batch = e.batch(&[a.seq], None).unwrap();
    {
        let v = batch.view();
        assert_eq!(v.num_kv_groups, 1);
        assert_eq!(v.group_slot_mapping, v.slot_mapping);
        assert_eq!(v.group_slots(0), v.slot_mapping);
        assert_eq!(v.group_tables(0), v.block_tables);
        assert!(v.group_slots(1).is_empty());
    }
    batch.copy().unwrap();
    drop(batch); // aborted
    e.check().unwrap();
}

#[test]
fn layer_windows_are_kept_and_checked() {
    let p = common::params(4, 16).layer_windows(&[0, 16]);
    let g = p.kv_groups().unwrap();
    assert_eq!((g.group_layers, g.group_window.clone(), g.layer_group.clone()), (1, vec![0, 16], vec![0, 1]));
    assert_eq!(p.profile().unwrap().num_kv_groups, 2);
    let wrong = p.clone().layer_windows(&[0, 16, 16]); // not num_layers: refused before pkv reads it
    assert_eq!(wrong.profile().unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(wrong.kv_groups().unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(Engine::new(&wrong).err().map(|e| e.status()), Some(Status::InvalidArgument));
    let big = p.clone().layer_windows(&[0, 1 << 31]);
    assert!(big.kv_groups().unwrap_err().message().contains("layer_windows[1]"));
    assert_eq!(p.clone().without_layer_windows().kv_groups().unwrap().group_window, [0]);
    // two groups: created once the block manager keeps a table per group, else UNSUPPORTED;
    // the engine's params keep their own copy of the windows
    match Engine::new(&p) {
        Ok(e) => {
            assert_eq!(e.params().get_layer_windows(), Some(&[0, 16][..]));
            assert_eq!(e.pool_info().num_kv_groups, 2);
        }
        Err(err) => {
            assert_eq!(err.status(), Status::Unsupported);
            assert!(err.message().contains("KV groups"), "{}", err);
        }
    }
}

#[test]
fn fp8_engine_and_scales() {
    for kv in [Dtype::Fp8E4m3, Dtype::Fp8E5m2] {
        let p = common::params(4, 16).kv_dtype(kv);
        assert_eq!(p.get_kv_dtype(), Some(kv));
        let e = Engine::new(&p).unwrap();
        let b = e.budget().unwrap();
        assert_eq!((b.kv_dtype, b.kv_scale_bytes), (Some(kv), 2 * 2 * 2 * 4));
        assert_eq!(b.block_bytes, 2 * 2 * 4 * 2 * 16);
        assert_eq!((e.kv_dtype(), e.dtype()), (Some(kv), Some(Dtype::F32)));
        e.set_kv_scales(0, &[0.5, 0.25], &[1.0, 2.0]).unwrap();
        e.set_kv_scales(1, &[1.0, 1.0], &[1.0, 1.0]).unwrap();
        assert_eq!(e.set_kv_scales(0, &[1.0], &[1.0, 1.0]).unwrap_err().status(), Status::InvalidArgument);
        assert_eq!(
            e.set_kv_scales(0, &[1.0, 0.0], &[1.0, 1.0]).unwrap_err().status(),
            Status::InvalidArgument
        );
        assert_eq!(
            e.set_kv_scales(0, &[1.0, f32::NAN], &[1.0, 1.0]).unwrap_err().status(),
            Status::InvalidArgument
        );
        assert_eq!(
            e.set_kv_scales(2, &[1.0, 1.0], &[1.0, 1.0]).unwrap_err().status(),
            Status::InvalidArgument
        );
        e.allocate(&[1, 2, 3], None).unwrap();
        assert_eq!(e.set_kv_scales(0, &[1.0, 1.0], &[1.0, 1.0]).unwrap_err().status(), Status::State);
    }
    let f32_engine = common::engine(4, 16);
    let err = f32_engine.set_kv_scales(0, &[1.0, 1.0], &[1.0, 1.0]).unwrap_err();
    assert!(err.status() == Status::InvalidArgument && err.message().contains("not fp8"), "{}", err);
    for p in [
        common::params(4, 16).kv_dtype(Dtype::F16),
        common::params(4, 16).dtype(Dtype::Fp8E4m3),
        common::params(4, 16).sliding_window(1 << 31),
    ] {
        assert_eq!(Engine::new(&p).err().map(|e| e.status()), Some(Status::InvalidArgument));
    }
}

#[test]
fn kv_events_carry_their_group() {
    let e = Engine::new(&common::params(4, 16).kv_events(true)).unwrap();
    let a = e.allocate(&common::tokens(1, 8), None).unwrap();
    common::compute(&e, &[a.seq]);
    let events = e.drain_kv_events().unwrap();
    assert!(!events.is_empty());
    assert!(events.iter().all(|ev| ev.group == 0));
}

/// Issue 26 item 3: reading a config is one call that yields the whole shape, per-layer windows
/// included. The sequences match `pkv profile --config tools/configs/gemma-2-9b.json --memory
/// 24GiB --device cpu` (10; 8 if the windows were dropped) and gemma-3-27b.json (2, not
/// OutOfMemory), as in the other bindings.
/// Gemma 2 also caps its logits (pkv 0.5): `from_hf_config` refuses it, naming the per-layer
/// call, and `from_hf_config_layers` reads it whole, its windows in the specs.
#[test]
fn one_config_call_gives_the_whole_shape() {
    let p = Params::from_hf_config(&config("gemma-3-27b.json"))
        .unwrap()
        .memory_total_bytes(24 << 30)
        .memory_used_bytes(0);
    assert!(p.get_layer_windows().is_some());
    let budget = p.profile().unwrap();
    assert_eq!((budget.max_seqs_at_max_model_len, budget.num_kv_groups), (2, 7));
    assert_eq!(p.clone().profile().unwrap().max_seqs_at_max_model_len, 2, "a copy keeps them");
    let full = p.without_layer_windows().profile();
    assert_eq!(full.unwrap_err().status(), Status::OutOfMemory);

    let err = Params::from_hf_config(&config("gemma-2-9b.json")).unwrap_err();
    assert_eq!(err.status(), Status::Unsupported);
    assert!(err.message().contains("attn_logit_softcapping"), "{}", err);
    let p = Params::from_hf_config_layers(&config("gemma-2-9b.json"))
        .unwrap()
        .memory_total_bytes(24 << 30)
        .memory_used_bytes(0);
    let specs = p.get_layer_specs().expect("Gemma 2's specs");
    assert_eq!(specs.len(), 42);
    assert!(specs.iter().all(|s| s.logit_softcap == 50.0), "{:?}", specs[0]);
    let budget = p.profile().unwrap();
    assert_eq!((budget.max_seqs_at_max_model_len, budget.num_kv_groups), (10, 2));
    assert_eq!(p.clone().profile().unwrap().max_seqs_at_max_model_len, 10, "a copy keeps them");
    assert_eq!(p.without_layer_specs().profile().unwrap().max_seqs_at_max_model_len, 8, "without windows");
}
