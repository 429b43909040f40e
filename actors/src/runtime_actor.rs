//! `RuntimeActor`: the one owner of the runtime snapshot (providers, models, agents), its revision, and the
//! provider connections behind it.
//!
//! The engine asks it for the snapshot; each connection registers a notifier at handshake, and every change of
//! the snapshot is broadcast to all of them as `runtime.changed`. `provider.connect` and `provider.disconnect`
//! are answered here: a connection is made durable in `providers.json` before it is acknowledged, installed in
//! the model router that runs use, and recorded under its client id so a redelivery gets the first answer.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use serde_json::json;
use troupe_protocol::notification::RuntimeChanged;
use troupe_protocol::server::ConnectionNotifier;
use troupe_protocol::types::provider::{
    DisconnectReceipt, DurableConnection, ProviderConnectParams, ProviderConnectResult, ProviderDisconnectParams,
    ProviderDisconnectResult,
};
use troupe_protocol::types::runtime::{AuthState, RuntimeChangedParams, RuntimeSnapshot};
use troupe_runtime::catalog::build_snapshot;
use troupe_runtime::clock::now_rfc3339;
use troupe_runtime::config::AgentConfig;
use troupe_runtime::model::anthropic::{Anthropic, AnthropicConfig};
use troupe_runtime::model::local::ScriptedModel;
use troupe_runtime::model::openai::{OpenAiCompatible, OpenAiCompatibleConfig};
use troupe_runtime::model::{ApiKey, ErrorStage, ModelError, ModelErrorKind, ModelProvider};
use troupe_runtime::provider_store::{ProviderStore, StoredConnection, request_fingerprint};

use crate::error::EngineError;
use crate::run_services::RunServices;

/// How long `provider.connect` waits for the provider to list its models.
const LIST_MODELS_TIMEOUT: Duration = Duration::from_secs(15);

/// How a provider's masked secrets are labelled in tool output: `provider <provider id> <auth value name>`, e.g.
/// `provider openai api_key`.
const PROVIDER_SECRET_PREFIX: &str = "provider ";

fn provider_secret_label(provider_id: &str, value_name: &str) -> String {
    format!("{PROVIDER_SECRET_PREFIX}{provider_id} {value_name}")
}

/// Returns the current snapshot.
#[derive(Message)]
#[rtype(result = "RuntimeSnapshot")]
pub struct GetSnapshot;

/// Registers (or replaces) a connection's notifier and returns the snapshot it starts from.
#[derive(Message)]
#[rtype(result = "RuntimeSnapshot")]
pub struct RegisterConnection {
    pub notifier: ConnectionNotifier,
}

/// Forgets a connection's notifier.
#[derive(Message)]
#[rtype(result = "()")]
pub struct UnregisterConnection {
    pub connection_id: u64,
}

/// `provider.connect`.
#[derive(Message)]
#[rtype(result = "Result<ProviderConnectResult, EngineError>")]
pub struct ConnectProvider {
    pub params: ProviderConnectParams,
}

/// `provider.disconnect`.
#[derive(Message)]
#[rtype(result = "Result<ProviderDisconnectResult, EngineError>")]
pub struct DisconnectProvider {
    pub params: ProviderDisconnectParams,
}

pub struct RuntimeActor {
    /// The current snapshot; its `revision` increases with every change.
    snapshot: RuntimeSnapshot,
    /// Connections that completed a handshake, by connection id.
    notifiers: HashMap<u64, ConnectionNotifier>,
    store: ProviderStore,
    agents: BTreeMap<String, AgentConfig>,
    services: Arc<RunServices>,
}

/// A provider client built from settings, before it is installed.
enum ProviderClient {
    Scripted(Arc<ScriptedModel>),
    OpenAi(OpenAiCompatible),
    Anthropic(Anthropic),
}

impl RuntimeActor {
    /// Installs every stored connection (without network calls) and builds the first snapshot.
    pub fn new(store: ProviderStore, agents: BTreeMap<String, AgentConfig>, services: Arc<RunServices>) -> Self {
        let mut actor = RuntimeActor {
            snapshot: build_snapshot(1, &BTreeMap::new(), &agents),
            notifiers: HashMap::new(),
            store,
            agents,
            services,
        };
        let stored: Vec<(String, StoredConnection)> =
            actor.store.contents.connections.iter().map(|(id, connection)| (id.clone(), connection.clone())).collect();
        for (provider_id, connection) in stored {
            match build_client(&provider_id, &connection.setup_values, &connection.auth_method, &connection.auth_values)
            {
                Ok(client) => actor.install(&provider_id, client),
                Err(error) => {
                    tracing::warn!(%provider_id, %error, "a stored provider connection could not be restored");
                    actor.store.contents.connections.remove(&provider_id);
                }
            }
        }
        actor.snapshot = actor.build(1);
        actor.sync_secrets();
        actor
    }

