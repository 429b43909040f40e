//! What a command's own mount namespace keeps from it, with a real `/bin/sh` on the real kernel: relative paths walk
//! its mounts, not the daemon's; outside its writable roots nothing's mode, owner, times or extended attributes can
//! change (Landlock governs reading and writing only), the denied paths included; inside them everything can, but
//! what the host mounted read-only. Tests that need Landlock and namespaces say so and are skipped without them.

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use troupe_protocol::types::run::ToolResultStatus;
use troupe_runtime::config::{SandboxConfig, SandboxMode};

mod sandbox_support;

use sandbox_support::*;

/// What the tests expect a refused command to leave as it was: a file's mode, owner and modification time.
fn metadata(path: &Path) -> (u32, u32, i64) {
    let metadata = std::fs::metadata(path).unwrap();
    (metadata.mode(), metadata.uid(), metadata.mtime())
}

/// A command starts in its cwd by the daemon's verified descriptor, which belongs to the daemon's mount namespace;
/// relative paths must still walk the command's own mounts: `../../proc` is its own `/proc` (where it is pid 1), not
/// the daemon's, whose command lines and processes it must not see.
#[tokio::test]
async fn relative_paths_walk_the_commands_own_mounts() {
    let workspace = Workspace::new();
    let sandbox = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    if !pid_namespace(&sandbox) {
        return;
    }
    let up = "../".repeat(workspace.cwd().canonicalize().unwrap().components().count() - 1);
    let command = format!("tr '\\0' ' ' < {up}proc/1/cmdline; echo; ls {up}proc | grep -c '^[0-9]'");
    let result = workspace.run(&sandbox, &command).await;
    assert_status(&result, ToolResultStatus::Ok);
    assert!(result.output.contains("/bin/sh -c tr"), "pid 1 is the command itself: {}", result.output);
    let processes: usize = result.output.lines().rev().find_map(|line| line.trim().parse().ok()).unwrap();
    assert!(processes <= 4, "only the command's own processes: {}", result.output);
}

/// Landlock governs reading and writing a denied path, not its metadata: the command's mount namespace holds the
/// denied paths read-only, so their mode, owner, times and extended attributes stay as they are (`chmod 644` of the
/// token would show it to every user of the machine; `chmod 000` of another daemon's data dir would hide it).
#[tokio::test]
async fn the_metadata_of_a_denied_path_cannot_be_changed() {
    let workspace = Workspace::new();
    let sandbox = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    if !pid_namespace(&sandbox) {
        return;
    }
    let token = workspace.data_dir.join("daemon/token");
    let (token_before, data_dir_before) = (metadata(&token), metadata(&workspace.data_dir));
    let commands = [
        "chmod 644 .troupe/daemon/token",
        "chmod 000 .troupe",
        "touch -c -m -d 2001-01-01 .troupe/daemon/token",
        "chown 12345:12345 .troupe/daemon/token",
        "python3 -c 'import os; os.setxattr(\".troupe/daemon/token\", \"user.x\", b\"1\")'",
    ];
    workspace.assert_each_refused(&sandbox, commands).await;
    for (path, was) in [(&token, token_before), (&workspace.data_dir, data_dir_before)] {
        assert_eq!(metadata(path), was, "{}", path.display());
    }
    // The cwd around it is as writable as ever.
    let result = workspace.run(&sandbox, "touch work/f && chmod 600 work/f && touch -d 2001-01-01 work/f").await;
    assert_status(&result, ToolResultStatus::Ok);
}

