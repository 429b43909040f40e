//! The git directory a session's commands need to write when it lies outside the session's directory: the `.git`
//! of an enclosing work tree (the session works in a subfolder of a repository), or the private and the common git
//! directory of a worktree (its `.git` is a file, `gitdir: <path>`). Without them `git add` and `git commit` fail
//! in such sessions.
//!
//! A `.git` file, and the files of a worktree's git directory, are text a command may have written (`gitdir:`
//! naming another repository, or a `commondir` naming `/`, would open them to the sandbox). So a worktree's git
//! directories are used only when they have exactly git's layout (`<common>/worktrees/<name>`, whose `gitdir` links
//! back to this worktree and whose `commondir` is `../..`), are real git directories, and lie outside everything
//! the sandbox may write. Submodules (whose `.git` file points into the parent's `.git/modules/`) are not
//! followed.
//!
//! Writing such a git directory is opt-in (`[sandbox] enclosing_git_dir = "writable"`): git runs what it configures
//! (hooks, `core.fsmonitor`, filters) later, outside the sandbox, in every folder of the repository. And a
//! repository that holds the home folder (a dotfiles repository) never gets it written, whatever the setting: its
//! git directory would then be writable from every session under the home folder ([`writable_git_dirs`]).

use std::path::{Path, PathBuf};

use crate::config::EnclosingGitDir;

/// The longest `.git` file or back-link read; real ones are one short line.
const MAX_LINK_BYTES: u64 = 4096;

/// The git directories of the repository holding `cwd` that lie outside it (empty when there is none, or when
/// the git directory is inside `cwd`). `cwd` should be canonical. `writable` are the roots tool processes may write
/// (the cwd, the temp root, `[sandbox] writable`): nothing found in them is trusted, since a command could have
/// forged it. Blocking I/O.
pub fn git_dirs_outside(cwd: &Path, writable: &[PathBuf]) -> Vec<PathBuf> {
    let trusted = |path: &Path| !writable.iter().any(|root| path.starts_with(root)) && is_git_dir(path);
    for dir in cwd.ancestors() {
        let dot_git = dir.join(".git");
        let Ok(metadata) = std::fs::symlink_metadata(&dot_git) else {
            continue;
        };
        if dot_git.starts_with(cwd) && metadata.is_dir() {
            // The session's own repository: already writable.
            return Vec::new();
        }
        let found = if metadata.is_dir() {
            vec![dot_git]
        } else if metadata.is_file() {
            worktree_git_dirs(&dot_git)
        } else {
            Vec::new()
        };
        if found.iter().all(|path| trusted(path)) {
            return found;
        }
        return Vec::new();
    }
    Vec::new()
}

/// Which of `found` (as [`git_dirs_outside`] gives them: the common git directory last) commands may write under
/// `setting`: none when `read-only`; all when `writable`, unless the repository's work tree (the folder holding
/// the common git directory) is `home` or holds it.
pub fn writable_git_dirs(found: &[PathBuf], setting: EnclosingGitDir, home: Option<&Path>) -> Vec<PathBuf> {
    if setting == EnclosingGitDir::ReadOnly {
        return Vec::new();
    }
    let work_tree = found.last().and_then(|common| common.parent());
    match (work_tree, home) {
        (Some(work_tree), Some(home)) if home.starts_with(work_tree) => Vec::new(),
        // Without a home folder to compare, `/` is the one work tree known to hold every folder.
        (Some(work_tree), None) if work_tree.parent().is_none() => Vec::new(),
        _ => found.to_vec(),
    }
}

