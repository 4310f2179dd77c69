//! The store tier (pkv 0.2): an engine writes its sealed prefix blocks to a store, a second
//! engine on the same store gets them back as cached tokens; the host's own `Store` (called from
//! pkv's threads), a failing one (a miss with its message, never an error) and a file store.
mod common;

use std::sync::Arc;

use pkv::{Engine, MapStore, Status, Store, StoreKey, StoreParams, StoreResult, WriteMode};

/// 3 full blocks of 4 + 1 token: 3 blocks sealed and written.
fn prompt() -> Vec<i32> {
    common::tokens(1, 13)
}

fn engine(store: &StoreParams) -> Engine {
    Engine::with_store(&common::params(4, 16).host_num_blocks(8), store).expect("an engine with a store")
}

/// Engine A computes the prompt into the store; dropping it waits for its writes.
fn compute_into(store: &StoreParams) {
    let a = engine(store);
    let s = a.allocate(&prompt(), None).unwrap();
    common::compute(&a, &[s.seq]);
}

fn share(store: &StoreParams) {
    compute_into(store);
    let b = engine(store);
    let s = b.allocate(&prompt(), None).unwrap();
    assert_eq!(s.num_cached_tokens, 12);
    let st = b.stats().unwrap();
    assert_eq!(
        (st.store_hit_tokens, st.num_store_lookups, st.num_store_hits, st.num_store_errors),
        (12, 3, 3, 0)
    );
    assert_eq!(b.store_error().unwrap(), "");
    common::compute(&b, &[s.seq]); // the loads, then the last token
    assert_eq!(b.seq_info(s.seq).unwrap().num_computed_tokens, 13);
    b.check().unwrap();
}

#[test]
fn callback_store_shared_between_engines() {
    let store = Arc::new(MapStore::new());
    share(&StoreParams::callback(store.clone()).unwrap().model_id("test-model@1").unwrap());
    assert_eq!(store.len(), 3);
}

/// get fails (or panics); put works.
struct Failing {
    inner: MapStore,
    panics: bool,
}

impl Store for Failing {
    fn get(&self, _key: &StoreKey, _value: &mut [u8]) -> StoreResult<bool> {
        if self.panics {
            panic!("the test store fell over");
        }
        Err("the test store is down".into())
    }
    fn put(&self, key: &StoreKey, value: &[u8]) -> StoreResult<()> {
        self.inner.put(key, value)
    }
}

#[test]
fn a_failing_store_is_a_miss_with_its_message() {
    for (panics, want) in [(false, "the test store is down"), (true, "panic: the test store fell over")] {
        let store = Arc::new(Failing { inner: MapStore::new(), panics });
        let params = StoreParams::callback(store.clone()).unwrap();
        compute_into(&params);
        assert_eq!(store.inner.len(), 3);
        let b = engine(&params);
        let s = b.allocate(&prompt(), None).unwrap();
        assert_eq!(s.num_cached_tokens, 0);
        let st = b.stats().unwrap();
        assert_eq!((st.num_store_errors, st.num_store_hits), (3, 0));
        let why = b.store_error().unwrap();
        assert!(why.contains(want), "{:?} lacks {:?}", why, want);
        b.check().unwrap();
    }
}

#[test]
fn file_store() {
    let dir = std::env::temp_dir().join(format!("pkv-rust-store-{}", std::process::id()));
    share(&StoreParams::file(&dir).unwrap().write_mode(WriteMode::Through).model_id("test-model@1").unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_store_params_are_refused() {
    let store = StoreParams::callback(Arc::new(MapStore::new())).unwrap();
    let no_host_tier = Engine::with_store(&common::params(4, 16), &store);
    let err = no_host_tier.err().expect("refused");
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("host tier"), "{}", err);
    let defaults = StoreParams::new().unwrap();
    assert_eq!(
        (defaults.raw().kind, defaults.raw().lookup_timeout_ms),
        (pkv::sys::PKV_STORE_NONE as u32, 200)
    );
    assert!(StoreParams::redis("local\0host", 6379).is_err()); // not a C string
    assert_eq!(common::engine(4, 16).store_error().unwrap(), "");
    assert_eq!(Status::from_code(pkv::sys::PKV_ERR_STORE), Some(Status::Store));
}

/// pkv 0.4: the model id is in every key's fingerprint. Engines of one KV shape share blocks only
/// under the same id; without one, the store error says what that risks.
#[test]
fn model_ids_keep_models_of_one_shape_apart() {
    let store = Arc::new(MapStore::new());
    let with_id = |id: Option<&str>| {
        let p = StoreParams::callback(store.clone()).unwrap();
        id.map_or(p.clone(), |id| p.model_id(id).unwrap())
    };
    compute_into(&with_id(Some("base@1")));
    assert_eq!(store.len(), 3);
    for (id, cached) in [(Some("base@1"), 12), (Some("finetune@1"), 0), (None, 0)] {
        let e = engine(&with_id(id));
        let s = e.allocate(&prompt(), None).unwrap();
        assert_eq!(s.num_cached_tokens, cached, "model id {:?}", id);
        let why = e.store_error().unwrap();
        assert_eq!(why.contains("model_id"), id.is_none(), "model id {:?}: {:?}", id, why);
    }
    assert!(StoreParams::new().unwrap().model_id("a\0b").is_err()); // not a C string
}

/// pkv 0.4: a model id from a config.json text: the SHA-256 of the text as it is.
#[test]
fn a_config_digest_names_a_config() {
    let path = format!("{}/../../../tools/configs/llama-3-8b.json", env!("CARGO_MANIFEST_DIR"));
    let json = std::fs::read_to_string(&path).unwrap();
    let digest = pkv::hf_config_digest(&json).unwrap();
    let hex = digest.strip_prefix("config-sha256:").unwrap_or_else(|| panic!("{:?}", digest));
    assert!(
        hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{:?}",
        digest
    );
    assert_eq!(pkv::hf_config_digest(&json).unwrap(), digest);
    assert_ne!(pkv::hf_config_digest(&format!("{}\n", json)).unwrap(), digest, "the text as it is");
    let err = pkv::hf_config_digest("{\"num_hidden_layers\": 2}").unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument, "{}", err);
}
