//! The git directory a session's commands need to write when it lies outside the session's directory: the `.git`
//! of an enclosing work tree (the session works in a subfolder of a repository), or the private and the common git
//! directory of a worktree (its `.git` is a file, `gitdir: <path>`). Without them `git add` and `git commit` fail
//! in such sessions.
//!
//! A `.git` file is text a command may have written (`gitdir: /some/other/repo/.git` would open that repository's
//! hooks to the sandbox). So a worktree's git directory is used only when it links back to this worktree: git
//! writes `<gitdir>/gitdir` naming the worktree's `.git` file, and a sandboxed command cannot write there.
//! Submodules (whose `.git` file points into the parent's `.git/modules/`) are not followed.

use std::path::{Path, PathBuf};

/// The longest `.git` file or back-link read; real ones are one short line.
const MAX_LINK_BYTES: u64 = 4096;

/// The git directories of the repository holding `cwd` that lie outside it (empty when there is none, or when
/// the git directory is inside `cwd`). `cwd` should be canonical. Blocking I/O.
pub fn git_dirs_outside(cwd: &Path) -> Vec<PathBuf> {
    for dir in cwd.ancestors() {
        let dot_git = dir.join(".git");
        let Ok(metadata) = std::fs::symlink_metadata(&dot_git) else {
            continue;
        };
        let found = if metadata.is_dir() {
            vec![dot_git]
        } else if metadata.is_file() {
            worktree_git_dirs(&dot_git)
        } else {
            Vec::new()
        };
        return found.into_iter().filter(|path| !path.starts_with(cwd)).collect();
    }
    Vec::new()
}

/// The private and common git directories of the worktree whose `.git` file is `dot_git`, if it is a genuine
/// worktree (its git directory links back to it).
fn worktree_git_dirs(dot_git: &Path) -> Vec<PathBuf> {
    let Some(holder) = dot_git.parent() else {
        return Vec::new();
    };
    let Some(git_dir) = read_link_file(dot_git, "gitdir:").map(|path| holder.join(path)) else {
        return Vec::new();
    };
    let Ok(git_dir) = git_dir.canonicalize() else {
        return Vec::new();
    };
    let back_link =
        read_link_file(&git_dir.join("gitdir"), "").and_then(|path| PathBuf::from(path).canonicalize().ok());
    if back_link.as_deref() != dot_git.canonicalize().ok().as_deref() {
        return Vec::new();
    }
    let mut dirs = vec![git_dir.clone()];
    if let Some(common) =
        read_link_file(&git_dir.join("commondir"), "").and_then(|path| git_dir.join(path).canonicalize().ok())
    {
        dirs.push(common);
    }
    dirs
}

/// The first line of a small file, after `prefix`, trimmed.
fn read_link_file(path: &Path, prefix: &str) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path).ok()?.take(MAX_LINK_BYTES).read_to_string(&mut text).ok()?;
    let line = text.lines().next()?.strip_prefix(prefix)?.trim();
    (!line.is_empty()).then(|| line.to_owned())
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    fn git(dir: &Path, arguments: &[&str]) {
        let status = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(arguments)
            .current_dir(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("git runs");
        assert!(status.success(), "git {arguments:?}");
    }

    #[test]
    fn a_subfolder_gets_the_enclosing_git_dir_and_the_root_gets_nothing_extra() {
        let base = tempfile::tempdir().unwrap();
        let repository = base.path().canonicalize().unwrap().join("repo");
        std::fs::create_dir_all(repository.join("sub")).unwrap();
        git(&repository, &["init", "-q"]);
        assert_eq!(git_dirs_outside(&repository.join("sub")), vec![repository.join(".git")]);
        assert!(git_dirs_outside(&repository).is_empty());
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
        let dirs = git_dirs_outside(&base.join("tree"));
        assert_eq!(dirs, vec![repository.join(".git/worktrees/tree"), repository.join(".git")]);

        // A `.git` file written by a command, naming another repository's git dir: not followed.
        let forged = base.join("forged");
        std::fs::create_dir_all(&forged).unwrap();
        std::fs::write(forged.join(".git"), format!("gitdir: {}\n", repository.join(".git/worktrees/tree").display()))
            .unwrap();
        assert!(git_dirs_outside(&forged).is_empty());
        std::fs::write(forged.join(".git"), format!("gitdir: {}\n", repository.join(".git").display())).unwrap();
        assert!(git_dirs_outside(&forged).is_empty());
    }
}
