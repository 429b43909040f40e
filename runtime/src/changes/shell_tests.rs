use std::path::Path;

use troupe_protocol::types::changes::FileChangeKind;

use super::shell::{SHELL_JOURNAL_FILE, ShellCall, SnapshotPhase, shell_runs};
use super::{ChangeLimits, ChangeStore};
use crate::sandbox::ProtectedPaths;
use troupe_test_support::git;

/// A repository with one commit of `a.txt`, its work tree in `dir`.
fn repository(dir: &Path) {
    git(dir, &["init", "-q"]);
    std::fs::write(dir.join("a.txt"), "one\ntwo\n").unwrap();
    std::fs::write(dir.join(".gitignore"), "ignored/\n").unwrap();
    git(dir, &["add", "."]);
    git(dir, &["commit", "-qm", "first"]);
}

fn snapshot(
    store: &ChangeStore,
    cwd: &Path,
    run: &str,
    call: &str,
    denied: &[std::path::PathBuf],
    phase: SnapshotPhase,
) {
    let call = ShellCall { session_id: "s1", run_id: run, tool_call_id: call, cwd, denied };
    store.snapshot_shell(&call, phase).unwrap();
}

fn objects(repo: &Path) -> usize {
    walk(&repo.join(".git/objects"))
}

fn walk(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|entry| if entry.file_type().unwrap().is_dir() { walk(&entry.path()) } else { 1 })
        .sum()
}

#[test]
fn a_runs_shell_changes_are_the_work_tree_before_its_first_command_against_after_its_last() {
    let data = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().canonicalize().unwrap();
    repository(&repo);
    std::fs::create_dir_all(data.path().join("sessions/s1")).unwrap();
    let store = ChangeStore::new(data.path(), ChangeLimits::default());
    let denied = vec![repo.join("secret.env")];
    std::fs::write(repo.join("secret.env"), "TOKEN=1\n").unwrap();
    let status_before = git(&repo, &["status", "--porcelain"]);
    let objects_before = objects(&repo);

    snapshot(&store, &repo, "r1", "c1", &denied, SnapshotPhase::Before);
    // What the command does.
    std::fs::write(repo.join("a.txt"), "one\n").unwrap();
    std::fs::create_dir(repo.join("src")).unwrap();
    std::fs::write(repo.join("src/new.rs"), "fn main() {}\n").unwrap();
    std::fs::write(repo.join("secret.env"), "TOKEN=2\n").unwrap();
    std::fs::write(repo.join("big.bin"), vec![7u8; 2 * 1024 * 1024]).unwrap();
    std::fs::create_dir(repo.join("ignored")).unwrap();
    std::fs::write(repo.join("ignored/out.o"), "built").unwrap();
    snapshot(&store, &repo, "r1", "c1", &denied, SnapshotPhase::After);
    // A second command of the run: its before is not taken again, its after is the run's end.
    snapshot(&store, &repo, "r1", "c2", &denied, SnapshotPhase::Before);
    std::fs::remove_file(repo.join("src/new.rs")).unwrap();
    std::fs::write(repo.join("src/lib.rs"), "pub fn f() {}\n").unwrap();
    snapshot(&store, &repo, "r1", "c2", &denied, SnapshotPhase::After);

    let records = store.shell_records("s1").unwrap();
    assert_eq!(records.len(), 3, "{records:?}");
    let runs = shell_runs(&records);
    assert_eq!(runs.len(), 1);
    let changes = store.shell_changes(&runs[0], &repo, &ProtectedPaths::new(Vec::new()));
    assert_eq!(changes.repository, repo.to_string_lossy());
    let files: Vec<(String, FileChangeKind, u64, u64)> =
        changes.files.iter().map(|file| (file.path.clone(), file.kind, file.lines_added, file.lines_removed)).collect();
    let path = |name: &str| repo.join(name).to_string_lossy().into_owned();
    assert_eq!(
        files,
        vec![(path("a.txt"), FileChangeKind::Modified, 0, 1), (path("src/lib.rs"), FileChangeKind::Created, 1, 0)]
    );
    let unified = changes.files[0].unified.as_deref().unwrap();
    assert!(unified.contains("-two\n") && unified.starts_with("--- a/a.txt\n+++ b/a.txt\n"), "{unified}");
    assert_eq!(changes.left_out, vec!["big.bin".to_owned()]);

    // The user's repository is as it was: its index, its objects.
    std::fs::write(repo.join("a.txt"), "one\ntwo\n").unwrap();
    std::fs::remove_file(repo.join("big.bin")).unwrap();
    std::fs::remove_dir_all(repo.join("src")).unwrap();
    assert_eq!(git(&repo, &["status", "--porcelain"]), status_before);
    assert_eq!(objects(&repo), objects_before);

    // A run that changed nothing is not listed; deleting the session's journal lets its shadow be collected.
    snapshot(&store, &repo, "r2", "c3", &denied, SnapshotPhase::Before);
    snapshot(&store, &repo, "r2", "c3", &denied, SnapshotPhase::After);
    assert_eq!(shell_runs(&store.shell_records("s1").unwrap()).len(), 1);
    assert!(data.path().join("shell-snapshots").read_dir().unwrap().next().is_some());
    std::fs::remove_file(data.path().join("sessions/s1").join(SHELL_JOURNAL_FILE)).unwrap();
    store.collect_garbage().unwrap();
    assert!(data.path().join("shell-snapshots").read_dir().unwrap().next().is_none());
}

