//! `provider.connect` and `provider.disconnect`: what each decides, staged as a change of the provider connections
//! that the store lane (`store_lane.rs`) makes durable, in the cluster's share first in a cluster, before it is
//! acknowledged. A redelivery is answered with its recorded answer: this node's, or in a cluster the one any node
//! recorded, looked up before anything else so that it is answered as the first time whichever node it reaches.

use serde_json::json;
use troupe_protocol::types::provider::{
    DisconnectReceipt, DurableConnection, ProviderConnectParams, ProviderConnectResult, ProviderDisconnectParams,
    ProviderDisconnectResult,
};
use troupe_runtime::clock::now_rfc3339;
use troupe_runtime::provider_store::{StoredConnection, request_fingerprint};

use super::clients::{build_client, list_models};
use super::store_lane::{Replay, Reply, Staged, share_step};
use super::*;

impl RuntimeActor {
    /// The answer to a redelivered `provider.connect`, from its recorded answer and the current snapshot.
    fn replayed_connect(&self, answer: serde_json::Value) -> Result<ProviderConnectResult, EngineError> {
        serde_json::from_value::<ProviderConnectResult>(json!({
            "durable_connection": answer["durable_connection"],
            "effective_auth_source": answer["effective_auth_source"],
            "snapshot": self.snapshot,
            "replayed": true,
        }))
        .map_err(|error| EngineError::Internal { detail: format!("a recorded answer is unreadable: {error}") })
    }

    /// The answer to a redelivered `provider.disconnect`.
    fn replayed_disconnect(
        &self,
        provider_id: &str,
        answer: serde_json::Value,
    ) -> Result<ProviderDisconnectResult, EngineError> {
        let mut result: ProviderDisconnectResult = serde_json::from_value(json!({
            "durable_receipt": answer["durable_receipt"],
            "disconnected": answer["disconnected"],
            "effective_auth_state": self.auth_state(provider_id),
            "snapshot": self.snapshot,
            "replayed": true,
        }))
        .map_err(|error| EngineError::Internal { detail: format!("a recorded answer is unreadable: {error}") })?;
        result.replayed = true;
        Ok(result)
    }

    /// Fails unless the client's expected revision (if any) is the current one.
    fn check_revision(&self, expected: Option<u64>) -> Result<(), EngineError> {
        match expected {
            Some(expected) if expected != self.snapshot.revision => {
                Err(EngineError::RevisionConflict { expected, found: self.snapshot.revision })
            }
            _ => Ok(()),
        }
    }

    /// The answer the cluster's share recorded under `key` (by any node); none without a share.
    fn shared_answer(
        &self,
        provider_id: &str,
        key: &str,
    ) -> impl Future<Output = Result<Option<RecordedAnswer>, EngineError>> + 'static {
        let lookup = self.share.as_ref().map(|share| share.answer(key));
        let provider_id = provider_id.to_owned();
        async move {
            match lookup {
                None => Ok(None),
                Some(lookup) => lookup
                    .await
                    .map_err(|error| EngineError::ProviderShareUnavailable { provider_id, detail: error.detail }),
            }
        }
    }

    fn knows_provider(&self, provider_id: &str) -> Result<(), EngineError> {
        if self.snapshot.providers.iter().any(|provider| provider.provider_id == provider_id) {
            Ok(())
        } else {
            Err(EngineError::ProviderNotFound { provider_id: provider_id.to_owned() })
        }
    }
}

fn connect_fingerprint(params: &ProviderConnectParams) -> String {
    request_fingerprint(&json!({
        "operation": "connect",
        "provider_id": params.provider_id,
        "setup_values": params.setup_values,
        "auth_method": params.auth_method,
        "auth_values": params.auth_values,
    }))
}

impl Handler<ConnectProvider> for RuntimeActor {
    type Result = Reply<ProviderConnectResult>;

