//! Issue 26 item 2: attention's host slices are checked against the engine's model dtype and
//! shape before pkv is called, and refused with a message naming what was expected.
mod common;

use pkv::{Bf16, Device, Dtype, Engine, Params, Status, F16};

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
    refused(batch.attention(0, &q, &kv, &kv, &mut out), &["Bf16", "slices of pkv::Bf16 expected, f32 given"]);
    // The right element type and lengths run; nothing was written by the refused call.
    let (q, kv, mut out) = (
        vec![Bf16::from_f32(1.0); 3 * 32 * 128],
        vec![Bf16::from_f32(0.5); 3 * 8 * 128],
        vec![Bf16(0); 3 * 32 * 128],
    );
    batch.attention(0, &q, &kv, &kv, &mut out).unwrap();
    assert!(out.iter().all(|x| x.to_f32() == 0.5), "softmax over equal values of 0.5 is 0.5");
    batch.end().unwrap();
}

#[test]
fn short_slices_are_refused_naming_the_shape() {
    let e = llama_engine();
    let a = e.allocate(&common::tokens(0, 3), None).unwrap();
    let mut batch = e.batch(&[a.seq], None).unwrap();
    let (q, kv, mut out) =
        (vec![Bf16(0); 3 * 32 * 128], vec![Bf16(0); 3 * 8 * 128], vec![Bf16(0); 3 * 32 * 128]);
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
    refused(batch.attention(0, &q, &kv, &kv, &mut out), &["F16", "slices of pkv::F16 expected, f32 given"]);
    drop(batch);
    let f32e = common::engine(4, 8);
    let a = f32e.allocate(&[1, 2], None).unwrap();
    let mut batch = f32e.batch(&[a.seq], None).unwrap();
    let (q, kv, mut out) = (vec![Bf16(0); 2 * 64], vec![Bf16(0); 2 * 32], vec![Bf16(0); 2 * 64]);
    refused(batch.attention(0, &q, &kv, &kv, &mut out), &["F32", "slices of f32 expected, pkv::Bf16 given"]);
}

/// A bf16 engine refuses f16 values (the same 16 bits, read as another format), and the other
/// way round; bits held as u16 elsewhere are viewed as the right type without a copy.
#[test]
fn f16_and_bf16_are_not_interchangeable() {
    let e = llama_engine();
    let a = e.allocate(&common::tokens(0, 2), None).unwrap();
    let mut batch = e.batch(&[a.seq], None).unwrap();
    let (q, kv, mut out) =
        (vec![F16(0); 2 * 32 * 128], vec![F16(0); 2 * 8 * 128], vec![F16(0); 2 * 32 * 128]);
    refused(batch.attention(0, &q, &kv, &kv, &mut out), &["Bf16", "pkv::Bf16 expected, pkv::F16 given"]);
    let q_bits = vec![Bf16::from_f32(1.0).0; 2 * 32 * 128];
    let kv_bits = vec![Bf16::from_f32(-2.0).0; 2 * 8 * 128];
    let mut out_bits = vec![0u16; 2 * 32 * 128];
    let kv = Bf16::from_bits_slice(&kv_bits);
    batch
        .attention(0, Bf16::from_bits_slice(&q_bits), kv, kv, Bf16::from_bits_slice_mut(&mut out_bits))
        .unwrap();
    assert!(out_bits.iter().all(|&b| Bf16(b).to_f32() == -2.0));
}

/// The conversions against values worked out by hand, and every 16-bit pattern round-trips.
#[test]
fn f16_and_bf16_conversions() {
    let f16 = [
        (1.0f32, 0x3c00u16),
        (0.5, 0x3800),
        (-2.0, 0xc000),
        (65504.0, 0x7bff),
        (65520.0, 0x7c00),
        (1e9, 0x7c00),
        (f32::INFINITY, 0x7c00),
        (1.0 / 3.0, 0x3555),
        (2f32.powi(-24), 0x0001),
        (2f32.powi(-25), 0x0000),
        (1.5 * 2f32.powi(-25), 0x0001),
        (2f32.powi(-14), 0x0400),
        (0.0, 0),
    ];
    for (x, bits) in f16 {
        assert_eq!(F16::from_f32(x).0, bits, "{}", x);
    }
    let bf16 = [
        (1.0f32, 0x3f80u16),
        (0.5, 0x3f00),
        (-2.0, 0xc000),
        (1.0 / 3.0, 0x3eab),
        (f32::from_bits(0x3f80_8000), 0x3f80),
        (f32::from_bits(0x3f81_8000), 0x3f82),
        (f32::MAX, 0x7f80),
    ];
    for (x, bits) in bf16 {
        assert_eq!(Bf16::from_f32(x).0, bits, "{}", x);
    }
    assert!(F16::from_f32(f32::NAN).to_f32().is_nan() && Bf16::from_f32(f32::NAN).to_f32().is_nan());
    for bits in 0..=u16::MAX {
        let (h, b) = (F16(bits), Bf16(bits));
        if !h.to_f32().is_nan() {
            assert_eq!(F16::from_f32(h.to_f32()), h, "{:#06x}", bits);
        }
        if !b.to_f32().is_nan() {
            assert_eq!(Bf16::from_f32(b.to_f32()), b, "{:#06x}", bits);
        }
    }
}
