//! A session's durable append-only log, `<session_dir>/events.jsonl`.
//!
//! The log is the truth about a session: every projection (metadata, transcript, usage, approvals) is rebuilt
//! from it. Only the session's single writer appends to it, through a [`LogWriter`], and it acknowledges an
//! event to anyone only after [`LogWriter::append_batch`] has returned, which is after `fdatasync`.
//!
//! # Line format
//!
//! The file is UTF-8 text made of lines, each terminated by one `\n` byte:
//!
//! ```text
//! {"session_id":"…","run_id":null,"seq":1,"timestamp":"…","payload":{"type":"session_created",…}}\n
//! {"session_id":"…","run_id":"…","seq":2,"timestamp":"…","payload":{"type":"run_started",…}}\n
//! ```
//!
//! - A line is one `StoredEvent` as compact JSON, written byte for byte as the engine encoded it once
//!   ([`EventJson::as_str`]): the log never re-encodes, so what a subscriber received is exactly what is stored.
//!   Compact JSON escapes newlines inside strings, so an event never spans lines; an event whose text contains a
//!   raw `\n` is refused before anything is written.
//! - The first line is `session_created` with `seq` 1 and `run_id` null; `seq` then strictly increases, and
//!   every line's `session_id` is the directory's name.
//! - Only complete lines count. A final line without its `\n` is a torn write from a crash: it was never
//!   acknowledged, so it is reported, not loaded, and cut off before the next append.
//! - Blank lines carry nothing and are ignored.
//!
//! # Write path
//!
//! [`LogWriter::create`] makes the session directory (0700) and the file (0600, `O_EXCL`), writes the first line,
//! fsyncs the file, then the session directory and the sessions directory, so that a session that was reported
//! created still exists after a crash. [`LogWriter::append_batch`] is group commit: one `write` of all the lines
//! of a batch and one `fdatasync` for all of them. If any write, fsync or truncation fails, what is on disk is
//! unknown (a failed fsync may even have dropped dirty pages), so the writer is poisoned: every later call fails
//! with [`RuntimeError::LogPoisoned`] and the supervisor reloads the session from disk, where the loader's
//! per-line checks decide what survived.
//!
//! # Load path
//!
//! [`open`] reads the file as a stream of lines and checks each on its own (`check`): a bad line is skipped and
//! reported as a [`SkippedEvent`](troupe_protocol::types::common::SkippedEvent) with its `seq` when readable, else
//! its line number, and a reason that never quotes the line. Accepted events go to the caller one by one (to build
//! the projection) and only the newest, up to a byte bound, stay in memory. Later reads go through the
//! [`EventStore`]/[`EventReader`] traits (`store`), which seek with a sparse index.
//!
//! # One writer
//!
//! Whoever opens a log to write it (creating it or loading it) holds an exclusive lock on the file (`flock`) for as
//! long as the writer lives. A session that crashed while a batch was being written leaves that batch's writer
//! alive on its log writer thread until the write ends; the session's successor, opening the log meanwhile, waits
//! for the lock (up to [`WRITER_LOCK_WAIT`], then [`RuntimeError::LogInUse`]) and so loads the log after that batch,
//! never beside it: two instances of a session never append to its log at once. The lock also keeps a second
//! process from writing a log this one writes.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use troupe_protocol::types::events::EventJson;

use crate::data_dir::{create_private_dir, sync_dir};
use crate::error::RuntimeError;

mod check;
mod load;
pub mod replica;
mod run_lookup;
pub mod snapshot;
mod store;

pub use check::{LoadDiagnostic, TORN_REASON};
pub use load::{
    LoadedEvent, LoadedLog, OpenedLog, ProjectedLog, SnapshotUse, load, modified_rfc3339, open, open_projected,
};
pub use replica::{
    Answered, FollowControl, FollowDeliver, FollowGuard, LogReplica, ReplicaAppend, ReplicaError, ReplicaFailure,
    ReplicaWriter, ReplicatedStore,
};
pub use run_lookup::{log_started_run, run_time_window};
pub use snapshot::{PendingSnapshot, SnapshotRefusal};
pub use store::{EventReader, EventStore, FileEventStore, INDEX_STRIDE, LogEntry};

/// The log's file name inside a session directory.
pub const LOG_FILE_NAME: &str = "events.jsonl";

/// The mode of the log file: owner only, because it holds prompts, tool output and file contents.
const LOG_FILE_MODE: u32 = 0o600;

