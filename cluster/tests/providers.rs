//! The shared provider connections against a real nats-server, across two nodes: a change is stored with its answer
//! and followed by every node, a client id answered by one node is answered the same on the other (and stores
//! nothing), the later of two nodes' changes of a provider comes last to every follower, an offer never replaces a
//! shared state, client ids with any characters are keys, and with NATS gone nothing is stored.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::collections::BTreeMap;

use tokio::sync::mpsc;
use troupe_cluster::{Cluster, ClusterSettings, NatsProviderShare};
use troupe_runtime::provider_share::{ProviderShare, ShareChange, ShareWrite, SharedProvider, Stored};
use troupe_runtime::provider_store::{RecordedAnswer, StoredConnection};
use troupe_test_support::NatsServer;
use troupe_test_support::wait::within;

fn node(url: &str, name: &str) -> Cluster {
    Cluster::connect(ClusterSettings::plain(url, name)).expect("connect to nats-server")
}

fn connected(generation: u64, key: &str) -> SharedProvider {
    SharedProvider {
        generation,
        connection: Some(StoredConnection {
            generation,
            connected_at: "2026-12-02T00:00:00Z".to_owned(),
            setup_values: BTreeMap::from([("base_url".to_owned(), "http://127.0.0.1:1/v1".to_owned())]),
            auth_method: "api_key".to_owned(),
            auth_values: BTreeMap::from([("api_key".to_owned(), key.to_owned())]),
            models: vec!["m1".to_owned()],
        }),
    }
}

fn write(client_key: &str, fingerprint: &str, provider_id: &str, state: SharedProvider) -> ShareWrite {
    ShareWrite {
        client_key: client_key.to_owned(),
        answer: RecordedAnswer {
            request_fingerprint: fingerprint.to_owned(),
            answer: serde_json::json!({ "by": fingerprint }),
            recorded_at: "2026-12-02T00:00:00.000Z".to_owned(),
        },
        provider_id: provider_id.to_owned(),
        state,
    }
}

/// Follows `share` into a channel.
fn follow(share: &NatsProviderShare) -> mpsc::UnboundedReceiver<ShareChange> {
    let (sender, receiver) = mpsc::unbounded_channel();
    share.follow(Box::new(move |change| {
        let _ = sender.send(change);
    }));
    receiver
}

async fn next(changes: &mut mpsc::UnboundedReceiver<ShareChange>) -> ShareChange {
    within("a shared provider change", changes.recv()).await.expect("the follow goes on")
}

/// The next provider change: its id, state and revision.
async fn next_provider(changes: &mut mpsc::UnboundedReceiver<ShareChange>) -> (String, SharedProvider, u64) {
    match next(changes).await {
        ShareChange::Provider { provider_id, state, revision } => (provider_id, *state, revision),
        other => panic!("expected a provider's state, got {other:?}"),
    }
}

#[test]
fn changes_are_shared_answered_once_and_the_later_revision_comes_last_everywhere() {
    let server = NatsServer::start();
    let (a, b) = (node(&server.url(), "a"), node(&server.url(), "b"));
    let (share_a, share_b) = (NatsProviderShare::new(a.clone()), NatsProviderShare::new(b));
    a.block_on(async {
        let mut on_b = follow(&share_b);
        assert_eq!(next(&mut on_b).await, ShareChange::CaughtUp, "an empty share");

        // Stored through a, with its answer; b follows it.
        let client_key = "c.1 with spaces/and*wildcards>";
        let first = write(client_key, "f1", "openai", connected(1, "sk-a"));
        let stored = within("a store", share_a.store(first.clone())).await.expect("stored");
        let Stored::Stored { revision: first_revision } = stored else { panic!("{stored:?}") };
        assert_eq!(next_provider(&mut on_b).await, ("openai".to_owned(), connected(1, "sk-a"), first_revision));
        let recorded = within("b reads the answer", share_b.answer(client_key)).await.expect("read");
        assert_eq!(recorded, Some(first.answer.clone()));

        // The same client id through b: a's answer, whatever b would have stored, and nothing stored.
        let redelivered = write(client_key, "f2", "openai", connected(2, "sk-b"));
        let answered = within("b stores again", share_b.store(redelivered)).await.expect("answered");
        assert_eq!(answered, Stored::AlreadyAnswered(first.answer.clone()));

        // Two nodes change one provider: every follower gets the later revision last.
        let Stored::Stored { revision: by_a } =
            within("a store", share_a.store(write("c-2", "f", "openai", connected(2, "sk-a2")))).await.unwrap()
        else {
            panic!("stored")
        };
        let disconnected = SharedProvider { generation: 3, connection: None };
        let Stored::Stored { revision: by_b } =
            within("b store", share_b.store(write("c-3", "f", "openai", disconnected.clone()))).await.unwrap()
        else {
            panic!("stored")
        };
        assert!(by_b > by_a && by_a > first_revision);
        assert_eq!(next_provider(&mut on_b).await.2, by_a);
        assert_eq!(next_provider(&mut on_b).await, ("openai".to_owned(), disconnected.clone(), by_b));

        // A follower that starts now gets each provider's latest state only, then CaughtUp.
        let mut on_a = follow(&share_a);
        assert_eq!(next_provider(&mut on_a).await, ("openai".to_owned(), disconnected.clone(), by_b));
        assert_eq!(next(&mut on_a).await, ShareChange::CaughtUp);

        // An offer does not replace a shared state (a disconnection included), and stores a missing one.
        let offered = within("an offer", share_a.offer("openai", connected(9, "sk-old"))).await.expect("offer");
        assert_eq!(offered, None, "the shared disconnection wins");
        let offered = within("an offer", share_a.offer("anthropic", connected(1, "sk-ant"))).await.expect("offer");
        let revision = offered.expect("stored: the share had no anthropic");
        assert_eq!(next_provider(&mut on_b).await, ("anthropic".to_owned(), connected(1, "sk-ant"), revision));
    });
}

#[test]
fn with_nats_gone_nothing_is_stored_and_the_answer_stays_free() {
    let mut server = NatsServer::start();
    let a = node(&server.url(), "a");
    let share = NatsProviderShare::new(a.clone());
    server.kill();
    let refused =
        a.block_on(within("a store without NATS", share.store(write("c-1", "f", "openai", connected(1, "k")))));
    assert!(refused.is_err(), "{refused:?}");
    let lookup = a.block_on(within("a lookup without NATS", share.answer("c-1")));
    assert!(lookup.is_err(), "{lookup:?}");

    server.restart();
    let stored = a.block_on(async {
        troupe_test_support::wait::eventually_some("NATS back", troupe_test_support::wait::WAIT, || async {
            share.answer("c-1").await.ok()
        })
        .await
    });
    assert_eq!(stored, None, "the refused change recorded no answer");
    let stored =
        a.block_on(within("a store with NATS back", share.store(write("c-1", "f", "openai", connected(1, "k")))));
    assert!(matches!(stored, Ok(Stored::Stored { .. })), "{stored:?}");
}
