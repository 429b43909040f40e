//! What a run changed, file by file, and what undoing it would do: plain functions over journal records and the
//! files' current digests, so the rules are tested without a file system.
//!
//! A run's change to a file runs from the file's state before the run's first write to it to the state after its
//! last. Undoing it puts back the first: a file the run left as it was is written back (or removed, if the run
//! created it); one already as before the run is left alone; one changed since (its digest is not what the run
//! left) or whose earlier content was not recorded is a conflict, which refuses the whole undo unless it is
//! forced. A forced undo writes back what it can and leaves a file whose earlier content it does not have.

use std::collections::BTreeMap;

use troupe_protocol::types::changes::{UndoAction, UndoConflict, UndoConflictReason};

use super::journal::{Before, ChangeRecord, Content};

/// One file of a run: its state before the run and after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileChange {
    pub path: String,
    pub inside_cwd: bool,
    pub before: Before,
    pub after: Content,
}

/// The files one run changed, in path order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunChanges {
    pub run_id: String,
    pub files: Vec<FileChange>,
}

/// Every run of `records` with its files, in the order of each run's first record.
pub fn runs_of(records: &[ChangeRecord]) -> Vec<RunChanges> {
    let mut order: Vec<String> = Vec::new();
    let mut files: BTreeMap<&str, BTreeMap<&str, FileChange>> = BTreeMap::new();
    for record in records {
        let run = files.entry(&record.run_id).or_insert_with(|| {
            order.push(record.run_id.clone());
            BTreeMap::new()
        });
        run.entry(&record.path).and_modify(|change| change.after = record.after.clone()).or_insert_with(|| {
            FileChange {
                path: record.path.clone(),
                inside_cwd: record.inside_cwd,
                before: record.before.clone(),
                after: record.after.clone(),
            }
        });
    }
    order
        .into_iter()
        .map(|run_id| {
            let changed = files.remove(run_id.as_str()).unwrap_or_default();
            RunChanges { files: changed.into_values().collect(), run_id }
        })
        .collect()
}

/// What a file holds now, as far as undo cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Current {
    Absent,
    Digest(String),
}

/// One step of an undo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Write the blob of this digest back.
    Write { path: String, inside_cwd: bool, digest: String },
    /// Remove the file (the run created it).
    Remove { path: String, inside_cwd: bool },
    /// Nothing to do; the action reported.
    Keep { path: String, action: UndoAction },
}

impl Step {
    pub fn path(&self) -> &str {
        match self {
            Step::Write { path, .. } | Step::Remove { path, .. } | Step::Keep { path, .. } => path,
        }
    }

    /// What the step does, as `session.undo` reports it.
    pub fn action(&self) -> UndoAction {
        match self {
            Step::Write { .. } => UndoAction::Restored,
            Step::Remove { .. } => UndoAction::Removed,
            Step::Keep { action, .. } => *action,
        }
    }
}

