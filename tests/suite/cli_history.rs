//! `troupe revert`, `fork`, `compact` and `tree`, and `run`/`watch` following delegated child sessions, through
//! the real binary against a real daemon: exit codes, what is printed, and the effect on the wire (the events the
//! daemon recorded, the sessions it holds). Refusals name what to do in words a user knows.

use std::process::Stdio;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use troupe_protocol::client::Client;
use troupe_protocol::method;
use troupe_protocol::types::common::{SessionIdParams, SessionMeta};
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::run::{RunIdParams, RunToolStdinParams};
use troupe_protocol::types::session::PermissionMode;

use super::cli_support::*;
use super::support::*;
use troupe_test_support::FakeServer;
use troupe_test_support::replies::{models_list, openai_text};

async fn get(client: &Client, session_id: &str) -> SessionMeta {
    within("session.get", client.call::<method::SessionGet>(SessionIdParams { session_id: session_id.into() }))
        .await
        .expect("session.get")
        .session
}

/// The last 8 characters of a session id: what the margin of a followed child shows.
fn short(session_id: &str) -> &str {
    &session_id[session_id.len() - 8..]
}

/// Runs `troupe watch SESSION` until a line satisfies `stop` (within [`WAIT`]), then kills it; the lines read.
async fn watch_until(daemon: &TestDaemon, session_id: &str, stop: impl Fn(&str) -> bool) -> Vec<String> {
    troupe_until(daemon, &["watch", session_id], stop).await
}

#[tokio::test]
async fn revert_and_fork_from_the_cli_change_the_session_and_watch_explains_the_marker() {
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    let (id, runs) =
        session_after_echo_runs(&daemon, &client, &mut deliveries, &["question one", "question two"]).await;
    let end_of_first = runs[0].last().unwrap().seq;
    let end_of_second = runs[1].last().unwrap().seq;

    // revert: the session after it, what the conversation ends with, and which events left it.
    let printed = troupe(&daemon, &["revert", &id, &end_of_first.to_string()]).await.ok();
    assert!(printed.starts_with(&id), "{printed}");
    assert!(printed.contains(&format!("the conversation now ends with #{end_of_first}: run completed")), "{printed}");
    assert!(
        printed.contains(&format!(
            "events #{} to #{end_of_second} are no longer part of the conversation; the log keeps them (`troupe \
             watch {id}` shows them)",
            end_of_first + 1
        )),
        "{printed}"
    );
    let marker =
        events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::SessionReverted { .. })).await;
    let marker = marker.last().unwrap();
    assert_eq!(marker.payload, EventPayload::SessionReverted { through_seq: end_of_first });
    assert_eq!(marker.seq, end_of_second + 1);

    // watch prints the hidden events, then a marker that says they are gone from the conversation.
    let lines = watch_until(&daemon, &id, |line| line.contains("reverted to")).await;
    assert!(lines.iter().any(|line| line.contains("user: question two")), "{lines:#?}");
    assert!(
        lines.last().unwrap().ends_with(&format!(
            "reverted to #{end_of_first}: events #{} to #{end_of_second} above are no longer part of the conversation",
            end_of_first + 1
        )),
        "{lines:#?}"
    );

    // fork: the new id alone on stdout, how to follow it on stderr; the fork exists and is titled as one.
    let output = troupe(&daemon, &["fork", &id, &end_of_first.to_string()]).await;
    assert!(output.succeeded(), "{output:?}");
    let fork = output.stdout.trim().to_owned();
    assert!(output.stderr.contains(&format!("troupe watch {fork}")), "{output:?}");
    assert_ne!(fork, id);
    let forked = get(&client, &fork).await;
    assert!(forked.title.as_deref().unwrap_or_default().ends_with("(fork)"), "{forked:?}");

    // --json for scripts.
    let json_output = troupe(&daemon, &["fork", &id, &end_of_first.to_string(), "--json"]).await.ok();
    let parsed: serde_json::Value = serde_json::from_str(&json_output).expect("JSON");
    assert!(parsed["session_id"].is_string(), "{json_output}");

    // Refusals in words a user knows.
    let refused = troupe(&daemon, &["revert", &id, "9999"]).await.refused();
    assert!(refused.contains(&format!("`troupe watch {id}` shows the sequence numbers")), "{refused}");
    let refused = troupe(&daemon, &["fork", &id, "1"]).await.refused();
    assert!(refused.contains("first message you sent"), "{refused}");
    let refused = troupe(&daemon, &["revert", "no-such-session", "1"]).await.refused();
    assert!(refused.contains("troupe sessions"), "{refused}");
}

