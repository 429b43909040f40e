//! `provider.connect` and `provider.disconnect`: changes of `providers.json`, made durable before they are
//! acknowledged.
//!
//! A change never blocks the actor's thread. Building a client (the local provider reads its script) and saving
//! (two `fsync`s) run on blocking threads, listing a provider's models is a network call, and meanwhile the actor
//! keeps answering snapshot requests. Changes are still applied one at a time, in arrival order, through the
//! actor's store lane: once the changes before it are done, a change decides on the latest durable state
//! (a redelivery finds the first answer there), its new contents are saved, and only once they are durable does
//! the actor adopt them, install or remove the client and tell every connection. A failed save changes nothing.

use serde_json::json;
use troupe_protocol::types::provider::{
    DisconnectReceipt, DurableConnection, ProviderConnectParams, ProviderConnectResult, ProviderDisconnectResult,
};
use troupe_runtime::clock::now_rfc3339;
use troupe_runtime::provider_store::{ProviderStoreContents, StoredConnection, request_fingerprint};

use super::clients::{build_client, list_models};
use super::*;

/// What a change decided on the latest durable state.
enum Staged<R> {
    /// Nothing to save: reply with this (a redelivery of a recorded answer).
    Answer(R),
    /// Save these contents; once they are durable, `adopt` applies the change to the actor and builds the reply.
    Save { contents: ProviderStoreContents, adopt: Box<dyn FnOnce(&mut RuntimeActor) -> R> },
}

/// How a change ends after its turn in the lane.
enum Finish<R> {
    Reply(Result<R, EngineError>),
    Adopt(Box<dyn FnOnce(&mut RuntimeActor) -> R>),
}

type Reply<R> = ResponseActFuture<RuntimeActor, Result<R, EngineError>>;

impl RuntimeActor {
    /// Applies one change of `providers.json` in its turn (see the module docs). `what` names the change in the
    /// error of a failed save.
    fn change_store<R: 'static>(
        &self,
        what: &'static str,
        stage: impl FnOnce(&mut RuntimeActor) -> Result<Staged<R>, EngineError> + 'static,
    ) -> Reply<R> {
        let lane = self.store_lane.clone();
        let turn = async move { lane.lock_owned().await };
        Box::pin(turn.into_actor(self).then(move |turn, actor, _| {
            let (save, finish) = match stage(actor) {
                Ok(Staged::Save { contents, adopt }) => (Some(actor.store.staged(contents)), Finish::Adopt(adopt)),
                Ok(Staged::Answer(reply)) => (None, Finish::Reply(Ok(reply))),
                Err(error) => (None, Finish::Reply(Err(error))),
            };
            let saving = async move {
                let pending = save?;
                Some(
                    tokio::task::spawn_blocking(move || {
                        let saved = pending.save();
                        (pending.contents, saved)
                    })
                    .await,
                )
            };
            saving.into_actor(actor).map(move |saved, actor, _| {
                // The next change takes its turn once this one is adopted (or abandoned).
                let _turn = turn;
                let adopt = match finish {
                    Finish::Reply(reply) => return reply,
                    Finish::Adopt(adopt) => adopt,
                };
                let failure = match saved {
                    Some(Ok((contents, Ok(())))) => {
                        actor.store.contents = contents;
                        return Ok(adopt(actor));
                    }
                    Some(Ok((_, Err(error)))) => error.to_string(),
                    Some(Err(join_error)) => format!("the save did not finish: {join_error}"),
                    None => "nothing was saved".to_owned(),
                };
                Err(EngineError::Internal { detail: format!("{what} was not saved: {failure}") })
            })
        }))
    }

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
        let prepare = async move {
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
            Ok::<_, EngineError>((client, listed))
        };
        Box::pin(prepare.into_actor(self).then(move |prepared, actor, _| {
            let staged = prepared.and_then(|(client, listed)| {
                let models = listed.map_err(|error| EngineError::ProviderUnreachable {
                    provider_id: provider_id.clone(),
                    detail: error.to_string(),
                })?;
                Ok((client, models))
            });
            let (client, models) = match staged {
                Ok(ready) => ready,
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
                contents.record_answer(
                    params.client_connect_id.clone(),
                    fingerprint,
                    json!({"durable_connection": durable_connection, "effective_auth_source": params.auth_method}),
                );
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
                Ok(Staged::Save { contents, adopt: Box::new(adopt) })
            })
        }))
    }
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
            contents.record_answer(
                params.client_request_id.clone(),
                fingerprint,
                json!({"durable_receipt": durable_receipt, "disconnected": disconnected}),
            );
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
            Ok(Staged::Save { contents, adopt: Box::new(adopt) })
        })
    }
}
