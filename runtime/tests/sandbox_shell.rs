//! The `shell` tool under the kernel sandbox, with a real `/bin/sh` on the real kernel: a command cannot read or
//! write the daemon's data directory or other denied paths (not by `cat`, `grep -r`, a hard link, a rename or a
//! copy), writes only where its mode allows, has no host network when told so, and is refused when the sandbox
//! cannot be enforced. Tests that need Landlock say so and pass vacuously on a kernel without it.

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use troupe_protocol::types::run::ToolResultStatus;
use troupe_runtime::config::{SandboxConfig, SandboxMode};
use troupe_runtime::sandbox::plan::Grant;
use troupe_runtime::sandbox::{Sandbox, Support};
use troupe_runtime::tools::ToolRegistry;

mod sandbox_support;

use sandbox_support::*;

#[tokio::test]
async fn the_data_directory_cannot_be_read() {
    let workspace = Workspace::new();
    let sandbox = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    if !landlock(&sandbox) {
        return;
    }
    for command in ["cat .troupe/daemon/token", "cat .troupe/providers.json", "cat .troupe/config.toml"] {
        let result = workspace.run(&sandbox, command).await;
        assert_status(&result, ToolResultStatus::Error);
        assert_no_secret(&result);
        assert!(result.output.contains("Permission denied"), "{}", result.output);
        assert!(result.output.contains("troupe sandbox, mode workspace-write"), "{}", result.output);
    }
    let result = workspace.run(&sandbox, "grep -r sk- . ; grep -r troupe-token .").await;
    assert_no_secret(&result);
    // Names stay listable; contents do not.
    let result = workspace.run(&sandbox, "ls .troupe").await;
    assert_status(&result, ToolResultStatus::Ok);
    assert!(result.output.contains("providers.json"), "{}", result.output);
}

#[tokio::test]
async fn a_hard_link_to_a_secret_beside_the_data_directory_is_not_opened_by_its_rule() {
    let workspace = Workspace::new();
    // Made by someone outside the sandbox (a command inside it cannot link the token); it sits in the folder the
    // rules are carved from, where a rule on it would grant the token's inode under every name.
    std::fs::hard_link(workspace.data_dir.join("daemon/token"), workspace.cwd().join("innocent.txt")).unwrap();
    std::fs::hard_link(workspace.data_dir.join("config.toml"), workspace.cwd().join("settings.toml")).unwrap();
    let sandbox = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    if !landlock(&sandbox) {
        return;
    }
    for command in ["cat innocent.txt", "cat .troupe/daemon/token", "echo 'x = 1' >> settings.toml"] {
        let result = workspace.run(&sandbox, command).await;
        assert_status(&result, ToolResultStatus::Error);
        assert_no_secret(&result);
    }
    assert_eq!(std::fs::read_to_string(workspace.data_dir.join("config.toml")).unwrap(), CONFIG);
}

/// Bind mounts made outside the sandbox, in the cwd the rules are carved from: of a denied folder, and of the
/// folder that holds it. A rule on such an entry would name the denied folder's own inode (or its parent's, and all
/// beneath it), opening it under every path, its own included. (A bind mount of a troupe data dir is found as one
/// and denied on its own; a `deny_read` folder is not.)
#[tokio::test]
async fn a_bind_mount_of_a_denied_folder_or_its_parent_opens_it_nowhere() {
    let workspace = Workspace::new();
    let elsewhere = tempfile::tempdir().unwrap();
    let elsewhere = elsewhere.path().canonicalize().unwrap();
    let secret_dir = elsewhere.join("secret-dir");
    std::fs::create_dir(&secret_dir).unwrap();
    std::fs::write(secret_dir.join("key"), API_KEY).unwrap();
    let sandbox = workspace.sandbox(SandboxConfig {
        deny_read: vec![secret_dir.display().to_string()],
        ..config(SandboxMode::WorkspaceWrite)
    });
    if !landlock(&sandbox) {
        return;
    }
    let Some(_secret) = mounts::bind_mount(&secret_dir, &workspace.cwd().join("mnt")) else {
        return;
    };
    let Some(_parent) = mounts::bind_mount(&elsewhere, &workspace.cwd().join("mnt-up")) else {
        return;
    };
    let key = secret_dir.join("key");
    for command in [
        "cat mnt/key > /dev/null && echo READ".to_owned(),
        format!("cat {} > /dev/null && echo READ", key.display()),
        "cat mnt-up/secret-dir/key > /dev/null && echo READ".to_owned(),
        "echo x > mnt/new.txt && echo WROTE".to_owned(),
        format!("echo x > {}/new.txt && echo WROTE", secret_dir.display()),
    ] {
        let result = workspace.run(&sandbox, &command).await;
        assert_status(&result, ToolResultStatus::Error);
        assert!(!result.output.contains("READ") && !result.output.contains("WROTE"), "{command}: {}", result.output);
    }
    assert!(!secret_dir.join("new.txt").exists());
    // What is not denied stays as usable as ever.
    let result = workspace.run(&sandbox, "echo x > work/new.txt && cat work/new.txt").await;
    assert_status(&result, ToolResultStatus::Ok);
}

