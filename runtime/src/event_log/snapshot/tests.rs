//! Tests of projection snapshots against real logs: a load through a snapshot gives what a whole scan gives, and
//! any mismatch makes the load scan the whole log.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use troupe_protocol::types::common::{ModelSelection, RunSelection, SessionOrigin};
use troupe_protocol::types::events::{EventJson, EventPayload, StoredEvent, TitleChangeKind};

use super::super::{EventStore, LogEntry, LogWriter, ProjectedLog, SnapshotUse, log_path, open_projected};
use super::*;

const SESSION_ID: &str = "0190f5c2-0000-7000-8000-0000000000aa";
const TAIL: usize = 4096;

fn session_location() -> (tempfile::TempDir, PathBuf) {
    let temp = tempfile::tempdir().unwrap();
    let sessions = temp.path().join("sessions");
    std::fs::create_dir(&sessions).unwrap();
    let session_dir = sessions.join(SESSION_ID);
    (temp, session_dir)
}

fn event(seq: u64, payload: EventPayload) -> EventJson {
    EventJson::encode(&StoredEvent {
        session_id: SESSION_ID.to_owned(),
        run_id: None,
        seq,
        timestamp: format!("2026-01-01T00:00:{:02}.000Z", seq % 60),
        origin: Some("user".to_owned()),
        payload,
    })
    .unwrap()
}

fn created() -> EventJson {
    let payload = EventPayload::SessionCreated {
        origin: SessionOrigin::Root,
        cwd: "/work".to_owned(),
        selection: RunSelection {
            agent: "default".to_owned(),
            model: ModelSelection { model: "local/echo".to_owned(), variant: None },
            preset: None,
        },
    };
    EventJson::encode(&StoredEvent {
        session_id: SESSION_ID.to_owned(),
        run_id: None,
        seq: 1,
        timestamp: "2026-01-01T00:00:00.000Z".to_owned(),
        origin: None,
        payload,
    })
    .unwrap()
}

/// A rename or a user input, alternating, so the projection has titles, renames and history.
fn ordinary(seq: u64) -> EventJson {
    if seq.is_multiple_of(2) {
        let payload = EventPayload::SessionTitleCommitted {
            title: Some(format!("title {seq}")),
            change: TitleChangeKind::Set,
            client_rename_id: format!("rename-{seq}"),
        };
        event(seq, payload)
    } else {
        event(
            seq,
            EventPayload::UserInputAdmitted {
                input_id: format!("input-{seq}"),
                input: format!("say {seq}"),
                attachments: Vec::new(),
            },
        )
    }
}

fn write_log(session_dir: &Path, through: u64) {
    let mut writer = LogWriter::create(session_dir, &created()).unwrap();
    let events: Vec<EventJson> = (2..=through).map(ordinary).collect();
    writer.append_batch(&events).unwrap();
}

fn append_raw(session_dir: &Path, bytes: &[u8]) {
    let mut file = OpenOptions::new().append(true).open(log_path(session_dir)).unwrap();
    file.write_all(bytes).unwrap();
}

fn append_events(session_dir: &Path, seqs: std::ops::RangeInclusive<u64>) {
    for seq in seqs {
        append_raw(session_dir, format!("{}\n", ordinary(seq).as_str()).as_bytes());
    }
}

/// Loads and writes the snapshot of the projection, as a load that found none does.
fn load_and_snapshot(session_dir: &Path) -> u64 {
    let projected = open_projected(session_dir, TAIL).unwrap();
    let pending = projected.opened.store.snapshot_of_projection(&projected.state).expect("a snapshot of the load");
    let covered = pending.covered_len();
    pending.write(session_dir).unwrap();
    assert_eq!(covered_len(session_dir), Some(covered));
    covered
}

/// What a load gives that a snapshot must not change, comparable (the state as JSON, with maps sorted).
fn observable(projected: &ProjectedLog) -> serde_json::Value {
    let store = &projected.opened.store;
    let all = store.reader().read_range(0, u64::MAX, usize::MAX).unwrap();
    serde_json::json!({
        "state": serde_json::to_value(&projected.state).unwrap(),
        "last_seq": projected.opened.last_seq,
        "skipped": projected.opened.skipped,
        "diagnostics": projected.opened.diagnostics,
        "tail": projected.opened.tail.iter().map(|entry| entry.seq).collect::<Vec<_>>(),
        "replay": all.iter().map(|entry| entry.json.as_str().to_owned()).collect::<Vec<_>>(),
        "len": store.len_bytes(),
        "torn": store.has_torn_tail(),
    })
}

