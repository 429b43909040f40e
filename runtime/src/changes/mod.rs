//! Change records: what every `write_file` and `edit_file` replaced, so a run's changes can be shown
//! (`session.diff`) and taken back (`session.undo`).
//!
//! Before a file tool changes a file, it records the file's content before (or that there was none) and after, as
//! content-addressed blobs in `<data_dir>/blobs/` ([`blobs`]), and a line naming them, its session, run and tool
//! call in the session's journal `sessions/<id>/changes.jsonl` ([`journal`]). Both are durable before the file is
//! touched, so a crash after the write can still be undone. The records live beside the event log rather than in
//! it: forks, reverts and compaction leave them alone (a revert hides events, never the files a run changed), the
//! journal goes with its session's folder, and collecting blobs reads only journals, never logs
//! ([`ChangeStore::collect_garbage`], after `session.delete`).
//!
//! Recording is bounded: a content over [`ChangeLimits::max_blob_bytes`] or past the store's budget is not stored,
//! and the write goes ahead with a note saying it cannot be undone. What shell commands change is not recorded file
//! by file: in a git repository, the work tree is snapshotted around them ([`shell`], [`git_snapshot`]) so that a
//! run's commands' changes can be shown, not undone.
//!
//! One lock serializes recording and collecting, so a blob is never removed between being stored and being named
//! in a journal.

mod blobs;
pub mod diff;
pub mod git_snapshot;
pub mod journal;
pub mod plan;
pub mod shell;
pub mod undo;

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::sync::{Mutex, MutexGuard};

pub use blobs::{BlobRefusal, DIGEST_PREFIX, digest_of, digest_text};
pub use journal::{Before, ChangeRecord, Content};

use blobs::BlobStore;

/// How much the store keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChangeLimits {
    /// The largest content recorded (before or after a write); larger files are written unrecorded.
    pub max_blob_bytes: u64,
    /// All blobs together; past it, new contents are not recorded until sessions are deleted.
    pub budget_bytes: u64,
}

impl Default for ChangeLimits {
    fn default() -> Self {
        ChangeLimits { max_blob_bytes: 8 * 1024 * 1024, budget_bytes: 1024 * 1024 * 1024 }
    }
}

/// The daemon's change records: the blobs and every session's journal.
pub struct ChangeStore {
    sessions_dir: PathBuf,
    limits: ChangeLimits,
    blobs: Mutex<BlobStore>,
    /// Each session's run whose first shell snapshot is taken (`shell`), so later commands of the run do not read
    /// the journal to learn it.
    shell_runs_begun: Mutex<std::collections::HashMap<String, String>>,
    /// The shell snapshots' shadow git dirs (`<data_dir>/shell-snapshots`).
    shadows: git_snapshot::ShadowRepos,
}

/// What a file held before a write, as the tool read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prior {
    Absent,
    Content(Vec<u8>),
    /// Larger than the tool reads for recording: only its size is known.
    TooLarge {
        size: u64,
    },
}

impl Prior {
    /// The content, when it was read whole.
    pub fn content(&self) -> Option<&[u8]> {
        match self {
            Prior::Content(content) => Some(content),
            Prior::Absent | Prior::TooLarge { .. } => None,
        }
    }
}

/// One write to record.
pub struct Write<'a> {
    pub tool: &'a str,
    pub path: &'a Path,
    pub inside_cwd: bool,
    pub before: &'a Prior,
    pub after: &'a [u8],
}

/// Why a write could not be (wholly) recorded: the note its tool result carries. `None`: recorded.
pub type RecordNote = Option<String>;

impl ChangeStore {
    /// The store of the data directory `data_dir`; nothing is created until the first record.
    pub fn new(data_dir: &Path, limits: ChangeLimits) -> Self {
        ChangeStore {
            sessions_dir: data_dir.join("sessions"),
            limits,
            blobs: Mutex::new(BlobStore::new(data_dir.join("blobs"), limits.max_blob_bytes, limits.budget_bytes)),
            shell_runs_begun: Mutex::default(),
            shadows: git_snapshot::ShadowRepos::new(data_dir.join("shell-snapshots")),
        }
    }

    pub fn limits(&self) -> ChangeLimits {
        self.limits
    }

    /// The blobs, under the lock that keeps recording and collecting apart. A panic while it was held left no
    /// half-made state a later use must avoid (blobs are whole or absent), so a poisoned lock is taken as it is.
    fn lock(&self) -> MutexGuard<'_, BlobStore> {
        self.blobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn session_dir(&self, session_id: &str) -> PathBuf {
        self.sessions_dir.join(session_id)
    }

