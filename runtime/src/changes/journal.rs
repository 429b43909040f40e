//! A session's change journal: `sessions/<id>/changes.jsonl`, one [`ChangeRecord`] JSON object per line, in the
//! order the writes happened.
//!
//! Each line is appended and fdatasynced before the write it records (the journal is created 0600 and the session
//! folder fsynced after). Reading is per line and best effort, like the event log's: a line that does not parse
//! (torn by a crash, never followed by its write) is skipped with a warning; an append after a torn line starts a
//! new line first, so a torn line never swallows the next record.

use std::fs::OpenOptions;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The journal's file name in a session's folder.
pub const JOURNAL_FILE: &str = "changes.jsonl";

/// One file write of a tool call: what the file held before (so it can be put back) and after (so a later change
/// is noticed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeRecord {
    pub run_id: String,
    pub tool_call_id: String,
    pub tool: String,
    /// The absolute path written, resolved as the tool resolved it.
    pub path: String,
    /// The path lay inside the session's cwd (else the write was approved for exactly this path).
    pub inside_cwd: bool,
    pub before: Before,
    pub after: Content,
    /// RFC 3339 UTC.
    pub recorded_at: String,
}

/// What the file held before the write.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Before {
    /// There was no file.
    Absent,
    /// Its content, stored as a blob when `stored`.
    Content(Content),
}

/// A content by digest, and whether its blob was stored (else `not_stored` says why).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Content {
    /// `sha256:<hex>`; absent when the content could not be read whole to digest it (see `not_stored`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    pub size: u64,
    /// Why the blob was not stored; absent when it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_stored: Option<String>,
}

impl Content {
    /// Whether the blob of this content was stored.
    pub fn stored(&self) -> bool {
        self.digest.is_some() && self.not_stored.is_none()
    }
}

impl Before {
    /// The digest the file had before: `Some(None)` for "no file", `None` when it is unknown (not read whole).
    pub fn known_digest(&self) -> Option<Option<&str>> {
        match self {
            Before::Absent => Some(None),
            Before::Content(Content { digest: Some(digest), .. }) => Some(Some(digest)),
            Before::Content(_) => None,
        }
    }
}

/// Appends `record` to the journal in `session_dir` and makes it durable.
pub(super) fn append(session_dir: &Path, record: &ChangeRecord) -> io::Result<()> {
    append_to(session_dir, JOURNAL_FILE, record)
}

/// Appends `record` as one line of the journal `name` in `session_dir` and makes it durable.
pub(super) fn append_to(session_dir: &Path, name: &str, record: &impl Serialize) -> io::Result<()> {
    crate::blocking::assert_may_block();
    let path = session_dir.join(name);
    let mut line = serde_json::to_vec(record).map_err(io::Error::other)?;
    line.push(b'\n');
    let (mut file, created) = match OpenOptions::new().append(true).read(true).create_new(true).mode(0o600).open(&path)
    {
        Ok(file) => (file, true),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
            (OpenOptions::new().append(true).read(true).open(&path)?, false)
        }
        Err(error) => return Err(error),
    };
    if !created && ends_torn(&mut file)? {
        line.insert(0, b'\n');
    }
    file.write_all(&line)?;
    file.sync_data()?;
    if created {
        std::fs::File::open(session_dir)?.sync_all()?;
    }
    Ok(())
}

/// Whether the file's last byte is not a newline (a line torn by a crash).
fn ends_torn(file: &mut std::fs::File) -> io::Result<bool> {
    let length = file.metadata()?.len();
    if length == 0 {
        return Ok(false);
    }
    file.seek(SeekFrom::Start(length - 1))?;
    let mut last = [0u8; 1];
    file.read_exact(&mut last)?;
    Ok(last[0] != b'\n')
}

/// Every readable record of the journal in `session_dir`, in order; none when there is no journal.
pub fn read(session_dir: &Path) -> io::Result<Vec<ChangeRecord>> {
    read_from(session_dir, JOURNAL_FILE)
}

/// Every readable record of the journal `name` in `session_dir`, in order; none when there is no such journal.
pub(super) fn read_from<T: serde::de::DeserializeOwned>(session_dir: &Path, name: &str) -> io::Result<Vec<T>> {
    crate::blocking::assert_may_block();
    let path = session_dir.join(name);
    let file = match crate::regular_file::open_regular(&path, crate::regular_file::Links::Refuse) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error),
    };
    let mut records = Vec::new();
    for (index, line) in BufReader::new(file).split(b'\n').enumerate() {
        let line = line?;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<T>(&line) {
            Ok(record) => records.push(record),
            Err(error) => tracing::warn!(
                path = %path.display(),
                line = index + 1,
                %error,
                "skipped an unreadable line of a change journal"
            ),
        }
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(run: &str, path: &str, before: Before, after: &str) -> ChangeRecord {
        ChangeRecord {
            run_id: run.into(),
            tool_call_id: format!("{run}-call"),
            tool: "write_file".into(),
            path: path.into(),
            inside_cwd: true,
            before,
            after: Content { digest: Some(after.into()), size: 1, not_stored: None },
            recorded_at: "2026-01-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn records_are_read_back_in_order_and_a_torn_line_costs_only_itself() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).unwrap().is_empty(), "no journal is no records");
        let first = record("r1", "/w/a", Before::Absent, "sha256:1");
        append(dir.path(), &first).unwrap();
        // A crash tore the next line.
        let mut file = OpenOptions::new().append(true).open(dir.path().join(JOURNAL_FILE)).unwrap();
        file.write_all(b"{\"run_id\":\"r").unwrap();
        let second = record("r2", "/w/b", Before::Absent, "sha256:2");
        append(dir.path(), &second).unwrap();
        assert_eq!(read(dir.path()).unwrap(), vec![first, second]);
    }
}
