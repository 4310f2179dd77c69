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

fn parse_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
}

/// With adapters and extra keys (pkv 0.5): tests/data/hash_vectors_extra.txt, every key passed with
/// every block (those apart from a block add nothing to its hash).
#[test]
fn extra_hash_vectors() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../tests/data/hash_vectors_extra.txt");
    let text = std::fs::read_to_string(&path).expect("read hash_vectors_extra.txt");
    let mut cases = 0;
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let (input, expected) = line.split_once("->").expect("a '->' in each case");
        let fields: Vec<&str> = input.split_whitespace().collect();
        assert_eq!(fields.len(), 5, "seed salt lora_id keys blocks: {}", line);
        let seed: u64 = fields[0].parse().unwrap();
        let salt = if fields[1] == "-" { Vec::new() } else { parse_bytes(fields[1]) };
        let lora_id: u64 = fields[2].parse().unwrap();
        let key_bytes: Vec<(u32, u32, Vec<u8>)> = if fields[3] == "-" {
            Vec::new()
        } else {
            fields[3]
                .split(',')
                .map(|item| {
                    let parts: Vec<&str> = item.split(':').collect();
                    (parts[0].parse().unwrap(), parts[1].parse().unwrap(), parse_bytes(parts[2]))
                })
                .collect()
        };
        let keys: Vec<pkv::ExtraKey> = key_bytes
            .iter()
            .map(|(start, end, key)| pkv::ExtraKey { start_token: *start, end_token: *end, key })
            .collect();
        let expected: Vec<u64> = expected.split_whitespace().map(parse_hex).collect();
        let mut parent = pkv::block_hash_root_lora(seed, &salt, lora_id).unwrap();
        assert_eq!(parent, expected[0], "root of: {}", line);
        let mut first = 0u32;
        for (i, block) in fields[4].split(';').enumerate() {
            let tokens: Vec<i32> = block.split(',').map(|t| t.parse().unwrap()).collect();
            parent = pkv::block_hash_extra(seed, parent, &tokens, first, &keys).unwrap();
            assert_eq!(parent, expected[i + 1], "block {} of: {}", i, line);
            first += tokens.len() as u32;
        }
        assert_eq!(fields[4].split(';').count() + 1, expected.len(), "{}", line);
        cases += 1;
    }
    assert!(cases >= 5, "only {} cases read", cases);
}
