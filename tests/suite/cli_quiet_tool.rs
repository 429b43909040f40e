//! A command that waits for input does not look hung: `troupe run` and `troupe watch` say, after a few quiet
//! seconds, that it still runs and which command sends it input; sending input with that very command lets the
//! run finish.

use std::process::Stdio;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::ChildStdout;
use troupe_protocol::types::session::PermissionMode;

use super::cli_support::*;
use super::support::*;

/// Reads lines until one contains `needle`; that line.
async fn line_with(lines: &mut Lines<BufReader<ChildStdout>>, needle: &str, seen: &mut Vec<String>) -> String {
    let found = tokio::time::timeout(WAIT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            seen.push(line.clone());
            if line.contains(needle) {
                return Some(line);
            }
        }
        None
    })
    .await;
    match found {
        Ok(Some(line)) => line,
        _ => panic!("no line containing {needle:?}; printed:\n{}", seen.join("\n")),
    }
}

#[tokio::test]
async fn run_and_watch_say_a_quiet_command_may_wait_for_input_and_how_to_send_it() {
    let (daemon, client, _deliveries) = scripted_daemon(json!({"turns": [
        {"tool_calls": [{"tool": "shell", "arguments": {"command": "read -r name; echo \"hello $name\""}}]},
        {"text": "all done"}
    ]}))
    .await;
    let session = daemon.create_session(&client).await.session_id;
    set_mode(&client, &session, PermissionMode::Yolo).await;

    let mut run = troupe_command(&daemon, &["run", "--session", &session, "--model", "local/scripted", "greet me"]);
    run.stdout(Stdio::piped());
    let mut running = run.spawn().expect("spawn run");
    let mut lines = BufReader::new(running.stdout.take().expect("stdout")).lines();
    let mut seen = Vec::new();
    line_with(&mut lines, "tool shell (call-1-1)", &mut seen).await;
    let hint = line_with(&mut lines, "is still running", &mut seen).await;
    assert!(hint.contains("shell (call-1-1) is still running, with no output for 3s"), "{hint}");

    // `watch` of the same session says it too (the call started in the history it replays).
    let watched = troupe_until(&daemon, &["watch", &session], |line| line.contains("is still running")).await;
    assert!(watched.last().is_some_and(|line| line.contains(&format!("troupe stdin --session {session}"))));

    // The command it names sends the input.
    let (_, command) = hint.split_once("send it: ").expect("the command");
    let command = command.split(" (--eof").next().expect("the command").replace("TEXT", "world");
    let args: Vec<&str> = command.split(' ').skip(1).collect();
    troupe(&daemon, &args).await.ok();
    line_with(&mut lines, "hello world", &mut seen).await;
    line_with(&mut lines, "run completed", &mut seen).await;
    let status = tokio::time::timeout(WAIT, running.wait()).await.expect("run ends").expect("run");
    assert!(status.success(), "{status:?}");
}
