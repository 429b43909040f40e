//! `session.undo` and `session.diff` over a session's records: which run, what it changed, and the undo itself,
//! file by file under the file tools' rules (`crate::tools::restore`). Blocking I/O, for a blocking thread.
//!
//! An undo checks every file before it changes any, and reads every content it will write back, so a refusal
//! (files changed since, contents not recorded or lost) changes nothing. A failure while writing back leaves the
//! files done so far restored and records nothing: running the undo again finds those as before the run
//! (`unchanged`) and goes on with the rest.

use std::collections::BTreeSet;
use std::path::Path;

use troupe_protocol::types::changes::{
    ChangedRun, FileChangeKind, FileDiff, SessionDiffResult, UndoConflict, UndoConflictReason, UndoneFile,
};

use super::ChangeStore;
use super::diff::{file_diff, unknown_diff};
use super::journal::{Before, Content};
use super::plan::{self, Current, FileChange, RunChanges, Step};
use crate::sandbox::ProtectedPaths;
use crate::tools::restore;

/// Why an undo or a diff was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum UndoError {
    #[error("{}", nothing_to_undo(.run_id.as_deref()))]
    NothingToUndo { run_id: Option<String> },
    #[error("run `{run_id}` changed no files of this session with write_file or edit_file")]
    RunChangedNoFiles { run_id: String },
    #[error(
        "run `{run_id}` changed files only with shell commands, which undo cannot take back; \
         `troupe diff --run {run_id}` shows what they changed"
    )]
    OnlyShellChanges { run_id: String },
    #[error("{}", conflicts_text(.files))]
    Conflicts { run_id: String, files: Vec<UndoConflict> },
    #[error("the change records could not be read: {0}")]
    Records(std::io::Error),
    #[error(
        "could not put back {path}: {detail}; {} restored before it; run the undo again once the cause is fixed",
        restored_text(.restored)
    )]
    Restore { run_id: String, path: String, detail: String, restored: Vec<String> },
}

fn nothing_to_undo(run_id: Option<&str>) -> String {
    match run_id {
        Some(run_id) => format!("run `{run_id}`'s changes were undone already; there is nothing to undo"),
        None => "no run of this session has file changes left to undo; there is nothing to undo".to_owned(),
    }
}

fn conflicts_text(files: &[UndoConflict]) -> String {
    let listed: Vec<String> = files
        .iter()
        .map(|file| match file.reason {
            UndoConflictReason::ChangedSince => format!("{} (changed since the run)", file.path),
            UndoConflictReason::NotRecorded => format!("{} (its content before the run was not recorded)", file.path),
            UndoConflictReason::Refused => format!("{} (the path cannot be used now)", file.path),
        })
        .collect();
    format!("nothing was undone: {}; force restores what it can", listed.join(", "))
}

fn restored_text(restored: &[String]) -> String {
    match restored.len() {
        0 => "no file was".to_owned(),
        count => format!("{count} files were ({})", restored.join(", ")),
    }
}

/// What an undo did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Undone {
    pub run_id: String,
    pub files: Vec<UndoneFile>,
}