/// The private and common git directories of the worktree whose `.git` file is `dot_git`, when they have exactly
/// the layout git gives them: `<common>/worktrees/<name>`, linking back to `dot_git` (`<name>/gitdir`) and to the
/// common directory as `../..` (`<name>/commondir`).
fn worktree_git_dirs(dot_git: &Path) -> Vec<PathBuf> {
    let Some(holder) = dot_git.parent() else {
        return Vec::new();
    };
    let Some(git_dir) = read_link_file(dot_git, "gitdir:").and_then(|path| holder.join(path).canonicalize().ok())
    else {
        return Vec::new();
    };
    let Some(common) = git_dir.parent().filter(|parent| parent.ends_with("worktrees")).and_then(Path::parent) else {
        return Vec::new();
    };
    let back_link =
        read_link_file(&git_dir.join("gitdir"), "").and_then(|path| PathBuf::from(path).canonicalize().ok());
    let common_link =
        read_link_file(&git_dir.join("commondir"), "").and_then(|path| git_dir.join(path).canonicalize().ok());
    if back_link.as_deref() != dot_git.canonicalize().ok().as_deref() || common_link.as_deref() != Some(common) {
        return Vec::new();
    }
    vec![git_dir.clone(), common.to_path_buf()]
}

/// Whether `path` is a git directory (so never `/` or a home folder): `HEAD` with `objects/` and `refs/`, or, for
/// a worktree's private one, with `commondir`.
fn is_git_dir(path: &Path) -> bool {
    path.join("HEAD").is_file()
        && ((path.join("objects").is_dir() && path.join("refs").is_dir()) || path.join("commondir").is_file())
}

/// The first line of a small regular file, after `prefix`, trimmed. Opened without blocking and checked to be a
/// regular file once open: a command can make a project's `.git` a FIFO, whose blocking open would pin the thread
/// preparing the run's first tool call, and the run with it.
fn read_link_file(path: &Path, prefix: &str) -> Option<String> {
    use std::io::Read;
    let file = crate::regular_file::open_regular(path, crate::regular_file::Links::Follow).ok()?;
    let mut text = String::new();
    file.take(MAX_LINK_BYTES).read_to_string(&mut text).ok()?;
    let line = text.lines().next()?.strip_prefix(prefix)?.trim();
    (!line.is_empty()).then(|| line.to_owned())
}

#[cfg(test)]
mod tests {
    use troupe_test_support::git;

    use super::*;

    #[test]
    fn a_subfolder_gets_the_enclosing_git_dir_and_the_root_gets_nothing_extra() {
        let base = tempfile::tempdir().unwrap();
        let repository = base.path().canonicalize().unwrap().join("repo");
        std::fs::create_dir_all(repository.join("sub")).unwrap();
        git(&repository, &["init", "-q"]);
        assert_eq!(git_dirs_outside(&repository.join("sub"), &[repository.join("sub")]), vec![repository.join(".git")]);
        assert!(git_dirs_outside(&repository, std::slice::from_ref(&repository)).is_empty());
    }

    #[test]
    fn enclosing_git_dirs_are_written_only_when_opted_in_and_never_for_a_repository_holding_home() {
        let project = vec![PathBuf::from("/home/u/code/project/.git")];
        let home = Some(Path::new("/home/u"));
        assert!(writable_git_dirs(&project, EnclosingGitDir::ReadOnly, home).is_empty());
        assert_eq!(writable_git_dirs(&project, EnclosingGitDir::Writable, home), project);
        let dotfiles = vec![PathBuf::from("/home/u/.git")];
        assert!(writable_git_dirs(&dotfiles, EnclosingGitDir::Writable, home).is_empty());
        assert!(writable_git_dirs(&[PathBuf::from("/.git")], EnclosingGitDir::Writable, None).is_empty());
        assert!(writable_git_dirs(&[PathBuf::from("/.git")], EnclosingGitDir::Writable, home).is_empty());
        // A worktree: the work tree is the one holding the common git directory, listed last.
        let worktree = vec![PathBuf::from("/home/u/.git/worktrees/w"), PathBuf::from("/home/u/.git")];
        assert!(writable_git_dirs(&worktree, EnclosingGitDir::Writable, home).is_empty());
        let worktree = vec![PathBuf::from("/srv/r/.git/worktrees/w"), PathBuf::from("/srv/r/.git")];
        assert_eq!(writable_git_dirs(&worktree, EnclosingGitDir::Writable, home), worktree);
    }