    fn handle(&mut self, message: ConnectProvider, _: &mut Context<Self>) -> Self::Result {
        let params = message.params;
        let provider_id = params.provider_id.clone();
        let fingerprint = connect_fingerprint(&params);
        // Answered at once: a redelivery of a durable answer, or a request that cannot succeed.
        let early = (|| {
            if let Some(answer) = self.replay(&provider_id, &params.client_connect_id, &fingerprint)? {
                return self.replayed_connect(answer).map(Some);
            }
            self.knows_provider(&provider_id)?;
            self.check_revision(params.expected_catalog_revision)?;
            Ok(None)
        })();
        match early {
            Ok(None) => {}
            Ok(Some(answer)) => return Box::pin(actix::fut::ready(Ok(answer))),
            Err(error) => return Box::pin(actix::fut::ready(Err(error))),
        }
        // Building the client may read the local provider's script; listing the models checks the address and the
        // credentials now, rather than at the first run.
        let settings = (params.setup_values.clone(), params.auth_method.clone(), params.auth_values.clone());
        let id = provider_id.clone();
        // In a cluster, another node may have answered this request first.
        let shared_answer = self.shared_answer(&provider_id, &params.client_connect_id);
        let prepare = async move {
            if let Some(recorded) = shared_answer.await? {
                return Ok(Prepared::Recorded(recorded));
            }
            let (setup_values, auth_method, auth_values) = settings;
            let built = tokio::task::spawn_blocking(move || {
                build_client(&id, &setup_values, &auth_method, &auth_values).map_err(|detail| (id, detail))
            })
            .await
            .map_err(|error| EngineError::Internal {
                detail: format!("building the provider client failed: {error}"),
            })?;
            let client =
                built.map_err(|(provider_id, detail)| EngineError::InvalidProviderSetup { provider_id, detail })?;
            let listed = list_models(&client).await;
            Ok::<_, EngineError>(Prepared::Client(client, listed))
        };
        Box::pin(prepare.into_actor(self).then(move |prepared, actor, _| {
            let staged = prepared.and_then(|prepared| match prepared {
                Prepared::Recorded(recorded) => {
                    let answer = judge_recorded(&provider_id, &params.client_connect_id, &fingerprint, &recorded)?;
                    actor.replayed_connect(answer).map(Err)
                }
                Prepared::Client(client, listed) => {
                    let models = listed.map_err(|error| EngineError::ProviderUnreachable {
                        provider_id: provider_id.clone(),
                        kind: error.kind,
                        detail: error.to_string(),
                    })?;
                    Ok(Ok((client, models)))
                }
            });
            let (client, models) = match staged {
                Ok(Ok(ready)) => ready,
                Ok(Err(replayed)) => return Box::pin(actix::fut::ready(Ok(replayed))) as Reply<ProviderConnectResult>,
                Err(error) => return Box::pin(actix::fut::ready(Err(error))) as Reply<ProviderConnectResult>,
            };
            actor.change_store("the provider connection", move |actor| {
                // Decided again on the latest state: a redelivery or another change may have landed meanwhile.
                if let Some(answer) = actor.replay(&provider_id, &params.client_connect_id, &fingerprint)? {
                    return actor.replayed_connect(answer).map(Staged::Answer);
                }
                actor.check_revision(params.expected_catalog_revision)?;
                let mut contents = actor.store.contents.clone();
                let generation = contents.generations.get(&provider_id).copied().unwrap_or(0) + 1;
                let connected_at = now_rfc3339();
                let durable_connection = DurableConnection {
                    provider_id: provider_id.clone(),
                    generation,
                    connected_at: connected_at.clone(),
                };
                contents.connections.insert(
                    provider_id.clone(),
                    StoredConnection {
                        generation,
                        connected_at,
                        setup_values: params.setup_values.clone(),
                        auth_method: params.auth_method.clone(),
                        auth_values: params.auth_values.clone(),
                        models,
                    },
                );
                let model_count =
                    contents.connections.get(&provider_id).map_or(0, |connection| connection.models.len());
                contents.generations.insert(provider_id.clone(), generation);
                let recorded = contents.record_answer(
                    params.client_connect_id.clone(),
                    fingerprint.clone(),
                    json!({"durable_connection": durable_connection, "effective_auth_source": params.auth_method}),
                );
                let key = params.client_connect_id.clone();
                let replay_provider = provider_id.clone();
                let replay: Replay<ProviderConnectResult> = Box::new(move |actor, recorded| {
                    actor.replayed_connect(judge_recorded(&replay_provider, &key, &fingerprint, recorded)?)
                });
                let shared = share_step(&contents, &provider_id, &params.client_connect_id, recorded, replay);
                let adopt = move |actor: &mut RuntimeActor| {
                    tracing::info!(provider = %provider_id, generation, models = model_count, "provider connected");
                    actor.install(&provider_id, client);
                    actor.publish_change("provider_connected");
                    ProviderConnectResult {
                        durable_connection,
                        effective_auth_source: params.auth_method.clone(),
                        snapshot: actor.snapshot.clone(),
                        replayed: false,
                    }
                };
                Ok(Staged::Save { contents, adopt: Box::new(adopt), shared: Box::new(shared) })
            })
        }))
    }
}

