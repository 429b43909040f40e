//! Red-team findings against `session.revert` (issue 11), each a test that failed before its fix: memory and
//! revert cost quadratic in the number of reverts (`Visibility` now keeps only the markers); a redelivered
//! `approval.respond` hidden by a revert not getting its original answer (the answer keeps its record); a
//! redelivered `run.start` of a run started after a revert refused after a restart (`run_started` records the
//! requested model).

use std::path::Path;

use serde_json::{Value, json};
use troupe_protocol::client::{Client, ClientError};
use troupe_protocol::method;
use troupe_protocol::types::approval::{ApprovalDecision, ApprovalRecord, ApprovalRespondParams, ApprovalStatus};
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::run::RunStartParams;
use troupe_protocol::types::session::PermissionMode;

use super::support::*;
use troupe_test_support::FakeServer;
use troupe_test_support::replies::{anthropic_text, models_list, openai_error, openai_text};

async fn respond(client: &Client, params: ApprovalRespondParams) -> Result<ApprovalRecord, ClientError> {
    within("approval.respond", client.call::<method::ApprovalRespond>(params)).await.map(|result| result.approval)
}

/// The daemon's peak resident memory (`VmHWM`), from `/proc`.
fn peak_rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    kib * 1024
}

/// Writes a log whose one run is followed by `reverts` pairs of (a rename, a revert to the previous marker):
/// every rename is hidden by the next marker, so the visible events are the run and the markers, each marker a
/// range of its own. Returns the log's size and the last marker's seq.
fn write_interleaved_reverts(data_dir: &Path, session_id: &str, reverts: u64) -> (u64, u64) {
    let dir = data_dir.join("sessions").join(session_id);
    std::fs::create_dir_all(&dir).expect("session dir");
    let line = |seq: u64, run: bool, payload: Value| {
        let run_id = if run { json!("run-1") } else { Value::Null };
        json!({"session_id": session_id, "run_id": run_id, "seq": seq, "timestamp": "2026-01-01T00:00:00.000Z",
            "payload": payload})
        .to_string()
    };
    let mut text = session_created_line(session_id, json!({"type": "root"}));
    text.push('\n');
    let started = json!({"type": "run_started", "client_run_id": "c-1", "selection": echo_selection(),
        "input": "go", "fallback_index": 0});
    text.push_str(&line(2, true, started));
    text.push('\n');
    text.push_str(&line(3, true, json!({"type": "run_completed", "final_text": "done"})));
    text.push('\n');
    let (mut seq, mut marker) = (3, 3);
    for n in 0..reverts {
        seq += 1;
        let renamed = json!({"type": "session_title_committed", "title": format!("hidden {n}"), "change": "set",
            "client_rename_id": format!("r-{n}")});
        text.push_str(&line(seq, false, renamed));
        text.push('\n');
        seq += 1;
        text.push_str(&line(seq, false, json!({"type": "session_reverted", "through_seq": marker})));
        text.push('\n');
        marker = seq;
    }
    std::fs::write(dir.join("events.jsonl"), &text).expect("write log");
    (text.len() as u64, marker)
}

/// `Visibility` keeps, for every marker, a copy of the whole visible range list, and a revert reads each visible
/// range with a read of its own: with reverts interleaved with any other event, the range list grows by one per
/// revert, so memory is quadratic in the number of reverts (3,000 reverts in a 1.3 MB log: ~290 MB at load,
/// ~390 MB after one more revert; 6,000: ~0.9 GB and ~1.4 GB) and each revert costs a read per earlier revert
/// (0.8 s at 1,000, 5.6 s at 6,000). A client can build such a log with plain rename + revert calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]

