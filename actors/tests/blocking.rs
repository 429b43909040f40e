//! The regression catcher for blocking file I/O on actix arbiter threads: once the engine's checker is installed,
//! the runtime's blocking file functions panic (in debug builds, as tests are) when called on an arbiter thread,
//! and run normally on a blocking thread or a plain thread.

#![cfg(debug_assertions)]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use troupe_runtime::provider_store::ProviderStore;

/// The panic message of `work`, which must panic.
fn panic_message(what: &str, work: impl FnOnce()) -> String {
    let payload = catch_unwind(AssertUnwindSafe(work)).expect_err(&format!("{what} on an arbiter thread must panic"));
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|text| (*text).to_owned()))
        .unwrap_or_default()
}

#[test]
fn blocking_file_functions_panic_on_an_arbiter_thread_and_run_on_a_blocking_thread() {
    troupe_actors::blocking_check::install();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    // A plain thread (this test's) is no arbiter: blocking is fine here.
    let store = ProviderStore::open(&root).unwrap();
    store.save().unwrap();
    std::fs::remove_file(root.join("providers.json")).unwrap();

    actix::System::new().block_on(async move {
        let message = panic_message("a providers.json save", || drop(store.save()));
        assert!(message.contains("blocking file-system call"), "{message}");
        assert!(message.contains("provider_store.rs"), "the message names the blocking function: {message}");
        assert!(!root.join("providers.json").exists(), "the assertion fires before anything is written");

        let cwd = root.clone();
        panic_message("a path resolution", || drop(troupe_runtime::tools::paths::resolve_path(&cwd, "a.txt")));
        panic_message("a metadata cache read", || drop(troupe_runtime::meta_cache::read(&cwd)));

        // The same calls on a blocking thread are allowed.
        let saved_root: PathBuf = root.clone();
        let saved = tokio::task::spawn_blocking(move || {
            troupe_runtime::tools::paths::resolve_path(&saved_root, "a.txt").unwrap();
            store.save()
        })
        .await
        .expect("the blocking thread finishes");
        saved.unwrap();
        assert!(root.join("providers.json").exists());
    });
}
