//! Steering and cancellation, as the reference says: `run.steer` admits at once; pending inputs are promoted
//! FIFO at the next boundary; `run.recall_steer` takes back the newest (LIFO) or answers null with no event;
//! a terminal event voids what is still pending, and cancelling kills the running command's process tree.

use serde_json::json;
use troupe_protocol::method;
use troupe_protocol::types::common::{SessionIdParams, SessionStatus};
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::run::{RunIdParams, RunSteerParams, RunToolStdinParams, ToolResultStatus};
use troupe_protocol::types::session::PermissionMode;

use super::processes::processes_with;
use super::support::*;

async fn steer(client: &troupe_protocol::client::Client, run_id: &str, input: &str) {
    let reply = within(
        "run.steer",
        client.call::<method::RunSteer>(RunSteerParams {
            run_id: run_id.into(),
            input: input.into(),
            attachments: Vec::new(),
        }),
    )
    .await
    .unwrap();
    assert!(reply.accepted);
}

async fn recall(client: &troupe_protocol::client::Client, run_id: &str) -> Option<String> {
    within("recall", client.call::<method::RunRecallSteer>(RunIdParams { run_id: run_id.into() }))
        .await
        .unwrap()
        .recalled
}

#[tokio::test]
async fn steers_are_promoted_fifo_at_the_next_boundary_and_recall_takes_the_newest() {
    let (daemon, client, mut deliveries) = scripted_daemon(json!({"turns": [
        {"tool_calls": [{"tool": "shell", "arguments": {"command": "read line; echo got $line"}}]},
        {"text": "after steering"}
    ]}))
    .await;
    let session = daemon.create_session(&client).await;
    set_mode(&client, &session.session_id, PermissionMode::Yolo).await;
    client.subscribe(&session.session_id, None).await.unwrap();
    let run_id = start_run(&client, &session.session_id, selection_of("default", "local/scripted"), "start").await;
    let started = events_until(&mut deliveries, |e| matches!(e.payload, EventPayload::ToolCallStarted { .. })).await;
    let EventPayload::ToolCallStarted { tool_call_id, .. } = &started.last().unwrap().payload else { unreachable!() };

    // An empty lane: nothing to recall, and no event is written.
    let before = client.call::<method::SessionGet>(SessionIdParams { session_id: session.session_id.clone() }).await;
    assert_eq!(recall(&client, &run_id).await, None);
    let after = client.call::<method::SessionGet>(SessionIdParams { session_id: session.session_id.clone() }).await;
    assert_eq!(before.unwrap().session.last_event_seq, after.unwrap().session.last_event_seq);

    steer(&client, &run_id, "first").await;
    steer(&client, &run_id, "second").await;
    steer(&client, &run_id, "third").await;
    assert_eq!(recall(&client, &run_id).await.as_deref(), Some("third"), "recall takes the newest");

    // Let the tool finish: that is the boundary where the lane is promoted.
    client
        .call::<method::RunToolStdin>(RunToolStdinParams {
            run_id: run_id.clone(),
            tool_call_id: tool_call_id.clone(),
            data: Some("ping\n".into()),
            eof: true,
        })
        .await
        .unwrap();
    let events = events_until(&mut deliveries, is_terminal).await;
    let lane: Vec<String> = events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::UserInputAdmitted { input, .. } => Some(format!("admitted {input}")),
            EventPayload::UserInputRecalled { input, .. } => Some(format!("recalled {input}")),
            EventPayload::UserInputSubmitted { input, .. } => Some(format!("submitted {input}")),
            EventPayload::ToolCallTerminated { .. } => Some("tool done".into()),
            EventPayload::ModelTurnCommitted { text, .. } => Some(format!("model: {text}")),
            _ => None,
        })
        .collect();
    assert_eq!(
        lane,
        [
            "admitted first",
            "admitted second",
            "admitted third",
            "recalled third",
            "tool done",
            "submitted first",
            "submitted second",
            "model: after steering"
        ]
    );
    let terminated = events.iter().find_map(|e| match &e.payload {
        EventPayload::ToolCallTerminated { result, .. } => Some(result.output.clone()),
        _ => None,
    });
    assert!(terminated.unwrap().contains("got ping"));
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCompleted { .. }));
    // The run is over: steering it now is refused with a clear error.
    let late = client
        .call::<method::RunSteer>(RunSteerParams {
            run_id: run_id.clone(),
            input: "late".into(),
            attachments: Vec::new(),
        })
        .await;
    assert!(
        matches!(late, Err(troupe_protocol::client::ClientError::Rpc(e)) if e.typed_code() == Some("run_not_active"))
    );
}

