//! `git` as tests run it: in a folder, with a fixed identity and default branch, failing the test unless it
//! succeeds.

use std::path::Path;
use std::process::Command;

/// Runs `git ARGUMENTS` in `dir` (identity `t <t@example.com>`, default branch `main`) and returns its stdout;
/// fails the test, with git's stderr, unless it succeeds.
pub fn git(dir: &Path, arguments: &[&str]) -> String {
    let done = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"])
        .args(arguments)
        .output()
        .expect("git runs");
    assert!(done.status.success(), "git {arguments:?}: {}", String::from_utf8_lossy(&done.stderr));
    String::from_utf8(done.stdout).expect("git's output is UTF-8")
}
