//! What shell commands changed: a snapshot of the session's git work tree before a run's first command and after
//! each command ([`git_snapshot`](super::git_snapshot)), named in the session's `shell-changes.jsonl`, and shown
//! per run as the difference between the run's first and last snapshot.
//!
//! Outside a git repository nothing is recorded. The difference is the work tree's, not only the commands': an
//! editor saving a file while a command runs shows too, and so do the run's file tools' writes once a command ran
//! after them. Undo does not take these changes back.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use troupe_protocol::types::changes::{FileChangeKind, FileDiff, ShellChanges};

use super::diff::{file_diff, unknown_diff};
use super::git_snapshot::{self, Side};
use super::{ChangeStore, journal};

/// The journal's file name in a session's folder.
pub const SHELL_JOURNAL_FILE: &str = "shell-changes.jsonl";

/// When a snapshot was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotPhase {
    /// Before the run's first shell command.
    Before,
    /// After a shell command.
    After,
}

/// One snapshot, as the journal names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    pub run_id: String,
    pub tool_call_id: String,
    pub phase: SnapshotPhase,
    /// The repository's top folder.
    pub repository: String,
    /// The shadow git dir holding the tree.
    pub shadow: String,
    pub tree: String,
    /// Paths (relative to the top folder) left out for their size.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<String>,
    /// RFC 3339 UTC.
    pub recorded_at: String,
}

/// A run's first and last snapshot, when they differ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShellRun {
    pub run_id: String,
    pub repository: String,
    pub shadow: String,
    pub before: String,
    pub after: String,
    pub left_out: Vec<String>,
    /// When the run's first snapshot was taken (to order runs with the file tools' records).
    pub first_at: String,
}

/// The runs of `records` whose work tree changed, in order.
pub fn shell_runs(records: &[SnapshotRecord]) -> Vec<ShellRun> {
    let mut runs: Vec<ShellRun> = Vec::new();
    for record in records {
        match runs.iter_mut().find(|run| run.run_id == record.run_id) {
            Some(run) if record.phase == SnapshotPhase::After && record.shadow == run.shadow => {
                run.after.clone_from(&record.tree);
                for path in &record.left_out {
                    if !run.left_out.contains(path) {
                        run.left_out.push(path.clone());
                    }
                }
            }
            Some(_) => {}
            None if record.phase == SnapshotPhase::Before => runs.push(ShellRun {
                run_id: record.run_id.clone(),
                repository: record.repository.clone(),
                shadow: record.shadow.clone(),
                before: record.tree.clone(),
                after: record.tree.clone(),
                left_out: record.left_out.clone(),
                first_at: record.recorded_at.clone(),
            }),
            // An `after` without a `before` (a crash between them in an older run): nothing to compare with.
            None => {}
        }
    }
    runs.retain(|run| run.before != run.after);
    runs
}

/// A shell call's identity, for [`ChangeStore::snapshot_shell`].
pub struct ShellCall<'a> {
    pub session_id: &'a str,
    pub run_id: &'a str,
    pub tool_call_id: &'a str,
    pub cwd: &'a Path,
    /// The sandbox's denied paths: never read into a snapshot.
    pub denied: &'a [PathBuf],
}

impl ChangeStore {
    /// Takes a snapshot of the git work tree around `call`'s cwd, if it is in one, and records it. A `Before`
    /// snapshot is taken only for the run's first command. What went wrong, for the log. Blocking.
    pub fn snapshot_shell(&self, call: &ShellCall<'_>, phase: SnapshotPhase) -> Result<(), String> {
        crate::blocking::assert_may_block();
        let session_dir = self.session_dir(call.session_id);
        if phase == SnapshotPhase::Before && self.run_has_before(call)? {
            return Ok(());
        }
        let Some(repository) = self.shadows.repository_of(call.cwd) else {
            return Ok(());
        };
        let snapshot = self.shadows.snapshot(&repository, call.denied)?;
        let record = SnapshotRecord {
            run_id: call.run_id.to_owned(),
            tool_call_id: call.tool_call_id.to_owned(),
            phase,
            repository: repository.toplevel.to_string_lossy().into_owned(),
            shadow: snapshot.shadow,
            tree: snapshot.tree,
            left_out: snapshot.left_out,
            recorded_at: crate::clock::now_rfc3339(),
        };
        journal::append_to(&session_dir, SHELL_JOURNAL_FILE, &record).map_err(|error| error.to_string())?;
        self.remember_begun(call);
        Ok(())
    }

    /// Whether `call`'s run has its `Before` snapshot already: remembered per session (a session runs one run at a
    /// time), else looked up in the journal once, after a restart.
    fn run_has_before(&self, call: &ShellCall<'_>) -> Result<bool, String> {
        let begun = self.shell_runs_begun.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if begun.get(call.session_id).is_some_and(|run| run == call.run_id) {
            return Ok(true);
        }
        drop(begun);
        let records = self.shell_records(call.session_id).map_err(|error| error.to_string())?;
        let found = records.iter().any(|record| record.run_id == call.run_id);
        if found {
            self.remember_begun(call);
        }
        Ok(found)
    }

