//! Issue 26 item 9: a store's administration (`StoreAdmin`: pkv_store_open, info, list, verify,
//! clear, close) on a FILE store an engine filled, in a directory of this test's own.
mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pkv::{Engine, MapStore, Status, StoreAdmin, StoreKind, StoreParams, ValueState, WriteMode};

/// A directory only this test (and process) uses, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("pkv-rust-{}-{}", name, std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An engine on the store computes 13 tokens: 3 full blocks of 4 are written (dropping the
/// engine waits for the writes).
fn fill(dir: &Path) {
    let params = common::params(4, 16).host_num_blocks(8);
    let e = Engine::with_store(&params, &StoreParams::file(dir).unwrap()).unwrap();
    let s = e.allocate(&common::tokens(1, 13), None).unwrap();
    common::compute(&e, &[s.seq]);
}

/// The block file of `key`: <dir>/<hh>/<64 hex>.blk.
fn block_file(dir: &Path, key: &[u8; 32]) -> PathBuf {
    let hex: String = key.iter().map(|b| format!("{:02x}", b)).collect();
    dir.join(&hex[..2]).join(format!("{}.blk", hex))
}

#[test]
fn info_list_verify_and_clear_a_file_store() {
    let dir = TempDir::new("store-admin");
    fill(&dir.0);
    let mut store = StoreAdmin::open(&StoreParams::file(&dir.0).unwrap()).unwrap();
    let info = store.info().unwrap();
    assert_eq!((info.kind, info.num_blocks), (Some(StoreKind::File), 3));
    let entries: Vec<_> = store.list().collect::<pkv::Result<_>>().unwrap();
    assert_eq!(entries.len(), 3);
    assert!(entries
        .iter()
        .all(|e| e.state == Some(ValueState::Good) && e.num_tokens == 4 && e.problem.is_empty()));
    assert_eq!(entries.iter().map(|e| e.value_bytes).sum::<u64>(), info.total_bytes);
    // The blocks chain: two of them have a parent among the three.
    let chained = entries.iter().filter(|e| entries.iter().any(|p| p.key == e.parent)).count();
    assert_eq!(chained, 2);
    let keys: Vec<_> = store.list_keys().map(|e| e.unwrap()).collect();
    assert!(keys.iter().all(|e| e.state == Some(ValueState::Unread) && e.num_tokens == 0));
    assert_eq!(keys.len(), 3);

    // Damage one value's last byte: verify finds it, and removes it when asked.
    let bad = entries[1].key;
    let path = block_file(&dir.0, &bad);
    let mut bytes = std::fs::read(&path).unwrap();
    *bytes.last_mut().unwrap() ^= 0xff;
    std::fs::write(&path, bytes).unwrap();
    let found = store.verify(false).unwrap();
    assert_eq!((found.num_blocks, found.num_good, found.num_bad, found.num_removed), (3, 2, 1, 0));
    let (first_key, problem) = found.first_bad.clone().expect("a bad value");
    assert_eq!(first_key, bad);
    assert!(!problem.is_empty());
    let listed_bad: Vec<_> =
        store.list().map(|e| e.unwrap()).filter(|e| e.state == Some(ValueState::Bad)).collect();
    assert_eq!(listed_bad.len(), 1);
    assert_eq!((listed_bad[0].key, &listed_bad[0].problem), (bad, &problem));
    let removed = store.verify(true).unwrap();
    assert_eq!((removed.num_bad, removed.num_removed), (1, 1));
    assert!(!path.exists());
    let after = store.verify(false).unwrap();
    assert_eq!((after.num_good, after.num_bad, after.first_bad), (2, 0, None));

    assert_eq!(store.clear().unwrap(), 2);
    assert_eq!(store.info().unwrap().num_blocks, 0);
    assert_eq!(store.list().count(), 0);
    store.close();
}

#[test]
fn a_read_only_store_refuses_removals() {
    let dir = TempDir::new("store-admin-ro");
    fill(&dir.0);
    let params = StoreParams::file(&dir.0).unwrap().write_mode(WriteMode::ReadOnly);
    let store = StoreAdmin::open(&params).unwrap();
    assert_eq!(store.clear().unwrap_err().status(), Status::State);
    assert_eq!(store.verify(true).unwrap_err().status(), Status::State);
    assert_eq!(store.verify(false).unwrap().num_good, 3);
    assert_eq!(store.info().unwrap().num_blocks, 3, "nothing was removed");
}

#[test]
fn stores_that_cannot_be_administered_are_refused() {
    let dir = TempDir::new("store-admin-missing");
    let missing = dir.0.join("not-made");
    let err = StoreAdmin::open(&StoreParams::file(&missing).unwrap()).err().expect("refused");
    assert_eq!(err.status(), Status::Store, "{}", err);
    assert!(err.message().contains("not-made"), "{}", err);
    assert!(!missing.exists(), "opening never makes the directory");
    let callback = StoreParams::callback(Arc::new(MapStore::new())).unwrap();
    let err = StoreAdmin::open(&callback).err().expect("refused");
    assert_eq!(err.status(), Status::Unsupported, "{}", err);
}
