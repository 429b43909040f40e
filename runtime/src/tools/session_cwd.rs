//! The session's folder, used only while it still is the folder the session was created in.
//!
//! A session records its cwd as a canonical path when it is created. Anything that can write in a parent of that
//! folder (another session whose cwd holds it, a command of the user's) can later replace it with a symlink to
//! any other folder; following the path then would run the session's commands and file tools there (a home
//! folder, `/etc/cron.d`). So every use of the cwd opens it first with no symlink allowed anywhere on its path
//! ([`Anchor::open`]: `openat2(RESOLVE_NO_SYMLINKS)`, or an `O_NOFOLLOW` walk) and works from that descriptor:
//! file tools open beneath it, the shell's child `fchdir`s into it between fork and exec. A cwd that meets a
//! symlink, or is no longer a directory, is refused with a [`CwdProblem`] the model or the client reads.

use std::io;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};

use super::dir_handle::Anchor;

/// Why a session's recorded cwd cannot be used now.
#[derive(Debug, thiserror::Error)]
pub enum CwdProblem {
    /// A folder on the cwd's path (or the cwd itself) is a symbolic link now: it was replaced after the session
    /// was created, and following it would lead the session's tools elsewhere.
    #[error(
        "the session's folder {} was replaced by a symbolic link{}; nothing is run or written there. Restore the \
         folder (remove the link and recreate the directory) or start a new session in the folder you mean",
        cwd.display(),
        now.as_ref().map(|now| format!(" (it now leads to {})", now.display())).unwrap_or_default()
    )]
    Replaced { cwd: PathBuf, now: Option<PathBuf> },
    /// The cwd exists but is not a directory any more.
    #[error(
        "the session's folder {} is no longer a directory; recreate it or start a new session elsewhere",
        cwd.display()
    )]
    NotADirectory { cwd: PathBuf },
    /// The cwd cannot be opened (removed, permissions).
    #[error("the session's folder {} is not accessible: {source}", cwd.display())]
    Inaccessible {
        cwd: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The session's cwd, opened and verified: a descriptor of the very folder its recorded path named when it was
/// opened, whatever happens to that path afterwards.
#[derive(Debug)]
pub struct SessionCwd {
    anchor: Anchor,
}

impl SessionCwd {
    /// Opens the recorded (absolute, canonical) `cwd`, refusing it when any component of it is a symlink now or
    /// it is not a directory. Blocking I/O.
    pub fn open(cwd: &Path) -> Result<SessionCwd, CwdProblem> {
        crate::blocking::assert_may_block();
        if !cwd.is_absolute() {
            let source = io::Error::new(io::ErrorKind::InvalidInput, "the path is not absolute");
            return Err(CwdProblem::Inaccessible { cwd: cwd.to_path_buf(), source });
        }
        match Anchor::open(cwd) {
            Ok(anchor) => Ok(SessionCwd { anchor }),
            Err(error) => Err(match error.raw_os_error() {
                Some(libc::ELOOP) => CwdProblem::Replaced { cwd: cwd.to_path_buf(), now: cwd.canonicalize().ok() },
                Some(libc::ENOTDIR) => CwdProblem::NotADirectory { cwd: cwd.to_path_buf() },
                _ => CwdProblem::Inaccessible { cwd: cwd.to_path_buf(), source: error },
            }),
        }
    }

    /// The path the cwd was opened at.
    pub fn path(&self) -> &Path {
        self.anchor.path()
    }

    /// The verified handle itself, for the file tools' cache of cwd handles ([`super::cwd_handle`]).
    pub(crate) fn into_anchor(self) -> Anchor {
        self.anchor
    }

    /// The `O_PATH` descriptor of the folder, for `fchdir` in a child.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.anchor.as_fd()
    }
}

/// Checks the recorded `cwd` as [`SessionCwd::open`] does, without keeping the descriptor (for a refusal before
/// a run starts). Blocking I/O.
pub fn check_session_cwd(cwd: &Path) -> Result<(), CwdProblem> {
    SessionCwd::open(cwd).map(drop)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn a_cwd_replaced_by_a_symlink_or_a_file_is_refused_and_an_intact_one_opens() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        let cwd = base.join("project/pkg");
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::create_dir_all(base.join("elsewhere")).unwrap();
        assert_eq!(SessionCwd::open(&cwd).unwrap().path(), cwd);

        std::fs::remove_dir(&cwd).unwrap();
        symlink(base.join("elsewhere"), &cwd).unwrap();
        let problem = SessionCwd::open(&cwd).unwrap_err();
        assert!(
            matches!(&problem, CwdProblem::Replaced { now: Some(now), .. } if *now == base.join("elsewhere")),
            "{problem:?}"
        );
        assert!(problem.to_string().contains("was replaced by a symbolic link"), "{problem}");

        // A folder above the cwd swapped instead.
        std::fs::remove_file(&cwd).unwrap();
        std::fs::create_dir_all(base.join("elsewhere/pkg")).unwrap();
        std::fs::rename(base.join("project"), base.join("project-old")).unwrap();
        symlink(base.join("elsewhere"), base.join("project")).unwrap();
        assert!(matches!(check_session_cwd(&cwd), Err(CwdProblem::Replaced { .. })));

        std::fs::remove_file(base.join("project")).unwrap();
        std::fs::create_dir(base.join("project")).unwrap();
        std::fs::write(&cwd, "a file").unwrap();
        assert!(matches!(check_session_cwd(&cwd), Err(CwdProblem::NotADirectory { .. })));
        std::fs::remove_file(&cwd).unwrap();
        assert!(matches!(check_session_cwd(&cwd), Err(CwdProblem::Inaccessible { .. })));
    }
}