/// What `projected` gives equals the load of the same log without the snapshot. `projected` is dropped first: its
/// store holds the log's writer lock, which the second load takes.
fn assert_same_as_full_scan(projected: ProjectedLog, session_dir: &Path) {
    let seen = observable(&projected);
    drop(projected);
    assert_eq!(seen, full_scan(session_dir));
}

/// The load without the snapshot (moved aside and put back).
fn full_scan(session_dir: &Path) -> serde_json::Value {
    let path = snapshot_path(session_dir);
    let aside = session_dir.join("aside.snap");
    let moved = std::fs::rename(&path, &aside).is_ok();
    let projected = open_projected(session_dir, TAIL).unwrap();
    assert!(matches!(projected.snapshot, SnapshotUse::Missing));
    if moved {
        std::fs::rename(&aside, &path).unwrap();
    }
    observable(&projected)
}

#[test]
fn a_stale_snapshot_scans_only_the_new_lines_and_equals_a_whole_scan() {
    let (_temp, session_dir) = session_location();
    write_log(&session_dir, 400);
    let covered = load_and_snapshot(&session_dir);
    assert_eq!(covered, std::fs::metadata(log_path(&session_dir)).unwrap().len());

    // Unchanged: nothing to scan.
    let projected = open_projected(&session_dir, TAIL).unwrap();
    assert!(matches!(projected.snapshot, SnapshotUse::Used { covered_len } if covered_len == covered));
    assert_eq!(projected.scanned_bytes, 0);
    assert_same_as_full_scan(projected, &session_dir);

    // Appended after the snapshot: only the new lines are scanned.
    append_events(&session_dir, 401..=450);
    let log_len = std::fs::metadata(log_path(&session_dir)).unwrap().len();
    let projected = open_projected(&session_dir, TAIL).unwrap();
    assert!(matches!(projected.snapshot, SnapshotUse::Used { .. }), "{:?}", projected.snapshot);
    assert_eq!(projected.scanned_bytes, log_len - covered);
    assert_eq!(projected.state.last_event_seq, 450);
    assert_eq!(projected.state.title.as_deref(), Some("title 450"));
    assert_same_as_full_scan(projected, &session_dir);

    // The store it gives appends and indexes as a scanned one does.
    let mut store = open_projected(&session_dir, TAIL).unwrap().opened.store;
    store.append_batch(&[LogEntry { seq: 451, json: ordinary(451) }]).unwrap();
    let replay = store.reader().read_range(440, 451, usize::MAX).unwrap();
    assert_eq!(replay.iter().map(|entry| entry.seq).collect::<Vec<_>>(), (441..=451).collect::<Vec<_>>());
}

#[test]
fn a_live_snapshot_after_appends_through_the_store_matches_a_whole_scan() {
    let (_temp, session_dir) = session_location();
    write_log(&session_dir, 50);
    let projected = open_projected(&session_dir, TAIL).unwrap();
    let (mut store, mut state) = (projected.opened.store, projected.state);
    for seq in 51..=80 {
        let json = ordinary(seq);
        state.apply(&json.decode().unwrap());
        store.append_batch(&[LogEntry { seq, json }]).unwrap();
    }
    store.snapshot_of_live(&state).expect("a live snapshot").write(&session_dir).unwrap();
    drop(store);
    append_events(&session_dir, 81..=90);
    let projected = open_projected(&session_dir, TAIL).unwrap();
    assert!(matches!(projected.snapshot, SnapshotUse::Used { .. }), "{:?}", projected.snapshot);
    assert_same_as_full_scan(projected, &session_dir);
}

#[test]
fn a_live_state_with_events_not_yet_durable_is_not_snapshotted() {
    let (_temp, session_dir) = session_location();
    write_log(&session_dir, 10);
    let projected = open_projected(&session_dir, TAIL).unwrap();
    let mut state = projected.state;
    state.apply(&ordinary(11).decode().unwrap());
    assert!(projected.opened.store.snapshot_of_live(&state).is_none());
}