#[tokio::test]
async fn a_revert_of_a_running_session_names_the_run_to_cancel() {
    let (daemon, client, mut deliveries) = scripted_daemon(json!({"turns": [
        {"tool_calls": [{"tool": "shell", "arguments": {"command": "read line"}}]},
        {"text": "done"}
    ]}))
    .await;
    let id = daemon.create_session(&client).await.session_id;
    set_mode(&client, &id, PermissionMode::Yolo).await;
    client.subscribe(&id, None).await.expect("subscribe");
    let run_id = start_run(&client, &id, selection_of("default", "local/scripted"), "go").await;
    events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::ToolCallStarted { .. })).await;

    let refused = troupe(&daemon, &["revert", &id, "1"]).await.refused();
    assert!(
        refused.contains(&format!("the session is running; cancel its run (`troupe cancel {run_id}`) or wait")),
        "{refused}"
    );
    within("run.cancel", client.call::<method::RunCancel>(RunIdParams { run_id })).await.expect("cancel");
    events_until(&mut deliveries, is_terminal).await;
}

#[tokio::test]
async fn run_and_watch_follow_a_delegated_child_and_tree_shows_it() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[agents.helper]\nmodels = [\"local/scripted\"]\n".to_owned()),
        ..Default::default()
    });
    let (client, _deliveries) = daemon.client().await;
    connect_script(
        &client,
        daemon.data_path(),
        json!({
            "turns": [
                {"tool_calls": [{"tool": "delegate", "arguments": {"agent": "helper", "task": "count the files"}}]},
                {"text": "the parent is done"}
            ],
            "by_input": {"count the files": {"turns": [
                {"tool_calls": [{"tool": "shell", "arguments": {"command": "echo counting-in-the-child"}}]},
                {"text": "there are three files"}
            ]}}
        }),
    )
    .await;
    let root = daemon.create_session(&client).await.session_id;
    set_mode(&client, &root, PermissionMode::Yolo).await;

    // run: the child's work is printed live, each line after a margin naming the child.
    let printed = troupe(&daemon, &["run", "--session", &root, "--model", "local/scripted", "go"]).await.ok();
    let delegated = printed
        .lines()
        .find(|line| line.contains("delegated to helper in child session"))
        .unwrap_or_else(|| panic!("no delegate_started line:\n{printed}"));
    let child = delegated.rsplit("child session ").next().unwrap().split(':').next().unwrap().to_owned();
    let margin = format!("  [{} helper] ", short(&child));
    let child_lines: Vec<&str> = printed.lines().filter(|line| line.starts_with(&margin)).collect();
    assert!(child_lines.iter().any(|line| line.contains("task from the parent: count the files")), "{printed}");
    assert!(child_lines.iter().any(|line| line.contains("tool shell")), "{printed}");
    assert!(child_lines.iter().any(|line| line.contains("assistant: there are three files")), "{printed}");
    assert!(child_lines.iter().any(|line| line.contains("run completed")), "{printed}");
    assert!(printed.contains(&format!("child session {child} completed: there are three files")), "{printed}");
    assert!(printed.contains("assistant: the parent is done"), "{printed}");

    // tree: the root marked, the child under it.
    let tree = troupe(&daemon, &["tree", &root]).await.ok();
    let lines: Vec<&str> = tree.lines().collect();
    assert_eq!(lines.len(), 2, "{tree}");
    assert!(lines[0].starts_with(&format!("{root}  default  ")) && lines[0].ends_with("(root)"), "{tree}");
    assert!(lines[1].starts_with(&format!("└─ {child}  helper  completed")), "{tree}");
    let json_tree: serde_json::Value =
        serde_json::from_str(&troupe(&daemon, &["tree", &root, "--json"]).await.ok()).expect("JSON");
    assert_eq!(json_tree["children"][0]["session"]["session_id"], child.as_str());

    // watch: the history replays with the child's events followed too.
    let lines = watch_until(&daemon, &root, |line| {
        line.starts_with(&margin) && line.contains("assistant: there are three files")
    })
    .await;
    assert!(lines.iter().any(|line| line.contains("delegated to helper")), "{lines:#?}");
}

