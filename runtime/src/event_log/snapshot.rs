//! `projection.snap`: a durable snapshot of a session's projection, so that loading a long log scans only the
//! lines written after it.
//!
//! The log stays the truth. A snapshot records the projection ([`SessionState`], as the projector leaves it,
//! *before* `branch::settle_loaded`) after the first `covered_len` bytes of the log, with what the loader needs
//! to go on from there without reading those bytes again: the store's sparse index, the excluded and repaired
//! lines, the skipped-line reports and repairs, and the line numbers. A load trusts it only after checking the
//! log against it: the log is at least `covered_len` long and its last covered line (which names the session,
//! its `seq` and its time) has the recorded SHA-256. Anything else (no file, another format version, another
//! session, a shorter or rewritten log, a file that does not decode) makes the load ignore the snapshot and scan
//! the whole log, as without one; a snapshot never fails a load.
//!
//! # File format
//!
//! Two lines of JSON. The first is a small [`Header`] (format version, session id, the covered length and the
//! check of the last covered line), read and checked before the second, the [`Body`] (the scan point and the
//! state), is decoded. JSON rather than a binary format: the state's types already speak serde, a snapshot of a
//! session the size of the issue-15 benchmark is a few kilobytes, and the file can be read when in doubt.
//!
//! # Writing
//!
//! The session actor takes a [`PendingSnapshot`] (a clone of the state and of the index) when its log has grown
//! by [`SNAPSHOT_EVERY_BYTES`] since the last one, and when it stops or after a load that scanned more than
//! [`SNAPSHOT_MIN_GROWTH_BYTES`] past it; [`PendingSnapshot::write`] runs on a blocking thread. The write is
//! durable (temporary file, fsync, rename, fsync of the directory) so that a snapshot that is found is whole.
//! A fork writes a new log in a new directory: it never has its source's snapshot, and a snapshot's session id
//! must match its directory anyway.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use troupe_protocol::types::common::SkippedEvent;

use super::check::LoadDiagnostic;
use super::log_path;
use crate::data_dir::{Durability, replace_file};
use crate::error::RuntimeError;
use crate::session_state::SessionState;

/// The snapshot's file name inside a session directory.
pub const SNAPSHOT_FILE_NAME: &str = "projection.snap";

/// Bumped whenever the stored shape changes (of the header, the scan point or any part of the state): a snapshot of
/// another version is ignored and rebuilt, never misread. 2: the state's named artifacts (`artifacts`).
const SNAPSHOT_FORMAT: u32 = 2;

/// A live session takes a snapshot each time its log has grown by this much since the last one. Scanning this
/// much log costs a few tens of milliseconds; taking a snapshot costs a clone of the state on the actor.
pub const SNAPSHOT_EVERY_BYTES: u64 = 4 * 1024 * 1024;

/// At a stop, or after a load, a snapshot is written when the log has grown past the last one by at least this
/// much (about 2 ms of scanning): less is not worth a write and an fsync.
pub const SNAPSHOT_MIN_GROWTH_BYTES: u64 = 256 * 1024;

/// Files larger than this are not snapshots this version wrote for any session the engine can hold in memory.
const MAX_SNAPSHOT_BYTES: u64 = 1 << 30;

/// The snapshot's path inside `session_dir`.
pub fn snapshot_path(session_dir: &Path) -> PathBuf {
    session_dir.join(SNAPSHOT_FILE_NAME)
}

/// Where a scan of the log stands after the covered lines: what the loader needs to go on from there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct ScanPoint {
    /// Bytes of complete lines covered.
    pub(super) covered_len: u64,
    /// Complete lines (blank ones too) in the covered bytes.
    pub(super) lines: u64,
    /// Where the last covered line starts.
    pub(super) last_line_start: u64,
    /// The line number of the last accepted event.
    pub(super) last_event_line: u64,
    /// The sequence of the last accepted event.
    pub(super) last_seq: u64,
    /// The store's sparse index: `(seq, offset)`.
    pub(super) index: Vec<(u64, u64)>,
    pub(super) next_mark: u64,
    /// Offsets of complete lines not accepted, in order.
    pub(super) excluded: Vec<u64>,
    /// Events served as repaired text: `(offset, text)`, in order.
    pub(super) repaired: Vec<(u64, String)>,
    pub(super) diagnostics: Vec<LoadDiagnostic>,
    /// The covered lines that were skipped (never a torn line: it lies past the covered bytes).
    pub(super) skipped: Vec<SkippedEvent>,
}