    fn remember_begun(&self, call: &ShellCall<'_>) {
        let mut begun = self.shell_runs_begun.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        begun.insert(call.session_id.to_owned(), call.run_id.to_owned());
    }

    /// The session's snapshot records, in order. Blocking I/O.
    pub fn shell_records(&self, session_id: &str) -> std::io::Result<Vec<SnapshotRecord>> {
        journal::read_from(&self.session_dir(session_id), SHELL_JOURNAL_FILE)
    }

    /// What `run` changed in its repository, as file diffs. Blocking.
    pub fn shell_changes(
        &self,
        run: &ShellRun,
        cwd: &Path,
        protected: &crate::sandbox::ProtectedPaths,
    ) -> ShellChanges {
        let toplevel = PathBuf::from(&run.repository);
        let mut changes = ShellChanges {
            repository: run.repository.clone(),
            files: Vec::new(),
            left_out: run.left_out.clone(),
            more_files: 0,
            note: None,
        };
        let max = self.limits.max_blob_bytes;
        match self.shadows.diff(&run.shadow, &toplevel, &run.before, &run.after, max) {
            Ok((files, more)) => {
                changes.more_files = more as u64;
                changes.files = files.into_iter().map(|file| shown(&toplevel, cwd, file, protected)).collect();
            }
            Err(error) => changes.note = Some(format!("no diff: {error}")),
        }
        changes
    }

    /// Removes the shadows no session's snapshot journal names; how many went. Blocking: reads every journal.
    pub(super) fn collect_shadows(&self, sessions: &[PathBuf]) -> std::io::Result<usize> {
        let mut live = HashSet::new();
        for session_dir in sessions {
            for record in journal::read_from::<SnapshotRecord>(session_dir, SHELL_JOURNAL_FILE)? {
                live.insert(record.shadow);
            }
        }
        self.shadows.retain(&live)
    }
}

/// One changed file as a diff, unless the sandbox denies its path now.
fn shown(
    toplevel: &Path,
    cwd: &Path,
    change: git_snapshot::TreeChange,
    protected: &crate::sandbox::ProtectedPaths,
) -> FileDiff {
    let path = toplevel.join(&change.path);
    let text = path.to_string_lossy().into_owned();
    let kind = match (&change.before, &change.after) {
        (None, _) => FileChangeKind::Created,
        (_, None) => FileChangeKind::Deleted,
        _ => FileChangeKind::Modified,
    };
    let size = |side: &Option<Side>| match side {
        None => 0,
        Some(Side::Content(content)) => content.len() as u64,
        Some(Side::Unread { size, .. }) => *size,
    };
    if let Some(refusal) = protected.refusal_for_path(&path, &text) {
        return unknown_diff(&text, kind, size(&change.before), size(&change.after), format!("not shown: {refusal}"));
    }
    match (&change.before, &change.after) {
        (Some(Side::Unread { why, .. }), _) | (_, Some(Side::Unread { why, .. })) => {
            unknown_diff(&text, kind, size(&change.before), size(&change.after), format!("no diff: {why}"))
        }
        (before, after) => {
            let content = |side: &Option<Side>| match side {
                Some(Side::Content(content)) => Some(content.clone()),
                _ => None,
            };
            file_diff(&text, Some(cwd), content(before).as_deref(), content(after).as_deref())
        }
    }
}

impl super::ChangeRecorder {
    /// Snapshots the git work tree around `cwd` for this shell call ([`ChangeStore::snapshot_shell`]), on a
    /// blocking thread. A failure costs only the diff: it is logged, and the command runs either way.
    pub async fn snapshot_shell(
        &self,
        cwd: &Path,
        sandbox: &std::sync::Arc<crate::sandbox::Sandbox>,
        phase: SnapshotPhase,
    ) {
        let recorder = self.clone();
        let cwd = cwd.to_path_buf();
        let sandbox = std::sync::Arc::clone(sandbox);
        let taken = tokio::task::spawn_blocking(move || {
            let denied = sandbox.denied_around(&cwd);
            let call = ShellCall {
                session_id: &recorder.session_id,
                run_id: &recorder.run_id,
                tool_call_id: &recorder.tool_call_id,
                cwd: &cwd,
                denied: &denied,
            };
            recorder.store.snapshot_shell(&call, phase)
        })
        .await;
        match taken {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(
                session_id = self.session_id,
                tool_call_id = self.tool_call_id,
                %error,
                "no snapshot of the git work tree around a shell command: its changes will not be shown"
            ),
            Err(error) => tracing::warn!(%error, "a shell snapshot's task failed"),
        }
    }
}
