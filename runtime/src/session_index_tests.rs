//! The session index on real files: what it keeps, what it leaves to the scan, and that taking it removes it.

use super::*;
use crate::artifact_names::NamedArtifacts;
use crate::event_log::log_path;
use crate::meta_cache::Described;
use crate::usage_book::UsageSummary;

/// A session folder `folder` whose log holds `log` and whose cache, about `session_id` titled `title`, describes a
/// log of `cached_len` bytes.
fn session(data_dir: &DataDir, folder: &str, session_id: &str, title: &str, log: &[u8], cached_len: u64) {
    let dir = data_dir.sessions_dir().join(folder);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(log_path(&dir), log).unwrap();
    let meta = troupe_protocol::types::common::SessionMeta {
        session_id: session_id.to_owned(),
        title: Some(title.to_owned()),
        ..meta_cache::tests::sample_meta()
    };
    let (usage, artifacts) = (UsageSummary::default(), NamedArtifacts::default());
    meta_cache::write(&dir, Described { meta: &meta, usage: &usage, artifacts: &artifacts }, cached_len).unwrap();
}

fn data_dir(root: &tempfile::TempDir) -> DataDir {
    let data_dir = DataDir::new(root.path().to_path_buf());
    data_dir.ensure_layout().unwrap();
    data_dir
}

#[test]
fn the_index_holds_the_current_caches_and_is_gone_once_taken() {
    let root = tempfile::tempdir().unwrap();
    let data_dir = data_dir(&root);
    assert_eq!(write(&data_dir).unwrap(), 0);
    assert!(take(&data_dir).is_empty());

    session(&data_dir, "s1", "s1", "kept", b"one line\n", 9);
    session(&data_dir, "s2", "s2", "stale", b"one line\nand another\n", 9);
    session(&data_dir, "s3", "elsewhere", "moved", b"one line\n", 9);
    session(&data_dir, ".s4.fork", ".s4.fork", "unfinished", b"one line\n", 9);
    std::fs::create_dir_all(data_dir.sessions_dir().join("s5")).unwrap();

    assert_eq!(write(&data_dir).unwrap(), 1, "only a cache that matches its log and its folder");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(data_dir.session_index_path()).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let taken = take(&data_dir);
    assert_eq!(taken.keys().collect::<Vec<_>>(), ["s1"]);
    assert_eq!(taken["s1"].meta.title.as_deref(), Some("kept"));
    assert_eq!(taken["s1"].log_len_bytes, 9);
    assert!(!data_dir.session_index_path().exists(), "taking it removes it");
    assert!(take(&data_dir).is_empty(), "a start after a start that did not stop cleanly scans everything");
}

#[test]
fn a_damaged_line_is_skipped_and_an_index_of_another_format_is_ignored() {
    let root = tempfile::tempdir().unwrap();
    let data_dir = data_dir(&root);
    session(&data_dir, "s1", "s1", "first", b"one line\n", 9);
    session(&data_dir, "s2", "s2", "second", b"one line\n", 9);
    assert_eq!(write(&data_dir).unwrap(), 2);
    let path = data_dir.session_index_path();
    let written = std::fs::read(&path).unwrap();

    let mut damaged = written.clone();
    damaged.extend_from_slice(b"{\"format\":3,\"log_len_bytes\":9,\"meta\":{\n\0\0\0\n");
    std::fs::write(&path, &damaged).unwrap();
    let mut ids: Vec<String> = take(&data_dir).into_keys().collect();
    ids.sort();
    assert_eq!(ids, ["s1", "s2"]);

    let text = String::from_utf8(written).unwrap();
    std::fs::write(&path, text.replacen("{\"format\":1}", "{\"format\":2}", 1)).unwrap();
    assert!(take(&data_dir).is_empty(), "another format: every session is scanned");
    assert!(!path.exists());
    std::fs::write(&path, b"").unwrap();
    assert!(take(&data_dir).is_empty());
}
