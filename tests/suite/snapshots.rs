//! Projection snapshots over the real socket: a session with a long log hibernates and writes its snapshot, and
//! after a restart `session.resume` answers what it answered before (metadata, usage, a rename's redelivery),
//! whether the snapshot is intact, corrupt, or older than the log's last events; and `GET /metrics` shows which
//! loads went through the snapshot.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use troupe_protocol::client::Client;
use troupe_protocol::method;
use troupe_protocol::types::approval::{ApprovalDecision, ApprovalListParams, ApprovalRecord, ApprovalRespondParams};
use troupe_protocol::types::common::SessionIdParams;
use troupe_runtime::event_log::{self, snapshot};

use super::metrics_support::{scrape, value};
use super::support::*;

const HIBERNATE_AFTER: Duration = Duration::from_millis(200);

fn start(data_dir: Option<tempfile::TempDir>) -> TestDaemon {
    TestDaemon::start_with(DaemonSetup { hibernate_after: Some(HIBERNATE_AFTER), data_dir, ..DaemonSetup::default() })
}

fn session_dir(daemon: &TestDaemon, session_id: &str) -> PathBuf {
    daemon.data_path().join("sessions").join(session_id)
}

fn log_len(session_dir: &Path) -> u64 {
    std::fs::metadata(event_log::log_path(session_dir)).map(|metadata| metadata.len()).unwrap_or_default()
}

/// What a client sees of the session: `session.resume`'s metadata and `session.usage`.
async fn observed(client: &Client, session_id: &str) -> Value {
    let params = || SessionIdParams { session_id: session_id.to_owned() };
    let resumed = within("session.resume", client.call::<method::SessionResume>(params())).await.expect("resume");
    let usage = within("session.usage", client.call::<method::SessionUsage>(params())).await.expect("usage");
    serde_json::json!({"resume": resumed, "usage": usage})
}

/// A redelivered rename is recognized (no new event), which needs the restored idempotency records.
async fn assert_redelivery_recognized(client: &Client, session_id: &str, last_seq: u64) {
    let title = format!("{}t 299", "x".repeat(400));
    let renamed = set_title(client, session_id, "t-299", &title).await.expect("redelivered rename");
    assert_eq!(renamed.session.last_event_seq, last_seq, "a redelivery appends nothing");
}

/// The session loads a daemon counted so far, by what they made of the snapshot, as `GET /metrics` shows them.
#[derive(Debug)]
struct Loads {
    used: f64,
    missing: f64,
    refused: f64,
}