async fn thousands_of_reverts_in_a_small_log_keep_the_daemon_small() {
    let data_dir = tempfile::tempdir().expect("temp dir");
    let session_id = "0190f5c2-0000-7000-8000-00000000a77a";
    let (log_bytes, last_marker) = write_interleaved_reverts(data_dir.path(), session_id, 3_000);
    assert!(log_bytes < 2_000_000, "{log_bytes}");
    let mut daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let pid = daemon.child.id();
    let (client, _deliveries) = daemon.client().await;

    let meta = within("get", client.call::<method::SessionGet>(SessionIdParams { session_id: session_id.into() }))
        .await
        .expect("session.get")
        .session;
    assert_eq!(meta.last_event_seq, last_marker);
    assert_eq!(meta.title, None, "every rename is hidden");
    // One more revert of the same kind (to the last marker, after a rename it hides).
    set_title(&client, session_id, "r-last", "hidden last").await.expect("rename");
    let reverted = revert(&client, session_id, last_marker).await.expect("revert");
    assert_eq!(reverted.title, None);

    let peak = peak_rss_bytes(pid);
    eprintln!("peak RSS {} MB for a {} KB log", peak / (1024 * 1024), log_bytes / 1024);
    assert!(
        peak < 160 * 1024 * 1024,
        "the daemon peaked at {} MB for a {} KB log of 3,000 reverts",
        peak / (1024 * 1024),
        log_bytes / 1024
    );
    drop(client);
    let _ = daemon.child.kill();
    let _ = daemon.child.wait();
}

/// docs/protocol.md (session.revert) promises that "a redelivered `approval.respond` of a hidden event still gets
/// its original answer". The answers by `client_response_id` do follow the whole log, but the redelivery is
/// answered with the record as the *visible* branch has it: `approval_not_found` once the request is hidden, and
/// the record `cancelled` (not the `approved` it was given) when the revert lands between request and answer.
#[tokio::test]

async fn a_redelivered_approval_answer_hidden_by_a_revert_gets_its_original_answer() {
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    let script = json!({"turns": [
        {"tool_calls": [{"tool": "shell", "arguments": {"command": "true"}}]},
        {"text": "done"}
    ]});
    connect_script(&client, daemon.data_path(), script).await;
    let session_id = daemon.create_session(&client).await.session_id;
    set_mode(&client, &session_id, PermissionMode::Ask).await;
    client.subscribe(&session_id, None).await.expect("subscribe");
    let run_id = start_run(&client, &session_id, selection_of("default", "local/scripted"), "run true").await;
    let asked =
        events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::ApprovalRequested { .. })).await;
    let request = asked.last().unwrap();
    let record: ApprovalRecord = match &request.payload {
        EventPayload::ApprovalRequested { approval } => (**approval).clone(),
        _ => unreachable!(),
    };
    let params = ApprovalRespondParams {
        session_id: session_id.clone(),
        approval_id: record.approval_id.clone(),
        request_revision: record.revision,
        operation_fingerprint: record.operation_fingerprint.clone(),
        client_response_id: "answer-1".into(),
        decision: ApprovalDecision::ApproveOnce,
        feedback: None,
    };
    let answered = respond(&client, params.clone()).await.expect("approve");
    assert_eq!(answered.status, ApprovalStatus::Approved);
    events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;

    // A revert between the request and the answer: the run is interrupted there, the record cancelled.
    revert(&client, &session_id, request.seq).await.expect("revert into the run");
    events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::RunInterrupted { .. })).await;
    let redelivered = respond(&client, params.clone()).await.expect("a redelivery is answered");
    assert_eq!(redelivered.status, ApprovalStatus::Approved, "the original answer: {redelivered:?}");

    // A revert to before the request: the record is hidden altogether.
    revert(&client, &session_id, request.seq - 1).await.expect("revert before the request");
    let redelivered = respond(&client, params).await.expect("a redelivery is answered, not approval_not_found");
    assert_eq!(redelivered.status, ApprovalStatus::Approved, "the original answer: {redelivered:?}");
}

