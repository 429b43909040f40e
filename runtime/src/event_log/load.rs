//! The load path: the log is read as a stream of lines, each checked on its own (see `check`), and handed to the
//! caller one by one, so loading a session of any size needs memory for its projection and a bounded tail only.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use troupe_protocol::types::common::SkippedEvent;
use troupe_protocol::types::events::{EventJson, StoredEvent};

use super::check::{Accepted, LineChecker, LoadDiagnostic, TORN_REASON, read_seq};
use super::snapshot::{self, ScanPoint, SnapshotRefusal};
use super::store::{EventStore, FileEventStore, FileFacts, LogEntry};
use super::{LogWriter, log_path};
use crate::error::RuntimeError;
use crate::session_state::{Projector, SessionState};

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
    let (file, path) = open_file(session_dir)?;
    let session_id = session_id_of(session_dir);
    scan_file(file, path, ScanStart::beginning(session_id), accept)
}

/// The log file of `session_dir`, opened for reading and appending.
fn open_file(session_dir: &Path) -> Result<(File, PathBuf), RuntimeError> {
    crate::blocking::assert_may_block();
    let path = log_path(session_dir);
    match OpenOptions::new().read(true).append(true).open(&path) {
        Ok(file) => Ok((file, path)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            Err(RuntimeError::SessionNotFound { session_dir: session_dir.to_path_buf() })
        }
        Err(error) => Err(RuntimeError::io("open the event log", &path, error)),
    }
}

/// The session id every line of the log in `session_dir` must carry: the directory's name.
fn session_id_of(session_dir: &Path) -> &str {
    session_dir.file_name().and_then(|name| name.to_str()).unwrap_or_default()
}