/// The path of the log inside `session_dir`.
/// How long opening a log for writing waits for the writer that holds it (see "One writer").
pub const WRITER_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Takes the exclusive writer's lock of the log `file` (at `path`), waiting up to [`WRITER_LOCK_WAIT`] for a writer
/// that holds it. The lock lasts as long as `file` (and its clones) are open.
fn lock_for_writing(file: &File, path: &Path) -> Result<(), RuntimeError> {
    crate::blocking::assert_may_block();
    let deadline = std::time::Instant::now() + WRITER_LOCK_WAIT;
    loop {
        match rustix::fs::flock(file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::WOULDBLOCK) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(rustix::io::Errno::WOULDBLOCK) => {
                return Err(RuntimeError::LogInUse { path: path.to_path_buf() });
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(error) => return Err(RuntimeError::io("lock the event log", path, error.into())),
        }
    }
}

pub fn log_path(session_dir: &Path) -> PathBuf {
    session_dir.join(LOG_FILE_NAME)
}

/// The single writer of one session's log.
///
/// It is `Send` so that the session actor can move it to a log writer thread (`actors/src/log_writers.rs`) for each
/// batch and get it back.
#[derive(Debug)]
pub struct LogWriter {
    /// The log file, opened for appending: every write lands at the current end, also after a truncation.
    file: File,
    path: PathBuf,
    /// Bytes of complete lines in the file: everything before it was written whole.
    valid_len: u64,
    /// Set when the file was loaded with a torn final line after `valid_len`; the first append cuts it off, so
    /// that new lines never follow half a line.
    truncate_before_next_append: bool,
    /// Set after any failed write, fsync or truncation; from then on the file's state is unknown.
    poisoned: bool,
    /// Where each group commit's events and fdatasync time are counted; `None` for logs nobody observes (forks'
    /// copies, tools, tests).
    metrics: Option<crate::metrics::Metrics>,
}

// The engine relies on moving the writer into blocking tasks; this fails to compile if a field stops being Send.
const _: fn() = || {
    fn assert_send<T: Send>() {}
    assert_send::<LogWriter>();
};

impl LogWriter {
    /// Creates `session_dir` (mode 0700; it must not exist, and its parent must) and a new log in it whose first
    /// line is `first`, and makes both durable. `first` should be the session's `session_created` event.
    ///
    /// On failure nothing is left behind when possible, so the session simply does not exist.
    pub fn create(session_dir: &Path, first: &EventJson) -> Result<LogWriter, RuntimeError> {
        Self::create_observed(session_dir, first, None)
    }

    /// [`create`](Self::create), counting the first line and every later commit into `metrics`.
    pub fn create_observed(
        session_dir: &Path,
        first: &EventJson,
        metrics: Option<crate::metrics::Metrics>,
    ) -> Result<LogWriter, RuntimeError> {
        crate::blocking::assert_may_block();
        let path = log_path(session_dir);
        ensure_one_line(std::slice::from_ref(first), &path)?;
        create_private_dir(session_dir).map_err(|error| match error {
            RuntimeError::Io { source, .. } if source.kind() == io::ErrorKind::AlreadyExists => {
                RuntimeError::SessionAlreadyExists { session_dir: session_dir.to_path_buf() }
            }
            other => other,
        })?;
        // `create_private_dir` has fsynced the sessions directory, so the session directory's entry is durable.

        let created = Self::create_file_with_first_line(session_dir, &path, first, metrics);
        if created.is_err() {
            // The directory is ours (it did not exist a moment ago); removing it keeps a half-created session
            // from appearing in listings. Failures here are ignored: the original error is the one to report.
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::remove_dir(session_dir);
        }
        created
    }

    fn create_file_with_first_line(
        session_dir: &Path,
        path: &Path,
        first: &EventJson,
        metrics: Option<crate::metrics::Metrics>,
    ) -> Result<LogWriter, RuntimeError> {
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(LOG_FILE_MODE)
            .open(path)
            .map_err(|error| RuntimeError::io("create the event log", path, error))?;
        lock_for_writing(&file, path)?;
        let mut writer = LogWriter {
            file,
            path: path.to_path_buf(),
            valid_len: 0,
            truncate_before_next_append: false,
            poisoned: false,
            metrics,
        };
        writer.append_batch(std::slice::from_ref(first))?;
        // The file's entry in the session directory must be durable too, or a crash could lose the whole log.
        sync_dir(session_dir)?;
        Ok(writer)
    }

