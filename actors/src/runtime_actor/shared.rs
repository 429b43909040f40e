//! The cluster's shared provider connections on this node: the share's changes are applied as a local connect or
//! disconnect is (saved in `providers.json`, the client installed or removed, `runtime.changed` sent to this node's
//! connections), in the actor's store lane like every change, and skipped where this node is at the provider's
//! revision already (its own change, or a later one): the share's latest revision of a provider wins on every node.
//!
//! Once the share's contents are applied, a node offers it the connections of providers the share has no state for
//! (the node ran alone before it joined); where the share has one, it wins and was applied.

use troupe_runtime::provider_share::{ProviderShare, ShareChange, SharedProvider};

use super::clients::build_client;
use super::*;

/// Gives the actor the cluster's share: it stores its changes there from now on, and applies the share's.
#[derive(Message)]
#[rtype(result = "()")]
pub struct InstallProviderShare {
    pub share: Arc<dyn ProviderShare>,
}

/// A change the share's follow saw.
#[derive(Message)]
#[rtype(result = "()")]
struct ShareChanged(ShareChange);

impl Handler<InstallProviderShare> for RuntimeActor {
    type Result = ();

    fn handle(&mut self, message: InstallProviderShare, ctx: &mut Context<Self>) {
        let actor = ctx.address();
        message.share.follow(Box::new(move |change| actor.do_send(ShareChanged(change))));
        self.share = Some(message.share);
    }
}

impl Handler<ShareChanged> for RuntimeActor {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, message: ShareChanged, _: &mut Context<Self>) -> Self::Result {
        match message.0 {
            ShareChange::Provider { provider_id, state, revision } => self.apply_shared(provider_id, *state, revision),
            ShareChange::CaughtUp => self.offer_local_connections(),
        }
    }
}

/// What applying a shared state made of this node's store, on a blocking thread.
struct Applied {
    store: ProviderStore,
    client: Option<ProviderClient>,
    saved: Result<(), troupe_runtime::error::RuntimeError>,
}

impl RuntimeActor {
    /// Applies `provider_id`'s shared state at `revision` in its turn, unless this node is at that revision already.
    fn apply_shared(&self, provider_id: String, state: SharedProvider, revision: u64) -> ResponseActFuture<Self, ()> {
        let lane = self.store_lane.clone();
        let turn = async move { lane.lock_owned().await };
        Box::pin(turn.into_actor(self).then(move |turn, actor, _| {
            let current = actor.shared_revisions.get(&provider_id).copied().unwrap_or(0);
            if revision <= current {
                return Box::pin(actix::fut::ready(())) as ResponseActFuture<Self, ()>;
            }
            let generation =
                actor.store.contents.generations.get(&provider_id).copied().unwrap_or(0).max(state.generation);
            if actor.store.contents.connections.get(&provider_id) == state.connection.as_ref()
                && actor.store.contents.generations.get(&provider_id) == Some(&generation)
            {
                actor.shared_revisions.insert(provider_id, revision);
                return Box::pin(actix::fut::ready(()));
            }
            let mut store = actor.store.staged(actor.store.contents.clone());
            let id = provider_id.clone();
            let applying = tokio::task::spawn_blocking(move || {
                store.contents.generations.insert(id.clone(), generation);
                let client = state.connection.as_ref().and_then(|connection| {
                    let built = build_client(
                        &id,
                        &connection.setup_values,
                        &connection.auth_method,
                        &connection.auth_values,
                    );
                    // Settings that work on the node that connected may not here (the local provider's script is
                    // a path on that node): this node then has the provider disconnected, and says why.
                    built
                        .map_err(|error| {
                            tracing::warn!(provider = %id, %error, "a provider connected on another node cannot be used here");
                        })
                        .ok()
                });
                match (&client, state.connection) {
                    (Some(_), Some(connection)) => store.contents.connections.insert(id, connection),
                    _ => store.contents.connections.remove(&id),
                };
                let saved = store.save();
                Applied { store, client, saved }
            });
            Box::pin(applying.into_actor(actor).map(move |applied, actor, _| {
                let _turn = turn;
                let applied = match applied {
                    Ok(Applied { saved: Err(error), .. }) => {
                        // Not adopted: the share's change is applied when the follow delivers it again.
                        tracing::error!(provider = %provider_id, %error, "a shared provider change was not saved");
                        return;
                    }
                    Err(error) => {
                        tracing::error!(provider = %provider_id, %error, "applying a shared provider change failed");
                        return;
                    }
                    Ok(applied) => applied,
                };
                let was_connected = actor.store.contents.connections.contains_key(&provider_id);
                actor.store.contents = applied.store.contents;
                actor.shared_revisions.insert(provider_id.clone(), revision);
                let reason = match applied.client {
                    Some(client) => {
                        tracing::info!(provider = %provider_id, generation, "provider connected on another node");
                        actor.install(&provider_id, client);
                        "provider_connected"
                    }
                    None if was_connected => {
                        tracing::info!(provider = %provider_id, generation, "provider disconnected on another node");
                        actor.uninstall(&provider_id);
                        "provider_disconnected"
                    }
                    // Disconnected here already: only its generation moved on.
                    None => return,
                };
                actor.publish_change(reason);
            }))
        }))
    }

    /// Once, after the share's contents were applied: offers the share the connections of providers it has no state
    /// for. Tried again at the next catch-up if NATS failed it.
    fn offer_local_connections(&mut self) -> ResponseActFuture<Self, ()> {
        let Some(share) = self.share.clone().filter(|_| !self.offered) else {
            return Box::pin(actix::fut::ready(()));
        };
        self.offered = true;
        let lane = self.store_lane.clone();
        let turn = async move { lane.lock_owned().await };
        Box::pin(turn.into_actor(self).then(move |turn, actor, _| {
            let offers: Vec<(String, SharedProvider)> = actor
                .store
                .contents
                .connections
                .iter()
                .filter(|(provider_id, _)| !actor.shared_revisions.contains_key(*provider_id))
                .map(|(provider_id, connection)| {
                    let state =
                        SharedProvider { generation: connection.generation, connection: Some(connection.clone()) };
                    (provider_id.clone(), state)
                })
                .collect();
            let offering = async move {
                let mut outcomes = Vec::with_capacity(offers.len());
                for (provider_id, state) in offers {
                    let outcome = share.offer(&provider_id, state).await;
                    outcomes.push((provider_id, outcome));
                }
                outcomes
            };
            offering.into_actor(actor).map(move |outcomes, actor, _| {
                let _turn = turn;
                for (provider_id, outcome) in outcomes {
                    match outcome {
                        Ok(Some(revision)) => {
                            tracing::info!(provider = %provider_id, "offered this node's provider connection to the cluster");
                            let known = actor.shared_revisions.entry(provider_id).or_insert(revision);
                            *known = (*known).max(revision);
                        }
                        // The share has a state for it: applied when the follow delivers it.
                        Ok(None) => {}
                        Err(error) => {
                            tracing::warn!(provider = %provider_id, %error, "could not offer a provider connection to the cluster");
                            actor.offered = false;
                        }
                    }
                }
            })
        }))
    }
}