#[tokio::test]
async fn the_data_directory_cannot_be_changed_linked_moved_or_copied() {
    let workspace = Workspace::new();
    let sandbox = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    if !landlock(&sandbox) {
        return;
    }
    let cwd = workspace.cwd();
    let result = workspace.run(&sandbox, "echo x >> .troupe/config.toml").await;
    assert_status(&result, ToolResultStatus::Error);
    assert_eq!(std::fs::read_to_string(workspace.data_dir.join("config.toml")).unwrap(), CONFIG);

    for command in [
        "ln .troupe/daemon/token work/t",
        "ln .troupe/daemon/token t",
        "ln -s .troupe work/l && cat work/l/daemon/token",
    ] {
        let result = workspace.run(&sandbox, command).await;
        assert_status(&result, ToolResultStatus::Error);
        assert_no_secret(&result);
    }
    assert!(!cwd.join("work/t").exists() && !cwd.join("t").exists());

    let result = workspace.run(&sandbox, "mv .troupe work/moved || mv .troupe moved").await;
    assert_status(&result, ToolResultStatus::Error);
    assert!(workspace.data_dir.join("daemon/token").exists());
    let result = workspace.run(&sandbox, "mv .troupe/providers.json work/p").await;
    assert_status(&result, ToolResultStatus::Error);
    assert!(workspace.data_dir.join("providers.json").exists());

    let result = workspace.run(&sandbox, "cp -r .troupe work/copy").await;
    assert_status(&result, ToolResultStatus::Error);
    for entry in walk(&cwd.join("work")) {
        let contents = std::fs::read_to_string(&entry).unwrap_or_default();
        assert!(!contents.contains(TOKEN) && !contents.contains("SECRETKEY"), "{} holds a secret", entry.display());
    }
}

#[tokio::test]
async fn writes_stay_in_the_cwd_and_the_temp_dir() {
    let workspace = Workspace::new();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), workspace.cwd().join("work/out")).unwrap();
    let sandbox = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    if !landlock(&sandbox) {
        return;
    }
    let result = workspace.run(&sandbox, "echo x > work/out/escaped").await;
    assert_status(&result, ToolResultStatus::Error);
    assert!(!outside.path().join("escaped").exists());
    let stray = std::env::temp_dir().join(format!("troupe-sandbox-stray-{}", std::process::id()));
    let result = workspace.run(&sandbox, &format!("echo x > {}", stray.display())).await;
    assert_status(&result, ToolResultStatus::Error);
    assert!(!stray.exists());
    // The cwd holds the data directory, so entries cannot be created directly in it (documented caveat).
    let result = workspace.run(&sandbox, "echo x > top-level").await;
    assert_status(&result, ToolResultStatus::Error);

    let result = workspace
        .run(
            &sandbox,
            "echo x > work/f && mkdir -p work/d/e && mv work/f work/d/e/g && rm -r work/d \
             && echo y > \"$TMPDIR/t\" && cat \"$TMPDIR/t\" && ln -s t \"$TMPDIR/l\" && echo ok",
        )
        .await;
    assert_status(&result, ToolResultStatus::Ok);
    assert!(result.output.contains("ok"), "{}", result.output);
}