/// Undoes `run_id` of `session_id` (or its last run with changes not in `undone_runs`), in `cwd`.
pub fn undo_run(
    store: &ChangeStore,
    session_id: &str,
    cwd: &Path,
    undone_runs: &BTreeSet<String>,
    run_id: Option<&str>,
    force: bool,
    protected: &ProtectedPaths,
) -> Result<Undone, UndoError> {
    crate::blocking::assert_may_block();
    let runs = plan::runs_of(&store.records(session_id).map_err(UndoError::Records)?);
    let run = match run_id {
        Some(run_id) => {
            let run = runs.into_iter().find(|run| run.run_id == run_id);
            let Some(run) = run else {
                let shell = store.shell_records(session_id).map_err(UndoError::Records)?;
                let run_id = run_id.to_owned();
                let by_shell = super::shell::shell_runs(&shell).iter().any(|run| run.run_id == run_id);
                return Err(if by_shell {
                    UndoError::OnlyShellChanges { run_id }
                } else {
                    UndoError::RunChangedNoFiles { run_id }
                });
            };
            if undone_runs.contains(run_id) {
                return Err(UndoError::NothingToUndo { run_id: Some(run_id.to_owned()) });
            }
            run
        }
        None => runs
            .into_iter()
            .rev()
            .find(|run| !undone_runs.contains(&run.run_id))
            .ok_or(UndoError::NothingToUndo { run_id: None })?,
    };
    let steps = checked_steps(store, cwd, &run, force, protected)?;
    let mut restored = Vec::new();
    for (step, content) in &steps {
        let done = match step {
            Step::Write { path, inside_cwd, .. } => {
                restore::write_back(cwd, path, *inside_cwd, content.as_deref().unwrap_or_default(), protected)
            }
            Step::Remove { path, inside_cwd } => restore::remove(cwd, path, *inside_cwd, protected),
            Step::Keep { .. } => Ok(()),
        };
        if let Err(detail) = done {
            let path = step.path().to_owned();
            return Err(UndoError::Restore { run_id: run.run_id.clone(), path, detail, restored });
        }
        if !matches!(step, Step::Keep { .. }) {
            restored.push(step.path().to_owned());
        }
    }
    let files =
        steps.iter().map(|(step, _)| UndoneFile { path: step.path().to_owned(), action: step.action() }).collect();
    Ok(Undone { run_id: run.run_id, files })
}

/// A step of an undo with the content it writes back, if any.
type PlannedStep = (Step, Option<Vec<u8>>);

/// The steps of the undo, each write with the content it writes, or the conflicts that refuse it.
fn checked_steps(
    store: &ChangeStore,
    cwd: &Path,
    run: &RunChanges,
    force: bool,
    protected: &ProtectedPaths,
) -> Result<Vec<PlannedStep>, UndoError> {
    let mut refused = Vec::new();
    let mut states = std::collections::HashMap::new();
    for file in &run.files {
        match restore::current_state(cwd, &file.path, file.inside_cwd, protected) {
            Ok(state) => {
                states.insert(file.path.clone(), state);
            }
            Err(detail) => {
                tracing::warn!(path = %file.path, %detail, "an undo cannot check a file");
                refused.push(UndoConflict { path: file.path.clone(), reason: UndoConflictReason::Refused });
            }
        }
    }
    let current = |path: &str| states.get(path).cloned().unwrap_or(Current::Absent);
    let planned = if refused.is_empty() { plan::plan_undo(run, force, current) } else { Err(refused) };
    let steps = planned.map_err(|files| UndoError::Conflicts { run_id: run.run_id.clone(), files })?;
    let mut with_content = Vec::new();
    let mut lost = Vec::new();
    for step in steps {
        let content = match &step {
            Step::Write { digest, path, .. } => match store.blob(digest) {
                Ok(content) => Some(content),
                Err(error) => {
                    tracing::warn!(%path, %error, "a recorded content cannot be read back");
                    lost.push(UndoConflict { path: path.clone(), reason: UndoConflictReason::NotRecorded });
                    continue;
                }
            },
            Step::Remove { .. } | Step::Keep { .. } => None,
        };
        with_content.push((step, content));
    }
    if !lost.is_empty() && !force {
        return Err(UndoError::Conflicts { run_id: run.run_id.clone(), files: lost });
    }
    for conflict in lost {
        with_content.push((
            Step::Keep { path: conflict.path, action: troupe_protocol::types::changes::UndoAction::Left },
            None,
        ));
    }
    with_content.sort_by(|(one, _), (other, _)| one.path().cmp(other.path()));
    Ok(with_content)
}

