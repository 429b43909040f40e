//! Running the `troupe` binary as a client of a test daemon, from async tests: each invocation is a child
//! process awaited under a timeout, so the test's own protocol client keeps running meanwhile.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

use super::support::*;

/// What one `troupe …` invocation did.
#[derive(Debug)]
pub struct CliOutput {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl CliOutput {
    pub fn succeeded(&self) -> bool {
        self.code == Some(0)
    }

    /// Asserts success and returns stdout.
    pub fn ok(self) -> String {
        assert!(self.succeeded(), "troupe failed: {self:?}");
        self.stdout
    }

    /// Asserts exit code 1 (an error a person should read) and returns stderr.
    pub fn refused(self) -> String {
        assert_eq!(self.code, Some(1), "expected exit code 1: {self:?}");
        self.stderr
    }
}

/// A `troupe` command aimed at `daemon` (URL and token from the environment, as a user would set them).
pub fn troupe_command(daemon: &TestDaemon, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(troupe_binary());
    command
        .args(args)
        .env("TROUPE_URL", daemon.url())
        .env("TROUPE_TOKEN", &daemon.token)
        .env("RUST_LOG", "off")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// `troupe args…` with no daemon address, token or home from the environment (what a user types in a fresh shell),
/// logging off: a command that is not aimed at a test daemon, or names it with flags only.
pub fn troupe_bare(args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(troupe_binary());
    command
        .args(args)
        .env_remove("TROUPE_URL")
        .env_remove("TROUPE_TOKEN")
        .env_remove("TROUPE_HOME")
        .env("RUST_LOG", "off")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// Runs `troupe args…` against `daemon` to its end, within `limit`.
pub async fn troupe_within(daemon: &TestDaemon, args: &[&str], limit: Duration) -> CliOutput {
    finish(troupe_command(daemon, args), limit).await
}

/// Runs a prepared `troupe` command to its end, within `limit`.
pub async fn finish(mut command: tokio::process::Command, limit: Duration) -> CliOutput {
    let output = tokio::time::timeout(limit, command.output())
        .await
        .unwrap_or_else(|_| panic!("{command:?} did not finish within {limit:?}"))
        .expect("run troupe");
    CliOutput {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs `troupe args…` against `daemon` to its end, within [`WAIT`].
pub async fn troupe(daemon: &TestDaemon, args: &[&str]) -> CliOutput {
    troupe_within(daemon, args, WAIT).await
}

/// Runs `troupe args…` (a command that does not end by itself, such as `watch`) until a line of its stdout
/// satisfies `stop` (within [`WAIT`]), then kills it; the lines read.
pub async fn troupe_until(daemon: &TestDaemon, args: &[&str], stop: impl Fn(&str) -> bool) -> Vec<String> {
    let mut command = troupe_command(daemon, args);
    let mut child = command.stdout(Stdio::piped()).spawn().expect("spawn troupe");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut seen = Vec::new();
    let found = tokio::time::timeout(WAIT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            let done = stop(&line);
            seen.push(line);
            if done {
                return true;
            }
        }
        false
    })
    .await;
    let _ = child.kill().await;
    assert_eq!(
        found.ok(),
        Some(true),
        "troupe {args:?} never printed the expected line; it printed:\n{}",
        seen.join("\n")
    );
    seen
}
