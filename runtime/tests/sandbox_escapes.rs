//! The ways out of the sandbox a red-team tried, each shut: the user's terminal, Unix sockets of services outside
//! the sandbox, and processes that leave the command's process group. (The daemon's environment: see
//! `sandbox_environment.rs`.)

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::io::Read;
use std::os::unix::net::UnixListener;

use troupe_protocol::types::run::ToolResultStatus;
use troupe_runtime::config::SandboxMode;

mod sandbox_support;

use sandbox_support::processes::processes_with;
use sandbox_support::*;

#[tokio::test]
async fn a_command_has_no_terminal_to_reach_the_users() {
    let workspace = Workspace::new();
    let sandbox = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    if !landlock(&sandbox) {
        return;
    }
    // Its own session, so no controlling terminal: /dev/tty cannot be opened (TIOCSTI injection needs it). The
    // shell leads the session its `cut` is in, and `cut` has no terminal (tty_nr 0). (Not compared with the test's
    // own session: where that is led from outside this PID namespace, as under some CI runners, it reads as 0.)
    let result = workspace.run(&sandbox, "echo session $(cut -d' ' -f6,7 /proc/self/stat); echo shell $$").await;
    assert_status(&result, ToolResultStatus::Ok);
    let numbers = |prefix: &str| -> Vec<i64> {
        let line =
            result.output.lines().find(|line| line.starts_with(prefix)).unwrap_or_else(|| panic!("{}", result.output));
        line[prefix.len()..].split_whitespace().map(|n| n.parse().unwrap()).collect()
    };
    let stat = numbers("session ");
    let shell = numbers("shell ")[0];
    assert_eq!(stat[0], shell, "the command's shell does not lead its session: {}", result.output);
    assert_ne!(stat[0], 0, "the command's session is led from outside its view: {}", result.output);
    assert_eq!(stat[1], 0, "the command has a controlling terminal: {}", result.output);
    let result = workspace.run(&sandbox, "echo x > /dev/tty").await;
    assert_status(&result, ToolResultStatus::Error);
    for terminal in ["echo x > /dev/pts/0", "cat /dev/pts/ptmx", "cat /dev/sda"] {
        let result = workspace.run(&sandbox, terminal).await;
        assert_status(&result, ToolResultStatus::Error);
    }
}

#[tokio::test]
async fn processes_that_leave_the_group_die_with_the_command() {
    let workspace = Workspace::new();
    let sandbox = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    if !pid_namespace(&sandbox) {
        return;
    }
    let marker = format!("sleep 77.{}", std::process::id());
    let command =
        format!("setsid {marker} > /dev/null 2>&1 < /dev/null & nohup {marker} > /dev/null 2>&1 & echo started");
    let result = workspace.run(&sandbox, &command).await;
    assert_status(&result, ToolResultStatus::Ok);
    troupe_test_support::eventually("the detached processes to die with their command", STEP, || {
        processes_with(&marker).is_empty()
    })
    .await;
    // The exit status of the command is the one the daemon sees, through the namespace's waiting parent.
    let result = workspace.run(&sandbox, "exit 3").await;
    assert!(result.output.contains("exit code 3"), "{}", result.output);
}