    /// Appends `events` as lines with one write and one `fdatasync` (group commit). When it returns `Ok`, every
    /// event of the batch is durable and may be acknowledged. After an I/O error the writer is poisoned.
    ///
    /// An event whose JSON contains a raw newline is refused with [`RuntimeError::EventNotOneLine`] before
    /// anything is written; the writer stays usable.
    pub fn append_batch(&mut self, events: &[EventJson]) -> Result<(), RuntimeError> {
        crate::blocking::assert_may_block();
        if self.poisoned {
            return Err(RuntimeError::LogPoisoned { path: self.path.clone() });
        }
        if events.is_empty() {
            return Ok(());
        }
        ensure_one_line(events, &self.path)?;
        let result = self.write_durably(events);
        if result.is_err() {
            self.poisoned = true;
        }
        result
    }

    fn write_durably(&mut self, events: &[EventJson]) -> Result<(), RuntimeError> {
        if self.truncate_before_next_append {
            self.file
                .set_len(self.valid_len)
                .and_then(|()| self.file.sync_data())
                .map_err(|error| RuntimeError::io("truncate the torn end of", &self.path, error))?;
            self.truncate_before_next_append = false;
        }
        let lines = encode_lines(events);
        self.file.write_all(&lines).map_err(|error| RuntimeError::io("append to", &self.path, error))?;
        let fsync_started = std::time::Instant::now();
        self.file.sync_data().map_err(|error| RuntimeError::io("fsync", &self.path, error))?;
        if let Some(metrics) = &self.metrics {
            metrics.log_committed(events.len(), fsync_started.elapsed());
        }
        self.valid_len += lines.len() as u64;
        Ok(())
    }

    /// Cuts the log back to `len` bytes of complete lines (what it held before a batch that must not stay), durably,
    /// and refuses every later append: the store it belongs to is done, and the session is opened again from the
    /// file. A replicated store cuts off its local copy of a batch the replica refused this way.
    pub fn cut_back(&mut self, len: u64) -> Result<(), RuntimeError> {
        crate::blocking::assert_may_block();
        self.poisoned = true;
        if len > self.valid_len {
            return Err(RuntimeError::io(
                "cut back",
                &self.path,
                std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{len} bytes is past the log's end")),
            ));
        }
        self.file
            .set_len(len)
            .and_then(|()| self.file.sync_data())
            .map_err(|error| RuntimeError::io("cut back", &self.path, error))?;
        self.valid_len = len;
        Ok(())
    }

    /// Counts every later group commit (its events, its fdatasync time) into `metrics`.
    pub fn observe(&mut self, metrics: crate::metrics::Metrics) {
        self.metrics = Some(metrics);
    }

    /// Whether the file still ends with the torn line it was loaded with (cut off by the next append).
    pub fn has_torn_tail(&self) -> bool {
        self.truncate_before_next_append
    }

    /// Bytes of complete lines in the log: its size once any torn tail is cut off.
    pub fn len_bytes(&self) -> u64 {
        self.valid_len
    }

    /// Whether an earlier I/O error made this writer refuse everything.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// The log file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Encodes a batch as log lines: each event's stored JSON text, byte for byte, followed by `\n`. This is the only
/// place that produces log bytes; see the module documentation for the format.
fn encode_lines(events: &[EventJson]) -> Vec<u8> {
    let total: usize = events.iter().map(|event| event.as_str().len() + 1).sum();
    let mut lines = Vec::with_capacity(total);
    for event in events {
        lines.extend_from_slice(event.as_str().as_bytes());
        lines.push(b'\n');
    }
    lines
}

/// Refuses a batch in which an event's text contains a raw newline, which would split it across lines.
fn ensure_one_line(events: &[EventJson], path: &Path) -> Result<(), RuntimeError> {
    match events.iter().position(|event| event.as_str().contains('\n')) {
        Some(index) => Err(RuntimeError::EventNotOneLine { path: path.to_path_buf(), index }),
        None => Ok(()),
    }
}

/// Creates the log of a new session whose first event is `first` (its `session_created`), durable when this
/// returns, and the store that appends to it; its commits count into `metrics`. What the engine calls to create
/// a session's log, whatever the backend: today the file store.
pub fn create_store(
    session_dir: &Path,
    first: &LogEntry,
    metrics: Option<crate::metrics::Metrics>,
) -> Result<Box<dyn EventStore>, RuntimeError> {
    let writer = LogWriter::create_observed(session_dir, &first.json, metrics)?;
    Ok(Box::new(FileEventStore::created(writer, first)))
}

#[cfg(test)]
mod tests;
