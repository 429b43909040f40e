//! A cluster's nodes share provider connections, through real `troupe serve --cluster … --node …` processes on a
//! real nats-server: a provider connected through one node is connected on every node (its snapshot says so and its
//! clients are told with `runtime.changed`), so a run hosted on another node uses it; a redelivered connect reaching
//! another node gets the first answer; a disconnection through any node disconnects it everywhere.

use std::time::Duration;

use serde_json::json;
use troupe_protocol::client::{Client, ClientDelivery, ClientError};
use troupe_protocol::method;
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::provider::ProviderConnectParams;
use troupe_protocol::types::runtime::RuntimeSnapshot;
use troupe_test_support::NatsServer;

use super::cluster::{Loopback, start_node};
use super::support::*;

async fn snapshot(client: &Client) -> RuntimeSnapshot {
    within("runtime.snapshot.get", client.call::<method::RuntimeSnapshotGet>(Default::default()))
        .await
        .expect("runtime.snapshot.get")
        .snapshot
}

/// Whether the local provider has a script connected: `local` is always listed as connected (its `echo` model
/// needs nothing), but only a connection gives it a generation.
fn script_connected(snapshot: &RuntimeSnapshot) -> bool {
    snapshot.providers.iter().any(|provider| provider.provider_id == "local" && provider.generation > 0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_connected_through_one_node_is_connected_on_every_node_and_disconnected_through_any() {
    let cluster = Loopback::start();
    let (dirs, project) = (cluster.dirs.path(), &cluster.project);
    let a = cluster.node("a");
    let b = cluster.node("b");
    let (client_a, mut deliveries_a) = a.client().await;
    let (observer_a, mut observed_a) = a.client().await;
    let (client_b, _) = b.client().await;
    assert!(!script_connected(&snapshot(&client_a).await), "nothing is connected yet");

    // Connected through b only.
    let script = dirs.join("script.json");
    std::fs::write(&script, json!({"turns": [{"text": "ran on a"}]}).to_string()).expect("script");
    let params = ProviderConnectParams {
        provider_id: "local".to_owned(),
        expected_catalog_revision: None,
        setup_values: [("script".to_owned(), script.display().to_string())].into(),
        auth_method: "none".to_owned(),
        auth_values: Default::default(),
        client_connect_id: troupe_runtime::clock::new_id(),
    };
    let first = within("provider.connect on b", client_b.call::<method::ProviderConnect>(params.clone()))
        .await
        .expect("connected through b");
    assert!(!first.replayed && script_connected(&first.snapshot));

    // Node a applies it and tells its clients.
    let changed = within("runtime.changed on a", async {
        loop {
            match observed_a.next().await {
                Some(ClientDelivery::RuntimeChanged(changed)) if changed.reasons == ["provider_connected"] => {
                    return changed;
                }
                Some(_) => {}
                None => panic!("node a's connection closed"),
            }
        }
    })
    .await;
    assert!(script_connected(&changed.snapshot), "{:?}", changed.snapshot.providers);
    assert!(script_connected(&snapshot(&observer_a).await), "a's snapshot shows it connected");

    // The same request redelivered to a gets b's answer; the same id for another request is a conflict there too.
    let again = within("provider.connect again on a", client_a.call::<method::ProviderConnect>(params.clone()))
        .await
        .expect("redelivered through a");
    assert!(again.replayed, "a redelivery through another node is a replay");
    assert_eq!(again.durable_connection, first.durable_connection);
    let mut different = params.clone();
    different.setup_values.insert("script".to_owned(), dirs.join("other.json").display().to_string());
    std::fs::write(dirs.join("other.json"), json!({"turns": [{"text": "other"}]}).to_string()).expect("script");
    let conflict = within("a conflicting reuse on a", client_a.call::<method::ProviderConnect>(different))
        .await
        .expect_err("a conflict");
    assert!(
        matches!(&conflict, ClientError::Rpc(error) if error.typed_code() == Some("idempotency_conflict")),
        "{conflict:?}"
    );

    // A session hosted on a, run through b, uses the provider on a.
    let session_id = create_session_in(&client_a, project).await.session_id;
    within("subscribe", client_a.subscribe(&session_id, None)).await.expect("subscribe");
    eventually_some("node b knows the session", WAIT, || async {
        let listed = client_b.call::<method::SessionList>(Default::default()).await.expect("list");
        listed.sessions.into_iter().find(|meta| meta.session_id == session_id && meta.node.as_deref() == Some("a"))
    })
    .await;
    let run_id = start_run(&client_b, &session_id, selection_of("default", "local/scripted"), "go").await;
    let events =
        events_until(&mut deliveries_a, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    assert!(matches!(events.last().map(|event| &event.payload), Some(EventPayload::RunCompleted { .. })), "{events:?}");

    // Disconnected through a: b's snapshot shows it disconnected.
    disconnect_provider(&client_a, "local").await;
    eventually_some("node b sees the disconnection", Duration::from_secs(20), || async {
        (!script_connected(&snapshot(&client_b).await)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_ran_alone_offers_its_connections_when_it_joins() {
    let nats = NatsServer::start();
    let dirs = tempfile::tempdir().expect("temp dir");
    let dir_a = dirs.path().join("a");
    std::fs::create_dir_all(&dir_a).expect("data dir");
    std::fs::write(dir_a.join("config.toml"), "[titles]\nauto = false\n").expect("config.toml");
    let mut alone = troupe_serve(&dir_a).listen("127.0.0.1:0").spawn();
    let (client, _) = alone.client().await;
    connect_script(&client, dirs.path(), json!({"turns": [{"text": "from before"}]})).await;
    alone.kill();

    let b = start_node(&nats.url(), "b", &dirs.path().join("b"));
    let (client_b, _) = b.client().await;
    assert!(!script_connected(&snapshot(&client_b).await), "nothing is shared yet");
    let a = start_node(&nats.url(), "a", &dir_a);
    let (client_a, _) = a.client().await;
    assert!(script_connected(&snapshot(&client_a).await), "a keeps its own connection");
    eventually_some("node b gets the connection a had alone", WAIT, || async {
        script_connected(&snapshot(&client_b).await).then_some(())
    })
    .await;
}
