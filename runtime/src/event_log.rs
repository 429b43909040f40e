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
//! [`load`] reads the whole file at once and checks each line on its own. A bad line (not JSON, not an event,
//! a sequence that does not increase, or that jumps further than the lines since the last good event allow, since
//! the writer numbers events one by one; another session's event) is skipped and reported as a [`SkippedEvent`]
//! with its `seq` when readable, else its line number, and a reason that never quotes the line: lines hold user
//! text and tool output, and reasons travel to clients. Good lines are parsed once.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde_json::error::Category;
use troupe_protocol::types::common::SkippedEvent;
use troupe_protocol::types::events::{EventJson, EventPayload, StoredEvent};

use crate::data_dir::{create_private_dir, sync_dir};
use crate::error::RuntimeError;

/// The log's file name inside a session directory.
pub const LOG_FILE_NAME: &str = "events.jsonl";

/// The mode of the log file: owner only, because it holds prompts, tool output and file contents.
const LOG_FILE_MODE: u32 = 0o600;

/// The path of the log inside `session_dir`.
pub fn log_path(session_dir: &Path) -> PathBuf {
    session_dir.join(LOG_FILE_NAME)
}

/// The single writer of one session's log.
///
/// It is `Send` so that the session actor can move it into `spawn_blocking` for each batch and get it back.
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
        let path = log_path(session_dir);
        ensure_one_line(std::slice::from_ref(first), &path)?;
        create_private_dir(session_dir).map_err(|error| match error {
            RuntimeError::Io { source, .. } if source.kind() == io::ErrorKind::AlreadyExists => {
                RuntimeError::SessionAlreadyExists { session_dir: session_dir.to_path_buf() }
            }
            other => other,
        })?;
        // `create_private_dir` has fsynced the sessions directory, so the session directory's entry is durable.

        let created = Self::create_file_with_first_line(session_dir, &path, first);
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
    ) -> Result<LogWriter, RuntimeError> {
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(LOG_FILE_MODE)
            .open(path)
            .map_err(|error| RuntimeError::io("create the event log", path, error))?;
        let mut writer = LogWriter {
            file,
            path: path.to_path_buf(),
            valid_len: 0,
            truncate_before_next_append: false,
            poisoned: false,
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
        self.file.sync_data().map_err(|error| RuntimeError::io("fsync", &self.path, error))?;
        self.valid_len += lines.len() as u64;
        Ok(())
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

/// A session's log as loaded from disk.
#[derive(Debug)]
pub struct LoadedLog {
    /// The accepted events, in order, each with its exact stored text.
    pub events: Vec<LoadedEvent>,
    /// Lines that were not loaded, in file order. Empty when the whole log loaded.
    pub skipped: Vec<SkippedEvent>,
    /// The writer, positioned after the last complete line.
    pub writer: LogWriter,
    /// The sequence of the last accepted event; 0 when none was accepted.
    pub last_seq: u64,
}

/// One accepted event: the typed record and the text it was stored as, which is what subscribers are sent.
#[derive(Clone, Debug)]
pub struct LoadedEvent {
    pub event: StoredEvent,
    pub json: EventJson,
}

/// Loads the log in `session_dir` and opens it for appending. Bad lines are skipped and reported, never fatal;
/// the error cases are a missing log ([`RuntimeError::SessionNotFound`]) and failing to read it.
///
/// The directory's name is the session id every line must carry.
pub fn load(session_dir: &Path) -> Result<LoadedLog, RuntimeError> {
    let path = log_path(session_dir);
    let mut file = match OpenOptions::new().read(true).append(true).open(&path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Err(RuntimeError::SessionNotFound { session_dir: session_dir.to_path_buf() });
        }
        Err(error) => return Err(RuntimeError::io("open the event log", &path, error)),
    };
    // One read of the whole file: logs are read rarely (on resume), and a single buffer lets every line be
    // parsed in place.
    let size_hint = file.metadata().map_or(0, |metadata| metadata.len());
    let mut bytes = Vec::with_capacity(usize::try_from(size_hint).unwrap_or(0));
    file.read_to_end(&mut bytes).map_err(|error| RuntimeError::io("read the event log", &path, error))?;

    let session_id = session_dir.file_name().and_then(|name| name.to_str()).unwrap_or_default();
    let parsed = parse_log(&bytes, session_id);
    if !parsed.skipped.is_empty() {
        // One summary per load rather than one per line: a log whose first line is lost skips every line.
        tracing::warn!(path = %path.display(), skipped = parsed.skipped.len(), "skipped lines of an event log");
    }
    let writer = LogWriter {
        file,
        path,
        valid_len: parsed.valid_len,
        truncate_before_next_append: parsed.valid_len < bytes.len() as u64,
        poisoned: false,
    };
    Ok(LoadedLog { events: parsed.events, skipped: parsed.skipped, writer, last_seq: parsed.last_seq })
}

/// The outcome of checking a log's bytes line by line.
struct ParsedLog {
    events: Vec<LoadedEvent>,
    skipped: Vec<SkippedEvent>,
    last_seq: u64,
    /// Bytes up to and including the last `\n`.
    valid_len: u64,
}

/// Checks every line of a log. Pure, so the rules are tested without files.
fn parse_log(bytes: &[u8], session_id: &str) -> ParsedLog {
    // Everything after the last `\n` is a torn tail; everything before it is complete lines.
    let complete_len = bytes.iter().rposition(|&byte| byte == b'\n').map_or(0, |newline| newline + 1);
    // Logs are written as UTF-8, so the complete lines almost always validate at once, which allows the fast
    // newline search of `str::find`. (A torn tail may end inside a character, which is why it is left out.) If
    // invalid bytes are somewhere, lines are checked one by one, so that one damaged line costs only itself.
    let complete_text = std::str::from_utf8(&bytes[..complete_len]).ok();
    let find_newline = |from: usize| -> Option<usize> {
        if from >= complete_len {
            return None;
        }
        let found = match complete_text {
            Some(text) => text[from..].find('\n'),
            None => bytes[from..complete_len].iter().position(|&byte| byte == b'\n'),
        };
        found.map(|index| from + index)
    };

    // Sized once: every complete line is at most one event, and growing a vector of large records by doubling
    // would copy them several times over.
    let line_count = bytes[..complete_len].iter().filter(|&&byte| byte == b'\n').count();
    let mut checker = LineChecker {
        session_id,
        events: Vec::with_capacity(line_count),
        skipped: Vec::new(),
        last_seq: 0,
        last_line: 0,
    };
    let mut offset = 0;
    let mut line_number: u64 = 0;
    while offset < bytes.len() {
        line_number += 1;
        let (end, next_offset, terminated) = match find_newline(offset) {
            Some(newline) => (newline, newline + 1, true),
            None => (bytes.len(), bytes.len(), false),
        };
        let start = offset;
        let line_bytes = &bytes[start..end];
        offset = next_offset;

        if line_bytes.trim_ascii().is_empty() {
            // Blank lines carry nothing. A blank torn tail is still cut off before the next append (through
            // `valid_len`), but there is nothing to report about it.
            continue;
        }
        let line = match complete_text {
            Some(text) if terminated => Ok(&text[start..end]),
            _ => std::str::from_utf8(line_bytes),
        };
        let line = match line {
            Ok(line) => line,
            Err(error) => {
                let reason = if terminated {
                    format!("not valid UTF-8 (at byte {} of the line)", error.valid_up_to() + 1)
                } else {
                    TORN_REASON.to_owned()
                };
                checker.skip(None, line_number, reason);
                continue;
            }
        };
        if terminated {
            checker.check_line(line, line_number);
        } else {
            // An unterminated line was never acknowledged, even when it happens to be complete JSON.
            checker.skip(read_seq(line), line_number, TORN_REASON.to_owned());
        }
    }

    if checker.events.is_empty() && checker.skipped.is_empty() {
        // Nothing at all, not even a damaged line: the log lost its `session_created`. Report it, so the caller
        // sees why the session has no metadata.
        checker.skipped.push(SkippedEvent {
            seq: Some(1),
            line: None,
            reason: "the log is empty: session_created (sequence 1) is missing".to_owned(),
        });
    }
    ParsedLog {
        events: checker.events,
        skipped: checker.skipped,
        last_seq: checker.last_seq,
        valid_len: complete_len as u64,
    }
}

/// The `reason` of the skipped-event entry that reports a torn final line. The engine drops that entry once the
/// writer has cut the tail off ([`LogWriter::has_torn_tail`] turns false).
pub const TORN_REASON: &str = "torn final line (no newline; will be truncated before the next append)";

/// The per-line rules, with the state they need: the session id and the last accepted sequence.
struct LineChecker<'a> {
    session_id: &'a str,
    events: Vec<LoadedEvent>,
    skipped: Vec<SkippedEvent>,
    last_seq: u64,
    /// The line number of the last accepted event.
    last_line: u64,
}

