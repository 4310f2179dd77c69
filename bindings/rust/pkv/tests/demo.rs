//! The Rust demo prints what the C demo prints, byte for byte (bindings/DEMO.md). The C program
//! is $PKV_DEMO (build/examples/demo); without it, seed 42 is compared with DEMO.md's output.
use std::path::{Path, PathBuf};
use std::process::Command;

/// target/<profile>/examples/demo, built by `cargo test` next to this test's binary (deps/).
fn rust_demo() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap();
    profile_dir.join("examples").join(format!("demo{}", std::env::consts::EXE_SUFFIX))
}

fn run(program: &Path, seed: &str) -> String {
    let out = Command::new(program).arg(seed).output().unwrap_or_else(|e| panic!("run {:?}: {}", program, e));
    assert!(out.status.success(), "{:?} {}: {}", program, seed, String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn demo_equals_the_c_demo() {
    let demo = rust_demo();
    assert!(demo.exists(), "{:?} missing: run `cargo test` (it builds the examples)", demo);
    match std::env::var_os("PKV_DEMO") {
        Some(c_demo) => {
            for seed in ["42", "0", "1", "7", "12345", "18446744073709551615"] {
                assert_eq!(run(&demo, seed), run(Path::new(&c_demo), seed), "seed {}", seed);
            }
        }
        None => {
            let md = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../DEMO.md");
            let md = std::fs::read_to_string(md).unwrap();
            let expected = md.split("```\n").nth(1).expect("DEMO.md's output block");
            assert_eq!(run(&demo, "42"), expected);
        }
    }
}
