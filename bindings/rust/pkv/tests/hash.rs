//! The canonical block hash against tests/data/hash_vectors.txt (shared with the C tests).
use std::path::Path;

fn parse_hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex hash")
}

#[test]
fn hash_vectors() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../tests/data/hash_vectors.txt");
    let text = std::fs::read_to_string(&path).expect("read hash_vectors.txt");
    let mut cases = 0;
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let (input, expected) = line.split_once("->").expect("a '->' in each case");
        let fields: Vec<&str> = input.split_whitespace().collect();
        let seed: u64 = fields[0].parse().unwrap();
        let salt: Vec<u8> = match fields[1] {
            "-" => Vec::new(),
            hex => {
                (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
            }
        };
        let expected: Vec<u64> = expected.split_whitespace().map(parse_hex).collect();
        let root = pkv::block_hash_root(seed, &salt).unwrap();
        assert_eq!(root, expected[0], "root of: {}", line);
        let mut parent = root;
        for (i, block) in fields[2].split(';').enumerate() {
            let tokens: Vec<i32> = block.split(',').map(|t| t.parse().unwrap()).collect();
            parent = pkv::block_hash(seed, parent, &tokens).unwrap();
            assert_eq!(parent, expected[i + 1], "block {} of: {}", i, line);
        }
        assert_eq!(fields[2].split(';').count() + 1, expected.len(), "{}", line);
        cases += 1;
    }
    assert!(cases >= 7, "only {} cases read", cases);
}
