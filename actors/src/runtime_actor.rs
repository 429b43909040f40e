//! `RuntimeActor`: the one owner of the runtime snapshot (providers, models, agents), its revision, and the
//! provider connections behind it.
//!
//! The engine asks it for the snapshot; each connection registers a notifier at handshake, and every change of
//! the snapshot is broadcast to all of them as `runtime.changed`. `provider.connect` and `provider.disconnect`
//! are answered here: a connection is made durable in `providers.json` before it is acknowledged, installed in
//! the model router that runs use, and recorded under its client id so a redelivery gets the first answer.
//!
//! `providers.json` is saved on a blocking thread, never on this actor's thread, and its changes are applied one
//! at a time in arrival order (`store_lane.rs`): meanwhile the actor keeps answering snapshot requests.
//!
//! In a cluster the connections are shared by every node through a [`ProviderShare`] (`shared.rs`): a change is
//! stored there before it is saved here and acknowledged, and every node applies the share's changes as its own.

mod clients;
mod providers;
mod shared;
mod store_lane;

pub use shared::InstallProviderShare;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use actix::prelude::*;
use troupe_protocol::notification::RuntimeChanged;
use troupe_protocol::server::ConnectionNotifier;
use troupe_protocol::types::provider::{
    ProviderConnectParams, ProviderConnectResult, ProviderDisconnectParams, ProviderDisconnectResult,
};
use troupe_protocol::types::runtime::{AuthState, ProviderKind, RuntimeChangedParams, RuntimeSnapshot};
use troupe_runtime::catalog::build_snapshot;
use troupe_runtime::config::AgentConfig;
use troupe_runtime::model::ModelProvider;
use troupe_runtime::provider_share::ProviderShare;
use troupe_runtime::provider_store::{ProviderStore, RecordedAnswer, StoredConnection};

use crate::error::EngineError;
use crate::run_services::RunServices;
use clients::{ProviderClient, build_client};

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
    /// `providers.json` as last made durable: a change is adopted only once it is saved.
    store: ProviderStore,
    /// Orders the changes of `providers.json`: each decides on the state the previous one left.
    store_lane: Arc<tokio::sync::Mutex<()>>,
    agents: BTreeMap<String, AgentConfig>,
    services: Arc<RunServices>,
    /// The cluster's shared connections; `None` on a single node.
    share: Option<Arc<dyn ProviderShare>>,
    /// Per provider, the share's revision this node's connection is at: an older change of the share is skipped.
    shared_revisions: HashMap<String, u64>,
    /// Whether this node offered the share the connections it had before it joined (done once).
    offered: bool,
    /// The MCP servers' changes since the first snapshot, followed from the actor's start.
    mcp_changes: Option<tokio::sync::watch::Receiver<u64>>,
}

impl RuntimeActor {
    /// Installs every stored connection (without network calls) and builds the first snapshot.
    pub fn new(store: ProviderStore, agents: BTreeMap<String, AgentConfig>, services: Arc<RunServices>) -> Self {
        let mcp_changes = Some(services.mcp.subscribe());
        let mut actor = RuntimeActor {
            snapshot: build_snapshot(1, &BTreeMap::new(), &agents),
            notifiers: HashMap::new(),
            store,
            store_lane: Arc::default(),
            agents,
            services,
            share: None,
            shared_revisions: HashMap::new(),
            offered: false,
            // Taken before the first snapshot is built, so that no change after it goes unpublished.
            mcp_changes,
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

    /// The snapshot at `revision`: the catalog with the stored connections and agents, `[models]`, and the sandbox.
    fn build(&self, revision: u64) -> RuntimeSnapshot {
        let mut snapshot = build_snapshot(revision, &self.store.contents.connections, &self.agents);
        troupe_runtime::catalog::apply_model_config(&mut snapshot, &self.services.models.configured());
        snapshot.sandbox = Some(self.services.sandbox.status());
        snapshot.mcp_servers = self.services.mcp.statuses();
        snapshot
    }

    /// Publishes `runtime.changed` (reason `mcp_servers_changed`) whenever an MCP server's status changes, for as
    /// long as the servers run.
    fn follow_mcp_servers(&self, mut changes: tokio::sync::watch::Receiver<u64>, ctx: &mut Context<Self>) {
        let changed = async move { changes.changed().await.ok().map(|()| changes) };
        ctx.spawn(changed.into_actor(self).map(|changes, actor, ctx| {
            if let Some(changes) = changes {
                actor.publish_change("mcp_servers_changed");
                actor.follow_mcp_servers(changes, ctx);
            }
        }));
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
        if ProviderKind::of_provider_id(provider_id) == Some(ProviderKind::Local) {
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
        self.store
            .contents
            .answers
            .get(key)
            .map(|recorded| judge_recorded(provider_id, key, fingerprint, recorded))
            .transpose()
    }

    fn auth_state(&self, provider_id: &str) -> AuthState {
        self.snapshot
            .providers
            .iter()
            .find(|provider| provider.provider_id == provider_id)
            .map_or(AuthState::Missing, |provider| provider.auth_state.clone())
    }
}

/// A recorded answer's JSON if it answered the same request (`fingerprint`); a conflict if `key` was used for
/// another.
fn judge_recorded(
    provider_id: &str,
    key: &str,
    fingerprint: &str,
    recorded: &RecordedAnswer,
) -> Result<serde_json::Value, EngineError> {
    if recorded.request_fingerprint == fingerprint {
        Ok(recorded.answer.clone())
    } else {
        Err(EngineError::ProviderIdempotencyConflict { provider_id: provider_id.to_owned(), key: key.to_owned() })
    }
}

impl Actor for RuntimeActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if let Some(changes) = self.mcp_changes.take() {
            self.follow_mcp_servers(changes, ctx);
        }
    }
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

/// Test-only size query: how many connections have a notifier registered (one per open, handshaken connection).
#[cfg(feature = "test-hooks")]
#[derive(Message)]
#[rtype(result = "usize")]
pub struct CountNotifiers;

#[cfg(feature = "test-hooks")]
impl Handler<CountNotifiers> for RuntimeActor {
    type Result = usize;

    fn handle(&mut self, _: CountNotifiers, _: &mut Context<Self>) -> usize {
        self.notifiers.len()
    }
}
