//! The cache described per layer (pkv 0.5, issue 27 item 8): an engine from layer specs (the
//! Params owns the array), each KV group's bytes (pkv_kv_group_info), each layer of the pool
//! (pkv_layer_info), attention per layer kind (K = V, shared) and attention sinks
//! (pkv_set_attention_sinks), checked against values computed here; a config.json read per
//! layer (pkv_engine_params_from_hf_config_layers).
mod common;

use pkv::{AttentionKind, Engine, LayerKind, LayerSpec, Params, Status};

const Q_HEADS: usize = 4;

/// Four layers of every kind the ABI has for attention: full, sliding 8, a K = V layer of
/// wider heads (one kv head of 32), and a layer sharing layer 1's cache.
fn mixed_specs() -> Vec<LayerSpec> {
    vec![
        LayerSpec::default(),
        LayerSpec::sliding(8),
        LayerSpec { num_kv_heads: 1, head_dim: 32, k_eq_v: true, ..LayerSpec::default() },
        LayerSpec { attention: Some(AttentionKind::Sliding), window: 8, ..LayerSpec::shared(1) },
    ]
}

fn mixed_params() -> Params {
    common::params(4, 32).num_layers(4).layer_specs(&mixed_specs())
}

#[test]
fn specs_are_kept_by_the_params() {
    let p = mixed_params();
    // read back as pkv reads them: a kind or attention left None is the default one
    let explicit = |s: LayerSpec| LayerSpec {
        kind: s.kind.or(Some(LayerKind::Attention)),
        attention: s.attention.or(Some(AttentionKind::Full)),
        ..s
    };
    assert_eq!(p.get_layer_specs().unwrap(), mixed_specs().into_iter().map(explicit).collect::<Vec<_>>());
    assert_eq!(p.clone().without_layer_specs().get_layer_specs(), None);
    // one spec per layer, refused before pkv is called, naming both counts
    let err = p.clone().num_layers(3).profile().unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("3") && err.message().contains("4 specs"), "{}", err.message());
}

#[test]
fn an_engine_from_specs_has_each_layers_shape() {
    let budget = mixed_params().profile().unwrap();
    assert_eq!(budget.num_cached_layers, 3);
    // f32 K and V of one token: layers 0 and 1 2 heads x 16 each, layer 2 K only, 1 x 32
    assert_eq!(budget.model_bytes_per_token, 2 * (2 * 2 * 16 * 4) + 32 * 4);
    let e = Engine::new(&mixed_params()).unwrap();
    assert_eq!(e.params().get_layer_specs().map(|s| s.len()), Some(4));
    let l2 = e.layer_info(2).unwrap();
    assert_eq!((l2.kind, l2.kv_heads, l2.head_dim, l2.v_head_dim), (Some(LayerKind::Attention), 1, 32, 32));
    assert!(l2.k_eq_v && l2.v_base == l2.k_base);
    let l3 = e.layer_info(3).unwrap();
    let l1 = e.layer_info(1).unwrap();
    assert_eq!((l3.kind, l3.source_layer, l3.group), (Some(LayerKind::Shared), 1, l1.group));
    assert_eq!((l3.attention, l3.window), (Some(AttentionKind::Sliding), 8));
    assert_eq!(l3.k_base, l1.k_base);
    assert_eq!(e.layer_info(4).unwrap_err().status(), Status::InvalidArgument);
    // layers of unequal bytes share pages: the pool is one range, each layer's K inside it
    let pool = e.pool_info();
    assert_eq!((pool.num_layers, pool.v_base), (1, std::ptr::null_mut()));
    let (start, end) = (pool.k_base as usize, pool.k_base as usize + pool.bytes_per_pool as usize);
    for l in 0..4 {
        let k = e.layer_info(l).unwrap().k_base as usize;
        assert!(start <= k && k < end, "layer {}: {:#x} outside {:#x}..{:#x}", l, k, start, end);
    }
}

