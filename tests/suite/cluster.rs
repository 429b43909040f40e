//! The cluster on NATS JetStream, through real `troupe serve --cluster … --node …` processes on a real nats-server
//! (Debian's, started on loopback): a node's sessions keep every acknowledged event in JetStream, every node lists
//! every session with the node that hosts it, a request for another node's session is answered by that node, and
//! when a node dies another one takes its sessions over (a run in flight ends `run_interrupted`, once).

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use troupe_protocol::client::{Client, ClientError};
use troupe_protocol::error_code::ErrorCode;
use troupe_protocol::method;
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::run::RunStartParams;
use troupe_protocol::types::session::SessionListParams;
use troupe_test_support::{ChildDaemon, NatsServer};

use super::support::*;

/// A lease outlives its node by this long: short, so that a test's takeover comes quickly.
const LEASE_TTL_SECS: u64 = 3;

/// `troupe serve` as node `name` of the cluster on `nats`, with its own data dir.
pub(super) fn start_node(nats_url: &str, name: &str, data_dir: &Path) -> ChildDaemon {
    start_replicated_node(nats_url, name, data_dir, 1)
}

/// [`start_node`] with each session's events kept on `replicas` NATS servers.
pub(super) fn start_replicated_node(nats_url: &str, name: &str, data_dir: &Path, replicas: u32) -> ChildDaemon {
    start_configured_node(nats_url, name, data_dir, &format!("replicas = {replicas}\n"))
}

/// [`start_node`] with more of `[cluster]` (lines of TOML).
pub(super) fn start_configured_node(nats_url: &str, name: &str, data_dir: &Path, cluster: &str) -> ChildDaemon {
    serve_configured_node(nats_url, name, data_dir, cluster).spawn()
}

/// The command [`start_configured_node`] runs, to be changed further before it is spawned. `cluster` may set
/// `lease_ttl_secs` itself.
pub(super) fn serve_configured_node(nats_url: &str, name: &str, data_dir: &Path, cluster: &str) -> ServeCommand {
    std::fs::create_dir_all(data_dir).expect("data dir");
    let lease =
        if cluster.contains("lease_ttl_secs") { String::new() } else { format!("lease_ttl_secs = {LEASE_TTL_SECS}\n") };
    let config = format!("[titles]\nauto = false\n[cluster]\n{cluster}{lease}");
    std::fs::write(data_dir.join("config.toml"), config).expect("config.toml");
    troupe_serve(data_dir).listen("127.0.0.1:0").args(["--cluster", nats_url, "--node", name])
}

/// A NATS server on loopback, a folder for the nodes' data dirs, and a project folder for sessions.
pub(super) struct Loopback {
    pub(super) nats: NatsServer,
    pub(super) dirs: tempfile::TempDir,
    pub(super) project: std::path::PathBuf,
}

impl Loopback {
    pub(super) fn start() -> Loopback {
        let nats = NatsServer::start();
        let dirs = tempfile::tempdir().expect("temp dir");
        let project = dirs.path().join("project");
        std::fs::create_dir_all(&project).expect("project");
        Loopback { nats, dirs, project }
    }

    /// Node `name`, with its data dir in the folder.
    pub(super) fn node(&self, name: &str) -> ChildDaemon {
        start_node(&self.nats.url(), name, &self.dirs.path().join(name))
    }

    /// [`node`](Self::node) with more of `[cluster]` (lines of TOML).
    pub(super) fn configured_node(&self, name: &str, cluster: &str) -> ChildDaemon {
        start_configured_node(&self.nats.url(), name, &self.dirs.path().join(name), cluster)
    }
}

