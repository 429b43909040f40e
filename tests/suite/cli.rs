//! The command-line clients against a real daemon process: `token`, `create`, `rename`, `sessions`, and
//! `watch` following a session across a daemon restart.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;

use super::support::*;

fn run(args: &[&str], daemon: &ChildDaemon) -> String {
    let output = Command::new(troupe_binary())
        .args(args)
        .env("TROUPE_URL", &daemon.url)
        .env("TROUPE_TOKEN", &daemon.token)
        .output()
        .expect("run troupe");
    assert!(output.status.success(), "troupe {args:?} failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("utf-8")
}

/// A client command running in the background against `daemon`, its stdout piped.
fn spawn_client(args: &[&str], daemon: &ChildDaemon) -> std::process::Child {
    Command::new(troupe_binary())
        .args(args)
        .env("TROUPE_URL", &daemon.url)
        .env("TROUPE_TOKEN", &daemon.token)
        .env("RUST_LOG", "off")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn troupe")
}

/// Like [`spawn_client`], with its stdout delivered line by line.
fn spawn_reading(args: &[&str], daemon: &ChildDaemon) -> (std::process::Child, mpsc::Receiver<String>) {
    let child = spawn_client(args, daemon);
    read_lines(child)
}

/// Like [`spawn_reading`], with the default log level and stderr written to `stderr`.
fn spawn_reading_logged(
    args: &[&str],
    daemon: &ChildDaemon,
    stderr: std::fs::File,
) -> (std::process::Child, mpsc::Receiver<String>) {
    let child = Command::new(troupe_binary())
        .args(args)
        .env("TROUPE_URL", &daemon.url)
        .env("TROUPE_TOKEN", &daemon.token)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("spawn troupe");
    read_lines(child)
}

fn read_lines(mut child: std::process::Child) -> (std::process::Child, mpsc::Receiver<String>) {
    let stdout = child.stdout.take().expect("stdout");
    let (sender, receiver) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    (child, receiver)
}

#[test]
fn token_prints_a_stable_43_character_token_with_private_permissions() {
    let data_dir = tempfile::tempdir().unwrap();
    // A data dir no daemon used has no token: `--create` makes one; afterwards it is printed as it is.
    let token = |dir: &std::path::Path| {
        let output = Command::new(troupe_binary())
            .arg("token")
            .arg("--create")
            .arg("--data-dir")
            .arg(dir)
            .env_remove("TROUPE_TOKEN")
            .output()
            .unwrap();
        assert!(output.status.success());
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    };
    let first = token(data_dir.path());
    assert_eq!(first.len(), 43);
    assert!(first.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
    assert_eq!(token(data_dir.path()), first);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(data_dir.path().join("daemon/token")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn watch_follows_a_session_live_and_across_a_daemon_restart() {
    let data_dir = tempfile::tempdir().unwrap();
    let daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let port = daemon.port();
    let session_id = run(&["create", "--cwd", "/"], &daemon).trim().to_owned();
    assert_eq!(session_id.len(), 36);

    let (mut first_watcher, first_lines) = spawn_reading(&["watch", &session_id], &daemon);
    let logs = tempfile::NamedTempFile::new().unwrap();
    let (mut second_watcher, second_lines) =
        spawn_reading_logged(&["watch", &session_id[..8]], &daemon, logs.reopen().unwrap());
    let wait_for = |lines: &mpsc::Receiver<String>, needle: &str, seen: &mut Vec<String>| loop {
        let line = lines.recv_timeout(WAIT).unwrap_or_else(|_| panic!("no line containing {needle:?}; saw {seen:?}"));
        seen.push(line.clone());
        if line.contains(needle) {
            return;
        }
    };
    let mut first_seen = Vec::new();
    let mut second_seen = Vec::new();
    wait_for(&first_lines, "session created", &mut first_seen);
    wait_for(&second_lines, "session created", &mut second_seen);

    run(&["rename", &session_id, "Ship the watch command"], &daemon);
    wait_for(&first_lines, "title set to \"Ship the watch command\"", &mut first_seen);
    wait_for(&second_lines, "title set to \"Ship the watch command\"", &mut second_seen);

    // Restart the daemon on the same port; the watchers reconnect and resume from their cursor.
    drop(daemon);
    let daemon = spawn_daemon(data_dir.path(), &format!("127.0.0.1:{port}"));
    run(&["rename", &session_id, "After the restart"], &daemon);
    wait_for(&first_lines, "After the restart", &mut first_seen);
    wait_for(&second_lines, "After the restart", &mut second_seen);

    for seen in [&first_seen, &second_seen] {
        let event_lines: Vec<&String> = seen.iter().filter(|line| line.starts_with('#')).collect();
        assert_eq!(event_lines.len(), 3, "each event printed once: {seen:?}");
        assert!(
            event_lines[0].starts_with("#1 ") && event_lines[1].starts_with("#2 ") && event_lines[2].starts_with("#3 ")
        );
    }
    // The restart is told once, in words, not as a log line per attempt.
    let said = std::fs::read_to_string(logs.path()).unwrap();
    assert_eq!(said.matches("daemon unreachable, retrying…").count(), 1, "{said}");
    assert_eq!(said.matches("reconnected").count(), 1, "{said}");
    assert!(!said.contains("WARN") && !said.contains("INFO"), "{said}");
    let listed = run(&["sessions"], &daemon);
    assert!(listed.contains(&session_id[..8]) && listed.contains("After the restart"), "{listed}");
    let _ = first_watcher.kill();
    let _ = second_watcher.kill();
    let _ = first_watcher.wait();
    let _ = second_watcher.wait();
}

#[test]
fn a_prompt_shown_by_watch_is_answered_with_troupe_approve_and_the_run_finishes() {
    let data_dir = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let script = project.path().join("script.json");
    std::fs::write(
        &script,
        r#"{"turns": [{"tool_calls": [{"tool": "write_file", "arguments": {"path": "approved.txt", "content": "yes"}}]}, {"text": "written"}]}"#,
    )
    .unwrap();
    let connected = run(&["connect", "local", "--script", script.to_str().unwrap()], &daemon);
    // Words, not the store's generation counter; and what to do with the models.
    assert!(connected.starts_with("connected local\n") && !connected.contains("generation"), "{connected}");
    // With a script, the model that plays it.
    assert!(connected.contains("troupe run --model local/scripted"), "{connected}");
    let session_id = run(&["create", "--cwd", project.path().to_str().unwrap()], &daemon).trim().to_owned();
    run(&["mode", &session_id, "ask"], &daemon);

    let (mut watcher, lines) = spawn_reading(&["watch", &session_id], &daemon);
    let mut running =
        spawn_client(&["run", "--session", &session_id, "--model", "local/scripted", "write the file"], &daemon);
    let mut seen = Vec::new();
    // Each needle's line, and the lines before it.
    let mut wait_for = |needle: &str| loop {
        let line = lines.recv_timeout(WAIT).unwrap_or_else(|_| panic!("no line containing {needle:?}; saw {seen:?}"));
        seen.push(line.clone());
        if line.contains(needle) {
            return seen.clone();
        }
    };
    wait_for("approval needed: write_file: write 3 bytes to ");
    // The path is said once (in the summary), not again as `write on PATH`.
    let asked = wait_for("troupe approve");
    assert!(!asked.iter().any(|line| line.contains("write on")), "{asked:?}");
    assert!(!project.path().join("approved.txt").exists(), "nothing is written before the answer");

    run(&["approve", &session_id], &daemon);
    // The answer in words (not `client:connection-N: approve_once`); the call's end named by its tool, with the
    // call's id counted from 1 as the turns are.
    let answered = wait_for("approval approved once");
    assert!(!answered.last().is_some_and(|line| line.contains("client:")), "{answered:?}");
    wait_for("write_file (call-1-1) ended: ok");
    wait_for("run completed");
    let status = exit_status_within(&mut running, "`troupe run` to finish", WAIT);
    assert!(status.success());
    assert_eq!(std::fs::read_to_string(project.path().join("approved.txt")).unwrap(), "yes");
    let _ = watcher.kill();
    let _ = watcher.wait();
}
