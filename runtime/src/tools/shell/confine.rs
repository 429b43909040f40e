//! The sandbox side of a shell call: its temp dir, the kernel rules prepared off the async threads, the durable
//! record of its process group, and the note that tells the model a "Permission denied" was the sandbox.

use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::config::SandboxMode;
use crate::sandbox::process_groups::GroupRecord;
use crate::sandbox::{PreparedSandbox, Sandbox};
use crate::tools::session_cwd::{CwdProblem, SessionCwd};

/// What a command's output says when the kernel refused it a file (or a Unix socket).
const REFUSAL_MARKERS: [&str; 5] =
    ["Permission denied", "Operation not permitted", "Read-only file system", "EACCES", "EPERM"];

/// What a command's output says when it could not reach the network, which the sandbox may have cut.
const OFFLINE_MARKERS: [&str; 5] = [
    "Temporary failure in name resolution",
    "Could not resolve host",
    "Network is unreachable",
    "Name or service not known",
    "getaddrinfo",
];

/// The temp dir of one call: the run's, or a fresh private one that the call removes when it ends.
#[derive(Debug)]
pub(super) struct CallTempDir {
    path: PathBuf,
    /// Whether this call created the directory and so removes it.
    owned: bool,
}

impl CallTempDir {
    /// The run's temp dir when it has one; otherwise a new directory (mode 0700) under the system temp dir.
    pub(super) fn new(run_temp_dir: Option<PathBuf>) -> io::Result<CallTempDir> {
        if let Some(path) = run_temp_dir {
            return Ok(CallTempDir { path, owned: false });
        }
        let path = std::env::temp_dir().join(format!("troupe-shell-{}", uuid::Uuid::now_v7().simple()));
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(CallTempDir { path, owned: true })
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Removes a directory this call created, off the async threads.
    pub(super) async fn remove(mut self) {
        if !self.owned {
            return;
        }
        self.owned = false;
        let path = std::mem::take(&mut self.path);
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(path)).await;
    }
}

impl Drop for CallTempDir {
    /// A call dropped before its end (its run went away) still removes the directory it created, in the
    /// background.
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let path = std::mem::take(&mut self.path);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(move || std::fs::remove_dir_all(path))),
            Err(_) => drop(std::fs::remove_dir_all(path)),
        }
    }
}

/// Why a command was not started.
#[derive(Debug)]
pub(super) enum NotStarted {
    /// The session's cwd was replaced or is unusable: an `error` result.
    Cwd(CwdProblem),
    /// The sandbox cannot be enforced: `denied`, with the reason for the model.
    Sandbox(String),
}

/// The session's cwd opened and verified ([`SessionCwd`]: the command `fchdir`s into that descriptor) and the
/// kernel rules of a command started there with `temp_dir`, built on a blocking thread (it opens every rule's
/// path). The rules name the cwd by the recorded path, which the ruleset checks again by what it opens, so a
/// swap after the cwd was opened takes access away rather than granting the swapped-in folder. `None` rules:
/// mode `off`.
pub(super) async fn prepare(
    sandbox: Arc<Sandbox>,
    cwd: PathBuf,
    temp_dir: PathBuf,
    extra_writable: Vec<PathBuf>,
) -> Result<(SessionCwd, Option<PreparedSandbox>), NotStarted> {
    let prepared = tokio::task::spawn_blocking(move || {
        let session_cwd = SessionCwd::open(&cwd).map_err(NotStarted::Cwd)?;
        let started = Instant::now();
        let prepared = sandbox.prepare(session_cwd.path(), &temp_dir, &extra_writable).map_err(NotStarted::Sandbox)?;
        if let Some(prepared) = &prepared {
            tracing::debug!(
                rules = prepared.rules().count(),
                elapsed_us = started.elapsed().as_micros() as u64,
                "prepared the sandbox of a shell command"
            );
        }
        Ok((session_cwd, prepared))
    })
    .await;
    prepared.unwrap_or_else(|error| Err(NotStarted::Sandbox(format!("preparing the sandbox failed: {error}"))))
}

/// Records the live group `pgid` durably, so that a daemon killed before the call ends kills it at its next start.
/// A failure is logged and the command goes on: the group still dies with the call, and its leader with the
/// daemon.
pub(super) async fn record_group(sandbox: &Arc<Sandbox>, pgid: libc::pid_t) -> Option<GroupRecord> {
    let sandbox = Arc::clone(sandbox);
    let recorded = tokio::task::spawn_blocking(move || sandbox.groups().map(|groups| groups.record(pgid))).await;
    match recorded {
        Ok(Some(Ok(record))) => Some(record),
        Ok(None) => None,
        Ok(Some(Err(error))) => {
            tracing::warn!(pgid, %error, "could not record a shell process group; it will not be killed if the daemon dies");
            None
        }
        Err(error) => {
            tracing::warn!(pgid, %error, "recording a shell process group failed");
            None
        }
    }
}

/// Ends the record of a group: removed once the group is known gone (killed and reaped); otherwise kept on disk
/// so that the next daemon start kills what is left.
pub(super) async fn release_group(record: Option<GroupRecord>, group_gone: bool) {
    let Some(record) = record else {
        return;
    };
    if group_gone {
        let _ = tokio::task::spawn_blocking(move || drop(record)).await;
    } else {
        std::mem::forget(record);
    }
}

/// One line for a failed command whose stderr shows a refused access, saying what the sandbox allows; `None` in
/// mode `off` or when nothing looks refused.
pub(super) fn refusal_note(sandbox: &Sandbox, cwd: &Path, stderr: &str, stdout: &str) -> Option<String> {
    let writes = match sandbox.mode() {
        SandboxMode::Off => return None,
        SandboxMode::WorkspaceWrite => {
            let mut roots = vec![cwd.display().to_string(), "$TMPDIR".to_owned()];
            roots.extend(sandbox.writable().iter().map(|path| path.display().to_string()));
            roots.join(", ")
        }
        SandboxMode::ReadOnly => "$TMPDIR".to_owned(),
    };
    let output = [stderr, stdout];
    let mentions = |markers: &[&str]| output.iter().any(|text| markers.iter().any(|marker| text.contains(marker)));
    let refused = mentions(&REFUSAL_MARKERS);
    let offline = !sandbox.network() && mentions(&OFFLINE_MARKERS);
    if !refused && !offline {
        return None;
    }
    let others = if sandbox.denied().len() > 1 { " and the other denied paths" } else { "" };
    let network = if sandbox.network() { "" } else { "; it has no network (only its own loopback)" };
    Some(format!(
        "(troupe sandbox, mode {}: this command cannot read or write {}{others}, may write only {writes}{network}. \
         A \"Permission denied\" on another path, or a failed connection, was the sandbox refusing it: do not \
         try to work around it (no sudo, chmod or chown); write under $TMPDIR instead (e.g. a cache), or ask the \
         user to allow the path with `[sandbox] writable` in troupe's config.toml)",
        sandbox.mode().as_str(),
        sandbox.data_dir().display(),
    ))
}