/// `session.diff`: `run_id`'s changes (or the last run's), each file from before the run to after it; and what its
/// shell commands changed in the session's git repository.
pub fn diff_run(
    store: &ChangeStore,
    session_id: &str,
    cwd: &Path,
    undone_runs: &BTreeSet<String>,
    run_id: Option<&str>,
    protected: &crate::sandbox::ProtectedPaths,
) -> Result<SessionDiffResult, UndoError> {
    crate::blocking::assert_may_block();
    let records = store.records(session_id).map_err(UndoError::Records)?;
    let runs = plan::runs_of(&records);
    let shell_runs = super::shell::shell_runs(&store.shell_records(session_id).map_err(UndoError::Records)?);
    // Every run that changed files, ordered by when it first did.
    let mut listed: Vec<(String, ChangedRun)> = runs
        .iter()
        .map(|run| {
            let first_at = records.iter().find(|record| record.run_id == run.run_id).map(|record| &record.recorded_at);
            let changed = ChangedRun {
                run_id: run.run_id.clone(),
                files: run.files.len() as u64,
                undone: undone_runs.contains(&run.run_id),
                shell: false,
            };
            (first_at.cloned().unwrap_or_default(), changed)
        })
        .collect();
    for shell_run in &shell_runs {
        match listed.iter_mut().find(|(_, run)| run.run_id == shell_run.run_id) {
            Some((first_at, run)) => {
                run.shell = true;
                if shell_run.first_at < *first_at {
                    first_at.clone_from(&shell_run.first_at);
                }
            }
            None => listed.push((
                shell_run.first_at.clone(),
                ChangedRun {
                    run_id: shell_run.run_id.clone(),
                    files: 0,
                    undone: undone_runs.contains(&shell_run.run_id),
                    shell: true,
                },
            )),
        }
    }
    listed.sort_by(|(one, _), (other, _)| one.cmp(other));
    let listed: Vec<ChangedRun> = listed.into_iter().map(|(_, run)| run).collect();
    let chosen = match run_id {
        Some(run_id) => listed
            .iter()
            .find(|run| run.run_id == run_id)
            .ok_or_else(|| UndoError::RunChangedNoFiles { run_id: run_id.to_owned() })?
            .run_id
            .clone(),
        None => match listed.last() {
            Some(run) => run.run_id.clone(),
            None => {
                return Ok(SessionDiffResult {
                    session_id: session_id.to_owned(),
                    run_id: None,
                    undone: false,
                    files: Vec::new(),
                    shell: None,
                    runs: listed,
                });
            }
        },
    };
    let files = runs
        .iter()
        .find(|run| run.run_id == chosen)
        .map(|run| run.files.iter().map(|file| file_change_diff(store, cwd, file)).collect())
        .unwrap_or_default();
    let shell = shell_runs.iter().find(|run| run.run_id == chosen).map(|run| store.shell_changes(run, cwd, protected));
    Ok(SessionDiffResult {
        session_id: session_id.to_owned(),
        undone: undone_runs.contains(&chosen),
        run_id: Some(chosen),
        files,
        shell,
        runs: listed,
    })
}

/// One file's change from its recorded contents; counts unknown when a side was not stored.
fn file_change_diff(store: &ChangeStore, cwd: &Path, file: &FileChange) -> FileDiff {
    let side = |content: &Content| -> Result<Vec<u8>, String> {
        match (&content.digest, &content.not_stored) {
            (Some(digest), None) => store.blob(digest).map_err(|error| format!("it cannot be read back ({error})")),
            (_, Some(reason)) => Err(format!("it was not recorded ({reason})")),
            (None, None) => Err("it was not recorded".to_owned()),
        }
    };
    let before = match &file.before {
        Before::Absent => Ok(None),
        Before::Content(content) => side(content).map(Some),
    };
    let after = side(&file.after);
    match (before, after) {
        (Ok(before), Ok(after)) => file_diff(&file.path, Some(cwd), before.as_deref(), Some(&after)),
        (before, after) => {
            let kind =
                if matches!(file.before, Before::Absent) { FileChangeKind::Created } else { FileChangeKind::Modified };
            let bytes_before = match &file.before {
                Before::Absent => 0,
                Before::Content(content) => content.size,
            };
            let note = match (before.err(), after.err()) {
                (Some(why), _) => format!("no diff: the content before the run: {why}"),
                (None, Some(why)) => format!("no diff: the content after the run: {why}"),
                (None, None) => String::new(),
            };
            unknown_diff(&file.path, kind, bytes_before, file.after.size, note)
        }
    }
}
