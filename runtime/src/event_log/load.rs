//! The load path: the log is read as a stream of lines, each checked on its own (see `check`), and handed to the
//! caller one by one, so loading a session of any size needs memory for its projection and a bounded tail only.

use std::collections::VecDeque;
use std::fs::OpenOptions;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

use troupe_protocol::types::common::SkippedEvent;
use troupe_protocol::types::events::{EventJson, StoredEvent};

use super::check::{Accepted, LineChecker, LoadDiagnostic, TORN_REASON, read_seq};
use super::store::{FileEventStore, FileFacts, LogEntry};
use super::{LogWriter, log_path};
use crate::error::RuntimeError;

/// A session's log as opened for serving: the store, the newest events, and what could not be loaded.
#[derive(Debug)]
pub struct OpenedLog {
    pub store: FileEventStore,
    /// The newest accepted events, oldest first, at most the requested tail bytes (and at least the last event).
    pub tail: VecDeque<LogEntry>,
    /// Lines that were not loaded, in file order. Empty when the whole log loaded.
    pub skipped: Vec<SkippedEvent>,
    /// Events loaded after repairing a damaged optional field.
    pub diagnostics: Vec<LoadDiagnostic>,
    /// The sequence of the last accepted event; 0 when none was accepted.
    pub last_seq: u64,
}

/// Opens the log in `session_dir` for serving. Each accepted event is passed to `visit` in order (to build the
/// projection); the newest ones, up to `tail_bytes` of event text (and at least the last), are kept in
/// [`OpenedLog::tail`]. Bad lines are skipped and reported, never fatal; the error cases are a missing log
/// ([`RuntimeError::SessionNotFound`]) and failing to read it.
///
/// The directory's name is the session id every line must carry.
pub fn open(
    session_dir: &Path,
    tail_bytes: usize,
    mut visit: impl FnMut(&StoredEvent),
) -> Result<OpenedLog, RuntimeError> {
    // The scan keeps no event text: the tail is read back afterwards by seeking near the end of the log, which is
    // cheaper than copying every line in case it turns out to be among the last.
    let (store, checker) = open_scanning(session_dir, |event, _| visit(event))?;
    let tail = if tail_bytes == 0 { VecDeque::new() } else { store.read_tail(tail_bytes)? };
    Ok(OpenedLog {
        store,
        tail,
        last_seq: checker.last_seq,
        skipped: checker.skipped,
        diagnostics: checker.diagnostics,
    })
}

/// Opens the log and scans it whole, passing each accepted event and the text it is served as to `accept`.
fn open_scanning(
    session_dir: &Path,
    accept: impl FnMut(&StoredEvent, &str),
) -> Result<(FileEventStore, LineChecker<'_>), RuntimeError> {
    crate::blocking::assert_may_block();
    let path = log_path(session_dir);
    let file = match OpenOptions::new().read(true).append(true).open(&path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Err(RuntimeError::SessionNotFound { session_dir: session_dir.to_path_buf() });
        }
        Err(error) => return Err(RuntimeError::io("open the event log", &path, error)),
    };
    let reading = file.try_clone().map_err(|error| RuntimeError::io("open the event log", &path, error))?;
    let session_id = session_dir.file_name().and_then(|name| name.to_str()).unwrap_or_default();
    let scanned = scan(BufReader::with_capacity(256 * 1024, reading), session_id, accept)
        .map_err(|error| RuntimeError::io("read the event log", &path, error))?;
    if !scanned.checker.skipped.is_empty() {
        // One summary per load rather than one per line: a log whose first line is lost skips every line.
        tracing::warn!(path = %path.display(), skipped = scanned.checker.skipped.len(), "skipped lines of an event log");
    }
    let writer = LogWriter {
        file,
        path,
        valid_len: scanned.complete_len,
        truncate_before_next_append: scanned.complete_len < scanned.total_len,
        poisoned: false,
        metrics: None,
    };
    let mut facts = scanned.facts;
    facts.set_committed_len(scanned.complete_len);
    Ok((FileEventStore::new(writer, facts), scanned.checker))
}

/// A session's whole log, loaded into memory (tests, tools and benchmarks; the engine serves through [`open`]).
#[derive(Debug)]
pub struct LoadedLog {
    /// The accepted events, in order, each with the text it is served as.
    pub events: Vec<LoadedEvent>,
    /// Lines that were not loaded, in file order. Empty when the whole log loaded.
    pub skipped: Vec<SkippedEvent>,
    pub diagnostics: Vec<LoadDiagnostic>,
    /// The store, positioned after the last complete line.
    pub store: FileEventStore,
    /// The sequence of the last accepted event; 0 when none was accepted.
    pub last_seq: u64,
}

