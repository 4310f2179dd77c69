//! Issue 26 item 2: attention's host slices are checked against the engine's model dtype and
//! shape before pkv is called, and refused with a message naming what was expected.
mod common;

use pkv::{Device, Dtype, Engine, Params, Status};

fn llama_config() -> String {
    let path = format!("{}/../../../tools/configs/llama-3-8b.json", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {}", path, e))
}

/// Llama-3-8B's shape from its config (bf16, 32 q heads, 8 kv heads, head_dim 128), cut to 2
/// layers and a small CPU pool.
fn llama_engine() -> Engine {
    let p = Params::from_hf_config(&llama_config()).unwrap();
    assert_eq!(p.get_dtype(), Some(Dtype::Bf16), "the config's dtype");
    Engine::new(
        &p.num_layers(2).max_model_len(128).num_blocks(8).block_size(16).device(Device::Cpu).num_threads(1),
    )
    .unwrap()
}

fn refused<T: std::fmt::Debug>(r: pkv::Result<T>, needles: &[&str]) {
    let err = r.expect_err("refused");
    assert_eq!(err.status(), Status::InvalidArgument, "{}", err);
    for n in needles {
        assert!(err.message().contains(n), "{:?} lacks {:?}", err.message(), n);
    }
}

#[test]
fn a_bf16_engine_refuses_f32_slices() {
    let e = llama_engine();
    let a = e.allocate(&common::tokens(0, 3), None).unwrap();
    let mut batch = e.batch(&[a.seq], None).unwrap();
    let (q, kv, mut out) = (vec![0.1f32; 3 * 32 * 128], vec![0.2f32; 3 * 8 * 128], vec![0f32; 3 * 32 * 128]);
    refused(
        batch.attention(0, &q, &kv, &kv, &mut out),
        &["Bf16", "u16 (the bits of bf16 values)", "f32 given"],
    );
    // The right element type and lengths run; nothing was written by the refused call.
    let (q, kv, mut out) =
        (vec![0x3f80u16; 3 * 32 * 128], vec![0x3f00u16; 3 * 8 * 128], vec![0u16; 3 * 32 * 128]);
    batch.attention(0, &q, &kv, &kv, &mut out).unwrap();
    assert!(out.iter().all(|&x| x == 0x3f00), "softmax over equal values of 0.5 is 0.5");
    batch.end().unwrap();
}

#[test]
fn short_slices_are_refused_naming_the_shape() {
    let e = llama_engine();
    let a = e.allocate(&common::tokens(0, 3), None).unwrap();
    let mut batch = e.batch(&[a.seq], None).unwrap();
    let (q, kv, mut out) = (vec![0u16; 3 * 32 * 128], vec![0u16; 3 * 8 * 128], vec![0u16; 3 * 32 * 128]);
    let short = &kv[..kv.len() - 1];
    refused(
        batch.attention(0, &q[1..], &kv, &kv, &mut out),
        &["q has 12287 elements, 12288 expected", "3 tokens x 32 heads x 128"],
    );
    refused(
        batch.attention(0, &q, short, &kv, &mut out),
        &["k has 3071 elements, 3072 expected", "3 tokens x 8 heads x 128"],
    );
    refused(batch.attention(0, &q, &kv, short, &mut out), &["v has 3071 elements"]);
    refused(batch.attention(0, &q, &kv, &kv, &mut out[..100]), &["out has 100 elements, 12288 expected"]);
    drop(batch);
    assert_eq!(e.seq_info(a.seq).unwrap().num_computed_tokens, 0);
}

#[test]
fn f16_and_f32_engines_take_their_own_element_type() {
    let f16 = Engine::new(&common::params(4, 8).dtype(Dtype::F16)).unwrap();
    let a = f16.allocate(&[1, 2], None).unwrap();
    let mut batch = f16.batch(&[a.seq], None).unwrap();
    let (q, kv, mut out) = (vec![0f32; 2 * 64], vec![0f32; 2 * 32], vec![0f32; 2 * 64]);
    refused(batch.attention(0, &q, &kv, &kv, &mut out), &["F16", "u16 (the bits of f16 values)"]);
    drop(batch);
    let f32e = common::engine(4, 8);
    let a = f32e.allocate(&[1, 2], None).unwrap();
    let mut batch = f32e.batch(&[a.seq], None).unwrap();
    let (q, kv, mut out) = (vec![0u16; 2 * 64], vec![0u16; 2 * 32], vec![0u16; 2 * 64]);
    refused(batch.attention(0, &q, &kv, &kv, &mut out), &["F32", "slices of f32 expected, u16 given"]);
}
