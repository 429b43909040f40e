//! Tests of the event log against real files in temporary directories.

use std::os::unix::fs::PermissionsExt;

use troupe_protocol::types::common::{ModelSelection, RunSelection, SessionOrigin, SkippedEvent};
use troupe_protocol::types::events::{EventPayload, StoredEvent};

use super::*;

const SESSION_ID: &str = "0190f5c2-0000-7000-8000-000000000001";

/// A temporary `sessions/` directory and the path of one session in it (not yet created).
fn session_location() -> (tempfile::TempDir, PathBuf) {
    let temp = tempfile::tempdir().unwrap();
    let sessions = temp.path().join("sessions");
    std::fs::create_dir(&sessions).unwrap();
    let session_dir = sessions.join(SESSION_ID);
    (temp, session_dir)
}

fn created_event() -> EventJson {
    EventJson::encode(&StoredEvent {
        session_id: SESSION_ID.to_owned(),
        run_id: None,
        seq: 1,
        timestamp: "2026-01-01T00:00:00.000Z".to_owned(),
        origin: None,
        payload: EventPayload::SessionCreated {
            origin: SessionOrigin::Root,
            cwd: "/work".to_owned(),
            selection: RunSelection {
                agent: "default".to_owned(),
                model: ModelSelection { model: "local/echo".to_owned(), variant: None },
                preset: None,
            },
        },
    })
    .unwrap()
}

fn input_event(seq: u64, input: &str) -> EventJson {
    EventJson::encode(&StoredEvent {
        session_id: SESSION_ID.to_owned(),
        run_id: None,
        seq,
        timestamp: "2026-01-01T00:00:01.000Z".to_owned(),
        origin: Some("user".to_owned()),
        payload: EventPayload::UserInputAdmitted {
            input_id: format!("input-{seq}"),
            input: input.to_owned(),
            attachments: Vec::new(),
        },
    })
    .unwrap()
}

fn seqs(loaded: &LoadedLog) -> Vec<u64> {
    loaded.events.iter().map(|loaded| loaded.event.seq).collect()
}

fn entries(events: &[EventJson]) -> Vec<LogEntry> {
    events.iter().map(|json| LogEntry { seq: json.decode().unwrap().seq, json: json.clone() }).collect()
}