/// `chmod 666 ~/.bashrc` would let every account of the machine write what the user's shell runs; as root, a
/// `chmod` or `chown` of a system file is worse. Outside the writable roots a command changes no file's metadata,
/// while a `[sandbox] writable` root elsewhere, the cwd and the temp dir stay its own.
#[tokio::test]
async fn the_metadata_outside_the_writable_roots_cannot_be_changed() {
    let workspace = Workspace::new();
    let outside = tempfile::tempdir().unwrap();
    let outside = outside.path().canonicalize().unwrap();
    let (profile, extra) = (outside.join("profile"), outside.join("extra"));
    std::fs::write(&profile, "export PATH\n").unwrap();
    std::fs::create_dir(&extra).unwrap();
    let sandbox = workspace
        .sandbox(SandboxConfig { writable: vec![extra.display().to_string()], ..config(SandboxMode::WorkspaceWrite) });
    if !pid_namespace(&sandbox) {
        return;
    }
    let was = metadata(&profile);
    let folder_was = metadata(&outside).0;
    let commands = [
        format!("chmod 666 {}", profile.display()),
        format!("chmod 777 {}", outside.display()),
        format!("touch -c -m -d 2001-01-01 {}", profile.display()),
        format!("chown 12345:12345 {}", profile.display()),
        format!("python3 -c 'import os; os.setxattr(\"{}\", \"user.x\", b\"1\")'", profile.display()),
    ];
    workspace.assert_each_refused(&sandbox, commands).await;
    assert_eq!(metadata(&profile), was);
    assert_eq!(metadata(&outside).0, folder_was, "the folder's mode is unchanged");

    let command = format!(
        "touch work/f && chmod 600 work/f && touch -d 2001-01-01 work/f \
         && echo x > \"$TMPDIR/t\" && chmod 600 \"$TMPDIR/t\" && echo x > {extra}/f && chmod 640 {extra}/f",
        extra = extra.display()
    );
    let result = workspace.run(&sandbox, &command).await;
    assert_status(&result, ToolResultStatus::Ok);
    assert_eq!(std::fs::metadata(extra.join("f")).unwrap().mode() & 0o777, 0o640);
}

/// A writable root is attached again as the host has it: a folder the host mounted read-only inside the cwd stays
/// read-only for the command (the sandbox grants no more than the host), and the rest of the cwd stays writable.
#[tokio::test]
async fn a_read_only_mount_inside_the_cwd_stays_read_only() {
    let workspace = Workspace::new();
    let sandbox = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    if !pid_namespace(&sandbox) {
        return;
    }
    let source = tempfile::tempdir().unwrap();
    std::fs::write(source.path().join("data"), "data").unwrap();
    let Some(_mounted) = mounts::bind_mount_read_only(source.path(), &workspace.cwd().join("work/ro")) else {
        return;
    };
    let commands = ["echo x > work/ro/new", "chmod 600 work/ro/data", "echo x >> work/ro/data"];
    workspace.assert_each_refused(&sandbox, commands).await;
    assert!(!source.path().join("new").exists());
    assert_eq!(std::fs::read_to_string(source.path().join("data")).unwrap(), "data");
    let result = workspace.run(&sandbox, "cat work/ro/data && echo x > work/rw && chmod 600 work/rw").await;
    assert_status(&result, ToolResultStatus::Ok);
}

/// A session in `/`: everything is its to write but the kernel's folders, so its mount namespace turns only those
/// read-only, and shared memory and the writable devices stay usable.
#[tokio::test]
async fn a_session_in_the_root_writes_what_it_may_and_no_kernel_folder() {
    let workspace = Workspace::new();
    let sandbox = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    if !pid_namespace(&sandbox) {
        return;
    }
    let elsewhere = tempfile::tempdir().unwrap();
    let file = elsewhere.path().canonicalize().unwrap().join("f");
    let shm = format!("/dev/shm/troupe-mounts-{}", std::process::id());
    let command = format!(
        "echo x > {file} && chmod 600 {file} && echo y > {shm} && rm {shm} && echo z > /dev/null && echo done",
        file = file.display()
    );
    let result = workspace.run_in(&sandbox, Path::new("/"), &command).await;
    assert_status(&result, ToolResultStatus::Ok);
    assert_eq!(std::fs::metadata(&file).unwrap().mode() & 0o777, 0o600);
    // The mode it has already, so that nothing changes if the mount were writable: the kernel checks the mount
    // before anything else, so the answer is EROFS for root and anyone else alike.
    for path in ["/sys/kernel", "/dev/null"] {
        assert!(Path::new(path).exists(), "{path} is there to try");
        let command = format!("chmod \"$(stat -c %a {path})\" {path}");
        let result = workspace.run_in(&sandbox, Path::new("/"), &command).await;
        assert_eq!(result.status, ToolResultStatus::Error, "{path}: {}", result.output);
        assert!(result.output.contains("Read-only file system"), "{path}: {}", result.output);
    }
}