    #[test]
    fn a_worktree_gets_its_own_and_the_common_git_dir_but_a_forged_git_file_gets_nothing() {
        let base = tempfile::tempdir().unwrap();
        let base = base.path().canonicalize().unwrap();
        let repository = base.join("repo");
        std::fs::create_dir_all(&repository).unwrap();
        git(&repository, &["init", "-q"]);
        git(&repository, &["commit", "-q", "--allow-empty", "-m", "first"]);
        git(&repository, &["worktree", "add", "-q", "../tree"]);
        let dirs = git_dirs_outside(&base.join("tree"), &[base.join("tree")]);
        assert_eq!(dirs, vec![repository.join(".git/worktrees/tree"), repository.join(".git")]);

        // A `.git` file written by a command, naming another repository's git dir: not followed.
        let forged = base.join("forged");
        std::fs::create_dir_all(&forged).unwrap();
        std::fs::write(forged.join(".git"), format!("gitdir: {}\n", repository.join(".git/worktrees/tree").display()))
            .unwrap();
        assert!(git_dirs_outside(&forged, std::slice::from_ref(&forged)).is_empty());
        std::fs::write(forged.join(".git"), format!("gitdir: {}\n", repository.join(".git").display())).unwrap();
        assert!(git_dirs_outside(&forged, std::slice::from_ref(&forged)).is_empty());
    }

    #[test]
    fn git_dirs_a_command_could_have_forged_are_not_trusted() {
        let base = tempfile::tempdir().unwrap();
        let base = base.path().canonicalize().unwrap();
        let victim = base.join("victim");
        std::fs::create_dir_all(&victim).unwrap();
        // Inside the session's directory: a fake worktree git dir with a back-link and a commondir naming elsewhere.
        let cwd = base.join("proj");
        std::fs::create_dir_all(cwd.join("fake")).unwrap();
        std::fs::write(cwd.join(".git"), "gitdir: fake\n").unwrap();
        std::fs::write(cwd.join("fake/gitdir"), format!("{}\n", cwd.join(".git").display())).unwrap();
        std::fs::write(cwd.join("fake/commondir"), format!("{}\n", victim.display())).unwrap();
        assert!(git_dirs_outside(&cwd, std::slice::from_ref(&cwd)).is_empty());
        // The same layout as git's, but inside what the sandbox may write.
        std::fs::create_dir_all(cwd.join("common/worktrees/w")).unwrap();
        std::fs::write(cwd.join(".git"), "gitdir: common/worktrees/w\n").unwrap();
        std::fs::write(cwd.join("common/worktrees/w/gitdir"), format!("{}\n", cwd.join(".git").display())).unwrap();
        std::fs::write(cwd.join("common/worktrees/w/commondir"), "../..\n").unwrap();
        assert!(git_dirs_outside(&cwd, std::slice::from_ref(&cwd)).is_empty());

        // A genuine worktree whose commondir a command (which may write the worktree's git dir) pointed elsewhere.
        let repository = base.join("repo");
        std::fs::create_dir_all(&repository).unwrap();
        git(&repository, &["init", "-q"]);
        git(&repository, &["commit", "-q", "--allow-empty", "-m", "first"]);
        git(&repository, &["worktree", "add", "-q", "../tree"]);
        let tree = base.join("tree");
        std::fs::write(repository.join(".git/worktrees/tree/commondir"), format!("{}\n", victim.display())).unwrap();
        assert!(git_dirs_outside(&tree, std::slice::from_ref(&tree)).is_empty());
        std::fs::write(repository.join(".git/worktrees/tree/commondir"), "/\n").unwrap();
        assert!(git_dirs_outside(&tree, std::slice::from_ref(&tree)).is_empty());
    }
}
