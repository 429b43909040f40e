//! `daemon/session-index.jsonl`: every session's metadata cache (`meta.json`) in one file, written by a daemon as it
//! stops cleanly and taken (read, then removed) by the next start, so that a daemon keeping many sessions knows them
//! after reading one file rather than a cache in each session's folder: the start's scan of 10,000 sessions read
//! 10,000 small files before the first `session.list` was answered (docs/performance.md, finding 12).
//!
//! Like `meta.json` it is a shortcut, never the truth. It holds only caches that matched their logs' length when it
//! was written, each line one cache as `meta.json` holds it (with that length), and the start believes a line at once
//! and checks it against its log afterwards (`actors/src/session_supervisor/index_check.rs`): a log changed while no
//! daemon ran (a backup put back, a crash that undid the file's removal) is read again. Taking it removes it, so a
//! daemon that does not stop cleanly leaves none behind, and its successor scans every session as before.
//!
//! The first line is `{"format":1}`; a file of another format, or a line that is not a cache, is ignored: those
//! sessions are scanned one by one.

use std::collections::HashMap;
use std::io::BufRead;

use crate::data_dir::{DataDir, Durability, replace_file};
use crate::error::RuntimeError;
use crate::meta_cache::{self, Cached};

/// The index's file name in the daemon's folder.
pub const SESSION_INDEX_FILE_NAME: &str = "session-index.jsonl";

/// Bumped whenever the file's own shape changes (its lines follow `meta.json`'s format, checked line by line).
const INDEX_FORMAT: u32 = 1;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    format: u32,
}

/// Writes the index of every session whose cache is current, replacing any older index: fsynced, with its rename, so
/// that after a crash the file is whole or absent (a few milliseconds at 10,000 sessions, measured with their caches
/// just rewritten and not yet written back). Returns how many sessions it holds; the others are scanned at the next start.
pub fn write(data_dir: &DataDir) -> Result<usize, RuntimeError> {
    crate::blocking::assert_may_block();
    let sessions_dir = data_dir.sessions_dir();
    let entries = match std::fs::read_dir(&sessions_dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(error) => return Err(RuntimeError::io("read directory", &sessions_dir, error)),
    };
    let mut file = format!("{{\"format\":{INDEX_FORMAT}}}\n").into_bytes();
    let mut sessions = 0;
    for entry in entries.flatten() {
        let Some(session_id) = entry.file_name().to_str().map(str::to_owned) else { continue };
        if session_id.starts_with('.') {
            continue;
        }
        // A cache is one line of JSON as written (`serde_json` escapes newlines in strings); one that is not is left
        // to the scan.
        if let Some((_, cache)) = meta_cache::read_current(&entry.path(), &session_id)
            && !cache.contains(&b'\n')
        {
            file.extend_from_slice(&cache);
            file.push(b'\n');
            sessions += 1;
        }
    }
    replace_file(&data_dir.session_index_path(), &file, Durability::Durable)?;
    Ok(sessions)
}

/// Reads the index and removes it: each session's cache by id, as the daemon that wrote it last saw it. Empty when
/// there is none, or it is of another format; a line that is not a cache is skipped. Read a line at a time, so the
/// start holds the file's entries, not the file too (6 MB at 10,000 sessions).
pub fn take(data_dir: &DataDir) -> HashMap<String, Cached> {
    crate::blocking::assert_may_block();
    let path = data_dir.session_index_path();
    let file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return HashMap::new(),
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "cannot read the session index; every session is scanned");
            return HashMap::new();
        }
    };
    if let Err(error) = std::fs::remove_file(&path) {
        // Left in place, it is read again by the next start, and checked again there like any other.
        tracing::warn!(path = %path.display(), %error, "cannot remove the session index after reading it");
    }
    let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
    let mut line = Vec::with_capacity(4096);
    // A read error ends the index where it stands: the sessions it did not give are scanned.
    let mut next_line = |line: &mut Vec<u8>| {
        line.clear();
        reader.read_until(b'\n', line).is_ok_and(|read| read > 0)
    };
    // `serde_json` takes the line's newline as trailing whitespace.
    let header = next_line(&mut line).then(|| serde_json::from_slice::<Header>(&line).ok()).flatten();
    if header.is_none_or(|header| header.format != INDEX_FORMAT) {
        return HashMap::new();
    }
    let mut indexed = HashMap::new();
    while next_line(&mut line) {
        if let Some(cached) = meta_cache::parse(&line) {
            indexed.insert(cached.meta.session_id.clone(), cached);
        }
    }
    indexed
}

#[cfg(test)]
#[path = "session_index_tests.rs"]
mod tests;