    /// Records `write` of a tool call, durably, before the write happens. Blocking I/O.
    pub fn record(&self, session_id: &str, run_id: &str, tool_call_id: &str, write: Write<'_>) -> RecordNote {
        crate::blocking::assert_may_block();
        let Some(path) = write.path.to_str() else {
            return Some("not recorded for undo: the path is not UTF-8".to_owned());
        };
        let mut blobs = self.lock();
        let mut notes = Vec::new();
        let before = match write.before {
            Prior::Absent => Before::Absent,
            Prior::TooLarge { size } => {
                let max = self.limits.max_blob_bytes;
                notes.push(format!("its content before is {size} bytes, over the {max} bytes recorded"));
                Before::Content(Content { digest: None, size: *size, not_stored: Some("too large".to_owned()) })
            }
            Prior::Content(content) => Before::Content(stored(&mut blobs, content, "before", &mut notes)),
        };
        let after = stored(&mut blobs, write.after, "after", &mut notes);
        let record = ChangeRecord {
            run_id: run_id.to_owned(),
            tool_call_id: tool_call_id.to_owned(),
            tool: write.tool.to_owned(),
            path: path.to_owned(),
            inside_cwd: write.inside_cwd,
            before,
            after,
            recorded_at: crate::clock::now_rfc3339(),
        };
        if let Err(error) = journal::append(&self.session_dir(session_id), &record) {
            tracing::warn!(session_id, path, %error, "could not record a file change");
            return Some(format!("not recorded for undo: the change journal could not be written ({error})"));
        }
        // Only the content after missing does not stop an undo (the digest is enough to notice a later change);
        // `session.diff` then shows sizes for that side.
        let before_lost = matches!(&record.before, Before::Content(content) if !content.stored());
        before_lost.then(|| format!("not recorded for undo: {}", notes.join("; ")))
    }

    /// The session's records, in order. Blocking I/O.
    pub fn records(&self, session_id: &str) -> io::Result<Vec<ChangeRecord>> {
        journal::read(&self.session_dir(session_id))
    }

    /// A stored content, checked against its digest. Blocking I/O.
    pub fn blob(&self, digest: &str) -> io::Result<Vec<u8>> {
        self.lock().get(digest)
    }

    /// Removes the blobs no session's journal names any more, and the shell snapshots' shadows no session's
    /// snapshot journal names; how many blobs went. Blocking I/O: it reads every journal, under the store's lock.
    pub fn collect_garbage(&self) -> io::Result<usize> {
        crate::blocking::assert_may_block();
        let mut blobs = self.lock();
        let mut referenced = HashSet::new();
        let sessions = match std::fs::read_dir(&self.sessions_dir) {
            Ok(sessions) => sessions,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return blobs.retain(&referenced),
            Err(error) => return Err(error),
        };
        let mut session_dirs = Vec::new();
        for entry in sessions.flatten() {
            let name = entry.file_name();
            // A deletion's staging folder (`.<id>.delete`) is on its way out.
            if name.to_string_lossy().starts_with('.') || !entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                continue;
            }
            session_dirs.push(entry.path());
        }
        if let Err(error) = self.collect_shadows(&session_dirs) {
            tracing::warn!(%error, "could not collect the shell snapshots no session names");
        }
        for session_dir in &session_dirs {
            for record in journal::read(session_dir)? {
                if let Before::Content(Content { digest: Some(digest), .. }) = record.before {
                    referenced.insert(digest);
                }
                if let Some(digest) = record.after.digest {
                    referenced.insert(digest);
                }
            }
        }
        blobs.retain(&referenced)
    }
}

/// Stores one side's content; its record, with the reason in `notes` when it was not stored.
fn stored(blobs: &mut BlobStore, content: &[u8], side: &str, notes: &mut Vec<String>) -> Content {
    let digest = digest_of(content);
    let size = content.len() as u64;
    match blobs.put(content) {
        Ok(_) => Content { digest: Some(digest), size, not_stored: None },
        Err(refusal) => {
            if let BlobRefusal::Io(error) = &refusal {
                tracing::warn!(%error, "could not store a file's content for undo");
            }
            notes.push(format!("its content {side} the write: {refusal}"));
            Content { digest: Some(digest), size, not_stored: Some(refusal.to_string()) }
        }
    }
}

/// What a tool call records its writes with: the store and the call's identity.
#[derive(Clone)]
pub struct ChangeRecorder {
    pub store: Arc<ChangeStore>,
    pub session_id: String,
    pub run_id: String,
    pub tool_call_id: String,
}

impl ChangeRecorder {
    /// Records `write` (see [`ChangeStore::record`]).
    pub fn record(&self, write: Write<'_>) -> RecordNote {
        self.store.record(&self.session_id, &self.run_id, &self.tool_call_id, write)
    }

    /// The most bytes of a file read to record it.
    pub fn max_blob_bytes(&self) -> u64 {
        self.store.limits.max_blob_bytes
    }
}

impl std::fmt::Debug for ChangeRecorder {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ChangeRecorder")
            .field("session_id", &self.session_id)
            .field("run_id", &self.run_id)
            .field("tool_call_id", &self.tool_call_id)
            .finish()
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod shell_tests;
