//! The sandbox's plan cache on the real kernel and file system: a cwd's plan is reused while the folders it listed
//! are unchanged, and an entry made in one of them afterwards is in the next command's rules, readable and writable
//! like its siblings.

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::path::Path;
use std::time::{Duration, Instant};

use troupe_protocol::types::run::ToolResultStatus;
use troupe_runtime::config::SandboxMode;
use troupe_runtime::sandbox::plan::Grant;
use troupe_runtime::sandbox::{PreparedSandbox, Sandbox};

mod sandbox_support;

use sandbox_support::*;

/// Prepares commands in `cwd` until two in a row share their plan: a folder changed within the file system's
/// timestamp granularity of its stamp is listed again at each call, so a fresh workspace is cached once it settles.
fn until_cached(sandbox: &Sandbox, cwd: &Path, temp: &Path) -> PreparedSandbox {
    // Generous: a listed folder that keeps changing (a busy `/tmp`) is listed again until it rests.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut previous = sandbox.prepare(cwd, temp, &[]).unwrap().unwrap();
    loop {
        let next = sandbox.prepare(cwd, temp, &[]).unwrap().unwrap();
        if std::ptr::eq(previous.base_plan(), next.base_plan()) {
            return next;
        }
        assert!(Instant::now() < deadline, "the plan of an unchanged cwd was never reused");
        previous = next;
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_entry_made_beside_a_denied_path_is_in_the_next_plan() {
    let workspace = Workspace::new();
    let sandbox = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    if !landlock(&sandbox) {
        return;
    }
    // The cwd holds the data directory, so its entries are listed one by one and each gets rules of its own.
    let cwd = workspace.cwd().canonicalize().unwrap();
    let temp = tempfile::tempdir().unwrap();
    let cached = tokio::task::block_in_place(|| until_cached(&sandbox, &cwd, temp.path()));
    let new_file = cwd.join("made-later.txt");
    assert!(cached.rules().all(|rule| rule.path != new_file));

    // Unchanged: still the same plan.
    let again = sandbox.prepare(&cwd, temp.path(), &[]).unwrap().unwrap();
    assert!(std::ptr::eq(cached.base_plan(), again.base_plan()));

    std::fs::write(&new_file, "written before the command").unwrap();
    let replanned = sandbox.prepare(&cwd, temp.path(), &[]).unwrap().unwrap();
    assert!(!std::ptr::eq(cached.base_plan(), replanned.base_plan()), "a new entry in a listed folder was missed");
    let granted = |grant: Grant| replanned.rules().any(|rule| rule.path == new_file && rule.grant == grant);
    assert!(granted(Grant::Read) && granted(Grant::Write));

    // Through the shell tool, as a session's next command: the new file is readable and writable like its siblings.
    drop(tokio::task::block_in_place(|| until_cached(&sandbox, &cwd, temp.path())));
    let other = cwd.join("made-after-caching.txt");
    std::fs::write(&other, "readable").unwrap();
    let result = workspace.run(&sandbox, "cat made-after-caching.txt && echo more >> made-after-caching.txt").await;
    assert_status(&result, ToolResultStatus::Ok);
    assert!(result.output.contains("readable"), "{}", result.output);
    assert_eq!(std::fs::read_to_string(&other).unwrap(), "readablemore\n");
    // And the data directory beside it still is not.
    let result = workspace.run(&sandbox, "cat .troupe/daemon/token").await;
    assert_status(&result, ToolResultStatus::Error);
    assert_no_secret(&result);
}