#[tokio::test]
async fn with_the_data_directory_elsewhere_the_whole_cwd_is_writable() {
    let workspace = Workspace::new();
    let project = tempfile::tempdir().unwrap();
    let sandbox = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    if !landlock(&sandbox) {
        return;
    }
    let command = "echo x > f && mkdir d && mv f d/g && rm -r d && echo done";
    let result = workspace.run_in(&sandbox, project.path(), command).await;
    assert_status(&result, ToolResultStatus::Ok);
}

#[tokio::test]
async fn ordinary_files_outside_the_cwd_stay_readable() {
    let workspace = Workspace::new();
    let sandbox = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    if !landlock(&sandbox) {
        return;
    }
    let result = workspace
        .run(&sandbox, "cat /etc/passwd > /dev/null && ls / > /dev/null && head -c 4 /dev/urandom | wc -c && echo ok")
        .await;
    assert_status(&result, ToolResultStatus::Ok);
    assert!(result.output.contains('4'), "{}", result.output);
    let result = workspace.run(&sandbox, "grep NoNewPrivs /proc/self/status").await;
    assert!(result.output.contains('1'), "{}", result.output);
}

#[tokio::test]
async fn the_daemon_cannot_be_signalled() {
    let workspace = Workspace::new();
    let sandbox = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    // Signal scoping came with Landlock ABI 6.
    if !landlock_abi(&sandbox, 6) {
        return;
    }
    let result = workspace.run(&sandbox, &format!("kill -0 {}", std::process::id())).await;
    assert_status(&result, ToolResultStatus::Error);
    let result = workspace.run(&sandbox, "sleep 5 & kill $! && echo own-child-killed").await;
    assert_status(&result, ToolResultStatus::Ok);
}

#[tokio::test]
async fn root_loses_the_capabilities_that_reach_around_landlock() {
    let workspace = Workspace::new();
    let sandbox = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    if !landlock_as_root(&sandbox) {
        return;
    }
    let result = workspace.run(&sandbox, "grep CapBnd /proc/self/status").await;
    assert_status(&result, ToolResultStatus::Ok);
    let line = result.output.lines().find(|line| line.starts_with("CapBnd:")).expect("CapBnd is shown");
    let bounding = u64::from_str_radix(line.trim_start_matches("CapBnd:").trim(), 16).unwrap();
    // SYS_MODULE, SYS_RAWIO, SYS_ADMIN, NET_ADMIN, NET_RAW (sniffing the daemon's loopback), SYS_PTRACE, BPF.
    for capability in [16, 17, 21, 12, 13, 19, 39] {
        assert_eq!(bounding & (1 << capability), 0, "capability {capability} is still bounded in: {line}");
    }
    let result =
        workspace.run(&sandbox, "python3 -c 'import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)'").await;
    assert_status(&result, ToolResultStatus::Error);
}

/// `PR_SET_PDEATHSIG` at work: the group leader is SIGKILLed when the thread that spawned it ends, as it would be
/// when the daemon dies.
#[test]
fn the_leader_dies_with_the_thread_that_spawned_it() {
    let pid = std::thread::spawn(|| {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let mut command = tokio::process::Command::new("sleep");
            command.arg("30");
            troupe_runtime::sandbox::PreparedSandbox::install_death_signal(&mut command);
            let child = command.spawn().unwrap();
            let pid = child.id().unwrap();
            // Neither killed nor reaped by us: only the death signal can end it.
            std::mem::forget(child);
            pid
        })
    })
    .join()
    .unwrap();
    let pid = libc::pid_t::try_from(pid).unwrap();
    let mut status = 0;
    // SAFETY: waits for our own child, writing its status into a local.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid);
    assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL, "status {status:#x}");
}