#[test]
fn a_truncated_or_rewritten_log_is_scanned_whole() {
    let (_temp, session_dir) = session_location();
    write_log(&session_dir, 100);
    let covered = load_and_snapshot(&session_dir);

    // Rewritten in place: the last covered line differs (same length).
    let text = std::fs::read_to_string(log_path(&session_dir)).unwrap();
    let rewritten = text.replacen("title 100", "title 1X0", 1);
    assert_ne!(text, rewritten);
    std::fs::write(log_path(&session_dir), &rewritten).unwrap();
    let projected = open_projected(&session_dir, TAIL).unwrap();
    assert!(matches!(projected.snapshot, SnapshotUse::Refused(SnapshotRefusal::LineDiffers { .. })));
    assert_eq!(projected.state.title.as_deref(), Some("title 1X0"));
    assert_same_as_full_scan(projected, &session_dir);

    // Truncated: shorter than the snapshot covers.
    let shorter: String = text.lines().take(60).map(|line| format!("{line}\n")).collect();
    assert!((shorter.len() as u64) < covered);
    std::fs::write(log_path(&session_dir), &shorter).unwrap();
    let projected = open_projected(&session_dir, TAIL).unwrap();
    assert!(matches!(projected.snapshot, SnapshotUse::Refused(SnapshotRefusal::LogShorter { .. })));
    assert_eq!(projected.state.last_event_seq, 60);
    assert_same_as_full_scan(projected, &session_dir);

    // Cut and regrown past the covered length with other lines: the line at the covered end is another.
    for seq in 61..=130 {
        let other = event(
            seq,
            EventPayload::UserInputAdmitted {
                input_id: format!("other-{seq}"),
                input: "x".into(),
                attachments: Vec::new(),
            },
        );
        append_raw(&session_dir, format!("{}\n", other.as_str()).as_bytes());
    }
    assert!(std::fs::metadata(log_path(&session_dir)).unwrap().len() > covered);
    let projected = open_projected(&session_dir, TAIL).unwrap();
    assert!(matches!(projected.snapshot, SnapshotUse::Refused(_)), "{:?}", projected.snapshot);
    assert_same_as_full_scan(projected, &session_dir);
}

#[test]
fn another_format_version_is_rebuilt() {
    let (_temp, session_dir) = session_location();
    write_log(&session_dir, 20);
    load_and_snapshot(&session_dir);
    let bytes = std::fs::read_to_string(snapshot_path(&session_dir)).unwrap();
    let changed = bytes.replacen(&format!("{{\"format\":{SNAPSHOT_FORMAT},"), "{\"format\":999,", 1);
    assert_ne!(bytes, changed);
    std::fs::write(snapshot_path(&session_dir), changed).unwrap();
    let projected = open_projected(&session_dir, TAIL).unwrap();
    assert!(matches!(projected.snapshot, SnapshotUse::Refused(SnapshotRefusal::Format { found: 999 })));
    assert_same_as_full_scan(projected, &session_dir);
}

#[test]
fn a_corrupt_snapshot_is_rebuilt() {
    let (_temp, session_dir) = session_location();
    write_log(&session_dir, 20);
    load_and_snapshot(&session_dir);
    let expected = full_scan(&session_dir);
    let bytes = std::fs::read(snapshot_path(&session_dir)).unwrap();
    let header_end = bytes.iter().position(|&byte| byte == b'\n').unwrap();
    for damaged in [
        bytes[..header_end + 20].to_vec(),
        [&bytes[..header_end + 1], b"{\"point\":1}"].concat(),
        b"not json at all".to_vec(),
        Vec::new(),
    ] {
        std::fs::write(snapshot_path(&session_dir), &damaged).unwrap();
        let projected = open_projected(&session_dir, TAIL).unwrap();
        assert!(
            matches!(projected.snapshot, SnapshotUse::Refused(SnapshotRefusal::Decode(_))),
            "{:?}",
            projected.snapshot
        );
        assert_eq!(observable(&projected), expected);
    }
}

