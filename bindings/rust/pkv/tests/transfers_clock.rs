//! A hold's timeout (pkv 0.12): with `DEBUG_TEST_CLOCK` the engine's clock is the process's
//! `PKV_TEST_CLOCK_MS`, which this test advances past each hold's timeout (`Engine::hold`'s
//! `timeout_ms`, 0 = `TRANSFER_TIMEOUT_DEFAULT_MS`, `TRANSFER_TIMEOUT_NONE` = never). Its own test
//! binary: the environment is the process's, and no other test may run beside it.
mod common;

use pkv::{Engine, Status, TransferOutcome, TransferState, DEBUG_TEST_CLOCK};
use pkv::{TRANSFER_TIMEOUT_DEFAULT_MS, TRANSFER_TIMEOUT_NONE};

fn held(e: &Engine) -> (u64, u64) {
    let st = e.stats().unwrap(); // any call reads the clock
    (st.num_held_seqs, st.num_holds_timed_out)
}

#[test]
fn holds_time_out_on_the_test_clock() {
    std::env::set_var("PKV_TEST_CLOCK_MS", "1000");
    let e = Engine::new(&common::params(4, 32).debug_flags(DEBUG_TEST_CLOCK)).unwrap();
    let seqs: Vec<_> = [(100, 10), (201, 9), (302, 8)]
        .iter()
        .map(|&(start, n)| e.allocate(&common::tokens(start, n), None).unwrap().seq)
        .collect();
    common::compute(&e, &seqs);
    let (a, b, c) = (seqs[0], seqs[1], seqs[2]);
    e.hold(a, 500).unwrap(); // until 1500
    e.hold(b, 0).unwrap(); // the default: until 1000 + 480000
    e.hold(c, TRANSFER_TIMEOUT_NONE).unwrap();
    std::env::set_var("PKV_TEST_CLOCK_MS", "1499");
    assert_eq!(held(&e), (3, 0));
    std::env::set_var("PKV_TEST_CLOCK_MS", "1500");
    assert_eq!(held(&e), (2, 1));
    assert_eq!(e.seq_info(a).unwrap().transfer, Some(TransferState::None));
    let err = e.hold_end(a, TransferOutcome::Done).unwrap_err(); // too late
    assert_eq!(err.status(), Status::State);
    let default_end = (1000 + TRANSFER_TIMEOUT_DEFAULT_MS).to_string();
    std::env::set_var("PKV_TEST_CLOCK_MS", (1000 + TRANSFER_TIMEOUT_DEFAULT_MS - 1).to_string());
    assert_eq!(held(&e), (2, 1));
    std::env::set_var("PKV_TEST_CLOCK_MS", default_end);
    assert_eq!(held(&e), (1, 2));
    std::env::set_var("PKV_TEST_CLOCK_MS", "999999999");
    assert_eq!(held(&e), (1, 2), "c never times out");
    e.check().unwrap();
    e.release(a).unwrap();
    e.release(b).unwrap();
    e.hold_end(c, TransferOutcome::Done).unwrap();
    e.release(c).unwrap();
    assert_eq!(e.stats().unwrap().num_used_blocks, 0);
    std::env::remove_var("PKV_TEST_CLOCK_MS");
}