    /// Makes the masked secrets of tool output the API keys of the connections stored now.
    fn sync_secrets(&self) {
        let secrets = &self.services.secrets;
        // One label per secret value (a provider may hold several), so none replaces another.
        let wanted: Vec<(String, &String)> = self
            .store
            .contents
            .connections
            .iter()
            .flat_map(|(provider_id, connection)| {
                connection
                    .auth_values
                    .iter()
                    .map(move |(name, value)| (provider_secret_label(provider_id, name), value))
            })
            .collect();
        for label in secrets.labels().into_iter().filter(|label| label.starts_with(PROVIDER_SECRET_PREFIX)) {
            if !wanted.iter().any(|(wanted_label, _)| *wanted_label == label) {
                secrets.remove(&label);
            }
        }
        for (label, value) in wanted {
            secrets.set(label, value.clone());
        }
    }

    /// The snapshot at `revision`: the catalog with the stored connections and agents, and the sandbox.
    fn build(&self, revision: u64) -> RuntimeSnapshot {
        let mut snapshot = build_snapshot(revision, &self.store.contents.connections, &self.agents);
        snapshot.sandbox = Some(self.services.sandbox.status());
        snapshot
    }

    fn install(&self, provider_id: &str, client: ProviderClient) {
        match client {
            ProviderClient::Scripted(scripted) => self.services.models.set_scripted(Some(scripted)),
            ProviderClient::OpenAi(client) => {
                self.services.models.set_remote(provider_id, Some(Arc::new(client) as Arc<dyn ModelProvider>))
            }
            ProviderClient::Anthropic(client) => {
                self.services.models.set_remote(provider_id, Some(Arc::new(client) as Arc<dyn ModelProvider>))
            }
        }
    }

    fn uninstall(&self, provider_id: &str) {
        if provider_id == "local" {
            self.services.models.set_scripted(None);
        } else {
            self.services.models.set_remote(provider_id, None);
        }
    }

    /// Rebuilds the snapshot at the next revision and tells every connection.
    fn publish_change(&mut self, reason: &str) {
        let previous_revision = self.snapshot.revision;
        self.snapshot = self.build(previous_revision + 1);
        self.sync_secrets();
        let params = RuntimeChangedParams {
            previous_revision: Some(previous_revision),
            snapshot: self.snapshot.clone(),
            reasons: vec![reason.to_owned()],
        };
        self.notifiers.retain(|_, notifier| notifier.notify::<RuntimeChanged>(&params).is_ok());
    }

    /// The recorded answer for `key` if this is a redelivery; a conflict if the key was used for another request.
    fn replay(
        &self,
        provider_id: &str,
        key: &str,
        fingerprint: &str,
    ) -> Result<Option<serde_json::Value>, EngineError> {
        match self.store.contents.answers.get(key) {
            None => Ok(None),
            Some(recorded) if recorded.request_fingerprint == fingerprint => Ok(Some(recorded.answer.clone())),
            Some(_) => Err(EngineError::ProviderIdempotencyConflict {
                provider_id: provider_id.to_owned(),
                key: key.to_owned(),
            }),
        }
    }

    fn auth_state(&self, provider_id: &str) -> AuthState {
        self.snapshot
            .providers
            .iter()
            .find(|provider| provider.provider_id == provider_id)
            .map_or(AuthState::Missing, |provider| provider.auth_state.clone())
    }
}

