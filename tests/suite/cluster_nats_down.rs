//! The cluster while its NATS cannot be reached, through real `troupe serve --cluster` processes: what a node
//! answers from its own copy of the directory says it may be stale, a write is refused with `cluster_unavailable`
//! (nothing is acknowledged that JetStream did not store), and once NATS is back the node goes on by itself with
//! every acknowledged event and none of the refused ones.

use troupe_protocol::client::{Client, ClientError};
use troupe_protocol::error_code::ErrorCode;
use troupe_protocol::method;
use troupe_protocol::types::common::{SessionIdParams, SessionMeta};
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::session::SessionListParams;

use super::cluster::{Loopback, history_until};
use super::cluster_follow::listed_on;
use super::support::*;

/// `session_id` as `client`'s node lists it.
async fn listed(client: &Client, session_id: &str) -> SessionMeta {
    let listed = within("session.list", client.call::<method::SessionList>(SessionListParams::default()))
        .await
        .expect("session.list answers from the node's own copy");
    listed.sessions.into_iter().find(|meta| meta.session_id == session_id).expect("listed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_nats_reads_say_they_may_be_stale_writes_are_refused_and_the_node_goes_on_when_it_returns() {
    let mut cluster = Loopback::start();
    let project = cluster.project.clone();
    let a = cluster.node("a");
    let b = cluster.node("b");
    let (client_a, _) = a.client().await;
    let (client_b, _) = b.client().await;
    let on_a = create_session_in(&client_a, &project).await.session_id;
    let on_b = create_session_in(&client_b, &project).await.session_id;
    let kept = set_title(&client_b, &on_b, "before", "acknowledged before").await.expect("rename while NATS is up");
    listed_on(&client_b, &on_a, "a").await;
    assert!(!listed(&client_b, &on_a).await.may_be_stale, "fresh while NATS is up");

    cluster.nats.kill();
    let stale = eventually_some("node b says its copy of a's session may be stale", WAIT, || async {
        let meta = listed(&client_b, &on_a).await;
        meta.may_be_stale.then_some(meta)
    })
    .await;
    assert_eq!(stale.node.as_deref(), Some("a"));
    assert!(!listed(&client_b, &on_b).await.may_be_stale, "node b's own session is known first hand");
    let got = within("session.get", client_b.call::<method::SessionGet>(SessionIdParams { session_id: on_a.clone() }))
        .await
        .expect("session.get answers from the node's copy");
    assert!(got.session.may_be_stale, "{:?}", got.session);

    let refused = set_title(&client_b, &on_b, "during", "never stored").await.expect_err("no NATS, no write");
    let ClientError::Rpc(error) = &refused else { panic!("{refused}") };
    assert_eq!(error.error_code(), Some(ErrorCode::ClusterUnavailable), "{refused}");
    assert!(error.detail().is_some_and(|detail| detail.contains("none was sent")), "says it is not stored: {refused}");

    cluster.nats.restart();
    eventually_some("node b follows the directory again", WAIT, || async {
        (!listed(&client_b, &on_a).await.may_be_stale).then_some(())
    })
    .await;
    let renamed = eventually_some("node b writes again by itself", WAIT, || async {
        set_title(&client_b, &on_b, "after", "acknowledged after").await.ok()
    })
    .await;
    assert_eq!(renamed.session.title.as_deref(), Some("acknowledged after"));
    let last = renamed.session.last_event_seq;
    let history = history_until(&a, &on_b, |event| event.seq == last).await;
    let titles: Vec<_> = history
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::SessionTitleCommitted { title, .. } => title.as_deref(),
            _ => None,
        })
        .collect();
    assert_eq!(titles, ["acknowledged before", "acknowledged after"], "every acknowledged title, none refused");
    assert!(kept.session.last_event_seq < renamed.session.last_event_seq);
}
