//! troupe extension: the changes file tools made, shown before (an approval's `diff`) and afterwards
//! (`session.diff`), and taken back (`session.undo`).
//!
//! Every `write_file` and `edit_file` records what it replaced before it writes (`docs/runtime-semantics.md`,
//! "Changes and undo"); these are the wire shapes of what clients see of those records. A strict protocol-20
//! client never sees them unless it asks: the methods are extensions, and the one field they add to a reference
//! shape (`ApprovalOperation.diff`) is omitted when absent, in a result a client must read leniently.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a change does to a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FileChangeKind {
    /// The file did not exist before.
    Created,
    /// The file existed and its content changes.
    Modified,
    /// The file existed and is gone afterwards (an undo of a creation).
    Deleted,
}

/// One file's change as a unified diff (`--- a/path`, `+++ b/path`, hunks with 3 lines of context).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FileDiff {
    /// The file's absolute path.
    pub path: String,
    pub kind: FileChangeKind,
    /// Lines added and removed (0 and 0 for a binary file).
    pub lines_added: u64,
    pub lines_removed: u64,
    /// Sizes in bytes before and after (0 for a file that does not exist).
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// Either side is not text (not UTF-8, or holds a NUL byte): there is no `unified` text.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub binary: bool,
    /// The unified diff; absent for a binary file or when the content could not be read (see `note`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unified: Option<String>,
    /// `unified` was cut to the daemon's bound (the counts are still whole).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Why the diff is partial or missing, for a person (a file too large to read whole, content not recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// `session.diff` params (troupe extension).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionDiffParams {
    pub session_id: String,
    /// The run whose changes to show; the session's last run that changed files when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

/// A run of the session that changed files, in `session.diff`'s list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChangedRun {
    pub run_id: String,
    /// How many files it changed.
    pub files: u64,
    /// Its changes were taken back by `session.undo`.
    pub undone: bool,
    /// Shell commands of the run changed its git repository's work tree (`SessionDiffResult.shell`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shell: bool,
}

/// What a run's shell commands changed, in the git repository that holds the session's folder: the work tree
/// before the run's first command against after its last, as `git diff` would show it. Not taken back by
/// `session.undo`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ShellChanges {
    /// The repository's top folder.
    pub repository: String,
    /// In path order (absolute paths), at most 300.
    pub files: Vec<FileDiff>,
    /// Files beyond `files` that changed too.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more_files: u64,
    /// Paths (relative to `repository`) left out of the snapshots: new or changed files over 1 MiB.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<String>,
    /// Why there is no diff (its snapshots are gone), for a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// `session.diff` result: one run's changes, each file from before the run to after it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionDiffResult {
    pub session_id: String,
    /// The run shown; null when no run of the session changed files.
    pub run_id: Option<String>,
    /// The run's changes were taken back by `session.undo`.
    pub undone: bool,
    /// What the run's file tools changed, in path order.
    pub files: Vec<FileDiff>,
    /// What the run's shell commands changed in the session's git repository; absent outside git, or when they
    /// changed nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<ShellChanges>,
    /// Every run of the session that changed files, oldest first.
    pub runs: Vec<ChangedRun>,
}

/// `session.undo` params (troupe extension).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionUndoParams {
    pub session_id: String,
    /// The run whose changes to take back; the session's last run with changes not yet undone when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Restore files changed since the run too (and leave those whose earlier content was not recorded).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
}

/// What an undo did to one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum UndoAction {
    /// Its content before the run was written back.
    Restored,
    /// It did not exist before the run and was removed.
    Removed,
    /// It was as before the run already; nothing was written.
    Unchanged,
    /// Left as it is (`force`): its content before the run was not recorded.
    Left,
}

/// One file of an undo.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UndoneFile {
    pub path: String,
    pub action: UndoAction,
}

/// `session.undo` result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionUndoResult {
    pub session_id: String,
    pub run_id: String,
    /// In path order.
    pub files: Vec<UndoneFile>,
    /// The `seq` of the `run_changes_undone` event that records the undo.
    pub seq: u64,
}

/// Why `session.undo` refused one file (`data.files` of an `undo_conflict` error).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum UndoConflictReason {
    /// The file changed since the run wrote it (its content is not what the run left).
    ChangedSince,
    /// What the file held before the run was not recorded (too large, or the store was full).
    NotRecorded,
    /// The path cannot be used now: it leads outside the session's folder or through a symbolic link, is denied
    /// by the sandbox, or cannot be read. `force` does not override this.
    Refused,
}

/// One refused file of an `undo_conflict` error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UndoConflict {
    pub path: String,
    pub reason: UndoConflictReason,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn undo_params_default_to_the_last_run_without_force_and_refuse_unknown_fields() {
        let params: SessionUndoParams = serde_json::from_value(json!({"session_id": "s"})).unwrap();
        assert_eq!(params, SessionUndoParams { session_id: "s".into(), run_id: None, force: false });
        assert!(serde_json::from_value::<SessionUndoParams>(json!({"session_id": "s", "all": true})).is_err());
    }

    #[test]
    fn a_text_diff_omits_what_it_does_not_have() {
        let diff = FileDiff {
            path: "/w/a.txt".into(),
            kind: FileChangeKind::Modified,
            lines_added: 1,
            lines_removed: 2,
            bytes_before: 4,
            bytes_after: 2,
            binary: false,
            unified: Some("--- a/w/a.txt\n".into()),
            truncated: false,
            note: None,
        };
        let value = serde_json::to_value(&diff).unwrap();
        assert_eq!(
            value,
            json!({"path": "/w/a.txt", "kind": "modified", "lines_added": 1, "lines_removed": 2, "bytes_before": 4,
                   "bytes_after": 2, "unified": "--- a/w/a.txt\n"})
        );
    }
}
