//! What a tool process can learn of the machine besides files, through the real `troupe serve` binary: the other
//! processes of the daemon's user (a secret in a command line, as `troupe --token` or a browser opened on a sign-in
//! link put there) and the daemon's environment. Tool processes get a `/proc` of their own, listing only their own
//! processes, whether the daemon runs as root or not, and an allowlisted environment.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use troupe_protocol::types::run::{PersistedToolResult, ToolResultStatus};
use troupe_protocol::types::session::PermissionMode;

use super::support::*;
use super::unavailable::{Missing, is_root, skip};

/// `troupe serve` on 127.0.0.1:0 with `environment` added to this test's and, with `user`, as that user (uid and
/// gid; the test runs as root then).
fn serve(data_dir: &Path, environment: &[(&str, &str)], user: Option<u32>) -> ChildDaemon {
    let mut command = troupe_serve(data_dir).listen("127.0.0.1:0");
    for (name, value) in environment {
        command = command.env(*name, *value);
    }
    if let Some(id) = user {
        command = command.user(id);
    }
    command.spawn()
}

/// Runs `commands` as shell calls of one `yolo` run in `cwd` and returns their results in order.
async fn run_commands(
    daemon: &ChildDaemon,
    data_dir: &Path,
    cwd: &Path,
    commands: &[&str],
) -> Vec<PersistedToolResult> {
    let mut turns: Vec<Value> = commands
        .iter()
        .map(|command| json!({"tool_calls": [{"tool": "shell", "arguments": {"command": command}}]}))
        .collect();
    turns.push(json!({"text": "done"}));
    let (client, mut deliveries) = daemon.client().await;
    connect_script(&client, data_dir, json!({ "turns": turns })).await;
    let session = create_session_in(&client, cwd).await;
    set_mode(&client, &session.session_id, PermissionMode::Yolo).await;
    client.subscribe(&session.session_id, None).await.expect("subscribe");
    start_run(&client, &session.session_id, selection_of("default", "local/scripted"), "go").await;
    let results = tool_results(&events_until(&mut deliveries, is_terminal).await);
    assert_eq!(results.len(), commands.len(), "every command ran: {results:?}");
    results
}

/// A process of this user whose command line holds `secret`, as `troupe --token SECRET watch` would; killed on drop
/// with its `sleep` (a process group of their own).
struct SecretHolder(std::process::Child);

impl SecretHolder {
    fn start(secret: &str, user: Option<u32>) -> SecretHolder {
        let mut command = Command::new("/bin/sh");
        // `; :` keeps the shell itself alive (and so its command line), rather than exec'ing the sleep.
        command.args(["-c", "sleep 600; :", "troupe", "--token", secret]).stdin(Stdio::null()).process_group(0);
        if let Some(id) = user {
            command.uid(id).gid(id);
        }
        SecretHolder(command.spawn().expect("spawn the secret holder"))
    }
}

