//! The issue's own picture of a cluster, with real `troupe serve --cluster … --node …` processes: three troupe
//! nodes, first on one nats-server, then on a cluster of three nats-servers (each node attached to its own server,
//! every session's events kept on all three). A session lives on node a; a client on node b follows it from the
//! start; a client on node c starts a run that asks for an approval, sees the approval raised on a, and answers it.
//! b's follower sees every event of the run, in order, none missing and none twice: exactly a's own log. The
//! approval is recorded as answered by c's client, by the name c's presence lists give it.

use troupe_protocol::client::Client;
use troupe_protocol::method;
use troupe_protocol::types::approval::{
    ApprovalDecision, ApprovalListParams, ApprovalRecord, ApprovalRespondParams, ApprovalStatus,
};
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::session::PermissionMode;
use troupe_test_support::{NatsCluster, NatsServer};

use super::cluster::start_replicated_node;
use super::cluster_follow::{ends_run, listed_on, seqs, whole_until};
use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_on_one_nats_server_follow_and_approve_one_session() {
    let nats = NatsServer::start();
    let url = nats.url();
    three_nodes_share_one_session([url.clone(), url.clone(), url], 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_on_three_nats_servers_follow_and_approve_one_session() {
    let nats = NatsCluster::start(3);
    let urls = [nats.servers[0].url(), nats.servers[1].url(), nats.servers[2].url()];
    three_nodes_share_one_session(urls, 3).await;
}

/// Nodes a, b and c, attached to `urls` in that order, with `replicas` copies of every event.
async fn three_nodes_share_one_session(urls: [String; 3], replicas: u32) {
    let dirs = tempfile::tempdir().expect("temp dir");
    let project = dirs.path().join("project");
    std::fs::create_dir_all(&project).expect("project");
    let [a, b, c] = [("a", &urls[0]), ("b", &urls[1]), ("c", &urls[2])]
        .map(|(name, url)| start_replicated_node(url, name, &dirs.path().join(name), replicas));

    let (client_a, _) = a.client().await;
    connect_script(&client_a, dirs.path(), write_file_script()).await;
    let session_id = create_session_in(&client_a, &project).await.session_id;
    set_mode(&client_a, &session_id, PermissionMode::Ask).await;

    let (follower, mut followed) = b.client().await;
    listed_on(&follower, &session_id, "a").await;
    within("subscribe on b", follower.subscribe(&session_id, None)).await.expect("subscribe on b from the start");

    let (client_c, _) = c.client().await;
    listed_on(&client_c, &session_id, "a").await;
    let run_id = start_run(&client_c, &session_id, selection_of("default", "local/scripted"), "write it").await;
    let approval = pending_approval(&client_c, &session_id).await;
    let answer = ApprovalRespondParams {
        session_id: approval.session_id.clone(),
        approval_id: approval.approval_id.clone(),
        request_revision: approval.revision,
        operation_fingerprint: approval.operation_fingerprint.clone(),
        client_response_id: "from-c".to_owned(),
        decision: ApprovalDecision::ApproveOnce,
        feedback: None,
    };
    let answered = within("approval.respond on c", client_c.call::<method::ApprovalRespond>(answer))
        .await
        .expect("answered from c");
    // Recorded on a as answered by c's client, by the name presence lists give it: not a's forwarding connection.
    let params = SessionIdParams { session_id: session_id.clone() };
    let you =
        within("session.presence on c", client_c.call::<method::SessionPresence>(params)).await.expect("presence").you;
    assert!(you.ends_with("@c"), "{you}");
    assert_eq!(answered.approval.answered_by.as_deref(), Some(format!("client:{you}").as_str()));

    let seen_on_b = whole_until(&mut followed, ends_run(&run_id)).await;
    let history = {
        let (reader, mut replayed) = a.client().await;
        within("subscribe on a", reader.subscribe(&session_id, None)).await.expect("subscribe on a");
        whole_until(&mut replayed, ends_run(&run_id)).await
    };
    assert_eq!(seqs(&history), (1..=history.len() as u64).collect::<Vec<_>>(), "a's log: every seq once");
    assert_eq!(seen_on_b, history, "b's follower saw exactly a's log: in order, none missing, none twice");
    let of_run: Vec<&StoredEvent> =
        seen_on_b.iter().filter(|event| event.run_id.as_deref() == Some(run_id.as_str())).collect();
    assert!(matches!(of_run.first().map(|event| &event.payload), Some(EventPayload::RunStarted { .. })), "{of_run:?}");
    assert!(
        of_run.iter().any(|event| matches!(&event.payload, EventPayload::ApprovalRequested { .. })),
        "b saw the approval raised on a"
    );
    assert!(
        of_run.iter().any(|event| matches!(&event.payload, EventPayload::ApprovalFinalized { .. })),
        "b saw c's answer recorded on a"
    );
    assert!(matches!(of_run.last().map(|event| &event.payload), Some(EventPayload::RunCompleted { .. })));
    assert_eq!(std::fs::read_to_string(project.join("asked.txt")).expect("written on a's machine"), "yes");
}

/// The one approval pending in `session_id`, as node `client` lists it (polled: the run asks a moment after it
/// started).
async fn pending_approval(client: &Client, session_id: &str) -> ApprovalRecord {
    eventually_some("the approval raised on a is listed on c", WAIT, || async {
        let params =
            ApprovalListParams { root_session_id: session_id.to_owned(), status: Some(ApprovalStatus::Pending) };
        let listed = client.call::<method::ApprovalList>(params).await.expect("approval.list on c");
        listed.approvals.into_iter().next()
    })
    .await
}