/// The steps undoing `run` takes given each file's current state (`current` answers for every path of the run),
/// or the conflicts that refuse it (never when `force`).
pub fn plan_undo(
    run: &RunChanges,
    force: bool,
    mut current: impl FnMut(&str) -> Current,
) -> Result<Vec<Step>, Vec<UndoConflict>> {
    let mut steps = Vec::new();
    let mut conflicts = Vec::new();
    for file in &run.files {
        let now = current(&file.path);
        let already = match (file.before.known_digest(), &now) {
            (Some(None), Current::Absent) => true,
            (Some(Some(digest)), Current::Digest(now)) => digest == now,
            _ => false,
        };
        if already {
            steps.push(Step::Keep { path: file.path.clone(), action: UndoAction::Unchanged });
            continue;
        }
        let as_left = matches!((&file.after.digest, &now), (Some(after), Current::Digest(now)) if after == now);
        let recorded = match &file.before {
            Before::Absent => true,
            Before::Content(content) => content.stored(),
        };
        if !as_left && !force {
            conflicts.push(UndoConflict { path: file.path.clone(), reason: UndoConflictReason::ChangedSince });
            continue;
        }
        if !recorded {
            if force {
                steps.push(Step::Keep { path: file.path.clone(), action: UndoAction::Left });
            } else {
                conflicts.push(UndoConflict { path: file.path.clone(), reason: UndoConflictReason::NotRecorded });
            }
            continue;
        }
        steps.push(match &file.before {
            Before::Absent => Step::Remove { path: file.path.clone(), inside_cwd: file.inside_cwd },
            Before::Content(content) => Step::Write {
                path: file.path.clone(),
                inside_cwd: file.inside_cwd,
                // `recorded` above: a stored content has a digest.
                digest: content.digest.clone().unwrap_or_default(),
            },
        });
    }
    if conflicts.is_empty() { Ok(steps) } else { Err(conflicts) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(digest: &str) -> Content {
        Content { digest: Some(digest.into()), size: 1, not_stored: None }
    }

    fn record(run: &str, path: &str, before: Before, after: &str) -> ChangeRecord {
        ChangeRecord {
            run_id: run.into(),
            tool_call_id: "call".into(),
            tool: "write_file".into(),
            path: path.into(),
            inside_cwd: true,
            before,
            after: stored(after),
            recorded_at: "2026-01-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn a_run_spans_from_before_its_first_write_to_after_its_last() {
        let records = [
            record("r1", "/w/b", Before::Content(stored("b0")), "b1"),
            record("r1", "/w/a", Before::Absent, "a1"),
            record("r2", "/w/a", Before::Content(stored("a1")), "a2"),
            record("r1", "/w/b", Before::Content(stored("b1")), "b2"),
        ];
        let runs = runs_of(&records);
        assert_eq!(runs.iter().map(|run| run.run_id.as_str()).collect::<Vec<_>>(), ["r1", "r2"]);
        let files: Vec<(&str, &Before, Option<&str>)> =
            runs[0].files.iter().map(|file| (file.path.as_str(), &file.before, file.after.digest.as_deref())).collect();
        assert_eq!(
            files,
            [("/w/a", &Before::Absent, Some("a1")), ("/w/b", &Before::Content(stored("b0")), Some("b2"))]
        );
    }

    #[test]
    fn undo_restores_removes_and_skips_what_is_already_back() {
        let records = [
            record("r", "/w/created", Before::Absent, "c1"),
            record("r", "/w/edited", Before::Content(stored("e0")), "e1"),
            record("r", "/w/back", Before::Content(stored("k0")), "k1"),
        ];
        let run = &runs_of(&records)[0];
        let current = |path: &str| match path {
            "/w/created" => Current::Digest("c1".into()),
            "/w/edited" => Current::Digest("e1".into()),
            _ => Current::Digest("k0".into()),
        };
        let steps = plan_undo(run, false, current).unwrap();
        assert_eq!(
            steps,
            [
                Step::Keep { path: "/w/back".into(), action: UndoAction::Unchanged },
                Step::Remove { path: "/w/created".into(), inside_cwd: true },
                Step::Write { path: "/w/edited".into(), inside_cwd: true, digest: "e0".into() },
            ]
        );
    }

    #[test]
    fn files_changed_since_or_not_recorded_refuse_unless_forced() {
        let not_stored = Content { digest: Some("big0".into()), size: 1 << 30, not_stored: Some("too large".into()) };
        let records = [
            record("r", "/w/moved_on", Before::Content(stored("m0")), "m1"),
            record("r", "/w/big", Before::Content(not_stored), "big1"),
            record("r", "/w/gone", Before::Absent, "g1"),
        ];
        let run = &runs_of(&records)[0];
        let current = |path: &str| match path {
            "/w/moved_on" => Current::Digest("m2".into()),
            "/w/big" => Current::Digest("big1".into()),
            _ => Current::Absent,
        };
        let refused = plan_undo(run, false, current).unwrap_err();
        assert_eq!(
            refused,
            [
                UndoConflict { path: "/w/big".into(), reason: UndoConflictReason::NotRecorded },
                UndoConflict { path: "/w/moved_on".into(), reason: UndoConflictReason::ChangedSince },
            ],
            "a created file removed since is already as before the run"
        );
        let forced = plan_undo(run, true, current).unwrap();
        assert_eq!(
            forced.iter().map(|step| (step.path(), step.action())).collect::<Vec<_>>(),
            [("/w/big", UndoAction::Left), ("/w/gone", UndoAction::Unchanged), ("/w/moved_on", UndoAction::Restored)]
        );
    }
}