/// One accepted event: the typed record and the text it is served as.
#[derive(Clone, Debug)]
pub struct LoadedEvent {
    pub event: StoredEvent,
    pub json: EventJson,
}

/// Loads the whole log in `session_dir` into memory.
pub fn load(session_dir: &Path) -> Result<LoadedLog, RuntimeError> {
    let mut events = Vec::new();
    let (store, checker) = open_scanning(session_dir, |event, text| {
        // The text parsed as this event, so it is one JSON value.
        if let Ok(json) = EventJson::from_json(text.to_owned()) {
            events.push(LoadedEvent { event: event.clone(), json });
        }
    })?;
    Ok(LoadedLog {
        events,
        skipped: checker.skipped,
        diagnostics: checker.diagnostics,
        store,
        last_seq: checker.last_seq,
    })
}

/// What a scan of the whole file found.
pub(super) struct Scanned<'a> {
    pub(super) checker: LineChecker<'a>,
    pub(super) facts: FileFacts,
    /// Bytes up to and including the last `\n`.
    pub(super) complete_len: u64,
    pub(super) total_len: u64,
}

/// Checks every line of a log, in one pass over `reader`, passing each accepted event to `accept` with the text
/// it is served as.
pub(super) fn scan<'a>(
    mut reader: impl BufRead,
    session_id: &'a str,
    mut accept: impl FnMut(&StoredEvent, &str),
) -> io::Result<Scanned<'a>> {
    let mut checker = LineChecker::new(session_id);
    let mut facts = FileFacts::default();
    let mut line = Vec::new();
    let mut accepted = Vec::new();
    let mut offset: u64 = 0;
    let mut complete_len: u64 = 0;
    let mut line_number: u64 = 0;
    loop {
        line.clear();
        let read = reader.read_until(b'\n', &mut line)?;
        if read == 0 {
            break;
        }
        line_number += 1;
        let line_offset = offset;
        offset += read as u64;
        let terminated = line.last() == Some(&b'\n');
        if terminated {
            line.pop();
            complete_len = offset;
        }
        if line.trim_ascii().is_empty() {
            // Blank lines carry nothing. A blank torn tail is still cut off before the next append (through the
            // complete length), but there is nothing to report about it.
            continue;
        }
        let text = match std::str::from_utf8(&line) {
            Ok(text) => text,
            Err(error) => {
                if terminated {
                    let reason = format!("not valid UTF-8 (at byte {} of the line)", error.valid_up_to() + 1);
                    checker.skip(None, line_number, Some(line_offset), reason);
                } else {
                    checker.skip(None, line_number, None, TORN_REASON.to_owned());
                }
                continue;
            }
        };
        if !terminated {
            // An unterminated line was never acknowledged, even when it happens to be complete JSON. It lies past
            // the complete lines, so replays never reach it.
            checker.skip(read_seq(text), line_number, None, TORN_REASON.to_owned());
            continue;
        }
        checker.check_line(text, line_number, line_offset, &mut accepted);
        take_accepted(&mut accepted, &mut facts, Some((line_offset, text)), &mut accept);
    }
    checker.finish(&mut accepted);
    take_accepted(&mut accepted, &mut facts, None, &mut accept);
    let mut excluded = std::mem::take(&mut checker.excluded);
    excluded.sort_unstable();
    for offset in excluded {
        facts.exclude(offset);
    }
    Ok(Scanned { checker, facts, complete_len, total_len: offset })
}

/// Hands accepted lines to the caller and the index, in order. `current` is the line just read, whose text the
/// caller gets from the reader's buffer; a line that waited for it kept its own.
fn take_accepted(
    accepted: &mut Vec<Accepted>,
    facts: &mut FileFacts,
    current: Option<(u64, &str)>,
    accept: &mut impl FnMut(&StoredEvent, &str),
) {
    for line in accepted.drain(..) {
        facts.note_event(line.event.seq, line.offset);
        match (line.repaired, line.kept_text, current) {
            (Some(json), _, _) => {
                accept(&line.event, json.as_str());
                facts.repair(line.offset, json);
            }
            (None, Some(text), _) => accept(&line.event, &text),
            (None, None, Some((offset, text))) if offset == line.offset => accept(&line.event, text),
            // Unreachable: a line accepted later than it was read always kept its text.
            (None, None, _) => tracing::error!(seq = line.event.seq, "an accepted log line lost its text"),
        }
    }
}

/// The log's modification time as RFC 3339: the stand-in creation time of a session whose log lost its
/// `session_created` and every other event. The current time when the file cannot be read.
pub fn modified_rfc3339(session_dir: &Path) -> String {
    let age = std::fs::metadata(log_path(session_dir))
        .and_then(|metadata| metadata.modified())
        .ok()
        .and_then(|modified| modified.elapsed().ok())
        .unwrap_or_default();
    crate::clock::rfc3339_ago(age)
}