#[tokio::test]
async fn compact_from_the_cli_prints_the_checkpoint_or_why_there_is_none() {
    const MODEL: &str = "openai/gpt-cli";
    let vendor = FakeServer::start(vec![
        models_list(&["gpt-cli"]),
        openai_text("answer one"),
        openai_text("SUMMARY: the user asked question one.\nIt was answered."),
    ])
    .await;
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some("sk-test"))
        .await
        .expect("connect the fake vendor");
    let id = daemon.create_session(&client).await.session_id;
    client.subscribe(&id, None).await.expect("subscribe");
    let first = run_in_subscribed(&client, &mut deliveries, &id, MODEL, "question one").await;
    let end_of_first = first.last().unwrap().seq;

    let output = troupe(&daemon, &["compact", &id, "--focus", "the parser"]).await;
    assert!(output.succeeded(), "{output:?}");
    assert!(
        output.stdout.starts_with(&format!("compacted: checkpoint: history through #{end_of_first} summarized")),
        "{output:?}"
    );
    assert!(output.stdout.contains("│ SUMMARY: the user asked question one."), "{output:?}");
    assert!(output.stderr.contains(&format!("compacting the history with {MODEL} (focus: the parser)")), "{output:?}");
    events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::ContextCheckpointCommitted { .. }))
        .await;

    // Nothing new since the checkpoint: not compacted, exit 1, with the daemon's reason.
    let output = troupe(&daemon, &["compact", &id]).await;
    assert_eq!(output.code, Some(1), "{output:?}");
    assert!(output.stdout.starts_with("not compacted: nothing to compact"), "{output:?}");
}

#[tokio::test]
async fn watch_from_a_cursor_past_a_delegation_follows_the_child_still_at_work() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[agents.helper]\nmodels = [\"local/scripted\"]\n".to_owned()),
        ..Default::default()
    });
    let (client, mut deliveries) = daemon.client().await;
    connect_script(
        &client,
        daemon.data_path(),
        json!({
            "turns": [
                {"tool_calls": [{"tool": "delegate", "arguments": {"agent": "helper", "task": "wait for input"}}]},
                {"text": "the parent is done"}
            ],
            "by_input": {"wait for input": {"turns": [
                {"tool_calls": [{"tool": "shell", "arguments": {"command": "read line; echo got $line"}}]},
                {"text": "the child is done"}
            ]}}
        }),
    )
    .await;
    let root = daemon.create_session(&client).await.session_id;
    set_mode(&client, &root, PermissionMode::Yolo).await;
    client.subscribe(&root, None).await.expect("subscribe to the root");
    start_run(&client, &root, selection_of("default", "local/scripted"), "go").await;
    let events =
        events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::DelegateStarted { .. })).await;
    let started = events.last().unwrap();
    let EventPayload::DelegateStarted { child_session_id: child, .. } = &started.payload else { unreachable!() };
    let child = child.clone();
    client.subscribe(&child, None).await.expect("subscribe to the child");
    let events = events_until(&mut deliveries, |event| {
        event.session_id == child && matches!(event.payload, EventPayload::ToolCallStarted { .. })
    })
    .await;
    let blocked = events.last().unwrap();
    let EventPayload::ToolCallStarted { tool_call_id, .. } = &blocked.payload else { unreachable!() };
    let (child_run, tool_call_id) = (blocked.run_id.clone().expect("a run event"), tool_call_id.clone());

    // Watching from after delegate_started: the child is found in the tree and followed from its end.
    let from = (started.seq + 1).to_string();
    let mut command = troupe_command(&daemon, &["watch", &root, "--from", &from]);
    let mut watcher = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn troupe watch --from");
    let mut notes = BufReader::new(watcher.stderr.take().expect("stderr")).lines();
    let following = format!("[following child session {child} (helper), at work]");
    let noted = within("watch to follow the child", async {
        while let Ok(Some(line)) = notes.next_line().await {
            if line == following {
                return true;
            }
        }
        false
    })
    .await;
    assert!(noted, "troupe watch did not follow the child");

    let stdin = RunToolStdinParams { run_id: child_run, tool_call_id, data: Some("hello\n".into()), eof: true };
    within("run.tool_stdin", client.call::<method::RunToolStdin>(stdin)).await.expect("stdin");
    let margin = format!("  [{} helper] ", short(&child));
    let mut lines = BufReader::new(watcher.stdout.take().expect("stdout")).lines();
    let mut seen = Vec::new();
    let finished = tokio::time::timeout(WAIT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            let done = line.contains(&format!("child session {child} completed: the child is done"));
            seen.push(line);
            if done {
                return true;
            }
        }
        false
    })
    .await;
    let _ = watcher.kill().await;
    assert_eq!(finished.ok(), Some(true), "{seen:#?}");
    assert!(seen.iter().any(|line| line.starts_with(&margin) && line.contains("│ got hello")), "{seen:#?}");
    assert!(
        seen.iter().any(|line| line.starts_with(&margin) && line.contains("assistant: the child is done")),
        "{seen:#?}"
    );
}