async fn loads(daemon: &TestDaemon) -> Loads {
    let samples = scrape(daemon).await;
    let count = |snapshot: &str| {
        let loads = value(&samples, &format!(r#"troupe_session_loads_total{{snapshot="{snapshot}"}}"#));
        // Each load is timed as well; a series of the histogram appears with its first load.
        let timed = samples.get(&format!(r#"troupe_session_load_duration_seconds_count{{snapshot="{snapshot}"}}"#));
        assert_eq!(timed.copied().unwrap_or_default(), loads, "loads with the snapshot {snapshot} timed");
        loads
    };
    Loads { used: count("used"), missing: count("missing"), refused: count("refused") }
}

/// Waits until the daemon has let the session go and its snapshot covers the whole log.
async fn snapshot_covers_the_log(session_dir: &Path) {
    let mut last = (None, 0);
    let covered = holds_within(WAIT, || {
        last = (snapshot::covered_len(session_dir), log_len(session_dir));
        last.0 == Some(last.1)
    })
    .await;
    assert!(covered, "no snapshot covers the log: the snapshot covers {:?} bytes of {}", last.0, last.1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_resumes_from_its_snapshot_and_without_it_the_same() {
    let daemon = start(None);
    let (client, mut deliveries) = daemon.client().await;
    let (session_id, _) = session_after_echo_runs(&daemon, &client, &mut deliveries, &["one", "two"]).await;
    // More than the smallest growth worth a snapshot (256 KiB): 500 renames of about 600 bytes.
    rename_many(&client, &session_id, "t", 500, 400).await;
    let dir = session_dir(&daemon, &session_id);
    drop((client, deliveries));
    // Hibernation (no subscriber, idle) writes the snapshot.
    snapshot_covers_the_log(&dir).await;
    let (client, _deliveries) = daemon.client().await;
    let before = observed(&client, &session_id).await;
    let last_seq = before["resume"]["session"]["last_event_seq"].as_u64().expect("last seq");
    assert!(last_seq > 500, "{before}");
    drop(client);
    let data_dir = daemon.stop();

    // Intact snapshot, after a restart: the resume loads the session through it.
    let daemon = start(Some(data_dir));
    let (client, _deliveries) = daemon.client().await;
    assert_eq!(observed(&client, &session_id).await, before);
    let counted = loads(&daemon).await;
    assert!(counted.used >= 1.0 && counted.missing == 0.0 && counted.refused == 0.0, "only through it: {counted:?}");
    assert_redelivery_recognized(&client, &session_id, last_seq).await;
    drop(client);
    let data_dir = daemon.stop();

    // Corrupt snapshot: the load scans the whole log, answers the same, and writes a good snapshot again.
    std::fs::write(snapshot::snapshot_path(&dir), b"{\"format\":1,\"session_id\":").expect("corrupt the snapshot");
    let daemon = start(Some(data_dir));
    let (client, _deliveries) = daemon.client().await;
    assert_eq!(observed(&client, &session_id).await, before);
    // (A reload after hibernation may find the good snapshot the refused load wrote.)
    let counted = loads(&daemon).await;
    assert!(counted.refused >= 1.0 && counted.missing == 0.0, "the corrupt one refused: {counted:?}");
    assert_redelivery_recognized(&client, &session_id, last_seq).await;
    snapshot_covers_the_log(&dir).await;

    // Events after the snapshot: too few to write a newer one at hibernation, so the next load scans them.
    let covered = snapshot::covered_len(&dir).expect("a snapshot");
    set_title(&client, &session_id, "after-1", "After the snapshot").await.expect("rename");
    drop(client);
    eventually("the session hibernates", || !daemon.engine().is_live(&session_id)).await;
    assert_eq!(snapshot::covered_len(&dir), Some(covered), "the snapshot is older than the log");
    assert!(log_len(&dir) > covered);
    let data_dir = daemon.stop();
    let daemon = start(Some(data_dir));
    let (client, _deliveries) = daemon.client().await;
    let through_snapshot = observed(&client, &session_id).await;
    assert_eq!(through_snapshot["resume"]["session"]["title"], "After the snapshot");
    assert_eq!(through_snapshot["resume"]["session"]["last_event_seq"], last_seq + 1);
    let counted = loads(&daemon).await;
    assert!(counted.used >= 1.0 && counted.missing == 0.0 && counted.refused == 0.0, "only through it: {counted:?}");
    drop(client);
    let data_dir = daemon.stop();

    // The same without any snapshot.
    std::fs::remove_file(snapshot::snapshot_path(&dir)).expect("remove the snapshot");
    let daemon = start(Some(data_dir));
    let (client, _deliveries) = daemon.client().await;
    assert_eq!(observed(&client, &session_id).await, through_snapshot);
    // The load scans the whole log, and writes a snapshot that a reload after hibernation may use.
    let counted = loads(&daemon).await;
    assert!(counted.missing >= 1.0 && counted.refused == 0.0, "without one: {counted:?}");
    assert_redelivery_recognized(&client, &session_id, last_seq + 1).await;
}

async fn respond(client: &Client, params: &ApprovalRespondParams) -> ApprovalRecord {
    within("approval.respond", client.call::<method::ApprovalRespond>(params.clone())).await.expect("respond").approval
}

async fn listed(client: &Client, root_session_id: &str) -> Value {
    let params = ApprovalListParams { root_session_id: root_session_id.to_owned(), status: None };
    let listed = within("approval.list", client.call::<method::ApprovalList>(params)).await.expect("approval.list");
    serde_json::to_value(listed).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_tool_calls_and_tree_grants_come_back_from_a_snapshot() {
    let daemon = start(None);
    let (client, mut deliveries) = daemon.client().await;
    connect_script(&client, daemon.data_path(), write_file_script()).await;
    let waiting = run_waiting_for_approval(&daemon, &client, &mut deliveries).await;
    let session_id = waiting.session_id.clone();
    let answer = ApprovalRespondParams {
        session_id: session_id.clone(),
        approval_id: waiting.approval.approval_id.clone(),
        request_revision: waiting.approval.revision,
        operation_fingerprint: waiting.approval.operation_fingerprint.clone(),
        client_response_id: "answer-1".into(),
        decision: ApprovalDecision::ApproveTree,
        feedback: None,
    };
    let answered = respond(&client, &answer).await;
    events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&waiting.run_id) && is_terminal(event)).await;
    rename_many(&client, &session_id, "t", 500, 400).await;
    let dir = session_dir(&daemon, &session_id);
    drop((client, deliveries));
    snapshot_covers_the_log(&dir).await;

    let (client, _deliveries) = daemon.client().await;
    let before = (observed(&client, &session_id).await, listed(&client, &session_id).await);
    drop(client);
    let data_dir = daemon.stop();

    let daemon = start(Some(data_dir));
    let (client, _deliveries) = daemon.client().await;
    assert_eq!((observed(&client, &session_id).await, listed(&client, &session_id).await), before);
    // The answer's redelivery is recognized from the restored records: the same record, nothing appended.
    assert_eq!(respond(&client, &answer).await, answered);
    assert_eq!(observed(&client, &session_id).await, before.0);
}