/// Scans `file` from `start` to its end and makes the store of it.
fn scan_file<'a>(
    file: File,
    path: PathBuf,
    start: ScanStart<'a>,
    accept: impl FnMut(&StoredEvent, &str),
) -> Result<(FileEventStore, LineChecker<'a>), RuntimeError> {
    let mut reading = file.try_clone().map_err(|error| RuntimeError::io("open the event log", &path, error))?;
    reading.seek(SeekFrom::Start(start.offset)).map_err(|error| RuntimeError::io("seek in", &path, error))?;
    let scanned = scan_from(BufReader::with_capacity(256 * 1024, reading), start, accept)
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

/// A session's log opened for serving with its projection, through the projection snapshot when one matches.
#[derive(Debug)]
pub struct ProjectedLog {
    pub opened: OpenedLog,
    /// The projection of every accepted event, as the projector leaves it: before `branch::settle_loaded`, with
    /// the skipped lines.
    pub state: SessionState,
    /// What the load made of the snapshot.
    pub snapshot: SnapshotUse,
    /// Bytes of log scanned (after the snapshot's, when one was used).
    pub scanned_bytes: u64,
}

/// Whether a load used a projection snapshot.
#[derive(Debug)]
pub enum SnapshotUse {
    /// There was none: the whole log was scanned.
    Missing,
    /// It matched the log: only the lines after the bytes it covers were scanned.
    Used { covered_len: u64 },
    /// It did not match the log (or could not be read): the whole log was scanned.
    Refused(SnapshotRefusal),
}

impl SnapshotUse {
    /// The log length the snapshot on disk covers, when one was used (a later one need not be written before the
    /// log grows past it).
    pub fn covered_len(&self) -> u64 {
        match self {
            SnapshotUse::Used { covered_len } => *covered_len,
            SnapshotUse::Missing | SnapshotUse::Refused(_) => 0,
        }
    }
}

/// Opens the log in `session_dir` for serving, with its projection: from the projection snapshot (`snapshot`) and
/// the lines after it when the snapshot matches the log, else from a scan of the whole log, as [`open`] does.
/// The state is the projector's (before `branch::settle_loaded`); the store, tail and reports are the same as
/// [`open`] would give.
///
/// This is the writer's open: it holds the log's writer lock (see "One writer" in `event_log`) for the life of the
/// store, waiting for a writer that still holds it.
pub fn open_projected(session_dir: &Path, tail_bytes: usize) -> Result<ProjectedLog, RuntimeError> {
    let (file, path) = open_file(session_dir)?;
    super::lock_for_writing(&file, &path)?;
    let session_id = session_id_of(session_dir);
    let (start, mut projector, snapshot) = match snapshot::read(session_dir, session_id, &file) {
        Ok(Some(restored)) => {
            let covered_len = restored.point.covered_len;
            let start = ScanStart::after(session_id, restored.point);
            (start, Projector::resumed(restored.state), SnapshotUse::Used { covered_len })
        }
        Ok(None) => (ScanStart::beginning(session_id), Projector::default(), SnapshotUse::Missing),
        Err(refusal) => {
            tracing::info!(path = %path.display(), %refusal, "ignoring the projection snapshot; scanning the whole log");
            (ScanStart::beginning(session_id), Projector::default(), SnapshotUse::Refused(refusal))
        }
    };
    let from = start.offset;
    let (store, checker) = scan_file(file, path, start, |event, _| projector.apply(event))?;
    let scanned_bytes = store.len_bytes().saturating_sub(from);
    let tail = if tail_bytes == 0 { VecDeque::new() } else { store.read_tail(tail_bytes)? };
    let fallback_time = modified_rfc3339(session_dir);
    let state = projector.finish(session_id, checker.skipped.clone(), &fallback_time);
    let opened = OpenedLog {
        store,
        tail,
        last_seq: checker.last_seq,
        skipped: checker.skipped,
        diagnostics: checker.diagnostics,
    };
    Ok(ProjectedLog { opened, state, snapshot, scanned_bytes })
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

/// Where a scan begins: the start of the log, or the point a verified snapshot covers.
pub(super) struct ScanStart<'a> {
    checker: LineChecker<'a>,
    facts: FileFacts,
    /// The byte the scan reads first (a line's start).
    offset: u64,
    /// Complete lines before `offset`.
    lines: u64,
    /// Where the last complete line before `offset` starts.
    last_line_start: u64,
}

impl<'a> ScanStart<'a> {
    pub(super) fn beginning(session_id: &'a str) -> Self {
        ScanStart {
            checker: LineChecker::new(session_id),
            facts: FileFacts::default(),
            offset: 0,
            lines: 0,
            last_line_start: 0,
        }
    }

    fn after(session_id: &'a str, point: ScanPoint) -> Self {
        let facts = FileFacts::from_point(&point);
        let ScanPoint { covered_len, lines, last_line_start, last_event_line, last_seq, skipped, diagnostics, .. } =
            point;
        let checker = LineChecker::resumed(session_id, last_seq, last_event_line, skipped, diagnostics);
        ScanStart { checker, facts, offset: covered_len, lines, last_line_start }
    }
}

/// Checks every line of a log, in one pass over `reader`, passing each accepted event to `accept` with the text
/// it is served as.
#[cfg(test)]
pub(super) fn scan<'a>(
    reader: impl BufRead,
    session_id: &'a str,
    accept: impl FnMut(&StoredEvent, &str),
) -> io::Result<Scanned<'a>> {
    scan_from(reader, ScanStart::beginning(session_id), accept)
}