#[tokio::test]
async fn cancel_kills_the_command_tree_and_voids_pending_input() {
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    // Found by its command line: the command runs in a PID namespace of its own, where `$!` is not a host pid.
    let marker = format!("sleep 60.{}", std::process::id());
    let command = format!("{marker} & wait");
    connect_script(
        &client,
        daemon.data_path(),
        json!({"turns": [{"tool_calls": [{"tool": "shell", "arguments": {"command": command}}]}]}),
    )
    .await;
    let session = daemon.create_session(&client).await;
    set_mode(&client, &session.session_id, PermissionMode::Yolo).await;
    client.subscribe(&session.session_id, None).await.unwrap();
    let run_id = start_run(&client, &session.session_id, selection_of("default", "local/scripted"), "sleep").await;
    events_until(&mut deliveries, |e| matches!(e.payload, EventPayload::ToolCallStarted { .. })).await;
    eventually("the grandchild runs", || !processes_with(&marker).is_empty()).await;
    steer(&client, &run_id, "never promoted").await;

    let cancelled =
        within("cancel", client.call::<method::RunCancel>(RunIdParams { run_id: run_id.clone() })).await.unwrap();
    assert!(cancelled.cancelled);
    let events = events_until(&mut deliveries, is_terminal).await;
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCancelled { .. }), "{:?}", kinds(&events));
    assert!(!kinds(&events).contains(&"user_input_submitted"), "pending input is voided, not promoted");
    let status = events.iter().find_map(|e| match &e.payload {
        EventPayload::ToolCallTerminated { result, .. } => Some(result.status),
        _ => None,
    });
    assert_eq!(status, Some(ToolResultStatus::Cancelled));
    eventually("the grandchild is gone", || processes_with(&marker).is_empty()).await;

    let again = client.call::<method::RunCancel>(RunIdParams { run_id: run_id.clone() }).await.unwrap();
    assert!(!again.cancelled, "a finished run cannot be cancelled again");
    let meta =
        client.call::<method::SessionGet>(SessionIdParams { session_id: session.session_id.clone() }).await.unwrap();
    assert_eq!(meta.session.status, SessionStatus::Cancelled);
    // The session takes a new run.
    let next = start_run(&client, &session.session_id, echo_selection(), "still here").await;
    let events = events_until(&mut deliveries, |e| e.run_id.as_deref() == Some(&next) && is_terminal(e)).await;
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCompleted { .. }));
}

#[tokio::test]
async fn a_run_the_daemon_does_not_know_is_run_not_found() {
    let daemon = TestDaemon::start();
    let mut raw = daemon.raw().await;
    raw.handshake().await;
    let unknown = "0190d3a4-0000-7000-8000-000000000000";
    // Asked twice: the second time the daemon remembers the id was found in no log, and answers the same.
    for (id, method, params) in [
        (2, "run.cancel", json!({"run_id": unknown})),
        (3, "run.steer", json!({"run_id": unknown, "input": "hello"})),
        (4, "run.recall_steer", json!({"run_id": unknown})),
        (5, "run.cancel", json!({"run_id": unknown})),
        (6, "run.steer", json!({"run_id": unknown, "input": "hello"})),
    ] {
        let reply = raw.call(id, method, params).await;
        assert_eq!(reply["error"]["code"], -32000, "{method}: {reply}");
        assert_eq!(reply["error"]["data"]["code"], "run_not_found", "{method}: {reply}");
        assert_eq!(reply["error"]["data"]["run_id"], unknown, "{method}: {reply}");
    }
}

/// A run that ended before a restart is an ended run, not an unknown one: its session answers (from its log) as
/// for any ended run, and a made-up id of the same form is still unknown.
#[tokio::test]
async fn a_run_from_before_a_restart_is_an_ended_run() {
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    let session = daemon.create_session(&client).await;
    within("subscribe", client.subscribe(&session.session_id, None)).await.unwrap();
    let older = start_run(&client, &session.session_id, echo_selection(), "before").await;
    events_until(&mut deliveries, |e| e.run_id.as_deref() == Some(&older) && is_terminal(e)).await;
    let run_id = start_run(&client, &session.session_id, echo_selection(), "the restart").await;
    events_until(&mut deliveries, |e| e.run_id.as_deref() == Some(&run_id) && is_terminal(e)).await;
    drop(client);
    let data_dir = daemon.stop();

    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..DaemonSetup::default() });
    let mut raw = daemon.raw().await;
    raw.handshake().await;
    for known in [&run_id, &older] {
        let reply = raw.call(2, "run.cancel", json!({"run_id": known})).await;
        assert_eq!(reply["result"], json!({"cancelled": false}), "{reply}");
        for (id, method, params) in [
            (3, "run.steer", json!({"run_id": known, "input": "hello"})),
            (4, "run.recall_steer", json!({"run_id": known})),
        ] {
            let reply = raw.call(id, method, params).await;
            assert_eq!(reply["error"]["data"]["code"], "run_not_active", "{method}: {reply}");
            assert_eq!(reply["error"]["data"]["run_id"], json!(known), "{method}: {reply}");
        }
    }
    // Made a moment after the real run, in the same session's lifetime, yet started by no session.
    let unknown = troupe_runtime::clock::new_id();
    let reply = raw.call(5, "run.cancel", json!({"run_id": unknown})).await;
    assert_eq!(reply["error"]["data"]["code"], "run_not_found", "{reply}");
}
