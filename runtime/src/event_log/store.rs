//! The log behind a small trait: append a batch durably, read a range of committed events, know the length.
//!
//! A session actor keeps only a bounded tail of recent events in memory; replay beyond the tail reads the file
//! through an [`EventReader`], which other threads use while appends continue. A sparse index (one entry per
//! [`INDEX_STRIDE`] bytes of log, built while loading and extended by appends) turns "events after `seq`" into a
//! seek: memory for the index is a few bytes per 64 KiB of history, whatever the number of events.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde::Deserialize;
use troupe_protocol::types::events::EventJson;

use troupe_protocol::types::common::SkippedEvent;

use super::LogWriter;
use super::check::{LoadDiagnostic, TORN_REASON};
use super::snapshot::{PendingSnapshot, ScanPoint};
use crate::error::RuntimeError;
use crate::session_state::SessionState;

/// Bytes of log between two index entries.
pub const INDEX_STRIDE: u64 = 64 * 1024;

/// One event as the log holds it: its sequence and its stored text.
#[derive(Clone, Debug)]
pub struct LogEntry {
    pub seq: u64,
    pub json: EventJson,
}

impl LogEntry {
    /// Bytes of the event's text.
    pub fn len(&self) -> usize {
        self.json.as_str().len()
    }

    pub fn is_empty(&self) -> bool {
        self.json.as_str().is_empty()
    }
}

/// A session's durable, append-only event store.
pub trait EventStore: Send + 'static {
    /// Appends `batch` (consecutive sequences after [`EventStore::last_seq`]). When it returns `Ok`, every event of
    /// the batch is durable. After an error the store refuses everything.
    fn append_batch(&mut self, batch: &[LogEntry]) -> Result<(), RuntimeError>;
    /// The sequence of the last durable event; 0 when there is none.
    fn last_seq(&self) -> u64;
    /// The store's size in bytes.
    fn len_bytes(&self) -> u64;
    /// A handle that reads committed events, on any thread, while appends continue.
    fn reader(&self) -> Arc<dyn EventReader>;
    /// Whether the store still ends with a torn line it found when it was opened (one that was never
    /// acknowledged); the first append cuts it off. Stores that cannot be torn answer `false`.
    fn has_torn_tail(&self) -> bool {
        false
    }
    /// A projection snapshot of the live `state`, for stores that keep them (the file store: see
    /// `FileEventStore::snapshot_of_live`); `None` when the store keeps none or `state` does not match it.
    fn snapshot_of_live(&self, _state: &SessionState) -> Option<PendingSnapshot> {
        None
    }
    /// Counts the store's commits into `metrics` from now on (the file store: its `fdatasync`s); stores with
    /// nothing to count ignore it.
    fn observe(&mut self, _metrics: crate::metrics::Metrics) {}
    /// Removes, durably, what was appended after the store was `len` bytes long ([`EventStore::len_bytes`] before a
    /// batch), and refuses every later append: a replicated store's local copy of a batch its replica refused
    /// ([`super::ReplicatedStore`]). A store that cannot answers `false` and keeps it; the session's next opening
    /// deals with a local log longer than the replica's.
    fn discard_from(&mut self, _len: u64) -> Result<bool, RuntimeError> {
        Ok(false)
    }
}

/// A boxed store is a store: the session's write lane holds whichever backend the daemon runs on.
impl<T: EventStore + ?Sized> EventStore for Box<T> {
    fn append_batch(&mut self, batch: &[LogEntry]) -> Result<(), RuntimeError> {
        (**self).append_batch(batch)
    }

    fn last_seq(&self) -> u64 {
        (**self).last_seq()
    }

    fn len_bytes(&self) -> u64 {
        (**self).len_bytes()
    }

    fn reader(&self) -> Arc<dyn EventReader> {
        (**self).reader()
    }

    fn has_torn_tail(&self) -> bool {
        (**self).has_torn_tail()
    }

    fn snapshot_of_live(&self, state: &SessionState) -> Option<PendingSnapshot> {
        (**self).snapshot_of_live(state)
    }

    fn observe(&mut self, metrics: crate::metrics::Metrics) {
        (**self).observe(metrics)
    }

    fn discard_from(&mut self, len: u64) -> Result<bool, RuntimeError> {
        (**self).discard_from(len)
    }
}

/// Reads committed events of one session.
pub trait EventReader: Send + Sync {
    /// The events with `after < seq <= through`, oldest first, at most `max_bytes` of event text (but at least one
    /// event when there is one). Events not durable yet are never returned.
    fn read_range(&self, after: u64, through: u64, max_bytes: usize) -> Result<Vec<LogEntry>, RuntimeError>;
}