#[tokio::test]
async fn read_only_mode_refuses_cwd_writes() {
    let workspace = Workspace::new();
    let sandbox = workspace.sandbox(config(SandboxMode::ReadOnly));
    if !landlock(&sandbox) {
        return;
    }
    let result = workspace.run(&sandbox, "echo x > work/f").await;
    assert_status(&result, ToolResultStatus::Error);
    assert!(
        result.output.contains("mode read-only") && result.output.contains("may write only $TMPDIR"),
        "{}",
        result.output
    );
    assert!(!workspace.cwd().join("work/f").exists());
    // The file tools change nothing either.
    for (tool, arguments) in [
        ("write_file", json!({"path": "work/f", "content": "x"})),
        ("edit_file", json!({"path": "work/g", "old_string": "a", "new_string": "b"})),
    ] {
        let registry = ToolRegistry::builtin();
        let result = registry.get(tool).unwrap().execute(arguments, workspace.context(&sandbox)).await;
        assert_status(&result, ToolResultStatus::Denied);
        assert!(result.output.contains("read-only mode"), "{}", result.output);
    }
    assert!(!workspace.cwd().join("work/f").exists());
    let result = workspace.run(&sandbox, "echo y > \"$TMPDIR/t\" && cat .troupe/../work/../.troupe/config.toml").await;
    assert_status(&result, ToolResultStatus::Error);
    let result = workspace.run(&sandbox, "echo y > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"").await;
    assert_status(&result, ToolResultStatus::Ok);
}

#[tokio::test]
async fn without_network_the_host_is_unreachable_but_loopback_is_up() {
    let workspace = Workspace::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("bash -c 'echo hello > /dev/tcp/127.0.0.1/{port}'");

    let isolated = workspace.sandbox(SandboxConfig { network: false, ..config(SandboxMode::WorkspaceWrite) });
    if !landlock(&isolated) {
        return;
    }
    let result = workspace.run(&isolated, &connect).await;
    assert_status(&result, ToolResultStatus::Error);
    // "Connection refused", not "Network is unreachable": the namespace's own loopback is up, nobody listens.
    assert!(result.output.contains("Connection refused"), "{}", result.output);
    assert!(listener.accept().is_err_and(|error| error.kind() == std::io::ErrorKind::WouldBlock));

    let connected = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    let result = workspace.run(&connected, &connect).await;
    assert_status(&result, ToolResultStatus::Ok);
    assert!(listener.accept().is_ok(), "with network the same command reaches the listener");
}

#[tokio::test]
async fn off_mode_runs_unconfined() {
    let workspace = Workspace::new();
    let sandbox = workspace.sandbox(config(SandboxMode::Off));
    let result = workspace.run(&sandbox, "cat .troupe/daemon/token && echo x > top-level").await;
    assert_status(&result, ToolResultStatus::Ok);
    assert!(result.output.contains(TOKEN));
    assert!(workspace.cwd().join("top-level").exists());
}

#[tokio::test]
async fn a_denied_extra_path_is_unreadable() {
    let workspace = Workspace::new();
    let elsewhere = tempfile::tempdir().unwrap();
    let secret_dir = elsewhere.path().join("secret-dir");
    std::fs::create_dir(&secret_dir).unwrap();
    std::fs::write(secret_dir.join("key"), API_KEY).unwrap();
    std::fs::write(elsewhere.path().join("public"), "public").unwrap();
    let sandbox = workspace.sandbox(SandboxConfig {
        deny_read: vec![secret_dir.display().to_string()],
        ..config(SandboxMode::WorkspaceWrite)
    });
    if !landlock(&sandbox) {
        return;
    }
    let result = workspace.run(&sandbox, &format!("cat {}/key", secret_dir.display())).await;
    assert_status(&result, ToolResultStatus::Error);
    assert_no_secret(&result);
    let result = workspace.run(&sandbox, &format!("cat {}/public", elsewhere.path().display())).await;
    assert_status(&result, ToolResultStatus::Ok);
}

#[tokio::test]
async fn an_unenforceable_sandbox_refuses_the_command() {
    let workspace = Workspace::new();
    let unavailable = Support::Unavailable { reason: "test kernel without Landlock".to_owned() };
    let sandbox = Arc::new(
        Sandbox::new(&config(SandboxMode::WorkspaceWrite), &workspace.data_dir, Some(workspace.cwd()))
            .with_support(unavailable),
    );
    let result = workspace.run(&sandbox, "echo ran > work/marker").await;
    assert_status(&result, ToolResultStatus::Denied);
    assert!(result.output.contains("refused by the sandbox"), "{}", result.output);
    assert!(result.output.contains("mode = \"off\""), "{}", result.output);
    assert!(!workspace.cwd().join("work/marker").exists());
}

#[tokio::test]
async fn tmpdir_is_the_run_temp_dir_or_a_fresh_one_removed_after() {
    let workspace = Workspace::new();
    let sandbox = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    let result = workspace.run(&sandbox, "echo \"$TMPDIR\"").await;
    assert_status(&result, ToolResultStatus::Ok);
    let fresh = result.output.lines().find(|line| line.contains("troupe-shell-")).expect("TMPDIR is shown");
    assert!(!Path::new(fresh.trim()).exists(), "the fresh temp dir is removed after the call");

    let run_temp = tempfile::tempdir().unwrap();
    let mut context = workspace.context(&sandbox);
    context.temp_dir = Some(run_temp.path().to_path_buf());
    let command = "echo kept > \"$TMPDIR/file\" && echo \"$TMP $TEMP\"";
    let result = tokio::time::timeout(STEP, shell().execute(json!({"command": command}), context)).await.unwrap();
    assert_status(&result, ToolResultStatus::Ok);
    assert!(result.output.contains(&run_temp.path().display().to_string()), "{}", result.output);
    assert_eq!(std::fs::read_to_string(run_temp.path().join("file")).unwrap(), "kept\n");
}

#[test]
fn the_plan_carves_around_the_data_directory() {
    let workspace = Workspace::new();
    let sandbox = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    let cwd = workspace.cwd().canonicalize().unwrap();
    let temp = tempfile::tempdir().unwrap();
    let data_dir = sandbox.data_dir().to_path_buf();

    let plan = troupe_runtime::sandbox::plan::plan(&sandbox, &cwd, temp.path(), &[]);
    for rule in plan.rules.iter().filter(|rule| rule.grant != Grant::ListNames) {
        assert!(!rule.path.starts_with(&data_dir), "{} reaches into the data dir", rule.path.display());
        assert!(!data_dir.starts_with(&rule.path), "{} holds the data dir", rule.path.display());
    }
    let granted = |path: &Path, grant: Grant| plan.rules.iter().any(|rule| rule.path == path && rule.grant == grant);
    assert!(granted(&cwd.join("work"), Grant::Write));
    assert!(granted(&cwd.join("work"), Grant::Read));
    assert!(granted(Path::new("/usr"), Grant::Read));
    assert!(granted(Path::new("/dev/null"), Grant::Device));
    assert!(!granted(Path::new("/dev"), Grant::Read));

    if landlock(&sandbox) {
        const ROUNDS: u32 = 20;
        let started = Instant::now();
        for _ in 0..ROUNDS {
            drop(sandbox.prepare(&cwd, temp.path(), &[]).unwrap());
        }
        let rules = sandbox.prepare(&cwd, temp.path(), &[]).unwrap().map_or(0, |prepared| prepared.rules().count());
        println!("prepare(): {:?} per call, {rules} rules", started.elapsed() / ROUNDS);
    }
}

/// Landlock does not govern a file's mode: a command could leave a program behind that runs as the daemon's user for
/// anyone who starts it. The set-id bits are refused however they are asked for; other modes change as usual.
#[tokio::test]
async fn a_command_cannot_make_a_set_id_program() {
    let workspace = Workspace::new();
    let sandbox = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    if !landlock(&sandbox) {
        return;
    }
    for command in [
        "cp /bin/true work/p && chmod u+s work/p",
        "install -m 4755 /bin/true work/p",
        "python3 -c 'import os; os.close(os.open(\"work/q\", os.O_CREAT | os.O_WRONLY, 0o4755))'",
        "python3 -c 'import os; os.close(os.open(\"work/q\", os.O_CREAT | os.O_WRONLY, 0o2755))'",
        "python3 -c 'import os; os.mknod(\"work/d\", 0o104755)'",
    ] {
        let result = workspace.run(&sandbox, command).await;
        assert_status(&result, ToolResultStatus::Error);
    }
    for path in ["work/p", "work/q", "work/d"] {
        let path = workspace.cwd().join(path);
        if let Ok(metadata) = std::fs::metadata(&path) {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(metadata.permissions().mode() & 0o6000, 0, "{}", path.display());
        }
    }
    let result = workspace.run(&sandbox, "cp /bin/true work/r && chmod 755 work/r && work/r && echo RAN").await;
    assert_status(&result, ToolResultStatus::Ok);
    assert!(result.output.contains("RAN"), "{}", result.output);
    // A folder's set-group-ID bit only gives new entries its group; GNU chmod and git's shared repositories keep it.
    let result =
        workspace.run(&sandbox, "mkdir work/shared && chmod 2775 work/shared && chmod -R u+w work/shared").await;
    assert_status(&result, ToolResultStatus::Ok);
}

/// A `deny_read` path that does not exist yet when the daemon starts, through a symlinked folder: denied where it
/// leads once it exists, under both names.
#[tokio::test]
async fn a_denied_path_made_later_behind_a_symlink_is_denied_where_it_leads() {
    let workspace = Workspace::new();
    let cwd = workspace.cwd().canonicalize().unwrap();
    std::fs::create_dir(cwd.join("real")).unwrap();
    std::os::unix::fs::symlink(cwd.join("real"), cwd.join("link")).unwrap();
    let sandbox = workspace.sandbox(SandboxConfig {
        deny_read: vec![
            cwd.join("link/secret.env").display().to_string(),
            cwd.join("gone/../other.env").display().to_string(),
        ],
        ..config(SandboxMode::WorkspaceWrite)
    });
    if !landlock(&sandbox) {
        return;
    }
    std::fs::write(cwd.join("real/secret.env"), API_KEY).unwrap();
    std::fs::write(cwd.join("other.env"), API_KEY).unwrap();
    std::fs::write(cwd.join("real/public.txt"), "public").unwrap();
    for command in ["cat real/secret.env", "cat link/secret.env", "cat other.env"] {
        let result = workspace.run(&sandbox, &format!("{command} > /dev/null && echo READ")).await;
        assert_eq!(result.status, ToolResultStatus::Error, "{command}: {}", result.output);
        assert!(!result.output.contains("READ"), "{command}: {}", result.output);
    }
    let result = workspace.run(&sandbox, "cat real/public.txt").await;
    assert_status(&result, ToolResultStatus::Ok);
}

/// A cwd of `/` (or in the kernel's folders) makes nothing of `/dev`, `/proc` or `/sys` writable but shared memory
/// and the writable devices, which have rules of their own.
#[test]
fn the_kernels_folders_are_never_written_through_a_cwd() {
    let workspace = Workspace::new();
    let sandbox = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    let temp = tempfile::tempdir().unwrap();
    let plan = troupe_runtime::sandbox::plan::plan(&sandbox, Path::new("/"), temp.path(), &[]);
    let written = |path: &Path| plan.rules.iter().any(|rule| rule.grant == Grant::Write && rule.path == path);
    assert!(written(Path::new("/usr")), "the cwd's other entries are written");
    assert!(written(Path::new("/dev/shm")));
    for rule in plan.rules.iter().filter(|rule| rule.grant == Grant::Write) {
        let system = ["/dev", "/proc", "/sys"].iter().any(|folder| rule.path.starts_with(folder));
        assert!(!system || rule.path.starts_with("/dev/shm"), "{} is writable", rule.path.display());
    }
    for cwd in ["/proc", "/sys/kernel", "/dev"] {
        let plan = troupe_runtime::sandbox::plan::plan(&sandbox, Path::new(cwd), temp.path(), &[]);
        assert!(plan.dropped_writable.iter().any(|path| path == Path::new(cwd)), "{cwd}: {:?}", plan.dropped_writable);
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() && !path.is_symlink() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