/// The first line: enough to check the snapshot against the log before decoding the rest.
#[derive(Serialize, Deserialize)]
struct Header {
    format: u32,
    session_id: String,
    covered_len: u64,
    last_line_start: u64,
    /// SHA-256 of the bytes of the last covered line (with its `\n`), in hex.
    last_line_sha256: String,
}

/// The second line.
#[derive(Serialize, Deserialize)]
struct Body {
    point: ScanPoint,
    state: SessionState,
}

/// Why a load did not use a snapshot that was there. Logged, never an error of the load.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotRefusal {
    #[error("the snapshot cannot be read: {0}")]
    Unreadable(io::Error),
    #[error("the snapshot is not of this format (format {found}, expected {SNAPSHOT_FORMAT})")]
    Format { found: u32 },
    #[error("the snapshot does not decode: {0}")]
    Decode(serde_json::Error),
    #[error("the snapshot is of another session")]
    OtherSession,
    #[error("the log is shorter ({log_len} bytes) than the snapshot covers ({covered_len})")]
    LogShorter { log_len: u64, covered_len: u64 },
    #[error("the log's line at byte {offset} is not the one the snapshot covers")]
    LineDiffers { offset: u64 },
}

/// A snapshot that matches the log: its state and where the scan goes on.
pub(super) struct Restored {
    pub(super) point: ScanPoint,
    pub(super) state: SessionState,
}

/// Reads the snapshot of `session_dir` and checks it against `log` (the open log file). `Ok(None)` when there is
/// none.
pub(super) fn read(session_dir: &Path, session_id: &str, log: &File) -> Result<Option<Restored>, SnapshotRefusal> {
    let path = snapshot_path(session_dir);
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(SnapshotRefusal::Unreadable(error)),
    };
    let mut bytes = Vec::new();
    file.take(MAX_SNAPSHOT_BYTES).read_to_end(&mut bytes).map_err(SnapshotRefusal::Unreadable)?;
    let (header, body) = match bytes.iter().position(|&byte| byte == b'\n') {
        Some(end) => (&bytes[..end], &bytes[end + 1..]),
        None => (&bytes[..], &[][..]),
    };
    let header: Header = match serde_json::from_slice(header) {
        Ok(header) => header,
        // A header of another shape may still say which format it is.
        Err(error) => {
            return Err(match serde_json::from_slice::<FormatOnly>(header) {
                Ok(FormatOnly { format }) if format != SNAPSHOT_FORMAT => SnapshotRefusal::Format { found: format },
                _ => SnapshotRefusal::Decode(error),
            });
        }
    };
    if header.format != SNAPSHOT_FORMAT {
        return Err(SnapshotRefusal::Format { found: header.format });
    }
    if header.session_id != session_id {
        return Err(SnapshotRefusal::OtherSession);
    }
    check_log(log, &header)?;
    let body: Body = serde_json::from_slice(body).map_err(SnapshotRefusal::Decode)?;
    let consistent = body.point.covered_len == header.covered_len
        && body.point.last_line_start == header.last_line_start
        && body.state.session_id == session_id
        && body.state.last_event_seq == body.point.last_seq;
    if !consistent {
        return Err(SnapshotRefusal::LineDiffers { offset: header.last_line_start });
    }
    Ok(Some(Restored { point: body.point, state: body.state }))
}

#[derive(Deserialize)]
struct FormatOnly {
    format: u32,
}