/// What the reader knows about the file beyond its bytes.
#[derive(Debug, Default)]
pub(super) struct FileFacts {
    /// `(seq, offset)` of the first event at or after each [`INDEX_STRIDE`] boundary, in order.
    index: Vec<(u64, u64)>,
    /// Where the next index entry is due.
    next_mark: u64,
    /// Bytes of durable, complete lines.
    committed_len: u64,
    last_seq: u64,
    /// Offsets of complete lines the loader did not accept, in order.
    excluded: Vec<u64>,
    /// Events served differently from their line (an optional field was repaired), by line offset.
    repaired: HashMap<u64, EventJson>,
    /// Complete lines (blank ones too) in the first `committed_len` bytes: where a resumed scan's line numbers go on.
    lines: u64,
    /// Where the last complete line starts: a projection snapshot checks that the log still holds that line.
    last_line_start: u64,
    /// The line number of the last accepted event (the loader's rule for sequence jumps counts lines from it).
    last_event_line: u64,
    /// The events the loader repaired, reported again by every load (a snapshot keeps them).
    diagnostics: Vec<LoadDiagnostic>,
}

impl FileFacts {
    /// Records an accepted event at `offset`.
    pub(super) fn note_event(&mut self, seq: u64, offset: u64) {
        if self.index.is_empty() || offset >= self.next_mark {
            self.index.push((seq, offset));
            self.next_mark = offset + INDEX_STRIDE;
        }
        self.last_seq = seq;
    }

    pub(super) fn exclude(&mut self, offset: u64) {
        self.excluded.push(offset);
    }

    pub(super) fn repair(&mut self, offset: u64, json: EventJson) {
        self.repaired.insert(offset, json);
    }

    pub(super) fn set_committed_len(&mut self, len: u64) {
        self.committed_len = len;
    }

    /// Records the scan's line facts: `lines` complete lines, the last one starting at `last_line_start`, the last
    /// accepted event on line `last_event_line`, and the repairs made.
    pub(super) fn set_lines(
        &mut self,
        lines: u64,
        last_line_start: u64,
        last_event_line: u64,
        diagnostics: Vec<LoadDiagnostic>,
    ) {
        self.lines = lines;
        self.last_line_start = last_line_start;
        self.last_event_line = last_event_line;
        self.diagnostics = diagnostics;
    }

    /// Where a scan stands after the committed lines, for a projection snapshot; `None` before any accepted event.
    pub(super) fn scan_point(&self, skipped: Vec<SkippedEvent>) -> Option<ScanPoint> {
        if self.index.is_empty() || self.committed_len == 0 {
            return None;
        }
        let mut repaired: Vec<(u64, String)> =
            self.repaired.iter().map(|(offset, json)| (*offset, json.as_str().to_owned())).collect();
        repaired.sort_unstable_by_key(|(offset, _)| *offset);
        Some(ScanPoint {
            covered_len: self.committed_len,
            lines: self.lines,
            last_line_start: self.last_line_start,
            last_event_line: self.last_event_line,
            last_seq: self.last_seq,
            index: self.index.clone(),
            next_mark: self.next_mark,
            excluded: self.excluded.clone(),
            repaired,
            diagnostics: self.diagnostics.clone(),
            skipped,
        })
    }

    /// The facts a scan had at `point` (a verified snapshot's), to continue scanning after it.
    pub(super) fn from_point(point: &ScanPoint) -> FileFacts {
        let repaired = point
            .repaired
            .iter()
            .filter_map(|(offset, text)| EventJson::from_json(text.clone()).ok().map(|json| (*offset, json)))
            .collect();
        FileFacts {
            index: point.index.clone(),
            next_mark: point.next_mark,
            committed_len: point.covered_len,
            last_seq: point.last_seq,
            excluded: point.excluded.clone(),
            repaired,
            lines: point.lines,
            last_line_start: point.last_line_start,
            last_event_line: point.last_event_line,
            diagnostics: point.diagnostics.clone(),
        }
    }

    /// The offset to start reading at for events after `after`.
    fn start_offset(&self, after: u64) -> u64 {
        let position = self.index.partition_point(|&(seq, _)| seq <= after + 1);
        position.checked_sub(1).map_or(0, |found| self.index[found].1)
    }
}

/// The file-backed store: the log writer plus what readers share with it.
#[derive(Debug)]
pub struct FileEventStore {
    writer: LogWriter,
    facts: Arc<RwLock<FileFacts>>,
}