#[tokio::test]
async fn a_unix_socket_of_a_service_outside_the_sandbox_cannot_be_reached() {
    let workspace = Workspace::new();
    let sandbox = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    if !landlock(&sandbox) {
        return;
    }
    let service = tempfile::tempdir().unwrap();
    let socket = service.path().join("service.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    listener.set_nonblocking(true).unwrap();
    let connect = format!(
        "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{}'); s.send(b'run this')\"",
        socket.display()
    );
    let result = workspace.run(&sandbox, &connect).await;
    assert_status(&result, ToolResultStatus::Error);
    assert!(
        result.output.contains("Permission denied") || result.output.contains("PermissionError"),
        "{}",
        result.output
    );
    match listener.accept() {
        Ok((mut stream, _)) => {
            let mut received = Vec::new();
            let _ = stream.read_to_end(&mut received);
            panic!("the service was reached: {}", String::from_utf8_lossy(&received));
        }
        Err(error) => assert_eq!(error.kind(), std::io::ErrorKind::WouldBlock),
    }
    // Nor through a datagram socket pair, whose end can `sendto` any socket path.
    let datagram = service.path().join("datagram.sock");
    let datagram_listener = std::os::unix::net::UnixDatagram::bind(&datagram).unwrap();
    datagram_listener.set_nonblocking(true).unwrap();
    let send = format!(
        "python3 -c \"import socket; a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); a.sendto(b'run this', '{}')\"",
        datagram.display()
    );
    let result = workspace.run(&sandbox, &send).await;
    assert_status(&result, ToolResultStatus::Error);
    let mut buffer = [0u8; 64];
    assert!(datagram_listener.recv(&mut buffer).is_err(), "the datagram service was reached");
    // Pipes and stream socket pairs between the command's own processes still work.
    let result = workspace
        .run(&sandbox, "python3 -c \"import socket; a, b = socket.socketpair(); a.send(b'ok'); print(b.recv(2))\"")
        .await;
    assert_status(&result, ToolResultStatus::Ok);
}

#[tokio::test]
async fn the_waiting_parent_outside_the_namespace_holds_the_daemons_memory_out_of_reach() {
    let workspace = Workspace::new();
    let sandbox = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    if !pid_namespace(&sandbox) {
        return;
    }
    // The command's shell leads its session; the shell's parent is the waiting parent, a fork of the daemon (its
    // token and keys).
    let command = "leader=$(cut -d' ' -f6 /proc/self/stat); parent=$(cut -d' ' -f4 /proc/$leader/stat); head -c 64 /proc/$parent/mem; head -c 64 /proc/$parent/maps; \
                   head -c 64 /proc/$parent/environ; echo tried $parent";
    let result = workspace.run(&sandbox, command).await;
    assert!(result.output.contains("tried"), "{}", result.output);
    if sandbox.private_proc() {
        // In its own /proc the command does not even see the parent: it lies outside the command's PID namespace,
        // so the shell's parent id reads 0 and no entry of /proc is the parent's.
        assert!(result.output.contains("tried 0"), "{}", result.output);
        assert!(result.output.contains("/proc/0/mem") && result.output.contains("No such file"), "{}", result.output);
        return;
    }
    for file in ["mem", "maps", "environ"] {
        let refused =
            result.output.lines().any(|line| line.contains(&format!("/{file}")) && line.contains("Permission denied"));
        assert!(refused, "{file} of the waiting parent was readable: {}", result.output);
    }
}

#[tokio::test]
async fn descriptors_the_daemon_inherited_do_not_reach_a_command() {
    let workspace = Workspace::new();
    let sandbox = workspace.sandbox(config(SandboxMode::WorkspaceWrite));
    // A descriptor without close-on-exec, as a supervisor or launcher may hand the daemon.
    let file = std::fs::File::open("/dev/null").unwrap();
    let descriptor = std::os::fd::AsRawFd::as_raw_fd(&file);
    // SAFETY: clears FD_CLOEXEC on a descriptor this test owns.
    unsafe { libc::fcntl(descriptor, libc::F_SETFD, 0) };
    let result = workspace.run(&sandbox, &format!("test -e /proc/self/fd/{descriptor} && echo leaked; true")).await;
    assert_status(&result, ToolResultStatus::Ok);
    assert!(!result.output.contains("leaked"), "descriptor {descriptor} reached the command: {}", result.output);
    drop(file);
}

#[tokio::test]
async fn the_default_data_directory_of_another_daemon_is_unreadable() {
    // This daemon's data directory is elsewhere; ~/.troupe (the default one, another daemon's) is denied too.
    let workspace = Workspace::new();
    let elsewhere = tempfile::tempdir().unwrap();
    let sandbox = std::sync::Arc::new(troupe_runtime::sandbox::Sandbox::new(
        &config(SandboxMode::WorkspaceWrite),
        elsewhere.path(),
        Some(workspace.home.path()),
    ));
    if !landlock(&sandbox) {
        return;
    }
    let result = workspace.run(&sandbox, "cat .troupe/daemon/token").await;
    assert_status(&result, ToolResultStatus::Error);
    assert_no_secret(&result);
}