fn append_raw(session_dir: &Path, bytes: &[u8]) {
    let mut file = OpenOptions::new().append(true).open(log_path(session_dir)).unwrap();
    file.write_all(bytes).unwrap();
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn batches_round_trip_with_identical_text_and_sequences() {
    let (_temp, session_dir) = session_location();
    let mut written = vec![created_event()];
    let mut writer = LogWriter::create(&session_dir, &written[0]).unwrap();
    for batch in [vec![2, 3, 4], vec![5], vec![6, 7]] {
        let events: Vec<EventJson> =
            batch.iter().map(|&seq| input_event(seq, "line one\nline two with \"quotes\" and ünïcödé")).collect();
        writer.append_batch(&events).unwrap();
        written.extend(events);
    }
    let file_len = std::fs::metadata(log_path(&session_dir)).unwrap().len();
    assert_eq!(writer.len_bytes(), file_len);
    drop(writer);

    let loaded = load(&session_dir).unwrap();
    assert!(loaded.skipped.is_empty(), "{:?}", loaded.skipped);
    assert_eq!(seqs(&loaded), (1..=7).collect::<Vec<_>>());
    assert_eq!(loaded.last_seq, 7);
    assert_eq!(loaded.store.len_bytes(), file_len);
    for (loaded_event, original) in loaded.events.iter().zip(&written) {
        assert_eq!(loaded_event.json.as_str(), original.as_str());
        assert_eq!(loaded_event.event, original.decode().unwrap());
    }
    let text = std::fs::read_to_string(log_path(&session_dir)).unwrap();
    let expected: String = written.iter().map(|event| format!("{}\n", event.as_str())).collect();
    assert_eq!(text, expected);
}

#[test]
fn appending_after_a_reload_continues_the_log() {
    let (_temp, session_dir) = session_location();
    let mut writer = LogWriter::create(&session_dir, &created_event()).unwrap();
    writer.append_batch(&[input_event(2, "a")]).unwrap();
    drop(writer);

    let mut loaded = load(&session_dir).unwrap();
    loaded.store.append_batch(&entries(&[input_event(3, "b")])).unwrap();
    drop(loaded);

    let reloaded = load(&session_dir).unwrap();
    assert!(reloaded.skipped.is_empty());
    assert_eq!(seqs(&reloaded), [1, 2, 3]);
}

#[test]
fn a_discarded_batch_leaves_the_file_and_later_appends_are_refused() {
    let (_temp, session_dir) = session_location();
    let mut writer = LogWriter::create(&session_dir, &created_event()).unwrap();
    writer.append_batch(&[input_event(2, "a")]).unwrap();
    drop(writer);

    let mut loaded = load(&session_dir).unwrap();
    let before = loaded.store.len_bytes();
    let reader = loaded.store.reader();
    loaded.store.append_batch(&entries(&[input_event(3, "b"), input_event(4, "c")])).unwrap();
    assert_eq!(reader.read_range(2, 4, usize::MAX).unwrap().len(), 2);
    assert!(loaded.store.discard_from(before).unwrap());
    assert_eq!(std::fs::metadata(log_path(&session_dir)).unwrap().len(), before);
    assert!(reader.read_range(2, 4, usize::MAX).unwrap().is_empty(), "a reader stops where the log was cut");
    let refused = loaded.store.append_batch(&entries(&[input_event(3, "b")])).unwrap_err();
    assert!(matches!(refused, RuntimeError::LogPoisoned { .. }), "{refused:?}");
    drop(loaded);

    let reloaded = load(&session_dir).unwrap();
    assert!(reloaded.skipped.is_empty(), "{:?}", reloaded.skipped);
    assert_eq!(seqs(&reloaded), [1, 2]);
}

#[test]
fn files_and_directories_are_private() {
    let (_temp, session_dir) = session_location();
    LogWriter::create(&session_dir, &created_event()).unwrap();
    assert_eq!(mode_of(&session_dir), 0o700);
    assert_eq!(mode_of(&log_path(&session_dir)), 0o600);
}

#[test]
fn creating_an_existing_session_fails_and_leaves_it_alone() {
    let (_temp, session_dir) = session_location();
    let mut writer = LogWriter::create(&session_dir, &created_event()).unwrap();
    writer.append_batch(&[input_event(2, "kept")]).unwrap();
    let error = LogWriter::create(&session_dir, &created_event()).unwrap_err();
    assert!(matches!(error, RuntimeError::SessionAlreadyExists { .. }), "{error:?}");
    assert_eq!(seqs(&load(&session_dir).unwrap()), [1, 2]);
}

#[test]
fn a_missing_log_is_session_not_found() {
    let (_temp, session_dir) = session_location();
    let error = load(&session_dir).unwrap_err();
    assert!(matches!(error, RuntimeError::SessionNotFound { .. }), "{error:?}");
}

#[test]
fn a_corrupt_middle_line_and_a_torn_tail_are_reported_and_the_tail_is_cut_off() {
    let (_temp, session_dir) = session_location();
    let mut writer = LogWriter::create(&session_dir, &created_event()).unwrap();
    writer.append_batch(&[input_event(2, "before")]).unwrap();
    drop(writer);
    // Line 3: garbage that names a secret; line 4: a good event; line 5: half an event, no newline.
    append_raw(&session_dir, b"{\"seq\": 3, secret-user-text\n");
    append_raw(&session_dir, format!("{}\n", input_event(4, "after").as_str()).as_bytes());
    let torn = input_event(5, "torn");
    append_raw(&session_dir, &torn.as_str().as_bytes()[..torn.as_str().len() / 2]);

    let mut loaded = load(&session_dir).unwrap();
    assert_eq!(seqs(&loaded), [1, 2, 4]);
    assert_eq!(loaded.last_seq, 4);
    assert_eq!(
        loaded.skipped,
        [
            SkippedEvent { seq: None, line: Some(3), reason: "invalid JSON (syntax error at column 12)".to_owned() },
            SkippedEvent { seq: None, line: Some(5), reason: TORN_REASON.to_owned() },
        ]
    );
    for skipped in &loaded.skipped {
        assert!(!skipped.reason.contains("secret"));
    }
    let file_len = std::fs::metadata(log_path(&session_dir)).unwrap().len();
    assert!(loaded.store.len_bytes() < file_len);

    // The next append cuts the torn half line off first, so the new line starts on a line of its own.
    loaded.store.append_batch(&entries(&[input_event(5, "retried")])).unwrap();
    let after_append = std::fs::metadata(log_path(&session_dir)).unwrap().len();
    assert_eq!(loaded.store.len_bytes(), after_append);
    drop(loaded);

    let reloaded = load(&session_dir).unwrap();
    assert_eq!(seqs(&reloaded), [1, 2, 4, 5]);
    assert_eq!(reloaded.skipped.len(), 1, "only the corrupt middle line remains: {:?}", reloaded.skipped);
    assert_eq!(reloaded.skipped[0].line, Some(3));
    assert_eq!(reloaded.events[3].json.as_str(), input_event(5, "retried").as_str());
}

#[test]
fn a_complete_but_unterminated_final_line_is_torn_and_reported_by_sequence() {
    let (_temp, session_dir) = session_location();
    LogWriter::create(&session_dir, &created_event()).unwrap();
    append_raw(&session_dir, input_event(2, "never acknowledged").as_str().as_bytes());

    let loaded = load(&session_dir).unwrap();
    assert_eq!(seqs(&loaded), [1]);
    assert_eq!(loaded.skipped, [SkippedEvent { seq: Some(2), line: None, reason: TORN_REASON.to_owned() }]);
}

#[test]
fn a_torn_tail_cut_inside_a_character_is_reported_and_cut_off() {
    let (_temp, session_dir) = session_location();
    let mut writer = LogWriter::create(&session_dir, &created_event()).unwrap();
    writer.append_batch(&[input_event(2, "fine")]).unwrap();
    let valid_len = writer.len_bytes();
    drop(writer);
    let torn = input_event(3, "ééééé");
    let cut = torn.as_str().find('é').unwrap() + 1;
    append_raw(&session_dir, &torn.as_str().as_bytes()[..cut]);

    let mut loaded = load(&session_dir).unwrap();
    assert_eq!(seqs(&loaded), [1, 2]);
    assert_eq!(loaded.skipped, [SkippedEvent { seq: None, line: Some(3), reason: TORN_REASON.to_owned() }]);
    assert_eq!(loaded.store.len_bytes(), valid_len);
    loaded.store.append_batch(&entries(&[input_event(3, "again")])).unwrap();
    drop(loaded);
    let reloaded = load(&session_dir).unwrap();
    assert!(reloaded.skipped.is_empty(), "{:?}", reloaded.skipped);
    assert_eq!(seqs(&reloaded), [1, 2, 3]);
}

#[test]
fn non_increasing_sequences_and_foreign_events_are_skipped() {
    let (_temp, session_dir) = session_location();
    let mut writer = LogWriter::create(&session_dir, &created_event()).unwrap();
    writer
        .append_batch(&[input_event(2, "a"), input_event(3, "b"), input_event(2, "stale"), input_event(3, "dup")])
        .unwrap();
    let foreign = input_event(4, "other").as_str().replace(SESSION_ID, "another-session");
    writer.append_batch(&[EventJson::from_json(foreign).unwrap(), input_event(4, "c")]).unwrap();
    drop(writer);

    let loaded = load(&session_dir).unwrap();
    assert_eq!(seqs(&loaded), [1, 2, 3, 4]);
    assert_eq!(
        loaded.skipped,
        [
            SkippedEvent { seq: Some(2), line: None, reason: "sequence 2 does not increase (previous 3)".to_owned() },
            SkippedEvent { seq: Some(3), line: None, reason: "sequence 3 does not increase (previous 3)".to_owned() },
            SkippedEvent {
                seq: Some(4),
                line: None,
                reason: "session_id does not match the session directory".to_owned(),
            },
        ]
    );
}

#[test]
fn one_damaged_sequence_is_skipped_and_the_intact_lines_after_it_load() {
    let (_temp, session_dir) = session_location();
    let mut writer = LogWriter::create(&session_dir, &created_event()).unwrap();
    // Sequence 4 damaged into 999999 on disk; everything around it intact.
    writer
        .append_batch(&[
            input_event(2, "a"),
            input_event(3, "b"),
            input_event(999_999, "damaged 4"),
            input_event(5, "c"),
            input_event(6, "d"),
        ])
        .unwrap();
    drop(writer);
    let loaded = load(&session_dir).unwrap();
    assert_eq!(seqs(&loaded), [1, 2, 3, 5, 6]);
    assert_eq!(
        loaded.skipped,
        [SkippedEvent {
            seq: Some(999_999),
            line: None,
            reason: "sequence 999999 is out of place (at most 4 can follow 3)".to_owned()
        }]
    );
    assert_eq!(loaded.last_seq, 6, "appends continue after the last good sequence");

    // The damaged line last: appends continue from the last good one, not from the damage.
    let mut store = loaded.store;
    store.append_batch(&entries(&[input_event(7, "e"), input_event(1_000_000, "damaged 8")])).unwrap();
    drop(store);
    let loaded = load(&session_dir).unwrap();
    assert_eq!(seqs(&loaded), [1, 2, 3, 5, 6, 7]);
    assert_eq!(loaded.last_seq, 7);
}

#[test]
fn json_that_is_not_an_event_is_reported_without_its_content() {
    let (_temp, session_dir) = session_location();
    LogWriter::create(&session_dir, &created_event()).unwrap();
    append_raw(&session_dir, b"{\"seq\": 2, \"payload\": \"private words\"}\n");
    append_raw(&session_dir, b"[\"no seq here\"]\n");
    append_raw(&session_dir, b"\n   \n");
    append_raw(&session_dir, &[0xff, 0xfe, b'{', b'\n']);
    append_raw(&session_dir, format!("{}\n", input_event(3, "fine").as_str()).as_bytes());

    let loaded = load(&session_dir).unwrap();
    assert_eq!(seqs(&loaded), [1, 3]);
    assert_eq!(
        loaded.skipped,
        [
            SkippedEvent { seq: Some(2), line: None, reason: "not a valid event: missing or wrong field".to_owned() },
            SkippedEvent { seq: None, line: Some(3), reason: "not a valid event: missing or wrong field".to_owned() },
            SkippedEvent { seq: None, line: Some(6), reason: "not valid UTF-8 (at byte 1 of the line)".to_owned() },
        ]
    );
}

#[test]
fn a_log_whose_first_line_is_not_session_created_loads_the_lines_after_it() {
    let (_temp, session_dir) = session_location();
    let mut writer = LogWriter::create(&session_dir, &input_event(1, "not a creation")).unwrap();
    writer.append_batch(&[input_event(2, "x"), created_event()]).unwrap();
    drop(writer);

    let loaded = load(&session_dir).unwrap();
    assert_eq!(seqs(&loaded), [2]);
    assert_eq!(loaded.last_seq, 2);
    assert_eq!(loaded.skipped.len(), 2);
    assert!(loaded.skipped.iter().all(|skipped| skipped.reason.contains("session_created")), "{:?}", loaded.skipped);
}

#[test]
fn a_damaged_first_line_leaves_the_rest_loadable() {
    let (_temp, session_dir) = session_location();
    std::fs::create_dir(&session_dir).unwrap();
    let mut text = String::from("{\"session_id\": garbage\n");
    for seq in 2..=4 {
        text.push_str(input_event(seq, "intact").as_str());
        text.push('\n');
    }
    std::fs::write(log_path(&session_dir), text).unwrap();
    let loaded = load(&session_dir).unwrap();
    assert_eq!(seqs(&loaded), [2, 3, 4]);
    assert_eq!(
        loaded.skipped,
        [SkippedEvent { seq: None, line: Some(1), reason: "invalid JSON (syntax error at column 16)".to_owned() }]
    );
}

#[test]
fn a_damaged_optional_field_is_repaired_to_null_and_reported() {
    let (_temp, session_dir) = session_location();
    let mut writer = LogWriter::create(&session_dir, &created_event()).unwrap();
    let failed = StoredEvent {
        session_id: SESSION_ID.to_owned(),
        run_id: Some("run-1".to_owned()),
        seq: 2,
        timestamp: "2026-01-01T00:00:02.000Z".to_owned(),
        origin: None,
        payload: EventPayload::RunFailed { error: "boom".to_owned(), model_error: None, resolved_model: None },
    };
    let mut value = serde_json::to_value(&failed).unwrap();
    value["payload"]["model_error"] = serde_json::json!({"kind": 42, "private": "words"});
    writer.append_batch(&[EventJson::from_json(value.to_string()).unwrap(), input_event(3, "after")]).unwrap();
    drop(writer);

    let loaded = load(&session_dir).unwrap();
    assert_eq!(seqs(&loaded), [1, 2, 3]);
    assert!(loaded.skipped.is_empty(), "{:?}", loaded.skipped);
    assert_eq!(loaded.events[1].event, failed);
    assert!(!loaded.events[1].json.as_str().contains("private"));
    assert_eq!(
        loaded.diagnostics,
        [LoadDiagnostic {
            seq: 2,
            detail: "the optional field `model_error` was damaged and is loaded as null".to_owned()
        }]
    );
    // Served from disk, the repaired event is the one that loaded, not the damaged line.
    let reader = loaded.store.reader();
    let read = reader.read_range(1, 3, usize::MAX).unwrap();
    assert_eq!(read.iter().map(|entry| entry.seq).collect::<Vec<_>>(), [2, 3]);
    assert_eq!(read[0].json.as_str(), loaded.events[1].json.as_str());
}

#[test]
fn the_reader_serves_any_range_from_disk_and_skips_what_did_not_load() {
    let (_temp, session_dir) = session_location();
    let mut writer = LogWriter::create(&session_dir, &created_event()).unwrap();
    // Large enough to span many index strides.
    let body = "x".repeat(3000);
    let events: Vec<EventJson> = (2..=200).map(|seq| input_event(seq, &body)).collect();
    writer.append_batch(&events).unwrap();
    drop(writer);
    append_raw(&session_dir, b"not json\n");
    append_raw(&session_dir, format!("{}\n", input_event(150, "stale").as_str()).as_bytes());

    let opened = open(&session_dir, 10_000, |_| {}).unwrap();
    assert!(opened.tail.len() < 10, "the tail is bounded: {}", opened.tail.len());
    assert_eq!(opened.tail.back().unwrap().seq, 200);
    let mut store = opened.store;
    store.append_batch(&entries(&[input_event(201, "appended")])).unwrap();
    let reader = store.reader();
    for (after, through) in [(0, 201), (1, 5), (99, 120), (150, 151), (199, 201), (200, 201)] {
        let read = reader.read_range(after, through, usize::MAX).unwrap();
        assert_eq!(read.iter().map(|entry| entry.seq).collect::<Vec<_>>(), ((after + 1)..=through).collect::<Vec<_>>());
    }
    assert!(reader.read_range(201, 300, usize::MAX).unwrap().is_empty());
    let page = reader.read_range(0, 201, 10_000).unwrap();
    assert_eq!(page.len(), 4, "stops once the byte bound is reached");
    assert_eq!(page[0].json.as_str(), created_event().as_str());
}

#[test]
fn an_empty_log_loads_empty_and_is_reported() {
    let (_temp, session_dir) = session_location();
    std::fs::create_dir(&session_dir).unwrap();
    std::fs::write(log_path(&session_dir), b"").unwrap();

    let loaded = load(&session_dir).unwrap();
    assert!(loaded.events.is_empty());
    assert_eq!(loaded.skipped.len(), 1);
    assert_eq!(loaded.skipped[0].seq, Some(1));
    assert_eq!(loaded.store.len_bytes(), 0);
}

#[test]
fn an_event_containing_a_raw_newline_is_refused_without_poisoning() {
    let (_temp, session_dir) = session_location();
    let mut writer = LogWriter::create(&session_dir, &created_event()).unwrap();
    let pretty = serde_json::to_string_pretty(&input_event(2, "x").decode().unwrap()).unwrap();
    let error = writer.append_batch(&[input_event(2, "x"), EventJson::from_json(pretty).unwrap()]).unwrap_err();
    assert!(matches!(error, RuntimeError::EventNotOneLine { index: 1, .. }), "{error:?}");
    assert!(!writer.is_poisoned());
    writer.append_batch(&[input_event(2, "x")]).unwrap();
    assert_eq!(seqs(&load(&session_dir).unwrap()), [1, 2]);
}

#[test]
fn a_failed_write_poisons_the_writer() {
    let (_temp, session_dir) = session_location();
    let mut writer = LogWriter::create(&session_dir, &created_event()).unwrap();
    // The seam: a read-only handle makes every write fail with EBADF, even for root.
    writer.file = File::open(log_path(&session_dir)).unwrap();
    let error = writer.append_batch(&[input_event(2, "lost")]).unwrap_err();
    assert!(matches!(error, RuntimeError::Io { .. }), "{error:?}");
    assert!(writer.is_poisoned());

    // Even with a working file again, the writer refuses until the session is reloaded.
    writer.file = OpenOptions::new().append(true).open(log_path(&session_dir)).unwrap();
    let error = writer.append_batch(&[input_event(2, "refused")]).unwrap_err();
    assert!(matches!(error, RuntimeError::LogPoisoned { .. }), "{error:?}");
    assert!(writer.append_batch(&[]).is_err());

    let mut reloaded = load(&session_dir).unwrap();
    assert_eq!(seqs(&reloaded), [1]);
    reloaded.store.append_batch(&entries(&[input_event(2, "after reload")])).unwrap();
}

#[test]
fn an_empty_batch_writes_nothing() {
    let (_temp, session_dir) = session_location();
    let mut writer = LogWriter::create(&session_dir, &created_event()).unwrap();
    let before = writer.len_bytes();
    writer.append_batch(&[]).unwrap();
    assert_eq!(writer.len_bytes(), before);
}

/// Compares the loader with the least any loader must do: parse every line into a `StoredEvent` and keep it,
/// plus `EventJson::from_json` (which validates the text again). Timing only; it asserts nothing about speed.
#[test]
#[ignore = "timing measurement: cargo test --release -p troupe-runtime loader_timing -- --ignored --nocapture"]
fn loader_timing_against_plain_parsing() {
    let mut text = format!("{}\n", created_event().as_str());
    for seq in 2..=50_000u64 {
        let input = "some user text with a \"quote\" and more words ".repeat((seq % 10 + 1) as usize);
        text.push_str(input_event(seq, &input).as_str());
        text.push('\n');
    }
    let bytes = text.into_bytes();
    let lines: Vec<&str> = std::str::from_utf8(&bytes).unwrap().lines().collect();
    let best_of_seven = |work: &dyn Fn() -> usize| {
        (0..7)
            .map(|_| {
                let started = std::time::Instant::now();
                std::hint::black_box(work());
                started.elapsed().as_secs_f64()
            })
            .fold(f64::MAX, f64::min)
    };
    let typed = best_of_seven(&|| {
        let events: Vec<StoredEvent> = lines.iter().map(|line| serde_json::from_str(line).unwrap()).collect();
        events.len()
    });
    let typed_and_text = best_of_seven(&|| {
        let events: Vec<(StoredEvent, EventJson)> = lines
            .iter()
            .map(|line| {
                let event: StoredEvent = serde_json::from_str(line).unwrap();
                (event, EventJson::from_json((*line).to_owned()).unwrap())
            })
            .collect();
        events.len()
    });
    let loader = best_of_seven(&|| {
        let mut events = Vec::new();
        // What a session's load keeps of each line: its typed event (the projection's input).
        load::scan(&bytes[..], SESSION_ID, |event, _| events.push(event.clone())).unwrap();
        events.len()
    });
    eprintln!(
        "typed {:.1} ms, typed + EventJson {:.1} ms, loader {:.1} ms: loader / typed = {:.2}",
        typed * 1e3,
        typed_and_text * 1e3,
        loader * 1e3,
        loader / typed
    );
}

#[test]
fn a_scan_finds_the_same_lines_whatever_its_reader_buffer_holds() {
    // Every kind of line the scan tells apart: good ones, a blank one, bad UTF-8, a sequence that jumps and then
    // turns out real (a lost line), one that does not increase, and a torn tail cut inside a character.
    let mut log = Vec::new();
    for line in [created_event(), input_event(2, "two"), input_event(4, "four (3 was lost)"), input_event(5, "five")] {
        log.extend_from_slice(line.as_str().as_bytes());
        log.push(b'\n');
    }
    log.extend_from_slice(b"  \n");
    log.extend_from_slice(b"{\"seq\":6,\"bad\":\"\xff\"}\n");
    log.extend_from_slice(input_event(5, "again").as_str().as_bytes());
    log.push(b'\n');
    let torn = input_event(7, "torn \u{e9}");
    let inside_the_character = torn.as_str().find('\u{e9}').unwrap() + 1;
    log.extend_from_slice(&torn.as_str().as_bytes()[..inside_the_character]);

    let scan_with = |capacity: usize| {
        let mut events = Vec::new();
        let reader = std::io::BufReader::with_capacity(capacity, &log[..]);
        let scanned = load::scan(reader, SESSION_ID, |event, text| events.push((event.seq, text.to_owned()))).unwrap();
        // What the store reads by later (the index, the excluded lines, the line counts) must not differ either.
        let facts = format!("{:?}", scanned.facts);
        (events, scanned.checker.skipped, scanned.checker.last_seq, scanned.complete_len, scanned.total_len, facts)
    };
    let whole = scan_with(log.len() + 1);
    assert_eq!(whole.0.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(), [1, 2, 4, 5]);
    assert_eq!(whole.0[2].1, input_event(4, "four (3 was lost)").as_str());
    assert_eq!(whole.1[0].reason, "missing: no line of the log holds sequence 3", "{:?}", whole.1);
    assert_eq!(whole.1.len(), 4, "{:?}", whole.1);
    assert_eq!(whole.1.last().unwrap().reason, TORN_REASON);
    assert_eq!((whole.3, whole.4), ((log.len() - inside_the_character) as u64, log.len() as u64));
    for capacity in [1, 2, 7, 64, 333] {
        assert_eq!(scan_with(capacity), whole, "a reader buffer of {capacity} bytes");
    }
}

/// Writes `lines` (event texts, or raw text) as a log, each ending in a newline.
fn write_lines(session_dir: &Path, lines: &[String]) {
    std::fs::create_dir(session_dir).unwrap();
    let text: String = lines.iter().map(|line| format!("{line}\n")).collect();
    std::fs::write(log_path(session_dir), text).unwrap();
}

fn numbered(seqs: std::ops::RangeInclusive<u64>) -> Vec<String> {
    seqs.map(|seq| if seq == 1 { created_event() } else { input_event(seq, "x") }.as_str().to_owned()).collect()
}

#[test]
fn a_lost_line_keeps_the_lines_after_it_and_appends_never_reuse_their_sequences() {
    let (_temp, session_dir) = session_location();
    let mut lines = numbered(1..=10);
    lines.remove(4); // seq 5 is gone
    write_lines(&session_dir, &lines);
    let loaded = load(&session_dir).unwrap();
    assert_eq!(seqs(&loaded), [1, 2, 3, 4, 6, 7, 8, 9, 10]);
    let lost = SkippedEvent { seq: Some(5), line: None, reason: "missing: no line of the log holds sequence 5".into() };
    assert_eq!(loaded.skipped, [lost]);
    assert_eq!(loaded.last_seq, 10, "the next append is 11, never a second 6");
    let read = loaded.store.reader().read_range(4, 10, usize::MAX).unwrap();
    assert_eq!(read.iter().map(|entry| entry.seq).collect::<Vec<_>>(), [6, 7, 8, 9, 10]);
}

#[test]
fn two_lines_merged_by_a_lost_newline_cost_only_themselves() {
    let (_temp, session_dir) = session_location();
    let mut lines = numbered(1..=10);
    let seventh = lines.remove(6);
    lines[5].push_str(&seventh); // 6 and 7 on one line
    write_lines(&session_dir, &lines);
    let loaded = load(&session_dir).unwrap();
    assert_eq!(seqs(&loaded), [1, 2, 3, 4, 5, 8, 9, 10]);
    assert_eq!(loaded.skipped.len(), 2, "{:?}", loaded.skipped);
    assert_eq!(loaded.skipped[0].line, Some(6));
    // Two events on one damaged line: one of their sequences has no line of its own.
    assert_eq!(loaded.skipped[1].reason, "missing: 1 of the sequences 6 to 7 have no line in the log");
}

#[test]
fn a_damaged_sequence_after_junk_is_told_apart_by_the_line_after_it() {
    let (_temp, session_dir) = session_location();
    let mut lines = numbered(1..=10);
    lines[4] = "junk".to_owned(); // 5 unreadable
    lines[5] = "more junk".to_owned(); // 6 unreadable
    lines[6] = input_event(9, "7 damaged into 9").as_str().to_owned();
    write_lines(&session_dir, &lines);
    let loaded = load(&session_dir).unwrap();
    assert_eq!(seqs(&loaded), [1, 2, 3, 4, 8, 9, 10], "the damaged 9 does not hide the real 8, 9, 10");
    // Three damaged lines stand for 5, 6 and 7: nothing is reported as lost besides them.
    assert_eq!(loaded.skipped.len(), 3, "{:?}", loaded.skipped);
    assert!(loaded.skipped.iter().any(|skipped| skipped.seq == Some(9) && skipped.reason.contains("out of place")));
}

#[test]
fn a_last_line_after_a_lost_line_is_kept_and_a_wildly_damaged_one_is_not() {
    let (_temp, session_dir) = session_location();
    let mut lines = numbered(1..=6);
    lines.remove(4); // 5 lost, 6 is the last line
    write_lines(&session_dir, &lines);
    let loaded = load(&session_dir).unwrap();
    assert_eq!(seqs(&loaded), [1, 2, 3, 4, 6]);
    assert_eq!(loaded.last_seq, 6);
    assert_eq!(loaded.skipped.iter().map(|skipped| skipped.seq).collect::<Vec<_>>(), [Some(5)]);

    let (_other, damaged_dir) = session_location();
    let mut lines = numbered(1..=5);
    lines.push(input_event(999_999, "damaged last").as_str().to_owned());
    write_lines(&damaged_dir, &lines);
    let loaded = load(&damaged_dir).unwrap();
    assert_eq!(seqs(&loaded), [1, 2, 3, 4, 5]);
    assert_eq!(loaded.last_seq, 5, "appends continue after the last good sequence, not at 1,000,000");
}

/// The fence between a session's instances: a writer that is still finishing a batch (an instance that crashed
/// meanwhile) holds the log, and the next instance's open waits for it, then loads after that batch. Without the
/// lock the second open would load the log without the batch and number its next event like the batch's.
#[test]
fn a_second_writer_waits_for_the_first_and_loads_after_its_last_batch() {
    let (_temp, session_dir) = session_location();
    let mut first = LogWriter::create(&session_dir, &created_event()).unwrap();
    let (opened, opening) = std::sync::mpsc::channel();
    let successor = {
        let session_dir = session_dir.clone();
        std::thread::spawn(move || {
            let projected = open_projected(&session_dir, 0);
            let _ = opened.send(());
            projected.map(|projected| projected.opened.last_seq)
        })
    };
    assert!(
        opening.recv_timeout(std::time::Duration::from_millis(300)).is_err(),
        "the successor opened the log while its writer was still writing"
    );
    first.append_batch(&[input_event(2, "the last batch of the crashed instance")]).unwrap();
    drop(first);
    assert_eq!(successor.join().unwrap().unwrap(), 2, "the successor loads after the batch");
}

#[test]
fn a_writer_that_never_lets_go_makes_the_open_fail_in_words() {
    let (_temp, session_dir) = session_location();
    let _first = LogWriter::create(&session_dir, &created_event()).unwrap();
    let started = std::time::Instant::now();
    let error = open_projected(&session_dir, 0).unwrap_err();
    assert!(started.elapsed() >= WRITER_LOCK_WAIT, "it waited for the writer first");
    assert!(matches!(error, RuntimeError::LogInUse { .. }), "{error:?}");
    assert!(error.to_string().contains("still held by another writer"), "{error}");
}