/// Starts (or redelivers) a run of the `chain` agent requesting `openai/first`.
async fn start_chain_run(
    client: &Client,
    session_id: &str,
    client_run_id: &str,
    reset_fallback: bool,
) -> Result<String, ClientError> {
    within(
        "run.start",
        client.call::<method::RunStart>(RunStartParams {
            session_id: session_id.to_owned(),
            client_run_id: client_run_id.to_owned(),
            selection: selection_of("chain", "openai/first"),
            input: format!("run {client_run_id}"),
            reset_fallback,
            attachments: Vec::new(),
        }),
    )
    .await
    .map(|started| started.run_id)
}

/// A run's recorded `sticky_before` (what a redelivered `run.start` is planned against) comes from the first,
/// whole-log pass of the load, where a revert hides nothing; live it came from the visible branch. When a hidden
/// run changed the stickiness (here a `reset_fallback` run that went back to the first model), a run started on
/// the branch's sticky fallback after the revert is recorded differently after a restart, and its redelivery is
/// refused as `idempotency_conflict` although it is the same request, accepted as a redelivery before the restart.
#[tokio::test]

async fn a_run_started_after_a_revert_is_recognized_as_redelivered_after_a_restart() {
    let first =
        FakeServer::start(vec![models_list(&["first"]), openai_error(401, "bad key"), openai_text("two")]).await;
    let backup =
        FakeServer::start(vec![models_list(&["backup"]), anthropic_text("one"), anthropic_text("three")]).await;
    let config = "[agents.chain]\nmodels = [\"openai/first\", \"anthropic/backup\"]\n";
    let daemon = TestDaemon::start_with(DaemonSetup { config_toml: Some(config.into()), ..DaemonSetup::default() });
    let (client, mut deliveries) = daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", first.base_url))], Some("k1")).await.unwrap();
    connect_provider(&client, "anthropic", &[("base_url", &backup.base_url)], Some("k2")).await.unwrap();
    let session_id = daemon.create_session(&client).await.session_id;
    client.subscribe(&session_id, None).await.expect("subscribe");
    let run_to_end = |run_id: String| {
        move |event: &troupe_protocol::types::events::StoredEvent| {
            event.run_id.as_deref() == Some(&run_id) && is_terminal(event)
        }
    };

    // r1 falls back to the backup (sticky); r2, a reset_fallback run, goes back to the first model (not sticky).
    let r1 = start_chain_run(&client, &session_id, "r1", false).await.expect("r1");
    let end_of_r1 = events_until(&mut deliveries, run_to_end(r1)).await.last().unwrap().seq;
    let r2 = start_chain_run(&client, &session_id, "r2", true).await.expect("r2");
    events_until(&mut deliveries, run_to_end(r2)).await;

    // Back to the end of r1: the branch is sticky on the backup again, and r3 starts there.
    revert(&client, &session_id, end_of_r1).await.expect("revert");
    let r3 = start_chain_run(&client, &session_id, "r3", false).await.expect("r3");
    let r3_events = events_until(&mut deliveries, run_to_end(r3.clone())).await;
    let started = r3_events.iter().find(|event| event.run_id.as_deref() == Some(&r3)).expect("run_started");
    assert!(
        matches!(&started.payload, EventPayload::RunStarted { selection, .. } if selection.model.model == "anthropic/backup"),
        "{started:?}"
    );
    let redelivered = start_chain_run(&client, &session_id, "r3", false).await.expect("a redelivery before a restart");
    assert_eq!(redelivered, r3);

    drop((client, deliveries));
    let data_dir = daemon.stop();
    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..DaemonSetup::default() });
    let (client, _deliveries) = daemon.client().await;
    match start_chain_run(&client, &session_id, "r3", false).await {
        Ok(redelivered) => assert_eq!(redelivered, r3),
        Err(ClientError::Rpc(error)) => panic!("a redelivery after a restart: {:?}", error.typed_code()),
        Err(other) => panic!("a redelivery after a restart: {other:?}"),
    }
}