#[test]
fn attention_takes_what_each_layer_keeps() {
    let e = Engine::new(&mixed_params()).unwrap();
    let a = e.allocate(&common::tokens(1, 6), None).unwrap();
    let mut b = e.batch(&[a.seq], None).unwrap();
    let n = b.num_tokens();
    let (q16, kv16, mut out16) = (vec![0.1f32; n * 64], vec![0.2f32; n * 32], vec![0f32; n * 64]);
    let (q32, k32, mut out32) = (vec![0.1f32; n * 128], vec![0.3f32; n * 32], vec![0f32; n * 128]);
    // refusals name what the layer takes, before pkv is called
    let err = b.attention(2, &q32, &k32, &k32, &mut out32).unwrap_err();
    assert!(err.message().contains("v None"), "{}", err.message());
    let err = b.attention_kv(3, &q16, Some(&kv16), None, &mut out16).unwrap_err();
    assert!(err.message().contains("shared"), "{}", err.message());
    let err = b.attention_kv(2, &q16, Some(&kv16), None, &mut out16).unwrap_err();
    assert!(err.message().contains("q has") && err.message().contains("32"), "{}", err.message());
    for layer in 0..2 {
        b.attention_kv(layer, &q16, Some(&kv16), Some(&kv16), &mut out16).unwrap();
    }
    b.attention_kv(2, &q32, Some(&k32), None, &mut out32).unwrap();
    // V is K: each head's output is the (constant) key
    assert!(out32.iter().all(|&x| (x - 0.3).abs() < 1e-6), "{:?}", &out32[..8]);
    b.attention_kv(3, &q16, None, None, &mut out16).unwrap();
    // layer 1's values, read through the shared layer
    assert!(out16.iter().all(|&x| (x - 0.2).abs() < 1e-6), "{:?}", &out16[..8]);
    b.end().unwrap();
    e.check().unwrap();
}

#[test]
fn kv_group_info_gives_each_groups_bytes() {
    // equal layers: one group of both, as before 0.5
    let g = common::params(4, 32).kv_group_infos().unwrap();
    assert_eq!(g.len(), 1);
    assert_eq!((g[0].attention, g[0].window, g[0].num_layers), (Some(AttentionKind::Full), 0, 2));
    assert_eq!((g[0].bytes_per_token, g[0].padding_bytes_per_block), (2 * 2 * 2 * 16 * 4, 0));
    // a full and a sliding layer: two groups of one layer each
    let p = common::params(4, 32).layer_specs(&[LayerSpec::default(), LayerSpec::sliding(8)]);
    let g = p.kv_group_infos().unwrap();
    assert_eq!(g.len(), 2);
    assert_eq!(
        (g[0].attention, g[1].attention, g[1].window),
        (Some(AttentionKind::Full), Some(AttentionKind::Sliding), 8)
    );
    for group in &g {
        assert_eq!((group.num_layers, group.bytes_per_token), (1, 2 * 2 * 16 * 4));
    }
    assert_eq!(p.kv_group_info(2).unwrap_err().status(), Status::InvalidArgument);
}

#[test]
fn layer_info_of_equal_layers_is_the_pools_layout() {
    let e = common::engine(4, 16);
    let pool = e.pool_info();
    for layer in 0..2u32 {
        let l = e.layer_info(layer).unwrap();
        assert_eq!(
            (l.kind, l.attention, l.source_layer, l.group),
            (Some(LayerKind::Attention), Some(AttentionKind::Full), layer, 0)
        );
        assert_eq!((l.kv_heads, l.head_dim, l.v_head_dim, l.k_eq_v, l.sinks), (2, 16, 16, false, false));
        assert_eq!(
            (l.block_stride, l.token_stride, l.head_stride),
            (pool.block_stride, pool.token_stride, pool.head_stride)
        );
        let offset = (layer as u64 * pool.layer_stride * 4) as usize; // f32 elements
        assert_eq!(l.k_base as usize, pool.k_base as usize + offset);
        assert_eq!(l.v_base as usize, pool.v_base as usize + offset);
        assert!((l.softmax_scale - 0.25).abs() < 1e-7); // 1/sqrt(16)
    }
}

/// An engine of one layer with sinks and one without, f32, 4 q heads over 2 kv heads.
fn sink_engine() -> Engine {
    let specs = [LayerSpec { sinks: true, ..LayerSpec::default() }, LayerSpec::default()];
    Engine::new(&common::params(4, 16).layer_specs(&specs)).unwrap()
}