/// Checks that the log still holds the snapshot's last covered line, byte for byte, where it was.
fn check_log(log: &File, header: &Header) -> Result<(), SnapshotRefusal> {
    let log_len = log.metadata().map_err(SnapshotRefusal::Unreadable)?.len();
    if log_len < header.covered_len {
        return Err(SnapshotRefusal::LogShorter { log_len, covered_len: header.covered_len });
    }
    let differs = SnapshotRefusal::LineDiffers { offset: header.last_line_start };
    let Some(line) =
        read_line_at(log, header.last_line_start, header.covered_len).map_err(SnapshotRefusal::Unreadable)?
    else {
        return Err(differs);
    };
    if sha256_hex(&line) != header.last_line_sha256 {
        return Err(differs);
    }
    Ok(())
}

/// The bytes `start..end` of `log` when they are one line ending at `end` (`None` otherwise).
fn read_line_at(log: &File, start: u64, end: u64) -> io::Result<Option<Vec<u8>>> {
    if start >= end || end - start > MAX_SNAPSHOT_BYTES {
        return Ok(None);
    }
    let mut line = vec![0; (end - start) as usize];
    log.read_exact_at(&mut line, start)?;
    let one_line = line.last() == Some(&b'\n') && !line[..line.len() - 1].contains(&b'\n');
    Ok(one_line.then_some(line))
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A snapshot taken and not yet written: the state and the scan point it belongs to.
#[derive(Debug)]
pub struct PendingSnapshot {
    state: SessionState,
    point: ScanPoint,
}

impl PendingSnapshot {
    pub(super) fn new(state: SessionState, point: ScanPoint) -> Self {
        PendingSnapshot { state, point }
    }

    /// Bytes of log the snapshot covers.
    pub fn covered_len(&self) -> u64 {
        self.point.covered_len
    }

    /// Writes the snapshot durably into `session_dir`, replacing any earlier one. Blocking: run it on a blocking
    /// thread. Fails (and writes nothing) when the log no longer holds the covered lines.
    pub fn write(self, session_dir: &Path) -> Result<(), RuntimeError> {
        crate::blocking::assert_may_block();
        let log = log_path(session_dir);
        let line = File::open(&log)
            .and_then(|file| read_line_at(&file, self.point.last_line_start, self.point.covered_len))
            .map_err(|error| RuntimeError::io("read the last covered line of", &log, error))?
            .ok_or_else(|| {
                let error = io::Error::new(io::ErrorKind::InvalidData, "the last covered line is not one line");
                RuntimeError::io("read the last covered line of", &log, error)
            })?;
        let final_path = snapshot_path(session_dir);
        // Two writes of one session may overlap (a stopping actor's and a load's): the one that covers more wins,
        // unless the log no longer holds what it covers.
        let log_len = std::fs::metadata(&log).map(|metadata| metadata.len()).unwrap_or_default();
        if covered_len(session_dir).is_some_and(|existing| existing > self.point.covered_len && existing <= log_len) {
            return Ok(());
        }
        let header = Header {
            format: SNAPSHOT_FORMAT,
            session_id: self.state.session_id.clone(),
            covered_len: self.point.covered_len,
            last_line_start: self.point.last_line_start,
            last_line_sha256: sha256_hex(&line),
        };
        let body = Body { point: self.point, state: self.state };
        let mut bytes =
            serde_json::to_vec(&header).map_err(|error| RuntimeError::io("encode", &final_path, error.into()))?;
        bytes.push(b'\n');
        serde_json::to_writer(&mut bytes, &body)
            .map_err(|error| RuntimeError::io("encode", &final_path, error.into()))?;
        replace_file(&final_path, &bytes, Durability::Durable)
    }
}

/// The log length the snapshot in `session_dir` covers, from its header alone (`None` without a readable one).
/// For tools and benchmarks that wait for a snapshot.
pub fn covered_len(session_dir: &Path) -> Option<u64> {
    let file = File::open(snapshot_path(session_dir)).ok()?;
    let mut header = Vec::new();
    io::BufRead::read_until(&mut io::BufReader::new(file), b'\n', &mut header).ok()?;
    let header: Header = serde_json::from_slice(&header).ok()?;
    (header.format == SNAPSHOT_FORMAT).then_some(header.covered_len)
}

#[cfg(test)]
mod tests;