impl FileEventStore {
    pub(super) fn new(writer: LogWriter, facts: FileFacts) -> Self {
        FileEventStore { writer, facts: Arc::new(RwLock::new(facts)) }
    }

    /// A store over a log just created with its first event, `first`.
    pub fn created(writer: LogWriter, first: &LogEntry) -> Self {
        let mut facts = FileFacts::default();
        facts.note_event(first.seq, 0);
        facts.set_committed_len(writer.len_bytes());
        facts.set_lines(1, 0, 1, Vec::new());
        Self::new(writer, facts)
    }

    /// Counts every later group commit (its events, its fdatasync time) into `metrics`.
    pub fn observe(&mut self, metrics: crate::metrics::Metrics) {
        self.writer.observe(metrics);
    }

    /// Whether the file still ends with the torn line it was loaded with (cut off by the next append).
    pub fn has_torn_tail(&self) -> bool {
        self.writer.has_torn_tail()
    }

    /// A projection snapshot of a live session's `state`, taken now (a clone of the state and of the sparse
    /// index) and written later, off the caller's thread, by [`PendingSnapshot::write`]. `None` when the state is
    /// not exactly the projection of the committed lines: events accepted and not yet durable, or reverts (the
    /// live state then holds the settled branch, while a snapshot holds the projection before
    /// `branch::settle_loaded`; such a session gets its snapshots from its loads).
    pub fn snapshot_of_live(&self, state: &SessionState) -> Option<PendingSnapshot> {
        if state.visibility.has_reverts() {
            return None;
        }
        self.snapshot_of_projection(state)
    }

    /// A projection snapshot of `state`, which must be the projector's state of the committed lines (as
    /// [`open_projected`](super::open_projected) gives it, before `branch::settle_loaded`). `None` when it ends at
    /// another event than the log, or no event was accepted.
    pub fn snapshot_of_projection(&self, state: &SessionState) -> Option<PendingSnapshot> {
        let facts = self.facts.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        if state.last_event_seq != facts.last_seq {
            return None;
        }
        // A torn line past the complete ones is not covered: its report belongs to the scan after the snapshot.
        let skipped = state.skipped_events.iter().filter(|skipped| skipped.reason != TORN_REASON).cloned().collect();
        let point = facts.scan_point(skipped)?;
        drop(facts);
        Some(PendingSnapshot::new(state.clone(), point))
    }

    /// The newest events, at most `tail_bytes` of them but at least the last one, oldest first.
    pub fn read_tail(&self, tail_bytes: usize) -> Result<std::collections::VecDeque<LogEntry>, RuntimeError> {
        let (start, end) = {
            let facts = self.facts.read().unwrap_or_else(|poisoned| poisoned.into_inner());
            let from = facts.committed_len.saturating_sub(tail_bytes as u64);
            // The last index entry at or before `from`: a line boundary at most one stride earlier.
            let position = facts.index.partition_point(|&(_, offset)| offset <= from);
            let start = position.checked_sub(1).map_or(0, |found| facts.index[found].1);
            (start, facts.committed_len)
        };
        let reader = FileEventReader { path: self.writer.path().to_path_buf(), facts: self.facts.clone() };
        let mut tail: std::collections::VecDeque<LogEntry> =
            reader.read_from(start, end, 0, u64::MAX, usize::MAX)?.into();
        let mut bytes: usize = tail.iter().map(LogEntry::len).sum();
        while bytes > tail_bytes && tail.len() > 1 {
            if let Some(oldest) = tail.pop_front() {
                bytes -= oldest.len();
            }
        }
        Ok(tail)
    }
}

impl EventStore for FileEventStore {
    fn append_batch(&mut self, batch: &[LogEntry]) -> Result<(), RuntimeError> {
        let start = self.writer.len_bytes();
        let lines: Vec<EventJson> = batch.iter().map(|entry| entry.json.clone()).collect();
        self.writer.append_batch(&lines)?;
        let mut facts = self.facts.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut offset = start;
        for entry in batch {
            facts.note_event(entry.seq, offset);
            facts.last_line_start = offset;
            facts.lines += 1;
            facts.last_event_line = facts.lines;
            offset += entry.len() as u64 + 1;
        }
        facts.set_committed_len(self.writer.len_bytes());
        Ok(())
    }

    fn last_seq(&self) -> u64 {
        self.facts.read().unwrap_or_else(|poisoned| poisoned.into_inner()).last_seq
    }

    fn len_bytes(&self) -> u64 {
        self.writer.len_bytes()
    }

    fn reader(&self) -> Arc<dyn EventReader> {
        Arc::new(FileEventReader { path: self.writer.path().to_path_buf(), facts: self.facts.clone() })
    }

