use super::*;

fn store_in(data_dir: &Path, limits: ChangeLimits) -> ChangeStore {
    for session in ["s1", "s2"] {
        std::fs::create_dir_all(data_dir.join("sessions").join(session)).unwrap();
    }
    ChangeStore::new(data_dir, limits)
}

fn write<'a>(path: &'a Path, before: &'a Prior, after: &'a [u8]) -> Write<'a> {
    Write { tool: "write_file", path, inside_cwd: true, before, after }
}

#[test]
fn a_write_is_recorded_with_both_contents_retrievable_by_digest() {
    let data_dir = tempfile::tempdir().unwrap();
    let store = store_in(data_dir.path(), ChangeLimits::default());
    let path = Path::new("/w/a.txt");
    let before = Prior::Content(b"old\n".to_vec());
    assert_eq!(store.record("s1", "r1", "c1", write(path, &before, b"new\n")), None);
    let records = store.records("s1").unwrap();
    assert_eq!(records.len(), 1);
    let record = &records[0];
    assert_eq!((record.run_id.as_str(), record.tool_call_id.as_str(), record.path.as_str()), ("r1", "c1", "/w/a.txt"));
    let Before::Content(before) = &record.before else { panic!("{record:?}") };
    assert_eq!(store.blob(before.digest.as_deref().unwrap()).unwrap(), b"old\n");
    assert_eq!(store.blob(record.after.digest.as_deref().unwrap()).unwrap(), b"new\n");
    assert!(store.records("s2").unwrap().is_empty());
}

#[test]
fn a_file_too_large_is_written_with_a_note_and_its_record_says_so() {
    let data_dir = tempfile::tempdir().unwrap();
    let store = store_in(data_dir.path(), ChangeLimits { max_blob_bytes: 4, budget_bytes: 100 });
    let path = Path::new("/w/big");
    let note = store.record("s1", "r1", "c1", write(path, &Prior::Content(b"12345".to_vec()), b"1")).unwrap();
    assert!(note.starts_with("not recorded for undo: its content before the write: it is 5 bytes"), "{note}");
    let note = store.record("s1", "r1", "c2", write(path, &Prior::TooLarge { size: 9 }, b"1")).unwrap();
    assert!(note.contains("9 bytes, over the 4 bytes recorded"), "{note}");
    let records = store.records("s1").unwrap();
    assert!(records.iter().all(|record| matches!(&record.before, Before::Content(content) if !content.stored())));
    // A new file too large to keep afterwards can still be undone: removing it needs no content.
    assert_eq!(store.record("s1", "r1", "c3", write(Path::new("/w/new"), &Prior::Absent, b"123456")), None);
}

#[test]
fn collecting_keeps_blobs_another_session_still_names() {
    let data_dir = tempfile::tempdir().unwrap();
    let store = store_in(data_dir.path(), ChangeLimits::default());
    let path = Path::new("/w/a.txt");
    let shared = Prior::Content(b"shared".to_vec());
    store.record("s1", "r1", "c1", write(path, &shared, b"only s1"));
    store.record("s2", "r2", "c1", write(path, &shared, b"only s2"));
    assert_eq!(store.collect_garbage().unwrap(), 0, "every blob is named");
    std::fs::remove_dir_all(data_dir.path().join("sessions").join("s1")).unwrap();
    assert_eq!(store.collect_garbage().unwrap(), 1, "only s1's own content goes");
    assert_eq!(store.blob(&digest_of(b"shared")).unwrap(), b"shared");
    assert_eq!(store.blob(&digest_of(b"only s2")).unwrap(), b"only s2");
    assert!(store.blob(&digest_of(b"only s1")).is_err());
}