/// `run.start` on `session_id` from `client`, retried while the session's node is being replaced (its lease has
/// not expired yet); the run's id.
pub(super) async fn start_run_once_hosted(client: &Client, session_id: &str, input: &str) -> String {
    let params = RunStartParams {
        session_id: session_id.to_owned(),
        client_run_id: troupe_runtime::clock::new_id(),
        selection: echo_selection(),
        input: input.to_owned(),
        reset_fallback: false,
        attachments: Vec::new(),
    };
    eventually_some("run.start once the session is hosted here", Duration::from_secs(30), || async {
        match client.call::<method::RunStart>(params.clone()).await {
            Ok(started) => Some(started.run_id),
            // Hosted by a node whose lease has not expired yet, or NATS electing a leader after a server died.
            Err(ClientError::Rpc(error))
                if matches!(
                    error.error_code(),
                    Some(ErrorCode::SessionHostedElsewhere | ErrorCode::ClusterUnavailable)
                ) =>
            {
                None
            }
            Err(error) => panic!("run.start: {error}"),
        }
    })
    .await
}

/// Every event of the session, replayed from the start on a new subscription, until `stop` holds for one.
pub(super) async fn history_until(
    node: &ChildDaemon,
    session_id: &str,
    stop: impl FnMut(&StoredEvent) -> bool,
) -> Vec<StoredEvent> {
    let (client, mut deliveries) = node.client().await;
    within("subscribe", client.subscribe(session_id, None)).await.expect("subscribe");
    events_until(&mut deliveries, stop).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_nodes_session_is_taken_over_with_every_acknowledged_event_and_its_run_interrupted_once() {
    let cluster = Loopback::start();
    let (dirs, project) = (cluster.dirs.path(), &cluster.project);

    let mut a = cluster.node("a");
    let (client_a, mut deliveries_a) = a.client().await;
    connect_script(
        &client_a,
        dirs,
        // The scripted model answers the history's n-th assistant turn with the script's n-th turn.
        json!({"turns": [
            {"text": "before"},
            {"tool_calls": [{"tool": "shell", "arguments": {"command": "sleep 60"}}]},
            {"text": "done"}
        ]}),
    )
    .await;
    let session_id = create_session_in(&client_a, project).await.session_id;
    set_mode(&client_a, &session_id, troupe_protocol::types::session::PermissionMode::Yolo).await;
    within("subscribe", client_a.subscribe(&session_id, None)).await.expect("subscribe");
    let first = run_in_subscribed(&client_a, &mut deliveries_a, &session_id, "local/scripted", "before").await;
    assert!(matches!(first.last().map(|event| &event.payload), Some(EventPayload::RunCompleted { .. })));
    // A run in flight when the node dies: its shell call is running.
    let running = start_run(&client_a, &session_id, selection_of("default", "local/scripted"), "sleep").await;
    let told = events_until(&mut deliveries_a, |event| {
        event.run_id.as_deref() == Some(&running) && matches!(event.payload, EventPayload::ToolCallStarted { .. })
    })
    .await;
    let acknowledged: Vec<StoredEvent> = first.iter().chain(&told).cloned().collect();
    a.kill();

    let b = cluster.node("b");
    let (client_b, _) = b.client().await;
    let listed = eventually_some("node b lists node a's session", WAIT, || async {
        let listed = client_b.call::<method::SessionList>(SessionListParams::default()).await.expect("list");
        listed.sessions.into_iter().find(|meta| meta.session_id == session_id)
    })
    .await;
    assert_eq!(listed.node.as_deref(), Some("a"), "{listed:?}");

    let next = start_run_once_hosted(&client_b, &session_id, "after").await;
    let history =
        history_until(&b, &session_id, |event| event.run_id.as_deref() == Some(&next) && is_terminal(event)).await;
    for told in &acknowledged {
        let stored =
            history.iter().find(|event| event.seq == told.seq).unwrap_or_else(|| panic!("seq {} lost", told.seq));
        assert_eq!(stored.payload, told.payload, "seq {} changed", told.seq);
    }
    let seqs: Vec<u64> = history.iter().map(|event| event.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "every seq once, in order");
    let interrupted: Vec<&StoredEvent> =
        history.iter().filter(|event| matches!(event.payload, EventPayload::RunInterrupted { .. })).collect();
    assert_eq!(interrupted.len(), 1, "{:?}", kinds(&history));
    assert_eq!(interrupted[0].run_id.as_deref(), Some(running.as_str()));
    assert!(matches!(history.last().map(|event| &event.payload), Some(EventPayload::RunCompleted { .. })));
    let relisted = client_b.call::<method::SessionList>(SessionListParams::default()).await.expect("list");
    let meta = relisted.sessions.iter().find(|meta| meta.session_id == session_id).expect("listed");
    assert_eq!(meta.node.as_deref(), Some("b"), "node b hosts it now");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_on_another_node_is_answered_by_the_node_that_hosts_the_session() {
    let cluster = Loopback::start();
    let project = &cluster.project;
    let a = cluster.node("a");
    let b = cluster.node("b");
    let (client_a, mut deliveries_a) = a.client().await;
    let (client_b, _) = b.client().await;
    let created = create_session_in(&client_a, project).await;
    let session_id = created.session_id;
    // The node that hosts it names itself too, at once: in the reply to the create and in its own listing.
    assert_eq!(created.node.as_deref(), Some("a"), "the create's reply names the node");
    let own = client_a.call::<method::SessionList>(SessionListParams::default()).await.expect("list on a");
    let own = own.sessions.into_iter().find(|meta| meta.session_id == session_id).expect("a lists its session");
    assert_eq!(own.node.as_deref(), Some("a"), "{own:?}");
    within("subscribe", client_a.subscribe(&session_id, None)).await.expect("subscribe");

    eventually_some("node b lists the session as node a's", WAIT, || async {
        let listed = client_b.call::<method::SessionList>(SessionListParams::default()).await.expect("list");
        listed.sessions.into_iter().find(|meta| meta.session_id == session_id && meta.node.as_deref() == Some("a"))
    })
    .await;
    let listing = std::process::Command::new(troupe_binary())
        .args(["sessions", "--url", &b.url, "--token", &b.token])
        .env_remove("TROUPE_HOME")
        .output()
        .expect("troupe sessions");
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(listing.contains(&session_id[..8]) && listing.contains("on a"), "{listing}");
    let status = eventually_some("both nodes live in b's status", WAIT, || async {
        let status = client_b.call::<method::DaemonStatus>(Default::default()).await.expect("daemon.status");
        let cluster = status.cluster.expect("a cluster node reports its cluster");
        (cluster.live_nodes == ["a", "b"]).then_some(cluster)
    })
    .await;
    assert_eq!((status.node.as_str(), status.nats_connected), ("b", true));
    let renamed = set_title(&client_b, &session_id, "from-b", "named on b").await.expect("rename through node b");
    assert_eq!(renamed.session.title.as_deref(), Some("named on b"));
    let again = set_title(&client_b, &session_id, "from-b", "named on b").await.expect("the same rename again");
    assert_eq!(again.session.last_event_seq, renamed.session.last_event_seq, "idempotent across nodes");

    let run_id = start_run(&client_b, &session_id, echo_selection(), "from b").await;
    let events =
        events_until(&mut deliveries_a, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    assert!(events.iter().any(|event| matches!(event.payload, EventPayload::SessionTitleCommitted { .. })));
    assert!(matches!(events.last().map(|event| &event.payload), Some(EventPayload::RunCompleted { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_workspace_is_not_on_this_machine_waits_for_its_node() {
    let cluster = Loopback::start();
    let dirs = cluster.dirs.path();
    let project = dirs.join("only-on-a");
    std::fs::create_dir_all(&project).expect("project");
    let mut a = cluster.node("a");
    let (client_a, _) = a.client().await;
    let session_id = create_session_in(&client_a, &project).await.session_id;
    a.kill();
    // Node b's machine has no such checkout.
    std::fs::remove_dir_all(&project).expect("remove the workspace");

    let b = cluster.node("b");
    let (client_b, _) = b.client().await;
    // Past the lease's expiry the answer stays the same: nobody else may write the session.
    tokio::time::sleep(Duration::from_secs(LEASE_TTL_SECS + 1)).await;
    let params = RunStartParams {
        session_id: session_id.clone(),
        client_run_id: troupe_runtime::clock::new_id(),
        selection: echo_selection(),
        input: "here?".to_owned(),
        reset_fallback: false,
        attachments: Vec::new(),
    };
    let refused = within("run.start", client_b.call::<method::RunStart>(params)).await.expect_err("refused");
    let ClientError::Rpc(error) = &refused else { panic!("{refused}") };
    assert_eq!(error.error_code(), Some(ErrorCode::SessionHostedElsewhere), "{refused}");
    assert!(error.detail().is_some_and(|detail| detail.contains('a')), "{refused}");
    assert!(!dirs.join("b/sessions").join(&session_id).exists(), "node b took nothing over");
    let listed = client_b.call::<method::SessionList>(SessionListParams::default()).await.expect("list");
    assert!(listed.sessions.iter().any(|meta| meta.session_id == session_id), "still listed everywhere");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_deleted_through_another_node_is_gone_from_every_node() {
    let cluster = Loopback::start();
    let (dirs, project) = (cluster.dirs.path(), &cluster.project);
    let a = cluster.node("a");
    let b = cluster.node("b");
    let (client_a, _) = a.client().await;
    let (client_b, _) = b.client().await;
    let session_id = create_session_in(&client_a, project).await.session_id;
    eventually_some("node b lists the session", WAIT, || async {
        let listed = client_b.call::<method::SessionList>(SessionListParams::default()).await.expect("list");
        listed.sessions.into_iter().find(|meta| meta.session_id == session_id)
    })
    .await;

    let params = troupe_protocol::types::common::SessionIdParams { session_id: session_id.clone() };
    let deleted = within("delete", client_b.call::<method::SessionDelete>(params)).await.expect("delete through b");
    assert_eq!(deleted.deleted_session_ids, vec![session_id.clone()]);
    assert!(!dirs.join("a/sessions").join(&session_id).exists(), "node a deleted it");
    for (node, client) in [("a", &client_a), ("b", &client_b)] {
        eventually_some(&format!("node {node} no longer lists it"), WAIT, || async {
            let listed = client.call::<method::SessionList>(SessionListParams::default()).await.expect("list");
            listed.sessions.iter().all(|meta| meta.session_id != session_id).then_some(())
        })
        .await;
    }
}

/// Renames `session_id` from `client` until `stop` is set; the titles acknowledged, in order, with their seqs.
async fn rename_until(
    client: &Client,
    session_id: &str,
    prefix: &str,
    stop: &std::sync::atomic::AtomicBool,
) -> Vec<(u64, String)> {
    let mut acknowledged = Vec::new();
    let mut attempt = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        attempt += 1;
        let title = format!("{prefix}-{attempt}");
        // A rename refused while NATS fails over is not acknowledged, and need not be stored; one acknowledged must.
        if let Ok(renamed) = set_title(client, session_id, &title, &title).await {
            acknowledged.push((renamed.session.last_event_seq, title));
        }
    }
    acknowledged
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_nats_server_of_three_killed_under_load_loses_no_acknowledged_event() {
    let mut nats = troupe_test_support::NatsCluster::start(3);
    let temp = tempfile::tempdir().expect("temp dir");
    let dirs = temp.path();
    let project = dirs.join("project");
    std::fs::create_dir_all(&project).expect("project");
    let a_dir = dirs.join("a");
    std::fs::create_dir_all(&a_dir).expect("data dir");
    std::fs::write(
        a_dir.join("config.toml"),
        format!("[titles]\nauto = false\n[cluster]\nreplicas = 3\nlease_ttl_secs = {LEASE_TTL_SECS}\n"),
    )
    .expect("config.toml");
    let mut a = troupe_serve(&a_dir).listen("127.0.0.1:0").args(["--cluster", &nats.urls(), "--node", "a"]).spawn();
    let (client, _) = a.client().await;
    let session_id = create_session_in(&client, &project).await.session_id;

    let stop = std::sync::atomic::AtomicBool::new(false);
    let (acknowledged, ()) = tokio::join!(rename_until(&client, &session_id, "load", &stop), async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        nats.kill(0);
        tokio::time::sleep(Duration::from_secs(6)).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    // Appends go on with two servers of three; one caught in the leader election may be refused (the session is
    // then opened again from JetStream), and a retry is accepted.
    let after_kill = eventually_some("appends continue", Duration::from_secs(60), || async {
        set_title(&client, &session_id, "after", "after the kill").await.ok()
    })
    .await;
    assert!(acknowledged.len() > 10, "the load ran: {} renames acknowledged", acknowledged.len());

    // Only JetStream is left to tell: the node and its disk are gone, and another node reads the session back.
    a.kill();
    std::fs::remove_dir_all(&a_dir).expect("remove node a's data dir");
    let b_dir = dirs.join("b");
    std::fs::create_dir_all(&b_dir).expect("data dir");
    std::fs::write(b_dir.join("config.toml"), "[titles]\nauto = false\n[cluster]\nreplicas = 3\n").expect("config");
    let remaining = nats.servers[1..].iter().map(NatsServer::url).collect::<Vec<_>>().join(",");
    // Its start waits until JetStream answers on the two servers left, which under a loaded machine may take
    // longer than a start usually does; the retries are logged (`info`) if it still does not listen.
    let b = troupe_serve(&b_dir)
        .listen("127.0.0.1:0")
        .args(["--cluster", &remaining, "--node", "b"])
        .rust_log("warn,troupe_cluster=info")
        .listen_within(Duration::from_secs(45))
        .spawn();
    let (client_b, _) = b.client().await;
    let last = after_kill.session.last_event_seq;
    let _ = start_run_once_hosted(&client_b, &session_id, "still here?").await;
    let history = history_until(&b, &session_id, |event| event.seq == last).await;
    for (seq, title) in &acknowledged {
        let event = history.iter().find(|event| event.seq == *seq).unwrap_or_else(|| panic!("seq {seq} lost"));
        let EventPayload::SessionTitleCommitted { title: stored, .. } = &event.payload else {
            panic!("seq {seq} is {:?}, not the rename to {title}", event.payload.kind())
        };
        assert_eq!(stored.as_deref(), Some(title.as_str()), "seq {seq}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_raised_on_one_node_is_listed_and_answered_from_another() {
    use troupe_protocol::types::approval::{ApprovalDecision, ApprovalListParams, ApprovalRespondParams};
    let cluster = Loopback::start();
    let a = cluster.node("a");
    let b = cluster.node("b");
    let (client_a, mut deliveries_a) = a.client().await;
    let (client_b, _) = b.client().await;
    connect_script(&client_a, cluster.dirs.path(), write_file_script()).await;
    let session_id = create_session_in(&client_a, &cluster.project).await.session_id;
    set_mode(&client_a, &session_id, troupe_protocol::types::session::PermissionMode::Ask).await;
    within("subscribe", client_a.subscribe(&session_id, None)).await.expect("subscribe");
    let run_id = start_run(&client_a, &session_id, selection_of("default", "local/scripted"), "write it").await;
    events_until(&mut deliveries_a, |event| matches!(event.payload, EventPayload::ApprovalRequested { .. })).await;

    let list = ApprovalListParams { root_session_id: session_id.clone(), status: None };
    let listed = within("approval.list on b", client_b.call::<method::ApprovalList>(list)).await.expect("listed");
    let [approval] = listed.approvals.as_slice() else { panic!("one approval: {listed:?}") };
    let params = ApprovalRespondParams {
        session_id: approval.session_id.clone(),
        approval_id: approval.approval_id.clone(),
        request_revision: approval.revision,
        operation_fingerprint: approval.operation_fingerprint.clone(),
        client_response_id: "from-b".to_owned(),
        decision: ApprovalDecision::ApproveOnce,
        feedback: None,
    };
    within("approval.respond on b", client_b.call::<method::ApprovalRespond>(params)).await.expect("answered from b");
    let events =
        events_until(&mut deliveries_a, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    assert!(matches!(events.last().map(|event| &event.payload), Some(EventPayload::RunCompleted { .. })));
    assert_eq!(std::fs::read_to_string(cluster.project.join("asked.txt")).expect("written"), "yes");
}
