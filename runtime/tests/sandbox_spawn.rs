//! How a tool process is started ([`ToolCommand`]): cloned straight into its PID namespace, so the command is the
//! namespace's init and the daemon's own child (no waiting copy of the daemon beside it); with no signal blocked or
//! ignored that the daemon blocks or ignores; killed and reaped when dropped; and failing with the exec's error,
//! or a named one when the program is not in its `PATH`. The confinement itself is tested through the shell tool
//! (sandbox_shell.rs, sandbox_escapes.rs).

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use troupe_runtime::config::SandboxMode;
use troupe_runtime::sandbox::{ToolCommand, ToolProcess};

mod sandbox_support;

use sandbox_support::*;

/// Reads all of the process's stdout and waits for it.
async fn output_of(mut process: ToolProcess) -> String {
    let mut stdout = process.stdout.take().unwrap();
    let mut text = String::new();
    tokio::time::timeout(STEP, stdout.read_to_string(&mut text)).await.unwrap().unwrap();
    let status = tokio::time::timeout(STEP, process.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status}: {text}");
    text
}

/// The value of `field` in `/proc/PID/status`.
fn status_field(pid: libc::pid_t, field: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| line.strip_prefix(field)?.strip_prefix(':').map(|value| value.trim().to_owned()))
}

/// Polls `condition` until it holds or `STEP` has passed.
async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + STEP;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_confined_command_is_the_init_of_its_namespace_and_the_daemons_own_child() {
    let workspace = Workspace::new();
    let sandbox = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    if !landlock(&sandbox) || !pid_namespace(&sandbox) {
        return;
    }
    let prepared = sandbox.prepare(workspace.cwd(), &std::env::temp_dir(), &[]).unwrap();
    let mut process = ToolCommand::new("/bin/sh")
        .args(["-c", "echo $$; exec sleep 30"])
        .cwd(workspace.cwd())
        .spawn(prepared)
        .unwrap();
    let pid = process.id();
    let mut stdout = process.stdout.take().unwrap();
    let mut first = [0u8; 2];
    tokio::time::timeout(STEP, stdout.read_exact(&mut first)).await.unwrap().unwrap();
    assert_eq!(&first, b"1\n", "the command is not its namespace's init");
    // SAFETY: getpid cannot fail.
    let daemon = unsafe { libc::getpid() };
    assert_eq!(status_field(pid, "PPid"), Some(daemon.to_string()), "another process stands between");
    assert_eq!(status_field(pid, "NSpid"), Some(format!("{pid}\t1")));
    // It leads its session and process group, whose id is its own pid: what the shell tool kills.
    // SAFETY: getpgid and getsid take a pid.
    let (group, session) = unsafe { (libc::getpgid(pid), libc::getsid(pid)) };
    assert_eq!((group, session), (pid, pid));
    process.start_kill().unwrap();
    let status = tokio::time::timeout(STEP, process.wait()).await.unwrap().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL));
}

#[tokio::test]
async fn a_command_starts_with_no_signal_blocked_or_ignored() {
    let workspace = Workspace::new();
    // The daemon ignores SIGPIPE (every Rust program does, this test's too) and blocks signals around the clone;
    // neither reaches the command. In both modes: confined and off.
    // SAFETY: sigaction is plain data, which sigaction only writes; a query changes nothing.
    let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    assert_eq!(unsafe { libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut current) }, 0);
    assert_eq!(current.sa_sigaction, libc::SIG_IGN, "this test means nothing unless SIGPIPE is ignored here");
    for mode in [SandboxMode::WorkspaceWrite, SandboxMode::Off] {
        let sandbox = workspace.sandbox(config(mode));
        if mode != SandboxMode::Off && !landlock(&sandbox) {
            continue;
        }
        let prepared = sandbox.prepare(workspace.cwd(), &std::env::temp_dir(), &[]).unwrap();
        let process = ToolCommand::new("grep")
            .args(["-E", "^(SigBlk|SigIgn)", "/proc/self/status"])
            .env("PATH", "/usr/bin:/bin")
            .cwd(workspace.cwd())
            .spawn(prepared)
            .unwrap();
        let text = output_of(process).await;
        assert!(text.contains("SigBlk:\t0000000000000000"), "{mode:?}: {text}");
        assert!(text.contains("SigIgn:\t0000000000000000"), "{mode:?}: {text}");
    }
}

#[tokio::test]
async fn a_dropped_process_is_killed_and_reaped() {
    let workspace = Workspace::new();
    let sandbox = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    if !landlock(&sandbox) {
        return;
    }
    let prepared = sandbox.prepare(workspace.cwd(), &std::env::temp_dir(), &[]).unwrap();
    let process = ToolCommand::new("/bin/sleep").arg("30").cwd(workspace.cwd()).spawn(prepared).unwrap();
    let pid = process.id();
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    drop(process);
    // Killed, then reaped in the background: the pid leaves /proc only once it is reaped, not as a zombie.
    eventually("the dropped process is reaped", || !std::path::Path::new(&format!("/proc/{pid}")).exists()).await;
}

#[tokio::test]
async fn a_program_that_cannot_start_fails_the_spawn_with_its_reason() {
    let workspace = Workspace::new();
    let error = ToolCommand::new("/no/such/program").cwd(workspace.cwd()).spawn(None).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::NotFound, "{error}");
    let error = ToolCommand::new("no-such-program-anywhere")
        .env("PATH", "/usr/bin:/bin")
        .cwd(workspace.cwd())
        .spawn(None)
        .unwrap_err();
    assert!(error.to_string().contains("`no-such-program-anywhere` is not in the command's PATH"), "{error}");
    // A working folder that is gone: the child's chdir fails, and the spawn with it.
    let error = ToolCommand::new("/bin/true").cwd(workspace.cwd().join("gone")).spawn(None).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::NotFound, "{error}");
    // A name is looked up in the command's own PATH, not the daemon's: here a folder only it lists.
    let bin = workspace.cwd().join("only-here");
    std::fs::create_dir_all(&bin).unwrap();
    let program = bin.join("say-found");
    std::fs::write(&program, "#!/bin/sh\necho found\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let text =
        output_of(ToolCommand::new("say-found").env("PATH", &bin).cwd(workspace.cwd()).spawn(None).unwrap()).await;
    assert_eq!(text, "found\n");
}