#[test]
fn nothing_a_repository_configures_runs_while_it_is_snapshotted() {
    let data = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().canonicalize().unwrap();
    repository(&repo);
    std::fs::create_dir_all(data.path().join("sessions/s1")).unwrap();
    let marker = work.path().join("ran");
    let program = format!("touch {}", marker.display());
    git(&repo, &["config", "filter.evil.clean", &program]);
    git(&repo, &["config", "filter.evil.required", "true"]);
    git(&repo, &["config", "core.fsmonitor", &program]);
    git(&repo, &["config", "diff.evil.textconv", &program]);
    std::fs::write(repo.join(".gitattributes"), "* filter=evil diff=evil\n").unwrap();
    let store = ChangeStore::new(data.path(), ChangeLimits::default());

    snapshot(&store, &repo, "r1", "c1", &[], SnapshotPhase::Before);
    std::fs::write(repo.join("a.txt"), "changed\n").unwrap();
    snapshot(&store, &repo, "r1", "c1", &[], SnapshotPhase::After);
    let runs = shell_runs(&store.shell_records("s1").unwrap());
    let changes = store.shell_changes(&runs[0], &repo, &ProtectedPaths::new(Vec::new()));
    assert!(changes.files.iter().any(|file| file.path.ends_with("/a.txt")), "{changes:?}");
    assert!(!marker.exists(), "a program the repository's config names ran");
}

#[test]
fn outside_a_repository_nothing_is_recorded() {
    let data = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(data.path().join("sessions/s1")).unwrap();
    let store = ChangeStore::new(data.path(), ChangeLimits::default());
    snapshot(&store, work.path(), "r1", "c1", &[], SnapshotPhase::Before);
    assert!(store.shell_records("s1").unwrap().is_empty());
}

#[test]
fn a_repository_whose_work_tree_is_elsewhere_is_not_snapshotted() {
    // A command can write a `.git` of its own whose config names any folder as its work tree: the snapshot would
    // read that folder, whose denied paths were never looked up.
    let data = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let base = work.path().canonicalize().unwrap();
    let (cwd, elsewhere) = (base.join("project"), base.join("elsewhere"));
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("private.txt"), "not the session's").unwrap();
    git(&cwd, &["init", "-q"]);
    git(&cwd, &["config", "core.worktree", elsewhere.to_str().unwrap()]);
    std::fs::create_dir_all(data.path().join("sessions/s1")).unwrap();
    let store = ChangeStore::new(data.path(), ChangeLimits::default());
    snapshot(&store, &cwd, "r1", "c1", &[], SnapshotPhase::Before);
    assert!(store.shell_records("s1").unwrap().is_empty());
    assert!(!data.path().join("shell-snapshots").exists(), "nothing of the other folder was read");
}