#[test]
fn another_sessions_snapshot_is_refused() {
    let (temp, session_dir) = session_location();
    write_log(&session_dir, 20);
    load_and_snapshot(&session_dir);
    // A copy of the directory under another name (as a careless copy would make): its lines name the other
    // session, so the loader skips them all; the snapshot must not stand in for them.
    let other = temp.path().join("sessions").join("0190f5c2-0000-7000-8000-0000000000bb");
    std::fs::create_dir(&other).unwrap();
    std::fs::copy(log_path(&session_dir), log_path(&other)).unwrap();
    std::fs::copy(snapshot_path(&session_dir), snapshot_path(&other)).unwrap();
    let projected = open_projected(&other, TAIL).unwrap();
    assert!(matches!(projected.snapshot, SnapshotUse::Refused(SnapshotRefusal::OtherSession)));
    assert!(projected.state.creation_lost);
}

#[test]
fn skipped_lines_and_a_torn_tail_load_as_a_whole_scan_does() {
    let (_temp, session_dir) = session_location();
    write_log(&session_dir, 30);
    append_raw(&session_dir, b"{not json}\n");
    append_events(&session_dir, 31..=40);
    append_raw(&session_dir, b"{\"torn\":");
    let projected = open_projected(&session_dir, TAIL).unwrap();
    assert_eq!(projected.opened.skipped.len(), 2, "{:?}", projected.opened.skipped);
    projected.opened.store.snapshot_of_projection(&projected.state).unwrap().write(&session_dir).unwrap();
    drop(projected);

    // The torn line is past the snapshot: it is reported again, once.
    let projected = open_projected(&session_dir, TAIL).unwrap();
    assert!(matches!(projected.snapshot, SnapshotUse::Used { .. }), "{:?}", projected.snapshot);
    assert_eq!(projected.opened.skipped.len(), 2, "{:?}", projected.opened.skipped);
    assert!(projected.opened.store.has_torn_tail());
    assert_same_as_full_scan(projected, &session_dir);

    // An append cuts the torn line off; the skipped line before the snapshot is still reported.
    let mut store = open_projected(&session_dir, TAIL).unwrap().opened.store;
    assert!(store.has_torn_tail());
    store.append_batch(&[LogEntry { seq: 41, json: ordinary(41) }]).unwrap();
    drop(store);
    let projected = open_projected(&session_dir, TAIL).unwrap();
    assert!(matches!(projected.snapshot, SnapshotUse::Used { .. }), "{:?}", projected.snapshot);
    assert_eq!(projected.opened.skipped.len(), 1, "{:?}", projected.opened.skipped);
    assert_eq!(projected.state.last_event_seq, 41);
    assert_same_as_full_scan(projected, &session_dir);
}

#[test]
fn reverts_across_a_snapshot_settle_as_after_a_whole_scan() {
    let (_temp, session_dir) = session_location();
    write_log(&session_dir, 20);
    // A revert to 10, then more events: the snapshot holds the projection before settling.
    append_raw(
        &session_dir,
        format!("{}\n", event(21, EventPayload::SessionReverted { through_seq: 10 }).as_str()).as_bytes(),
    );
    append_events(&session_dir, 22..=24);
    let projected = open_projected(&session_dir, TAIL).unwrap();
    assert!(
        projected.opened.store.snapshot_of_live(&projected.state).is_none(),
        "a live state with reverts is settled"
    );
    projected.opened.store.snapshot_of_projection(&projected.state).unwrap().write(&session_dir).unwrap();
    drop(projected);
    // A second revert after the snapshot, into the hidden branch's neighbourhood.
    append_raw(
        &session_dir,
        format!("{}\n", event(25, EventPayload::SessionReverted { through_seq: 22 }).as_str()).as_bytes(),
    );
    append_events(&session_dir, 26..=27);

    let settled = |projected: ProjectedLog| {
        let mut state = projected.state;
        crate::branch::settle_loaded(&mut state, &*projected.opened.store.reader()).unwrap();
        serde_json::to_value(&state).unwrap()
    };
    let through_snapshot = open_projected(&session_dir, TAIL).unwrap();
    assert!(matches!(through_snapshot.snapshot, SnapshotUse::Used { .. }), "{:?}", through_snapshot.snapshot);
    let through_snapshot = settled(through_snapshot);
    std::fs::remove_file(snapshot_path(&session_dir)).unwrap();
    let whole = settled(open_projected(&session_dir, TAIL).unwrap());
    assert_eq!(through_snapshot, whole);
    assert_eq!(whole["title"], "title 26");
}
