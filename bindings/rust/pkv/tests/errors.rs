//! Statuses and errors: every status maps to its Error with pkv's message, raw NULL handles are
//! refused through the -sys layer, and a refused call (NO_SPACE) changes nothing.
mod common;

use std::ptr;

use pkv::{Error, Seq, Status};

#[test]
fn every_status_round_trips_and_has_the_library_string() {
    let lib = pkv::library().unwrap();
    assert_eq!(Status::from_code(pkv::sys::PKV_OK), None);
    for (i, status) in Status::ALL.iter().enumerate() {
        let code = status.code().unwrap();
        assert_eq!(code, -(i as i32) - 1, "{:?}: values are the header's, in order", status);
        assert_eq!(Status::from_code(code), Some(*status));
        let text = lib.status_string(code);
        assert_ne!(text, "unknown status", "{:?} ({}) unknown to libpkv", status, code);
        // check() turns the code into an Error with this thread's last message.
        let err = lib.check(code).unwrap_err();
        assert_eq!(err.status(), *status);
    }
    // The enum covers every status the library knows: the next value is unknown to it.
    let next = -(Status::ALL.len() as i32) - 1;
    assert_eq!(lib.status_string(next), "unknown status", "libpkv has a status this binding lacks");
    assert_eq!(Status::from_code(next), Some(Status::Unknown(next)));
    assert_eq!(Status::Load.code(), None);
}

fn expect_err<T: std::fmt::Debug>(r: pkv::Result<T>, status: Status, needle: &str) -> Error {
    let err = r.expect_err("the call should fail");
    assert_eq!(err.status(), status, "{}", err);
    assert!(!err.message().is_empty(), "{:?}: no message", status);
    assert!(err.message().contains(needle), "{:?}: message {:?} lacks {:?}", status, err.message(), needle);
    assert!(err.to_string().contains(err.message()));
    err
}

#[test]
fn failed_calls_carry_their_status_and_message() {
    let e = common::engine(16, 8);
    expect_err(e.allocate(&[], None), Status::InvalidArgument, "");
    expect_err(e.release(Seq(12345)), Status::NotFound, "");
    let a = e.allocate(&common::tokens(1, 20), None).unwrap();
    expect_err(e.fork(a.seq), Status::State, ""); // tokens not computed yet
    let b = e.batch(&[a.seq], None).unwrap();
    expect_err(e.batch(&[a.seq], None).map(|_| ()), Status::State, ""); // one open batch
    expect_err(e.release(a.seq), Status::State, ""); // in the open batch
    drop(b); // aborted
    expect_err(e.allocate(&common::tokens(1, 16 * 9), None), Status::NoSpace, "");
    // CPU engines take only the NULL stream.
    expect_err(unsafe { e.set_stream(8 as *mut _) }, Status::InvalidArgument, "");
    // head_dim 12: pkv_attention says Unsupported.
    let odd = pkv::Engine::new(&common::params(16, 8).head_dim(12)).unwrap();
    let s = odd.allocate(&[1, 2, 3], None).unwrap();
    let mut batch = odd.batch(&[s.seq], None).unwrap();
    let (q, kv, mut out) = (vec![0f32; 3 * 48], vec![0f32; 3 * 24], vec![0f32; 3 * 48]);
    expect_err(batch.attention(0, &q, &kv, &kv, &mut out), Status::Unsupported, "");
    // A budget too small: OutOfMemory, with every term of the budget still filled.
    let tiny = common::params(16, 0).memory_total_bytes(1 << 20).max_model_len(1 << 20);
    let (budget, status) = tiny.profile_detailed();
    expect_err(status, Status::OutOfMemory, "");
    assert!(budget.shortfall_bytes > 0 && budget.block_bytes > 0);
    // No GPU, or a build without CUDA: NoDevice (skipped where a GPU is usable).
    if let Err(err) = pkv::Engine::new(&common::params(16, 8).device(pkv::Device::Cuda)) {
        assert_eq!(err.status(), Status::NoDevice, "{}", err);
    }
    // Malformed config.json: InvalidArgument naming the field.
    expect_err(
        pkv::Params::from_hf_config("{\"num_hidden_layers\": 2}"),
        Status::InvalidArgument,
        "num_attention_heads",
    );
}

#[test]
fn a_null_handle_is_refused_through_the_sys_layer() {
    let lib = pkv::library().unwrap();
    let raw = lib.raw();
    let mut stats: pkv::sys::pkv_stats = unsafe { std::mem::zeroed() };
    stats.struct_size = std::mem::size_of::<pkv::sys::pkv_stats>() as u32;
    unsafe {
        assert_eq!(raw.pkv_engine_stats(ptr::null_mut(), &mut stats), pkv::sys::PKV_ERR_INVALID_ARGUMENT);
        assert_eq!(raw.pkv_release(ptr::null_mut(), 1), pkv::sys::PKV_ERR_INVALID_ARGUMENT);
        assert_eq!(raw.pkv_batch_end(ptr::null_mut()), pkv::sys::PKV_ERR_INVALID_ARGUMENT);
        raw.pkv_engine_destroy(ptr::null_mut()); // accepts NULL
        raw.pkv_batch_abort(ptr::null_mut()); // accepts NULL
    }
    let err = lib.check(unsafe { raw.pkv_engine_check(ptr::null_mut()) }).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(!err.message().is_empty());
    // A closed engine cannot be used: `close(self)` moves it (see Engine's compile_fail doctest).
}

/// Everything observable about an engine's state.
fn snapshot(e: &pkv::Engine, seqs: &[Seq]) -> String {
    let mut st = e.stats().unwrap();
    st.prefix_query_tokens = 0; // cumulative query counters are not state
    let mut s = format!("{:?}", st);
    for &seq in seqs {
        s += &format!(
            "\n{:?} {:?} {:?}",
            e.seq_info(seq).unwrap(),
            e.block_table(seq).unwrap(),
            e.tokens(seq).unwrap()
        );
    }
    s
}

#[test]
fn no_space_leaves_state_unchanged() {
    let e = common::engine(4, 6);
    let a = e.allocate(&common::tokens(100, 10), None).unwrap(); // 3 blocks
    common::compute(&e, &[a.seq]);
    let b = e.allocate(&common::tokens(200, 8), None).unwrap(); // 2 blocks: 1 left
    let before = snapshot(&e, &[a.seq, b.seq]);
    expect_err(e.allocate(&common::tokens(300, 9), None), Status::NoSpace, "");
    assert_eq!(snapshot(&e, &[a.seq, b.seq]), before);
    e.append(a.seq, &[1, 2, 3, 4]).unwrap(); // fills a's last block, takes the free one
    let before = snapshot(&e, &[a.seq, b.seq]);
    expect_err(e.append(b.seq, &[1, 2, 3, 4, 5]), Status::NoSpace, "");
    expect_err(e.fork(a.seq).and_then(|c| e.append(c, &[7])), Status::State, "");
    assert_eq!(snapshot(&e, &[a.seq, b.seq]), before);
    e.check().unwrap();
}