#[test]
fn sinks_join_the_denominator() {
    let e = sink_engine();
    let err = e.set_attention_sinks(0, &[0.0; 3]).unwrap_err();
    assert!(err.message().contains("4 q heads"), "{}", err.message());
    assert_eq!(e.set_attention_sinks(1, &[0.0; 4]).unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(
        e.set_attention_sinks(0, &[0.0, f32::NAN, 0.0, 0.0]).unwrap_err().status(),
        Status::InvalidArgument
    );
    assert!(e.layer_info(0).unwrap().sinks);
    let sinks = [0.0f32, 3f32.ln(), -1.0, 2.0];
    e.set_attention_sinks(0, &sinks).unwrap();
    // one token: its only score is q . k = 0, so head h's weight is 1 / (1 + exp(sink_h))
    let a = e.allocate(&[7], None).unwrap();
    let mut b = e.batch(&[a.seq], None).unwrap();
    let q = vec![0f32; Q_HEADS * 16];
    let k: Vec<f32> = (0..32).map(|i| i as f32 * 0.01).collect();
    let v: Vec<f32> = (0..32).map(|i| 1.0 + i as f32).collect();
    let mut out = vec![0f32; Q_HEADS * 16];
    b.attention(0, &q, &k, &v, &mut out).unwrap();
    for h in 0..Q_HEADS {
        let weight = 1.0 / (1.0 + (sinks[h] as f64).exp());
        for d in 0..16 {
            let want = weight * v[(h / 2) * 16 + d] as f64; // q head h reads kv head h / 2
            let got = out[h * 16 + d] as f64;
            assert!(
                (got - want).abs() <= 1e-5 + 1e-5 * want.abs(),
                "head {} dim {}: {} vs {}",
                h,
                d,
                got,
                want
            );
        }
    }
    b.attention(1, &q, &k, &v, &mut out).unwrap(); // no sinks: the value itself
    assert!((out[0] - v[0]).abs() < 1e-6);
    b.end().unwrap();
    // sinks are set before the first sequence
    assert_eq!(e.set_attention_sinks(0, &sinks).unwrap_err().status(), Status::State);
}

#[test]
fn attention_refuses_a_layer_whose_sinks_are_not_set() {
    let e = sink_engine();
    let a = e.allocate(&[1, 2], None).unwrap();
    let mut b = e.batch(&[a.seq], None).unwrap();
    let (q, kv, mut out) = (vec![0.1f32; 2 * 64], vec![0.2f32; 2 * 32], vec![0f32; 2 * 64]);
    assert_eq!(b.attention(0, &q, &kv, &kv, &mut out).unwrap_err().status(), Status::State);
}

#[test]
fn a_soft_capped_layer_matches_the_reference() {
    const CAP: f64 = 0.5;
    let specs = [LayerSpec { logit_softcap: CAP as f32, softmax_scale: 1.0, ..LayerSpec::default() }];
    let e = Engine::new(&common::params(4, 16).num_layers(1).layer_specs(&specs)).unwrap();
    let a = e.allocate(&[1, 2], None).unwrap();
    let mut b = e.batch(&[a.seq], None).unwrap();
    let val = |i: usize, m: f32| ((i * 7 % 13) as f32 - 6.0) * m;
    let q: Vec<f32> = (0..2 * 64).map(|i| val(i, 0.1)).collect();
    let k: Vec<f32> = (0..2 * 32).map(|i| val(i + 3, 0.2)).collect();
    let v: Vec<f32> = (0..2 * 32).map(|i| val(i + 5, 1.0)).collect();
    let mut out = vec![0f32; 2 * 64];
    b.attention(0, &q, &k, &v, &mut out).unwrap();
    // token 1, head h (kv head h / 2): softmax over keys 0 and 1 of CAP * tanh(q . k / CAP)
    for h in 0..Q_HEADS {
        let kv = h / 2;
        let score = |j: usize| {
            let dot: f64 = (0..16).map(|d| q[64 + h * 16 + d] as f64 * k[j * 32 + kv * 16 + d] as f64).sum();
            CAP * (dot / CAP).tanh()
        };
        let (w0, w1) = (score(0).exp(), score(1).exp());
        for d in 0..16 {
            let want = (w0 * v[kv * 16 + d] as f64 + w1 * v[32 + kv * 16 + d] as f64) / (w0 + w1);
            let got = out[64 + h * 16 + d] as f64;
            assert!(
                (got - want).abs() <= 1e-4 + 1e-4 * want.abs(),
                "head {} dim {}: {} vs {}",
                h,
                d,
                got,
                want
            );
        }
    }
    b.end().unwrap();
}

#[test]
fn a_config_is_read_per_layer() {
    let json = r#"{"model_type": "gpt_oss", "num_hidden_layers": 4, "num_attention_heads": 8,
        "num_key_value_heads": 2, "head_dim": 16, "hidden_size": 128, "sliding_window": 8,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        "torch_dtype": "bfloat16", "max_position_embeddings": 4096}"#;
    let p = Params::from_hf_config_layers(json).unwrap();
    assert_eq!((p.raw().num_layers, p.raw().num_kv_heads, p.raw().head_dim), (4, 2, 16));
    let specs = p.get_layer_specs().expect("gpt-oss needs per-layer specs (sinks)");
    for (l, s) in specs.iter().enumerate() {
        assert!(s.sinks, "layer {}", l);
        let want =
            if l % 2 == 0 { (Some(AttentionKind::Sliding), 8) } else { (Some(AttentionKind::Full), 0) };
        assert_eq!((s.attention, s.window), want, "layer {}", l);
    }
    // a model of equal layers keeps the flat fields only
    let llama = r#"{"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "hidden_size": 64, "torch_dtype": "float32", "max_position_embeddings": 256}"#;
    let p = Params::from_hf_config_layers(llama).unwrap();
    assert_eq!((p.raw().num_layers, p.get_layer_specs()), (2, None));
    let err = Params::from_hf_config_layers("{").unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
}