/// Checks every line `reader` holds, which are the log's from `start` on, passing each accepted event to `accept`
/// with the text it is served as. A line that lies whole in the reader's buffer is checked where it lies; only one
/// that straddles a refill is copied out.
pub(super) fn scan_from<'a>(
    mut reader: impl BufRead,
    start: ScanStart<'a>,
    mut accept: impl FnMut(&StoredEvent, &str),
) -> io::Result<Scanned<'a>> {
    let ScanStart { checker, facts, offset, lines, last_line_start } = start;
    let mut scan = LineScan {
        checker,
        facts,
        accepted: Vec::new(),
        offset,
        complete_len: offset,
        line_number: lines,
        complete_lines: lines,
        last_line_start,
    };
    // The start of a line that straddles the end of the reader's buffer.
    let mut straddling = Vec::new();
    loop {
        let buffer = match reader.fill_buf() {
            Ok(buffer) => buffer,
            // As `read_until` did: a read interrupted by a signal is tried again.
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        if buffer.is_empty() {
            break;
        }
        let used = match memchr::memchr(b'\n', buffer) {
            Some(end) if straddling.is_empty() => {
                scan.line(&buffer[..=end], &mut accept);
                end + 1
            }
            Some(end) => {
                straddling.extend_from_slice(&buffer[..=end]);
                scan.line(&straddling, &mut accept);
                straddling.clear();
                end + 1
            }
            None => {
                straddling.extend_from_slice(buffer);
                buffer.len()
            }
        };
        reader.consume(used);
    }
    if !straddling.is_empty() {
        scan.line(&straddling, &mut accept);
    }
    let LineScan {
        mut checker, mut facts, mut accepted, offset, complete_len, complete_lines, last_line_start, ..
    } = scan;
    checker.finish(&mut accepted);
    take_accepted(&mut accepted, &mut facts, None, &mut accept);
    let mut excluded = std::mem::take(&mut checker.excluded);
    excluded.sort_unstable();
    for offset in excluded {
        facts.exclude(offset);
    }
    facts.set_lines(complete_lines, last_line_start, checker.last_line, checker.diagnostics.clone());
    Ok(Scanned { checker, facts, complete_len, total_len: offset })
}

/// A scan's state between lines.
struct LineScan<'a> {
    checker: LineChecker<'a>,
    facts: FileFacts,
    /// Lines the checker accepted and the caller has not been handed yet.
    accepted: Vec<Accepted>,
    /// Where the next line starts.
    offset: u64,
    /// Bytes up to and including the last `\n`.
    complete_len: u64,
    line_number: u64,
    complete_lines: u64,
    /// Where the last complete line starts.
    last_line_start: u64,
}

impl LineScan<'_> {
    /// Checks one line: its bytes through its `\n`, or the unterminated rest of the log.
    fn line(&mut self, bytes: &[u8], accept: &mut impl FnMut(&StoredEvent, &str)) {
        self.line_number += 1;
        let line_offset = self.offset;
        self.offset += bytes.len() as u64;
        let (line, terminated) = match bytes.split_last() {
            Some((b'\n', line)) => (line, true),
            _ => (bytes, false),
        };
        if terminated {
            self.complete_len = self.offset;
            self.complete_lines = self.line_number;
            self.last_line_start = line_offset;
        }
        if line.trim_ascii().is_empty() {
            // Blank lines carry nothing. A blank torn tail is still cut off before the next append (through the
            // complete length), but there is nothing to report about it.
            return;
        }
        let line_number = self.line_number;
        let text = match std::str::from_utf8(line) {
            Ok(text) => text,
            Err(error) => {
                if terminated {
                    let reason = format!("not valid UTF-8 (at byte {} of the line)", error.valid_up_to() + 1);
                    self.checker.skip(None, line_number, Some(line_offset), reason);
                } else {
                    self.checker.skip(None, line_number, None, TORN_REASON.to_owned());
                }
                return;
            }
        };
        if !terminated {
            // An unterminated line was never acknowledged, even when it happens to be complete JSON. It lies past
            // the complete lines, so replays never reach it.
            self.checker.skip(read_seq(text), line_number, None, TORN_REASON.to_owned());
            return;
        }
        self.checker.check_line(text, line_number, line_offset, &mut self.accepted);
        take_accepted(&mut self.accepted, &mut self.facts, Some((line_offset, text)), accept);
    }
}

/// Hands accepted lines to the caller and the index, in order. `current` is the line just read, whose text the
/// caller gets from where the scan holds it (the reader's buffer, or the copy of a line that straddled a refill); a
/// line that waited for it kept its own.
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
