//! Where a run's tool calls work: the session's cwd as the kernel sees it, the git directory of the repository
//! holding it when it lies outside it, and the run's private temp dir.
//!
//! Prepared on a blocking thread at the run's first tool call (a run without tool calls touches no disk for it)
//! and torn down when the run ends: the temp dir and everything a tool left in it are removed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use troupe_runtime::sandbox::Sandbox;

/// A run's working places.
#[derive(Debug)]
pub(crate) struct RunWorkspace {
    /// The session's cwd as recorded (canonical when the session was created).
    pub cwd: PathBuf,
    /// The git directories of the repository holding `cwd` that lie outside it (a subfolder of a repository, a
    /// worktree): writable by the run's commands, so that they can commit.
    pub git_dirs: Vec<PathBuf>,
    /// `TMPDIR` of the run's tool processes, writable in every sandbox mode; `None` if it could not be made (each
    /// call then makes its own).
    pub temp_dir: Option<PathBuf>,
}

impl RunWorkspace {
    pub async fn prepare(cwd: PathBuf, run_id: String, sandbox: Arc<Sandbox>) -> RunWorkspace {
        let fallback = cwd.clone();
        let prepared = tokio::task::spawn_blocking(move || {
            // The recorded cwd, never resolved again: replaced by a symlink since, it would lead elsewhere (and make
            // that folder's repository writable). The tools refuse such a cwd; here it only gets no git dirs.
            let intact = match troupe_runtime::tools::check_session_cwd(&cwd) {
                Ok(()) => true,
                Err(problem) => {
                    tracing::warn!(%run_id, %problem, "the session's cwd is unusable; its tools will refuse it");
                    false
                }
            };
            // Other troupe data dirs in reach: their secrets are masked in the output of the run's tools.
            sandbox.mask_secrets_around(&cwd);
            let temp_root = sandbox.temp_root();
            let mut writable = vec![cwd.clone()];
            writable.extend(temp_root.as_ref().ok().cloned());
            writable.extend(sandbox.writable().iter().cloned());
            let git_dirs = match intact {
                true => troupe_runtime::sandbox::repository::git_dirs_outside(&cwd, &writable),
                false => Vec::new(),
            };
            let temp_dir = temp_root
                .and_then(|root| make_temp_dir(&root, &run_id))
                .inspect_err(|error| tracing::warn!(%run_id, %error, "could not create the run's temp dir"))
                .ok();
            RunWorkspace { cwd, git_dirs, temp_dir }
        })
        .await;
        prepared.unwrap_or(RunWorkspace { cwd: fallback, git_dirs: Vec::new(), temp_dir: None })
    }

    /// Removes the temp dir and what the run's tools left in it.
    pub async fn remove(self) {
        if let Some(temp_dir) = self.temp_dir {
            let removed = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&temp_dir)).await;
            if let Ok(Err(error)) = removed {
                tracing::warn!(%error, "could not remove a run's temp dir");
            }
        }
    }
}

/// `<temp root>/run-<run id>`, mode 0700, created fresh (a leftover of the same name is not reused).
fn make_temp_dir(parent: &Path, run_id: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let safe_id: String = run_id.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
    for attempt in 0..8u32 {
        let name = if attempt == 0 { format!("run-{safe_id}") } else { format!("run-{safe_id}-{attempt}") };
        let path = parent.join(name);
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => return Ok(path),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(error) => return Err(error),
        }
    }
    Err(std::io::Error::other("every candidate name of the run's temp dir exists already"))
}
