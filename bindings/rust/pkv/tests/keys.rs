//! Extra keys and a LoRA adapter in block identity (pkv 0.5, issue 27 items 5 and 8): two
//! prompts of the same placeholder tokens hit each other only under the same item key, the
//! text before the item stays shared, adapters never share, the events carry both, and the
//! canonical hashes reduce to 0.4's without them.
mod common;

use pkv::{Engine, ExtraKey, KvEventKind, Request, SeqKeys, Status};

/// Block size 4, prefix caching and KV events on.
fn keyed_engine() -> Engine {
    Engine::new(&common::params(4, 64).kv_events(true)).unwrap()
}

/// An item over the prompt's placeholder tokens 4 .. 8 (its second block).
fn image(key: &[u8]) -> [ExtraKey<'_>; 1] {
    [ExtraKey { start_token: 4, end_token: 8, key }]
}

const PROMPT: [i32; 13] = [1, 2, 3, 4, 99, 99, 99, 99, 5, 6, 7, 8, 9];

#[test]
fn the_same_item_hits_another_does_not() {
    let e = keyed_engine();
    let a =
        e.allocate_keyed(&PROMPT, &SeqKeys { extra_keys: &image(b"image-a"), ..SeqKeys::default() }).unwrap();
    common::compute(&e, &[a.seq]);
    let (img_a, img_b) = (image(b"image-a"), image(b"image-b"));
    let cases = [
        ("the same image", SeqKeys { extra_keys: &img_a, ..SeqKeys::default() }, 12),
        ("another image: the text before it only", SeqKeys { extra_keys: &img_b, ..SeqKeys::default() }, 4),
        ("no image: the text before it only", SeqKeys::default(), 4),
        (
            "the same image, another adapter",
            SeqKeys { extra_keys: &img_a, lora_id: 7, ..SeqKeys::default() },
            0,
        ),
    ];
    for (name, keys, cached) in cases {
        let q = e.allocate_query_keyed(&PROMPT, &keys).unwrap();
        assert_eq!(q.num_cached_tokens, cached, "{}", name);
    }
    let b = e.allocate_keyed(&PROMPT, &SeqKeys { extra_keys: &img_a, ..SeqKeys::default() }).unwrap();
    assert_eq!(b.num_cached_tokens, 12);
}

#[test]
fn bad_keys_are_refused_and_change_nothing() {
    let e = keyed_engine();
    let prompt = common::tokens(1, 8);
    let before = e.stats().unwrap();
    let long = vec![0u8; pkv::sys::PKV_MAX_EXTRA_KEY_BYTES as usize + 1];
    let bad: [(&str, Vec<ExtraKey<'_>>); 5] = [
        ("past the prompt", vec![ExtraKey { start_token: 4, end_token: 9, key: b"x" }]),
        ("empty range", vec![ExtraKey { start_token: 4, end_token: 4, key: b"x" }]),
        ("no bytes", vec![ExtraKey { start_token: 0, end_token: 4, key: b"" }]),
        (
            "overlapping",
            vec![
                ExtraKey { start_token: 0, end_token: 4, key: b"x" },
                ExtraKey { start_token: 3, end_token: 6, key: b"y" },
            ],
        ),
        ("too long a key", vec![ExtraKey { start_token: 0, end_token: 4, key: &long }]),
    ];
    for (name, keys) in &bad {
        let err = e.allocate_keyed(&prompt, &SeqKeys { extra_keys: keys, ..SeqKeys::default() }).unwrap_err();
        assert_eq!(err.status(), Status::InvalidArgument, "{}", name);
        let err = e.submit(&prompt, &Request { extra_keys: keys, ..Request::default() }).unwrap_err();
        assert_eq!(err.status(), Status::InvalidArgument, "{}: submit", name);
    }
    assert_eq!(e.stats().unwrap(), before, "refused keys changed the engine");
}

#[test]
fn events_carry_the_adapter_and_the_keys() {
    let e = keyed_engine();
    let img = image(b"image-a");
    let a = e
        .allocate_keyed(&PROMPT[..9], &SeqKeys { extra_keys: &img, lora_id: 7, ..SeqKeys::default() })
        .unwrap();
    common::compute(&e, &[a.seq]);
    let events = e.drain_kv_events().unwrap();
    assert_eq!(events.len(), 2, "two blocks stored: {:?}", events);
    for (i, ev) in events.iter().enumerate() {
        assert_eq!(
            (ev.kind, ev.lora_id, ev.num_extra_keys),
            (Some(KvEventKind::BlockStored), 7, i as u32),
            "{:?}",
            ev
        );
    }
    // the stored blocks' hashes are the canonical ones of the same keys
    let root = pkv::block_hash_root_lora(0, &[], 7).unwrap();
    let h0 = pkv::block_hash_extra(0, root, &PROMPT[..4], 0, &img).unwrap();
    let h1 = pkv::block_hash_extra(0, h0, &PROMPT[4..8], 4, &img).unwrap();
    assert_eq!((events[0].parent_hash, events[0].block_hash, events[1].block_hash), (root, h0, h1));
}

#[test]
fn keyed_hashes_reduce_to_plain_ones() {
    let salt = b"tenant-a";
    for seed in [0u64, 42] {
        let plain = pkv::block_hash_root(seed, salt).unwrap();
        assert_eq!(pkv::block_hash_root_lora(seed, salt, 0).unwrap(), plain);
        assert_ne!(pkv::block_hash_root_lora(seed, salt, 7).unwrap(), plain);
        let tokens = [1, 2, 3, 4];
        let h = pkv::block_hash(seed, plain, &tokens).unwrap();
        assert_eq!(pkv::block_hash_extra(seed, plain, &tokens, 0, &[]).unwrap(), h);
        assert_eq!(pkv::block_hash_extra(seed, plain, &tokens, 0, &image(b"later")).unwrap(), h);
        assert_ne!(
            pkv::block_hash_extra(seed, plain, &tokens, 4, &image(b"a")).unwrap(),
            pkv::block_hash_extra(seed, plain, &tokens, 4, &image(b"b")).unwrap()
        );
    }
    let err = pkv::block_hash_extra(0, 0, &[1], 0, &[ExtraKey { start_token: 0, end_token: 1, key: b"" }])
        .unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
}