impl LineChecker<'_> {
    /// Accepts or skips one complete, non-blank line.
    fn check_line(&mut self, line: &str, line_number: u64) {
        // The common case parses once, straight into the typed event; only a failing line is parsed again, as a
        // plain value, to find its sequence for the report.
        let event = match serde_json::from_str::<StoredEvent>(line) {
            Ok(event) => event,
            Err(error) => {
                let reason = match error.classify() {
                    Category::Syntax => {
                        format!("invalid JSON (syntax error at column {})", error.column())
                    }
                    Category::Eof => {
                        format!("invalid JSON (ends early at column {})", error.column())
                    }
                    // Data errors can quote the offending value, so their message is never used.
                    Category::Data | Category::Io => "not a valid event: missing or wrong field".to_owned(),
                };
                self.skip(read_seq(line), line_number, reason);
                return;
            }
        };
        let seq = event.seq;
        if event.session_id != self.session_id {
            self.skip(Some(seq), line_number, "session_id does not match the session directory".to_owned());
            return;
        }
        if self.events.is_empty() {
            let is_creation =
                matches!(event.payload, EventPayload::SessionCreated { .. }) && seq == 1 && event.run_id.is_none();
            if !is_creation {
                self.skip(
                    Some(seq),
                    line_number,
                    "expected session_created with sequence 1 and no run as the first event".to_owned(),
                );
                return;
            }
        } else if seq <= self.last_seq {
            self.skip(Some(seq), line_number, format!("sequence {seq} does not increase (previous {})", self.last_seq));
            return;
        } else if seq > self.last_seq + (line_number - self.last_line) {
            // The writer numbers events one by one, so a line can be at most one higher than the line before it.
            // A larger jump is a damaged sequence: skipping it (not the intact lines after it) keeps the log going
            // and appends continuing from the last good sequence.
            let most = self.last_seq + (line_number - self.last_line);
            self.skip(
                Some(seq),
                line_number,
                format!("sequence {seq} is out of place (at most {most} can follow {})", self.last_seq),
            );
            return;
        }
        let json = match EventJson::from_json(line.to_owned()) {
            Ok(json) => json,
            // Unreachable in practice: the line just parsed as an event, so it is one JSON value.
            Err(_) => {
                self.skip(Some(seq), line_number, "invalid JSON".to_owned());
                return;
            }
        };
        self.last_seq = seq;
        self.last_line = line_number;
        self.events.push(LoadedEvent { event, json });
    }

    /// Records a skipped line: by sequence when one was read, else by line number (exactly one of the two).
    fn skip(&mut self, seq: Option<u64>, line_number: u64, reason: String) {
        self.skipped.push(SkippedEvent { line: if seq.is_some() { None } else { Some(line_number) }, seq, reason });
    }
}

/// The `seq` of a line that is JSON but not a valid event, if it has a usable one.
fn read_seq(line: &str) -> Option<u64> {
    let value: serde_json::Value = serde_json::from_str(line).ok()?;
    value.get("seq")?.as_u64()
}

#[cfg(test)]
mod tests;
