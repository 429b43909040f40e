//! The commands that act on a running run (`steer`, `recall`, `stdin`, `cancel`) and `disconnect`, through the
//! real binary against a real daemon: each checks its exit code, what it printed, and its effect on the wire
//! (the events the daemon recorded, or the runtime snapshot). Bad input is refused in words a user knows, with
//! the command or flag that fixes it.

use serde_json::json;
use troupe_protocol::client::{Client, Deliveries};
use troupe_protocol::method;
use troupe_protocol::types::common::Empty;
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::run::ToolResultStatus;
use troupe_protocol::types::runtime::RuntimeSnapshot;
use troupe_protocol::types::session::PermissionMode;

use super::cli_support::*;
use super::support::*;
use troupe_test_support::{FakeResponse, FakeServer};

/// A yolo session running `script` on `local/scripted`, followed by `client`; returns the session id, the run id
/// and the `tool_call_started` of the script's first tool call.
async fn running_tool(daemon: &TestDaemon, client: &Client, deliveries: &mut Deliveries, command: &str) -> Running {
    connect_script(
        client,
        daemon.data_path(),
        json!({"turns": [
            {"tool_calls": [{"tool": "shell", "arguments": {"command": command}}]},
            {"text": "all done"}
        ]}),
    )
    .await;
    let session = daemon.create_session(client).await;
    set_mode(client, &session.session_id, PermissionMode::Yolo).await;
    client.subscribe(&session.session_id, None).await.expect("subscribe");
    let run_id = start_run(client, &session.session_id, selection_of("default", "local/scripted"), "go").await;
    let events = events_until(deliveries, |event| matches!(event.payload, EventPayload::ToolCallStarted { .. })).await;
    let Some(EventPayload::ToolCallStarted { tool_call_id, .. }) = events.last().map(|event| &event.payload) else {
        unreachable!("events_until stops at tool_call_started")
    };
    Running { run_id, tool_call_id: tool_call_id.clone() }
}

struct Running {
    run_id: String,
    tool_call_id: String,
}

/// The first event of `events` that `pick` maps to something.
fn find<T>(events: &[StoredEvent], pick: impl Fn(&EventPayload) -> Option<T>) -> Option<T> {
    events.iter().find_map(|event| pick(&event.payload))
}

#[tokio::test]
async fn steer_recall_and_stdin_from_the_cli_reach_the_run() {
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    let running = running_tool(&daemon, &client, &mut deliveries, "read line; echo got $line").await;
    let run_id = running.run_id.as_str();

    // steer: admitted at once, exit 0.
    let printed = troupe(&daemon, &["steer", run_id, "also update the docs"]).await.ok();
    assert!(printed.contains("queued for the next boundary"), "{printed}");
    let admitted =
        events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::UserInputAdmitted { .. })).await;
    let input = find(&admitted, |payload| match payload {
        EventPayload::UserInputAdmitted { input, .. } => Some(input.clone()),
        _ => None,
    });
    assert_eq!(input.as_deref(), Some("also update the docs"));

    // recall: takes back the newest steer, exit 0.
    troupe(&daemon, &["steer", run_id, "never mind this one"]).await.ok();
    let printed = troupe(&daemon, &["recall", run_id]).await.ok();
    assert_eq!(printed.trim(), "recalled: never mind this one");
    let recalled =
        events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::UserInputRecalled { .. })).await;
    let input = find(&recalled, |payload| match payload {
        EventPayload::UserInputRecalled { input, .. } => Some(input.clone()),
        _ => None,
    });
    assert_eq!(input.as_deref(), Some("never mind this one"));

    // stdin: the tool reads the text; the run then submits the remaining steer at the boundary and completes.
    troupe(&daemon, &["stdin", run_id, &running.tool_call_id, "ping\n", "--eof"]).await.ok();
    let events = events_until(&mut deliveries, is_terminal).await;
    assert!(kinds(&events).contains(&"tool_stdin_submitted"), "{:?}", kinds(&events));
    let result = find(&events, |payload| match payload {
        EventPayload::ToolCallTerminated { result, .. } => Some(result.clone()),
        _ => None,
    })
    .expect("the tool ended");
    assert_eq!(result.status, ToolResultStatus::Ok);
    assert!(result.output.contains("got ping"), "{}", result.output);
    let submitted = find(&events, |payload| match payload {
        EventPayload::UserInputSubmitted { input, .. } => Some(input.clone()),
        _ => None,
    });
    assert_eq!(submitted.as_deref(), Some("also update the docs"), "the steer entered at the boundary");
    assert!(matches!(events.last().map(|event| &event.payload), Some(EventPayload::RunCompleted { .. })));

    // Now the run is over: each command says so, with what to do instead, and exits 1.
    let said = troupe(&daemon, &["stdin", run_id, &running.tool_call_id, "more"]).await.refused();
    assert!(said.contains("hint:") && said.contains("troupe run --session"), "{said}");
    let said = troupe(&daemon, &["recall", "no-such-run"]).await.refused();
    assert!(said.contains("hint:") && said.contains("troupe run"), "{said}");
    let said = troupe(&daemon, &["steer", run_id, "   "]).await.refused();
    assert!(said.contains("the steering text is empty") && said.contains("troupe steer RUN_ID"), "{said}");
    let said = troupe(&daemon, &["steer", "no-such-run", "hello"]).await.refused();
    assert!(said.contains("no-such-run") && said.contains("hint:"), "{said}");
}