    fn has_torn_tail(&self) -> bool {
        FileEventStore::has_torn_tail(self)
    }

    fn snapshot_of_live(&self, state: &SessionState) -> Option<PendingSnapshot> {
        FileEventStore::snapshot_of_live(self, state)
    }

    fn observe(&mut self, metrics: crate::metrics::Metrics) {
        FileEventStore::observe(self, metrics)
    }

    fn discard_from(&mut self, len: u64) -> Result<bool, RuntimeError> {
        // Readers stop at `len` before the file is cut, so none reads a line as it goes.
        let mut facts = self.facts.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        facts.committed_len = facts.committed_len.min(len);
        drop(facts);
        self.writer.cut_back(len)?;
        Ok(true)
    }
}

/// Reads a log file by seeking through the shared index.
struct FileEventReader {
    path: PathBuf,
    facts: Arc<RwLock<FileFacts>>,
}

/// The one field a reader needs to place a line.
#[derive(Deserialize)]
struct SeqOnly {
    seq: u64,
}

impl EventReader for FileEventReader {
    fn read_range(&self, after: u64, through: u64, max_bytes: usize) -> Result<Vec<LogEntry>, RuntimeError> {
        let (start, end) = {
            let facts = self.facts.read().unwrap_or_else(|poisoned| poisoned.into_inner());
            if after >= through.min(facts.last_seq) {
                return Ok(Vec::new());
            }
            (facts.start_offset(after), facts.committed_len)
        };
        self.read_from(start, end, after, through, max_bytes)
    }
}

impl FileEventReader {
    /// The events with `after < seq <= through` in the bytes `start..end` (`start` at a line's beginning).
    fn read_from(
        &self,
        start: u64,
        end: u64,
        after: u64,
        through: u64,
        max_bytes: usize,
    ) -> Result<Vec<LogEntry>, RuntimeError> {
        crate::blocking::assert_may_block();
        let mut file =
            File::open(&self.path).map_err(|error| RuntimeError::io("open the event log", &self.path, error))?;
        file.seek(SeekFrom::Start(start)).map_err(|error| RuntimeError::io("seek in", &self.path, error))?;
        let mut lines = BufReader::with_capacity(64 * 1024, file);
        let mut entries = Vec::new();
        let mut bytes = 0usize;
        let mut offset = start;
        let mut line = Vec::new();
        while offset < end {
            line.clear();
            let read = read_line(&mut lines, &mut line, end - offset, &self.path)?;
            if read == 0 {
                break;
            }
            let line_offset = offset;
            offset += read as u64;
            let Some(entry) = self.entry_at(line_offset, &mut line) else { continue };
            if entry.seq <= after {
                continue;
            }
            if entry.seq > through {
                break;
            }
            if !entries.is_empty() && bytes + entry.len() > max_bytes {
                break;
            }
            bytes += entry.len();
            entries.push(entry);
        }
        Ok(entries)
    }

    /// The event a complete line at `offset` holds, if the loader accepted it.
    fn entry_at(&self, offset: u64, line: &mut Vec<u8>) -> Option<LogEntry> {
        {
            let facts = self.facts.read().unwrap_or_else(|poisoned| poisoned.into_inner());
            if facts.excluded.binary_search(&offset).is_ok() {
                return None;
            }
            if let Some(json) = facts.repaired.get(&offset) {
                let seq = serde_json::from_str::<SeqOnly>(json.as_str()).ok()?.seq;
                return Some(LogEntry { seq, json: json.clone() });
            }
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        if line.trim_ascii().is_empty() {
            return None;
        }
        let seq = match serde_json::from_slice::<SeqOnly>(line) {
            Ok(place) => place.seq,
            Err(error) => {
                // The loader accepted this line; it changed on disk since. Leave it out rather than fail the replay.
                tracing::warn!(path = %self.path.display(), offset, %error, "an event log line changed on disk");
                return None;
            }
        };
        let text = String::from_utf8(std::mem::take(line)).ok()?;
        let json = EventJson::from_json(text).ok()?;
        Some(LogEntry { seq, json })
    }
}

/// Reads one line (with its `\n`) but never more than `limit` bytes. Returns the bytes consumed.
fn read_line(reader: &mut impl BufRead, line: &mut Vec<u8>, limit: u64, path: &Path) -> Result<usize, RuntimeError> {
    let mut limited = io::Read::take(reader, limit);
    limited.read_until(b'\n', line).map_err(|error| RuntimeError::io("read the event log", path, error))
}