/// Builds a provider client from its settings, checking them. Errors never contain secret values.
fn build_client(
    provider_id: &str,
    setup_values: &BTreeMap<String, String>,
    auth_method: &str,
    auth_values: &BTreeMap<String, String>,
) -> Result<ProviderClient, String> {
    let allowed_setup: &[&str] = if provider_id == "local" { &["script"] } else { &["base_url"] };
    if let Some(unknown) = setup_values.keys().find(|key| !allowed_setup.contains(&key.as_str())) {
        return Err(format!(
            "unknown setup value `{unknown}` for `{provider_id}`; allowed: {}",
            allowed_setup.join(", ")
        ));
    }
    let api_key = match auth_method {
        "none" => {
            if !auth_values.is_empty() {
                return Err("auth_method `none` takes no auth_values".to_owned());
            }
            None
        }
        "api_key" => match auth_values.get("api_key") {
            Some(key) if !key.trim().is_empty() && auth_values.len() == 1 => Some(ApiKey::new(key.trim())),
            _ => {
                return Err("auth_method `api_key` needs exactly one auth value, a non-empty `api_key`".to_owned());
            }
        },
        other => {
            return Err(format!("unknown auth_method `{other}`; use `api_key` or `none`"));
        }
    };
    match provider_id {
        "local" => {
            if api_key.is_some() {
                return Err("the local provider takes auth_method `none`".to_owned());
            }
            let script = setup_values.get("script").ok_or("the local provider needs setup_values.script")?;
            let scripted = ScriptedModel::from_file(&PathBuf::from(script))
                .map_err(|error| format!("the script cannot be used: {error}"))?;
            Ok(ProviderClient::Scripted(Arc::new(scripted)))
        }
        "openai" => {
            let mut config = match api_key {
                Some(key) => OpenAiCompatibleConfig::openai(key),
                None => match setup_values.get("base_url") {
                    Some(base_url) => OpenAiCompatibleConfig::keyless(base_url.clone()),
                    None => return Err("without an api_key, setup_values.base_url is required (e.g. Ollama)".into()),
                },
            };
            if let Some(base_url) = setup_values.get("base_url") {
                config.base_url = base_url.clone();
            }
            OpenAiCompatible::new(config).map(ProviderClient::OpenAi).map_err(|error| error.to_string())
        }
        "anthropic" => {
            let key = api_key.ok_or("the anthropic provider needs auth_method `api_key`")?;
            let mut config = AnthropicConfig::new(key);
            if let Some(base_url) = setup_values.get("base_url") {
                config.base_url = base_url.clone();
            }
            Anthropic::new(config).map(ProviderClient::Anthropic).map_err(|error| error.to_string())
        }
        other => Err(format!("unknown provider `{other}`")),
    }
}

async fn within_listing_timeout(
    listing: impl Future<Output = Result<Vec<String>, ModelError>>,
) -> Result<Vec<String>, ModelError> {
    tokio::time::timeout(LIST_MODELS_TIMEOUT, listing).await.unwrap_or_else(|_| {
        Err(ModelError::new(ModelErrorKind::Timeout, ErrorStage::Request, "listing the models timed out"))
    })
}

impl Actor for RuntimeActor {
    type Context = Context<Self>;
}

impl Handler<GetSnapshot> for RuntimeActor {
    type Result = MessageResult<GetSnapshot>;

    fn handle(&mut self, _: GetSnapshot, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.snapshot.clone())
    }
}

impl Handler<RegisterConnection> for RuntimeActor {
    type Result = MessageResult<RegisterConnection>;

    fn handle(&mut self, message: RegisterConnection, _: &mut Context<Self>) -> Self::Result {
        self.notifiers.retain(|_, notifier| !notifier.is_closed());
        self.notifiers.insert(message.notifier.connection_id(), message.notifier);
        MessageResult(self.snapshot.clone())
    }
}

impl Handler<UnregisterConnection> for RuntimeActor {
    type Result = ();

    fn handle(&mut self, message: UnregisterConnection, _: &mut Context<Self>) {
        self.notifiers.remove(&message.connection_id);
    }
}

impl Handler<ConnectProvider> for RuntimeActor {
    type Result = ResponseActFuture<Self, Result<ProviderConnectResult, EngineError>>;