impl Drop for SecretHolder {
    fn drop(&mut self) {
        // The shell's `sleep` too: killing the shell alone left it running for ten minutes, reparented to init.
        let group = libc::pid_t::try_from(self.0.id()).expect("a pid");
        // SAFETY: kill(2) of the process group this holder made; it touches no memory of ours.
        unsafe { libc::kill(-group, libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

/// The commands that look for the secret and for other processes, and what they must show.
async fn assert_tools_see_only_their_own_processes(user: Option<u32>) {
    let data_dir = tempfile::tempdir().expect("data dir");
    let project = tempfile::tempdir().expect("project");
    if let Some(id) = user {
        for dir in [data_dir.path(), project.path()] {
            std::os::unix::fs::chown(dir, Some(id), Some(id)).expect("chown");
        }
    }
    let secret = format!("tok-{}", troupe_runtime::clock::new_id());
    let holder = SecretHolder::start(&secret, user);
    let holder_pid = holder.0.id();
    let own_cmdline = format!("/proc/{holder_pid}/cmdline");
    eventually("the secret holder runs", || {
        std::fs::read(&own_cmdline).is_ok_and(|line| String::from_utf8_lossy(&line).contains(&secret))
    })
    .await;
    let home = project.path().display().to_string();
    let daemon = serve(data_dir.path(), &[("HOME", &home)], user);
    let daemon_pid = daemon.child.id();

    let snapshot = within(
        "snapshot",
        daemon
            .client()
            .await
            .0
            .call::<troupe_protocol::method::RuntimeSnapshotGet>(troupe_protocol::types::common::Empty {}),
    )
    .await
    .expect("runtime.snapshot.get")
    .snapshot;
    let sandbox = snapshot.sandbox.expect("the snapshot reports the sandbox");
    assert!(sandbox.pid_namespace && sandbox.private_proc, "this machine allows both: {sandbox:?}");

    let commands = [
        "cat /proc/*/cmdline | tr '\\0' ' '".to_owned(),
        format!("cat /proc/{holder_pid}/cmdline /proc/{daemon_pid}/environ; echo end"),
        "ls /proc | grep -E '^[0-9]+$' | tr '\\n' ' '".to_owned(),
        "tr '\\0' ' ' < /proc/1/cmdline".to_owned(),
    ];
    let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
    let mounts_before = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let results = run_commands(&daemon, data_dir.path(), project.path(), &commands).await;
    for (command, result) in commands.iter().zip(&results) {
        assert!(!result.output.contains(&secret), "`{command}` shows the secret");
    }
    assert_eq!(results[0].status, ToolResultStatus::Ok, "{}", results[0].output);
    assert!(results[0].output.contains("/proc/*/cmdline"), "it saw its own command: {}", results[0].output);
    assert!(results[1].output.contains("end"), "{}", results[1].output);
    // The result is `exit code 0`, then the command's stdout after a `--- stdout ---` line.
    let listing = results[2].output.split_once("--- stdout ---").map_or("", |(_, stdout)| stdout);
    let pids: Vec<u32> =
        listing.lines().nth(1).unwrap_or_default().split_whitespace().filter_map(|pid| pid.parse().ok()).collect();
    assert!(pids.contains(&1), "the command is the init of its namespace: {}", results[2].output);
    // The shell, ls, grep and tr: nothing else, and none of the daemon's or the holder's pids.
    assert!(pids.len() <= 4, "only its own processes are listed: {}", results[2].output);
    assert!(!pids.contains(&holder_pid) && !pids.contains(&daemon_pid), "{}", results[2].output);
    assert!(results[3].output.contains("/bin/sh -c tr"), "pid 1 is the command: {}", results[3].output);
    // The tools' /proc was mounted in their own mount namespaces: nothing propagated to this one.
    assert_eq!(std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo"), mounts_before);
    drop(holder);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_sees_only_its_own_processes_and_no_secret_in_another_command_line() {
    assert_tools_see_only_their_own_processes(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_of_a_daemon_that_is_not_root_sees_only_its_own_processes_too() {
    if !is_root() {
        // The daemon of the test above already runs as this ordinary user; this one needs root to start as `nobody`.
        skip(Missing::Root);
        return;
    }
    // `nobody`: the daemon gets its namespaces through an unprivileged user namespace, as bubblewrap does.
    assert_tools_see_only_their_own_processes(Some(65534)).await;
}

/// The variables the issue found passing to commands, each holding a secret.
const SECRET_ENVIRONMENT: [(&str, &str); 5] = [
    ("GPG_PASSPHRASE", "gpg-secret-5a1f"),
    ("CI_JOB_JWT", "eyJhbGciOiJIUzI1NiJ9.secret-jwt-77c2"),
    ("BW_SESSION", "bw-secret-90de"),
    ("SLACK_WEBHOOK_URL", "https://hooks.slack.com/services/T0/B0/secret-hook-31ab"),
    ("STRIPE_SK_LIVE", "sk_live_secret-c4f0"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_gets_the_allowlisted_environment_and_the_listed_names_only() {
    let data_dir = tempfile::tempdir().expect("data dir");
    let project = tempfile::tempdir().expect("project");
    std::fs::write(data_dir.path().join("config.toml"), "[titles]\nauto = false\n[sandbox]\nenv = [\"APP_LISTED\"]\n")
        .expect("write config");
    let mut environment = SECRET_ENVIRONMENT.to_vec();
    environment.extend([("APP_LISTED", "listed-value"), ("APP_UNLISTED", "unlisted-value"), ("LC_TIME", "C")]);
    let daemon = serve(data_dir.path(), &environment, None);
    let results = run_commands(&daemon, data_dir.path(), project.path(), &["env", "echo \"tmp=$TMPDIR\""]).await;
    let output = &results[0].output;
    assert_eq!(results[0].status, ToolResultStatus::Ok, "{output}");
    for (name, value) in SECRET_ENVIRONMENT {
        assert!(!output.contains(name) && !output.contains(value), "{name} reached the command: {output}");
    }
    assert!(!output.contains("APP_UNLISTED"), "{output}");
    for expected in ["APP_LISTED=listed-value", "LC_TIME=C", "PATH=", "HOME="] {
        assert!(output.lines().any(|line| line.starts_with(expected)), "{expected} is missing: {output}");
    }
    assert!(!output.contains("TROUPE_"), "{output}");
    let temp_root = troupe_runtime::sandbox::temp_root_of(&data_dir.path().canonicalize().expect("canonical"));
    assert!(results[1].output.contains(&format!("tmp={}", temp_root.display())), "{}", results[1].output);

    drop(daemon);
    // A name that is not a variable's, or one of troupe's own settings, is refused by `config check`.
    std::fs::write(data_dir.path().join("config.toml"), "[sandbox]\nenv = [\"TROUPE_TOKEN\", \"A-B\"]\n")
        .expect("write config");
    let output = Command::new(troupe_binary())
        .args(["config", "check", "--data-dir"])
        .arg(data_dir.path())
        .env("RUST_LOG", "off")
        .env_remove("TROUPE_HOME")
        .output()
        .expect("config check");
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(text.contains("sandbox.env[0] names one of troupe's own settings"), "{text}");
    assert!(text.contains("sandbox.env[1] is not an environment variable name"), "{text}");
}

/// A file tool runs inside the daemon, where `/proc/self` is the daemon: a path through a link of `/proc` would be
/// judged (and opened) as the daemon's, so it is refused with the reason, in every spelling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_tool_refuses_a_path_through_a_link_of_proc() {
    let data_dir = tempfile::tempdir().expect("data dir");
    let project = tempfile::tempdir().expect("project");
    std::fs::write(project.path().join("notes.txt"), "notes").expect("write notes");
    std::os::unix::fs::symlink("/proc/self/root/etc", project.path().join("etc")).expect("symlink");
    let daemon = serve(data_dir.path(), &[], None);
    let daemon_pid = daemon.child.id();
    let paths = [
        "/proc/self/environ".to_owned(),
        "/proc/self/cwd/notes.txt".to_owned(),
        "/proc/thread-self/root/etc/hostname".to_owned(),
        format!("/proc/{daemon_pid}/root/etc/hostname"),
        "/dev/fd/0".to_owned(),
        "/dev/stdin".to_owned(),
        "etc/hostname".to_owned(),
    ];
    let mut turns: Vec<Value> =
        paths.iter().map(|path| json!({"tool_calls": [{"tool": "read_file", "arguments": {"path": path}}]})).collect();
    turns.push(json!({"text": "done"}));
    let (client, mut deliveries) = daemon.client().await;
    connect_script(&client, data_dir.path(), json!({ "turns": turns })).await;
    let session = create_session_in(&client, project.path()).await;
    set_mode(&client, &session.session_id, PermissionMode::Yolo).await;
    client.subscribe(&session.session_id, None).await.expect("subscribe");
    start_run(&client, &session.session_id, selection_of("default", "local/scripted"), "go").await;
    let results = tool_results(&events_until(&mut deliveries, is_terminal).await);
    assert_eq!(results.len(), paths.len(), "{results:?}");
    for (path, result) in paths.iter().zip(&results) {
        assert_ne!(result.status, ToolResultStatus::Ok, "{path}: {}", result.output);
        assert!(!result.output.contains("TROUPE_") && !result.output.contains("RUST_LOG"), "{path}: {}", result.output);
    }
    // The ones that are not the daemon's own /proc (which file tools never read) say why.
    for (path, result) in paths.iter().zip(&results).skip(1) {
        assert!(
            result.output.contains("a link of /proc whose target depends on the process that follows it"),
            "{path}: {}",
            result.output
        );
    }
}
