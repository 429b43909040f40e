//! The index's scan of the sessions directory, on real files: what it lists, what it repairs, what it removes.

use troupe_protocol::types::events::EventJson;
use troupe_runtime::data_dir::DataDir;
use troupe_runtime::event_log::{self, EventStore, LogEntry};
use troupe_runtime::fork::FORK_DIR_SUFFIX;
use troupe_runtime::meta_cache;

use super::scan_sessions;
use crate::session_supervisor::index_check::check_sessions;
use crate::test_support::session_created;

/// Creates the log of a root session `session_id`, its first event durable.
fn create_session(data_dir: &DataDir, session_id: &str) {
    let json = EventJson::encode(&session_created(session_id)).unwrap();
    event_log::create_store(&data_dir.session_dir(session_id), &LogEntry { seq: 1, json }, None).unwrap();
}

#[test]
fn the_scan_lists_sessions_from_their_logs_and_caches_them_and_clears_leftovers() {
    let root = tempfile::tempdir().unwrap();
    let data_dir = DataDir::new(root.path().to_path_buf());
    assert!(scan_sessions(&data_dir).unwrap().is_empty(), "no sessions directory: nothing, not an error");
    data_dir.ensure_layout().unwrap();

    create_session(&data_dir, "s1");
    let leftover_fork = data_dir.sessions_dir().join(format!(".s9{FORK_DIR_SUFFIX}"));
    std::fs::create_dir_all(&leftover_fork).unwrap();
    std::fs::create_dir_all(data_dir.session_dir("no-log")).unwrap();

    let scanned = scan_sessions(&data_dir).unwrap();
    let ids: Vec<&str> = scanned.iter().map(|session| session.meta.session_id.as_str()).collect();
    assert_eq!(ids, ["s1"], "a folder without a log is no session");
    assert!(!leftover_fork.exists(), "a fork the daemon never finished is removed");
    let cached = meta_cache::read(&data_dir.session_dir("s1")).expect("the scan writes the metadata cache");
    assert_eq!(cached.meta, scanned[0].meta);
    assert_eq!(scanned[0].artifacts, Some(cached.artifacts.clone()), "known: it names none");

    // A cache that no longer matches the log's length is not believed.
    let stale = troupe_protocol::types::common::SessionMeta { title: Some("stale".into()), ..cached.meta.clone() };
    let described = meta_cache::Described { meta: &stale, usage: &cached.usage, artifacts: &cached.artifacts };
    meta_cache::write(&data_dir.session_dir("s1"), described, cached.log_len_bytes + 1).unwrap();
    assert_eq!(scan_sessions(&data_dir).unwrap()[0].meta.title, None);
}

#[test]
fn a_session_whose_log_cannot_be_opened_stays_listed_with_its_damage() {
    let root = tempfile::tempdir().unwrap();
    let data_dir = DataDir::new(root.path().to_path_buf());
    data_dir.ensure_layout().unwrap();
    create_session(&data_dir, "s1");
    let log = event_log::log_path(&data_dir.session_dir("s1"));
    std::fs::remove_file(&log).unwrap();
    std::fs::create_dir(&log).unwrap();

    let scanned = scan_sessions(&data_dir).unwrap();
    assert_eq!(scanned.len(), 1, "still listed, so requests reach it and say what is wrong");
    let skipped = &scanned[0].meta.skipped_events;
    assert!(skipped.iter().any(|skipped| skipped.reason.contains("could not be opened")), "{skipped:?}");
    assert_eq!(scanned[0].artifacts, None, "what it names is unknown, so no artifact may be collected");
}

#[test]
fn a_clean_stops_session_index_is_believed_then_checked_against_each_log() {
    use troupe_protocol::types::events::{EventPayload, StoredEvent, TitleChangeKind};
    use troupe_runtime::session_index;

    let root = tempfile::tempdir().unwrap();
    let data_dir = DataDir::new(root.path().to_path_buf());
    data_dir.ensure_layout().unwrap();
    create_session(&data_dir, "s1");
    create_session(&data_dir, "s2");
    assert_eq!(scan_sessions(&data_dir).unwrap().len(), 2, "the first scan reads the logs and writes the caches");
    assert_eq!(session_index::write(&data_dir).unwrap(), 2);

    // A rename appended to s2's log while no daemon ran: the index is behind it.
    let renamed = StoredEvent {
        seq: 2,
        payload: EventPayload::SessionTitleCommitted {
            title: Some("renamed".into()),
            change: TitleChangeKind::Set,
            client_rename_id: "r1".into(),
        },
        ..session_created("s2")
    };
    let mut opened = event_log::open(&data_dir.session_dir("s2"), 0, |_| ()).unwrap();
    opened.store.append_batch(&[LogEntry { seq: 2, json: EventJson::encode(&renamed).unwrap() }]).unwrap();
    drop(opened);

    let scanned = scan_sessions(&data_dir).unwrap();
    assert!(!data_dir.session_index_path().exists(), "the index is read once");
    assert_eq!(scanned.len(), 2);
    assert!(scanned.iter().all(|session| session.unchecked_log_len.is_some() && session.meta.title.is_none()));
    let unchecked = scanned.iter().map(|session| (session.meta.session_id.clone(), session.unchecked_log_len.unwrap()));
    let read_again = check_sessions(&data_dir, unchecked.collect());
    assert_eq!(read_again.len(), 1, "only the session whose log moved is read again");
    assert_eq!(read_again[0].meta.session_id, "s2");
    assert_eq!(read_again[0].meta.title.as_deref(), Some("renamed"));
    assert_eq!(read_again[0].unchecked_log_len, None);

    // Without an index, the caches (refreshed by the check where they were stale) are read.
    let mut titles: Vec<_> = scan_sessions(&data_dir).unwrap().into_iter().map(|session| session.meta.title).collect();
    titles.sort();
    assert_eq!(titles, [None, Some("renamed".to_owned())]);
}