    fn handle(&mut self, message: ConnectProvider, _: &mut Context<Self>) -> Self::Result {
        let params = message.params;
        let provider_id = params.provider_id.clone();
        let fingerprint = request_fingerprint(&json!({
            "operation": "connect",
            "provider_id": params.provider_id,
            "setup_values": params.setup_values,
            "auth_method": params.auth_method,
            "auth_values": params.auth_values,
        }));
        let prepared = (|| {
            if let Some(answer) = self.replay(&provider_id, &params.client_connect_id, &fingerprint)? {
                return Ok(Err(answer));
            }
            if !self.snapshot.providers.iter().any(|provider| provider.provider_id == provider_id) {
                return Err(EngineError::ProviderNotFound { provider_id: provider_id.clone() });
            }
            if let Some(expected) = params.expected_catalog_revision
                && expected != self.snapshot.revision
            {
                return Err(EngineError::RevisionConflict { expected, found: self.snapshot.revision });
            }
            build_client(&provider_id, &params.setup_values, &params.auth_method, &params.auth_values)
                .map(Ok)
                .map_err(|detail| EngineError::InvalidProviderSetup { provider_id: provider_id.clone(), detail })
        })();
        let client = match prepared {
            Err(error) => return Box::pin(actix::fut::ready(Err(error))),
            Ok(Err(answer)) => {
                let snapshot = self.snapshot.clone();
                let replayed = serde_json::from_value::<ProviderConnectResult>(json!({
                    "durable_connection": answer["durable_connection"],
                    "effective_auth_source": answer["effective_auth_source"],
                    "snapshot": snapshot,
                    "replayed": true,
                }))
                .map_err(|error| EngineError::Internal { detail: format!("a recorded answer is unreadable: {error}") });
                return Box::pin(actix::fut::ready(replayed));
            }
            Ok(Ok(client)) => client,
        };
        // Listing the models checks the address and the credentials now, rather than at the first run.
        let listing = async move {
            let listed = match &client {
                ProviderClient::Scripted(_) => Ok(Vec::new()),
                ProviderClient::OpenAi(openai) => within_listing_timeout(openai.list_models()).await,
                ProviderClient::Anthropic(anthropic) => within_listing_timeout(anthropic.list_models()).await,
            };
            (client, listed)
        };
        Box::pin(listing.into_actor(self).map(move |(client, listed), actor, _| {
            let models = listed.map_err(|error| EngineError::ProviderUnreachable {
                provider_id: provider_id.clone(),
                detail: error.to_string(),
            })?;
            let generation = actor.store.contents.generations.get(&provider_id).copied().unwrap_or(0) + 1;
            let connected_at = now_rfc3339();
            let durable_connection =
                DurableConnection { provider_id: provider_id.clone(), generation, connected_at: connected_at.clone() };
            let previous = actor.store.contents.clone();
            let contents = &mut actor.store.contents;
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
            contents.generations.insert(provider_id.clone(), generation);
            contents.record_answer(
                params.client_connect_id.clone(),
                fingerprint,
                json!({"durable_connection": durable_connection, "effective_auth_source": params.auth_method}),
            );
            if let Err(error) = actor.store.save() {
                actor.store.contents = previous;
                return Err(EngineError::Internal {
                    detail: format!("the provider connection was not saved: {error}"),
                });
            }
            actor.install(&provider_id, client);
            actor.publish_change("provider_connected");
            Ok(ProviderConnectResult {
                durable_connection,
                effective_auth_source: params.auth_method.clone(),
                snapshot: actor.snapshot.clone(),
                replayed: false,
            })
        }))
    }
}

impl Handler<DisconnectProvider> for RuntimeActor {
    type Result = Result<ProviderDisconnectResult, EngineError>;

    fn handle(&mut self, message: DisconnectProvider, _: &mut Context<Self>) -> Self::Result {
        let params = message.params;
        let provider_id = params.provider_id.clone();
        let fingerprint = request_fingerprint(&json!({
            "operation": "disconnect",
            "provider_id": params.provider_id,
            "expected_runtime_revision": params.expected_runtime_revision,
            "expected_connection_generation": params.expected_connection_generation,
        }));
        if let Some(answer) = self.replay(&provider_id, &params.client_request_id, &fingerprint)? {
            let mut result: ProviderDisconnectResult = serde_json::from_value(json!({
                "durable_receipt": answer["durable_receipt"],
                "disconnected": answer["disconnected"],
                "effective_auth_state": self.auth_state(&provider_id),
                "snapshot": self.snapshot,
                "replayed": true,
            }))
            .map_err(|error| EngineError::Internal { detail: format!("a recorded answer is unreadable: {error}") })?;
            result.replayed = true;
            return Ok(result);
        }
        if !self.snapshot.providers.iter().any(|provider| provider.provider_id == provider_id) {
            return Err(EngineError::ProviderNotFound { provider_id });
        }
        if let Some(expected) = params.expected_runtime_revision
            && expected != self.snapshot.revision
        {
            return Err(EngineError::RevisionConflict { expected, found: self.snapshot.revision });
        }
        let current_generation =
            self.store.contents.connections.get(&provider_id).map(|connection| connection.generation);
        if let Some(expected) = params.expected_connection_generation
            && Some(expected) != current_generation
        {
            return Err(EngineError::RevisionConflict { expected, found: current_generation.unwrap_or(0) });
        }
        let previous = self.store.contents.clone();
        let disconnected = self.store.contents.connections.remove(&provider_id).is_some();
        let generation = self.store.contents.generations.get(&provider_id).copied().unwrap_or(0);
        let durable_receipt =
            DisconnectReceipt { provider_id: provider_id.clone(), generation, disconnected_at: now_rfc3339() };
        self.store.contents.record_answer(
            params.client_request_id.clone(),
            fingerprint,
            json!({"durable_receipt": durable_receipt, "disconnected": disconnected}),
        );
        if let Err(error) = self.store.save() {
            self.store.contents = previous;
            return Err(EngineError::Internal { detail: format!("the disconnection was not saved: {error}") });
        }
        if disconnected {
            self.uninstall(&provider_id);
            self.publish_change("provider_disconnected");
        }
        Ok(ProviderDisconnectResult {
            durable_receipt,
            disconnected,
            effective_auth_state: self.auth_state(&provider_id),
            snapshot: self.snapshot.clone(),
            replayed: false,
        })
    }
}