/// What a `provider.connect` has once its client is ready, or the answer another node recorded for it.
enum Prepared {
    Recorded(RecordedAnswer),
    Client(ProviderClient, Result<Vec<String>, troupe_runtime::model::ModelError>),
}

impl Handler<DisconnectProvider> for RuntimeActor {
    type Result = Reply<ProviderDisconnectResult>;

    fn handle(&mut self, message: DisconnectProvider, _: &mut Context<Self>) -> Self::Result {
        let params = message.params;
        let provider_id = params.provider_id.clone();
        let fingerprint = request_fingerprint(&json!({
            "operation": "disconnect",
            "provider_id": params.provider_id,
            "expected_runtime_revision": params.expected_runtime_revision,
            "expected_connection_generation": params.expected_connection_generation,
        }));
        // In a cluster, another node may have answered this request first.
        let shared_answer = self.shared_answer(&provider_id, &params.client_request_id);
        Box::pin(shared_answer.into_actor(self).then(move |shared_answer, actor, _| match shared_answer {
            Err(error) => Box::pin(actix::fut::ready(Err(error))),
            Ok(Some(recorded)) => {
                let replayed = judge_recorded(&provider_id, &params.client_request_id, &fingerprint, &recorded)
                    .and_then(|answer| actor.replayed_disconnect(&provider_id, answer));
                Box::pin(actix::fut::ready(replayed))
            }
            Ok(None) => actor.disconnect(params, fingerprint),
        }))
    }
}

impl RuntimeActor {
    /// A `provider.disconnect` no node answered yet, in its turn.
    fn disconnect(&self, params: ProviderDisconnectParams, fingerprint: String) -> Reply<ProviderDisconnectResult> {
        let provider_id = params.provider_id.clone();
        self.change_store("the disconnection", move |actor| {
            if let Some(answer) = actor.replay(&provider_id, &params.client_request_id, &fingerprint)? {
                return actor.replayed_disconnect(&provider_id, answer).map(Staged::Answer);
            }
            actor.knows_provider(&provider_id)?;
            actor.check_revision(params.expected_runtime_revision)?;
            let current_generation =
                actor.store.contents.connections.get(&provider_id).map(|connection| connection.generation);
            if let Some(expected) = params.expected_connection_generation
                && Some(expected) != current_generation
            {
                return Err(EngineError::RevisionConflict { expected, found: current_generation.unwrap_or(0) });
            }
            let mut contents = actor.store.contents.clone();
            let disconnected = contents.connections.remove(&provider_id).is_some();
            let generation = contents.generations.get(&provider_id).copied().unwrap_or(0);
            let durable_receipt =
                DisconnectReceipt { provider_id: provider_id.clone(), generation, disconnected_at: now_rfc3339() };
            let recorded = contents.record_answer(
                params.client_request_id.clone(),
                fingerprint.clone(),
                json!({"durable_receipt": durable_receipt, "disconnected": disconnected}),
            );
            let key = params.client_request_id.clone();
            let replay_provider = provider_id.clone();
            let replay: Replay<ProviderDisconnectResult> = Box::new(move |actor, recorded| {
                let answer = judge_recorded(&replay_provider, &key, &fingerprint, recorded)?;
                actor.replayed_disconnect(&replay_provider, answer)
            });
            let shared = share_step(&contents, &provider_id, &params.client_request_id, recorded, replay);
            let adopt = move |actor: &mut RuntimeActor| {
                if disconnected {
                    tracing::info!(provider = %provider_id, generation, "provider disconnected");
                    actor.uninstall(&provider_id);
                    actor.publish_change("provider_disconnected");
                }
                ProviderDisconnectResult {
                    durable_receipt,
                    disconnected,
                    effective_auth_state: actor.auth_state(&provider_id),
                    snapshot: actor.snapshot.clone(),
                    replayed: false,
                }
            };
            Ok(Staged::Save { contents, adopt: Box::new(adopt), shared: Box::new(shared) })
        })
    }
}
