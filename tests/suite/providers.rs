//! `provider.connect` and `provider.disconnect`: durable, idempotent by client id, checked against revisions,
//! broadcast to every connection as `runtime.changed`, and never revealing a key.

use serde_json::json;
use troupe_protocol::client::{ClientDelivery, ClientError};
use troupe_protocol::method;
use troupe_protocol::types::provider::{ProviderConnectParams, ProviderDisconnectParams};
use troupe_protocol::types::runtime::AuthState;

use super::support::*;
use troupe_test_support::{FakeResponse, FakeServer};

#[tokio::test]
async fn connecting_is_durable_idempotent_broadcast_and_keeps_keys_secret() {
    let models = json!({"data": [{"id": "m1"}, {"id": "m2"}]}).to_string();
    let vendor =
        FakeServer::start(vec![FakeResponse::status(200, &[], models.clone()), FakeResponse::status(200, &[], models)])
            .await;
    let daemon = TestDaemon::start();
    let (client, _) = daemon.client().await;
    let (_observer, mut observed) = daemon.client().await;
    let params = ProviderConnectParams {
        provider_id: "openai".into(),
        expected_catalog_revision: Some(1),
        setup_values: [("base_url".to_owned(), format!("{}/v1", vendor.base_url))].into(),
        auth_method: "api_key".into(),
        auth_values: [("api_key".to_owned(), "sk-KEEP-ME-SECRET".to_owned())].into(),
        client_connect_id: "connect-1".into(),
    };
    let first = within("connect", client.call::<method::ProviderConnect>(params.clone())).await.unwrap();
    assert!(!first.replayed);
    assert_eq!(first.durable_connection.generation, 1);
    assert_eq!(first.snapshot.revision, 2);
    let openai = first.snapshot.providers.iter().find(|p| p.provider_id == "openai").unwrap();
    assert!(openai.connected);
    assert_eq!(openai.auth_state, AuthState::Configured);
    let models: Vec<&str> = first.snapshot.models.iter().map(|m| m.model.as_str()).collect();
    assert!(models.contains(&"openai/m1") && models.contains(&"openai/m2"), "{models:?}");

    // Another connection is told, with the reason.
    let changed = within("runtime.changed", async {
        loop {
            if let Some(ClientDelivery::RuntimeChanged(changed)) = observed.next().await
                && changed.reasons == ["provider_connected"]
            {
                return changed;
            }
        }
    })
    .await;
    assert_eq!((changed.previous_revision, changed.snapshot.revision), (Some(1), 2));

    // A redelivery gets the first answer; the same id with other content is a conflict.
    let again = client.call::<method::ProviderConnect>(params.clone()).await.unwrap();
    assert!(again.replayed);
    assert_eq!(again.durable_connection, first.durable_connection);
    let mut different = params.clone();
    different.auth_values.insert("api_key".into(), "sk-OTHER".into());
    let conflict = client.call::<method::ProviderConnect>(different).await.unwrap_err();
    assert!(matches!(&conflict, ClientError::Rpc(e) if e.typed_code() == Some("idempotency_conflict")));

    // A stale revision is refused.
    let mut stale = params.clone();
    stale.client_connect_id = "connect-2".into();
    let stale = client.call::<method::ProviderConnect>(stale).await.unwrap_err();
    let ClientError::Rpc(stale) = stale else { panic!() };
    assert_eq!(stale.typed_code(), Some("revision_conflict"));

    // Bad settings are a clear -32602 that never echoes the key.
    let mut bad = params.clone();
    bad.client_connect_id = "connect-3".into();
    bad.expected_catalog_revision = None;
    bad.setup_values.insert("colour".into(), "red".into());
    let ClientError::Rpc(bad) = client.call::<method::ProviderConnect>(bad).await.unwrap_err() else { panic!() };
    assert_eq!((bad.code, bad.typed_code()), (-32602, Some("invalid_provider_setup")));
    assert!(bad.detail().unwrap().contains("colour"));

    let everything = format!("{first:?}{again:?}{stale:?}{bad:?}{}", serde_json::to_string(&first.snapshot).unwrap());
    assert!(!everything.contains("KEEP-ME-SECRET"));

    // Durable: a restarted daemon still has the connection.
    drop(client);
    let data_dir = daemon.stop();
    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..DaemonSetup::default() });
    let (client, _) = daemon.client().await;
    let snapshot = client.call::<method::RuntimeSnapshotGet>(Default::default()).await.unwrap().snapshot;
    assert!(snapshot.providers.iter().any(|p| p.provider_id == "openai" && p.connected && p.generation == 1));

    let disconnect = ProviderDisconnectParams {
        provider_id: "openai".into(),
        expected_runtime_revision: None,
        expected_connection_generation: Some(1),
        client_request_id: "disconnect-1".into(),
    };
    let gone = client.call::<method::ProviderDisconnect>(disconnect.clone()).await.unwrap();
    assert!(gone.disconnected && !gone.replayed);
    assert_eq!(gone.effective_auth_state, AuthState::Missing);
    assert!(!gone.snapshot.models.iter().any(|m| m.provider_id == "openai"));
    assert!(client.call::<method::ProviderDisconnect>(disconnect).await.unwrap().replayed);
}
