//! Retention that decays (pkv 0.8): with `DEBUG_TEST_CLOCK` the engine's clock is the process's
//! `PKV_TEST_CLOCK_MS`, which this test advances past `retention_ms`. Its own test binary: the
//! environment is the process's, and no other test may run beside it.
mod common;

use common::{burst, cached, check_sums, run, SYSTEM};
use pkv::{Retention, CACHE_PRIORITY_MAX, DEBUG_TEST_CLOCK};

#[test]
fn a_retention_decays_on_the_test_clock() {
    std::env::set_var("PKV_TEST_CLOCK_MS", "1000");
    let e = pkv::Engine::new(&common::params(4, 8).debug_flags(DEBUG_TEST_CLOCK)).unwrap();
    let mut prompt = SYSTEM.to_vec();
    prompt.push(1);
    run(&e, &prompt, Retention { priority: CACHE_PRIORITY_MAX, retention_ms: 500 }); // until 1500
    burst(&e, 4, 5000);
    assert_eq!(cached(&e, &SYSTEM), 8);
    std::env::set_var("PKV_TEST_CLOCK_MS", "1500"); // decayed: the oldest normal blocks
    burst(&e, 1, 9000); // 1 free block, then 2 evictions: SYSTEM's
    assert_eq!(cached(&e, &SYSTEM), 0);
    let s = e.stats().unwrap();
    assert_eq!((s.num_evictions_highest, s.num_evictions_normal), (0, s.num_evictions));
    check_sums(&e);
    std::env::remove_var("PKV_TEST_CLOCK_MS");
}
