//! The log's promise under load: every tool call's `tool_call_started` is stored before its
//! `tool_call_terminated`, even when the session's mailbox is full at the moment the call starts (another client
//! renaming the session in a burst, the session actor stalled). A `tool_call_started` used to be lost exactly then
//! when the call produced no output.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::session::PermissionMode;

use super::support::*;

/// Sessions, runs per session: 1,000 tool-calling runs in all.
const SESSIONS: usize = 10;
const RUNS_PER_SESSION: usize = 100;

/// Turn 2k asks for one `read_file` (no live output), turn 2k+1 ends run k.
fn script() -> serde_json::Value {
    let turns: Vec<_> = (0..RUNS_PER_SESSION)
        .flat_map(|_| {
            [json!({"tool_calls": [{"tool": "read_file", "arguments": {"path": "note.txt"}}]}), json!({"text": "ok"})]
        })
        .collect();
    json!({ "turns": turns })
}

/// Every terminated call of `events` had its start stored before it.
fn assert_every_call_started_first(events: &[StoredEvent]) -> usize {
    let mut started = std::collections::HashSet::new();
    let mut calls = 0;
    for event in events {
        match &event.payload {
            EventPayload::ToolCallStarted { tool_call_id, .. } => {
                started.insert((event.run_id.clone(), tool_call_id.clone()));
            }
            EventPayload::ToolCallTerminated { tool_call_id, .. } => {
                calls += 1;
                let key = (event.run_id.clone(), tool_call_id.clone());
                assert!(started.contains(&key), "seq {}: {tool_call_id} ended without a stored start", event.seq);
            }
            _ => {}
        }
    }
    calls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_tool_calls_under_a_full_mailbox_all_store_their_start() {
    let daemon = Arc::new(TestDaemon::start());
    std::fs::write(daemon.project_path().join("note.txt"), "a note").unwrap();
    let (client, _deliveries) = daemon.client().await;
    connect_script(&client, daemon.data_path(), script()).await;
    let (loader, _loader_deliveries) = daemon.client().await;
    let loader = Arc::new(loader);

    let mut total_calls = 0;
    for session_index in 0..SESSIONS {
        let session = daemon.create_session(&client).await;
        set_mode(&client, &session.session_id, PermissionMode::Yolo).await;
        // Another client keeps the session's mailbox full: bursts of renames, and the actor stalled now and then
        // so that the bursts pile up.
        let stop = Arc::new(AtomicBool::new(false));
        let load = {
            let (daemon, loader, stop, session_id) =
                (daemon.clone(), loader.clone(), stop.clone(), session.session_id.clone());
            tokio::spawn(async move {
                let mut round = 0;
                while !stop.load(Ordering::Relaxed) {
                    daemon.engine().stall_session(&session_id, Duration::from_millis(3)).await.expect("stall");
                    rename_many(&loader, &session_id, &format!("load-{session_index}-{round}"), 40, 0).await;
                    round += 1;
                }
            })
        };
        let (runner, mut deliveries) = daemon.client().await;
        runner.subscribe(&session.session_id, None).await.unwrap();
        for _ in 0..RUNS_PER_SESSION {
            start_run(&runner, &session.session_id, selection_of("default", "local/scripted"), "read it").await;
            events_until(&mut deliveries, is_terminal).await;
        }
        stop.store(true, Ordering::Relaxed);
        within("the load stops", load).await.unwrap();

        // What is stored, as a late subscriber replays it.
        let (reader, mut replay) = daemon.client().await;
        let last_seq = reader
            .call::<troupe_protocol::method::SessionGet>(troupe_protocol::types::common::SessionIdParams {
                session_id: session.session_id.clone(),
            })
            .await
            .unwrap()
            .session
            .last_event_seq;
        reader.subscribe(&session.session_id, None).await.unwrap();
        let stored = events_until(&mut replay, |event| event.seq >= last_seq).await;
        total_calls += assert_every_call_started_first(&stored);
    }
    assert_eq!(total_calls, SESSIONS * RUNS_PER_SESSION);
}
