//! The session's cwd opened once and kept, checked again on every use with one system call.
//!
//! Every file tool call starts from the session's cwd, which must still be the folder its recorded path named
//! ([`super::session_cwd`]: no symlink anywhere on the path). Opening it afresh for each path resolution and each
//! open cost an `open` of `/`, an `openat2`, two `close`s and a `realpath` (a `readlink` per component of the
//! path), twice per call. Here the first use opens it exactly as [`SessionCwd::open`] does and keeps the `O_PATH`
//! descriptor, by the path it was opened at; every later use asks the kernel where that descriptor is now
//! (`readlink` of `/proc/self/fd/<n>`, one call). The kernel answers with the folder's real location, built from
//! the directory entries above it: when that is still exactly the canonical path, each component of the path is
//! a real folder (no symlink) and the last one is the kept folder, so the descriptor is what a fresh
//! `openat2(RESOLVE_NO_SYMLINKS)` of the path would open. Any other answer (the folder or one above it was
//! renamed, a symlink put in its place, the folder removed: `… (deleted)`) drops the kept handle and opens the
//! path afresh, which refuses a symlink or a missing folder with the [`CwdProblem`] a fresh open gives.
//!
//! One difference from opening afresh: a file system mounted over the cwd's path (or above it) after the handle
//! was kept is not entered; the handle keeps naming the folder it was opened at, which the checks of denied paths
//! judge by its identity and location as before. Mounting needs privileges the tools do not have.
//!
//! Without `/proc` (or for a cwd whose canonical path cannot be told) nothing is kept and every use opens the
//! cwd afresh, as before. The cache holds at most [`MAX_KEPT`] handles (one descriptor each) and is emptied when
//! full.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use super::dir_handle::Anchor;
use super::session_cwd::{CwdProblem, SessionCwd};

/// The most cwd handles kept at once: a daemon serves few folders at a time, and each costs a descriptor.
const MAX_KEPT: usize = 64;

/// The kept handles, by the path the cwd was asked for as.
static KEPT: Mutex<Option<HashMap<PathBuf, Arc<Anchor>>>> = Mutex::new(None);

/// The verified handle of the session's `cwd` (absolute), known by its canonical path: the kept one when the
/// kernel still places it at that path, else opened afresh (refused as [`SessionCwd::open`] refuses). Blocking
/// I/O: one `readlink` when a handle is kept.
pub(crate) fn verified_cwd(cwd: &Path) -> Result<Arc<Anchor>, CwdHandleError> {
    crate::blocking::assert_may_block();
    let kept = lock().as_ref().and_then(|kept| kept.get(cwd).cloned());
    if let Some(anchor) = kept {
        if real_location(&anchor).is_some_and(|location| location == anchor.path()) {
            return Ok(anchor);
        }
        if let Some(kept) = lock().as_mut() {
            kept.remove(cwd);
        }
    }
    let anchor = SessionCwd::open(cwd)?.into_anchor();
    let location = real_location(&anchor);
    let anchor = match &location {
        Some(location) => anchor.known_as(location.clone()),
        // No `/proc`: the path the standard library resolves, as before, and nothing kept.
        None => {
            let canonical = cwd.canonicalize().map_err(|source| CwdHandleError::Canonical { source })?;
            return Ok(Arc::new(anchor.known_as(canonical)));
        }
    };
    let anchor = Arc::new(anchor);
    let mut guard = lock();
    let kept = guard.get_or_insert_with(HashMap::new);
    if kept.len() >= MAX_KEPT {
        kept.clear();
    }
    kept.insert(cwd.to_path_buf(), Arc::clone(&anchor));
    Ok(anchor)
}

/// Why [`verified_cwd`] gave no handle.
#[derive(Debug)]
pub(crate) enum CwdHandleError {
    /// The cwd may not be used ([`SessionCwd::open`]'s refusal).
    Problem(CwdProblem),
    /// It opened, but its canonical path could not be told.
    Canonical { source: io::Error },
}

impl From<CwdProblem> for CwdHandleError {
    fn from(problem: CwdProblem) -> Self {
        CwdHandleError::Problem(problem)
    }
}

/// Where the kernel says `anchor`'s folder is now; `None` without `/proc`, or for a folder that has no path
/// (removed: the kernel adds ` (deleted)`, which is not absolute-and-equal to anything kept either).
fn real_location(anchor: &Anchor) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    let location = std::fs::read_link(format!("/proc/self/fd/{}", anchor.as_fd().as_raw_fd())).ok()?;
    location.is_absolute().then_some(location)
}

fn lock() -> std::sync::MutexGuard<'static, Option<HashMap<PathBuf, Arc<Anchor>>>> {
    KEPT.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn a_kept_cwd_is_given_again_until_its_folder_moves_and_then_a_symlink_in_its_place_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        let cwd = base.join("project/pkg");
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::create_dir_all(base.join("elsewhere/pkg")).unwrap();

        let first = verified_cwd(&cwd).unwrap();
        assert_eq!(first.path(), cwd);
        let again = verified_cwd(&cwd).unwrap();
        assert!(Arc::ptr_eq(&first, &again), "the kept handle is given again");

        // A folder above the cwd swapped for a symlink: the kept handle is not used, and the fresh open refuses.
        std::fs::rename(base.join("project"), base.join("project-old")).unwrap();
        symlink(base.join("elsewhere"), base.join("project")).unwrap();
        let refused = verified_cwd(&cwd).unwrap_err();
        assert!(matches!(refused, CwdHandleError::Problem(CwdProblem::Replaced { .. })), "{refused:?}");

        // Put back as a new folder: a new handle, of the new folder.
        std::fs::remove_file(base.join("project")).unwrap();
        std::fs::create_dir_all(&cwd).unwrap();
        let renewed = verified_cwd(&cwd).unwrap();
        assert!(!Arc::ptr_eq(&first, &renewed));
        std::fs::remove_dir(&cwd).unwrap();
        assert!(matches!(verified_cwd(&cwd), Err(CwdHandleError::Problem(CwdProblem::Inaccessible { .. }))));
    }

    #[test]
    fn a_cwd_recorded_with_dot_dot_is_known_by_its_canonical_path() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        std::fs::create_dir_all(base.join("a/b")).unwrap();
        let anchor = verified_cwd(&base.join("a/b/..")).unwrap();
        assert_eq!(anchor.path(), base.join("a"));
    }
}
