//! The child's process group, and killing all of it.
//!
//! The shell runs as the leader of its own group, so one `killpg` reaches everything it started (pipelines,
//! background jobs, their children) unless a process deliberately moved to another session. Killing only the
//! `sh` would leave a grandchild running with our pipes open, and reading would never end.

use std::io;

/// Kills the group on drop unless told the group is gone, so that a dropped tool future leaves no processes.
#[derive(Debug)]
pub(crate) struct ProcessGroup {
    pgid: libc::pid_t,
    armed: bool,
}

impl ProcessGroup {
    pub(crate) fn new(pgid: libc::pid_t) -> Self {
        Self { pgid, armed: true }
    }

    /// Sends SIGKILL to every process in the group. The group has no members once this and the reaping of the
    /// leader are done; a group that is already empty is not an error.
    pub(crate) fn kill(&self) -> io::Result<()> {
        // SAFETY: killpg has no memory-safety preconditions; pgid is the id of the group our child leads. The
        // id stays reserved while any member lives, and callers kill at most once right after reaping the
        // leader, so a reused id is not a practical concern.
        let outcome = unsafe { libc::killpg(self.pgid, libc::SIGKILL) };
        if outcome == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() == Some(libc::ESRCH) { Ok(()) } else { Err(error) }
    }

    /// The group was killed and its leader reaped: dropping must not signal an id that may be reused.
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.kill();
        }
    }
}