#[tokio::test]
async fn cancel_from_the_cli_cancels_the_running_command_and_the_run() {
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    let running = running_tool(&daemon, &client, &mut deliveries, "sleep 600").await;

    let printed = troupe(&daemon, &["cancel", &running.run_id]).await.ok();
    assert_eq!(printed.trim(), "cancelled");
    let events = events_until(&mut deliveries, is_terminal).await;
    assert!(
        matches!(events.last().map(|event| &event.payload), Some(EventPayload::RunCancelled { .. })),
        "{:?}",
        kinds(&events)
    );
    let result = find(&events, |payload| match payload {
        EventPayload::ToolCallTerminated { result, .. } => Some(result.status),
        _ => None,
    });
    assert_eq!(result, Some(ToolResultStatus::Cancelled), "the sleeping command was killed");

    // Cancelling again does nothing, and says so; an unknown run is an error with a hint.
    let printed = troupe(&daemon, &["cancel", &running.run_id]).await.ok();
    assert_eq!(printed.trim(), "the run was not running");
    let said = troupe(&daemon, &["cancel", "no-such-run"]).await.refused();
    assert!(said.contains("no-such-run") && said.contains("hint:"), "{said}");
}

#[tokio::test]
async fn disconnect_from_the_cli_removes_the_provider_from_the_runtime_snapshot() {
    let models = json!({"data": [{"id": "m1"}]}).to_string();
    let vendor = FakeServer::start(vec![FakeResponse::status(200, &[], models)]).await;
    let daemon = TestDaemon::start();
    let (client, _deliveries) = daemon.client().await;
    let base_url = format!("{}/v1", vendor.base_url);
    let mut connect =
        troupe_command(&daemon, &["connect", "openai", "--base-url", &base_url, "--api-key-env", "CLI_KEY"]);
    connect.env("CLI_KEY", "sk-cli-test-key");
    let printed = finish(connect, WAIT).await.ok();
    assert!(printed.contains("connected openai") && printed.contains("openai/m1"), "{printed}");
    let openai = |snapshot: &RuntimeSnapshot| {
        let connected =
            snapshot.providers.iter().any(|provider| provider.provider_id == "openai" && provider.connected);
        let models = snapshot.models.iter().filter(|model| model.provider_id == "openai").count();
        (connected, models)
    };
    let snapshot = within("snapshot", client.call::<method::RuntimeSnapshotGet>(Empty {})).await.unwrap().snapshot;
    assert_eq!(openai(&snapshot), (true, 1));

    let printed = troupe(&daemon, &["disconnect", "openai"]).await.ok();
    assert_eq!(printed.trim(), "disconnected");
    let snapshot = within("snapshot", client.call::<method::RuntimeSnapshotGet>(Empty {})).await.unwrap().snapshot;
    assert_eq!(openai(&snapshot), (false, 0), "{:?}", snapshot.providers);

    // Again: nothing to do, and it says so.
    let printed = troupe(&daemon, &["disconnect", "openai"]).await.ok();
    assert_eq!(printed.trim(), "it was not connected");
    // A provider that does not exist: named, with the ones that do.
    let said = troupe(&daemon, &["disconnect", "nosuch"]).await.refused();
    assert!(said.contains("nosuch") && said.contains("local, openai and anthropic"), "{said}");
    assert_eq!(said.matches("anthropic").count(), 1, "the providers are listed once: {said}");
    // A key is never taken from the command line: a missing variable is named.
    let said = troupe(&daemon, &["connect", "openai", "--base-url", &base_url, "--api-key-env", "NO_SUCH_VAR"])
        .await
        .refused();
    assert!(said.contains("NO_SUCH_VAR"), "{said}");
}