#[test]
fn chunked_and_sliding_layers_mask_their_keys() {
    let specs = [LayerSpec::chunked(2), LayerSpec::sliding(2)];
    let e = Engine::new(&common::params(4, 16).layer_specs(&specs)).unwrap();
    let a = e.allocate(&[1, 2, 3], None).unwrap();
    let mut b = e.batch(&[a.seq], None).unwrap();
    // equal scores (q = 0): each token's output is the mean of the values it sees, token t's
    // values all t + 1
    let (q, k) = (vec![0f32; 3 * 64], vec![0f32; 3 * 32]);
    let v: Vec<f32> = (0..3 * 32).map(|i| (i / 32 + 1) as f32).collect();
    let mut out = vec![0f32; 3 * 64];
    // chunks of 2: token 2 starts its own chunk; a window of 2: token 2 sees tokens 1 and 2
    for (layer, want) in [(0, [1.0, 1.5, 3.0]), (1, [1.0, 1.5, 2.5])] {
        b.attention(layer, &q, &k, &v, &mut out).unwrap();
        for (t, &w) in want.iter().enumerate() {
            let row = &out[t * 64..][..64];
            assert!(
                row.iter().all(|&x| (x - w).abs() < 1e-6),
                "layer {} token {}: {:?}",
                layer,
                t,
                &row[..4]
            );
        }
    }
    b.end().unwrap();
}

#[test]
fn fp8_scales_follow_each_layers_heads() {
    let specs = [
        LayerSpec::default(),
        LayerSpec { num_kv_heads: 1, head_dim: 32, k_eq_v: true, ..LayerSpec::default() },
        LayerSpec::shared(0),
    ];
    let p = common::params(4, 16).num_layers(3).kv_dtype(pkv::Dtype::Fp8E4m3).layer_specs(&specs);
    let e = Engine::new(&p).unwrap();
    e.set_kv_scales(0, &[0.5, 0.5], &[0.5, 0.5]).unwrap();
    // layer 1 has one kv head, and its V is its K: no V scales
    let err = e.set_kv_scales(1, &[0.5, 0.5], &[0.5, 0.5]).unwrap_err();
    assert!(err.message().contains("layer 1 has 1 kv heads"), "{}", err.message());
    e.set_k_scales(1, &[0.5]).unwrap();
    // a shared layer reads its source's codes with the source's scales
    assert_eq!(e.set_kv_scales(2, &[0.5, 0.5], &[0.5, 0.5]).unwrap_err().status(), Status::InvalidArgument);
    let a = e.allocate(&[1, 2, 3], None).unwrap();
    let mut b = e.batch(&[a.seq], None).unwrap();
    let (q16, kv16, mut out16) = (vec![0.1f32; 3 * 64], vec![0.2f32; 3 * 32], vec![0f32; 3 * 64]);
    let (q32, k32, mut out32) = (vec![0.1f32; 3 * 128], vec![0.3f32; 3 * 32], vec![0f32; 3 * 128]);
    b.attention(0, &q16, &kv16, &kv16, &mut out16).unwrap();
    b.attention_kv(1, &q32, Some(&k32), None, &mut out32).unwrap();
    // e4m3 keeps 3 mantissa bits: within 1/16 of the value
    assert!(out32.iter().all(|&x| (x - 0.3).abs() <= 0.3 / 16.0), "{:?}", &out32[..4]);
    b.attention_kv(2, &q16, None, None, &mut out16).unwrap();
    assert!(out16.iter().all(|&x| (x - 0.2).abs() <= 0.2 / 16.0), "{:?}", &out16[..4]);
    b.end().unwrap();
}
