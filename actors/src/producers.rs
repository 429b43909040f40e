//! Producers: who may send messages into a session from outside the user, and what the engine needs to start
//! the runs those messages wake.
//!
//! - [`ProducerRegistry`]: the runtime registrations `{producer_id, owner, session_id, registered_at}`. They are
//!   never persisted: a restart (or, for a plugin, a reconnect: its host calls
//!   [`ProducerRegistry::unregister_owner`]) forgets them, and the producer registers again. The messages
//!   themselves are durable events of the session's log (`troupe_runtime::producer_book`).
//! - [`PluginRecoverySource`]: the hook through which the plugin hosts report each plugin's recovery handshake
//!   for `session.producers`; without one, `plugin_recovery` is empty.
//! - [`EngineRunContext`]: what a session actor needs to start a run nobody asked for over the wire (a producer
//!   message waking an idle session): the runtime snapshot for the agent's model chain, the shared run services
//!   and the tree's approval actor. Given to every session actor by the supervisor.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use parking_lot::{Mutex, RwLock};
use troupe_protocol::types::common::{ModelSelection, RunSelection};
use troupe_protocol::types::producers::{PluginRecoveryState, ProducerOwner, ProducerRegistration};
use troupe_runtime::catalog::validate_selection;
use troupe_runtime::clock::new_id;
use troupe_runtime::policy::Policy;

use crate::approval_trees::TreeApprovals;
use crate::error::EngineError;
use crate::run_services::RunServices;
use crate::runtime_actor::{GetSnapshot, RuntimeActor};
use crate::session_supervisor::{ApprovalsFor, SessionSupervisor};

/// Registrations one owner may hold at a time (a plugin registers per session it serves).
pub const MAX_REGISTRATIONS_PER_OWNER: usize = 1024;

/// One runtime registration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    pub producer_id: String,
    pub owner: ProducerOwner,
    pub session_id: String,
    pub registered_at: Instant,
}

impl Registration {
    pub fn to_wire(&self) -> ProducerRegistration {
        ProducerRegistration {
            producer_id: self.producer_id.clone(),
            owner: self.owner.clone(),
            session_id: self.session_id.clone(),
            age_ms: self.registered_at.elapsed().as_millis().try_into().unwrap_or(u64::MAX),
        }
    }
}

/// Reports where each configured plugin's recovery handshake stands, for `session.producers`. Implemented by
/// the plugin hosts; called on the engine's request path, so it must answer from memory without blocking.
pub trait PluginRecoverySource: Send + Sync {
    /// One entry per configured plugin, for the session `session_id`.
    fn recovery_states(&self, session_id: &str) -> Vec<PluginRecoveryState>;
}

/// Checks what a producer sends before anything is written, the same for every sender (a plugin's request or an
/// engine caller): a valid idempotency key and a body that is not empty and at most `max_body_bytes`.
pub fn check_message(idempotency_key: &str, body: &str, max_body_bytes: usize) -> Result<(), EngineError> {
    crate::error::check_idempotency_key("idempotency_key", idempotency_key)?;
    if body.trim().is_empty() {
        return Err(EngineError::InvalidProducerMessage { reason: "the body is empty".into() });
    }
    if body.len() > max_body_bytes {
        return Err(EngineError::InvalidProducerMessage {
            reason: format!(
                "the body is {} bytes; at most {max_body_bytes} are accepted (`[limits] max_input_bytes`)",
                body.len()
            ),
        });
    }
    Ok(())
}

/// The engine's producer registrations (runtime only), and the plugin recovery hook.
#[derive(Default)]
pub struct ProducerRegistry {
    registrations: Mutex<HashMap<String, Registration>>,
    recovery: RwLock<Option<Arc<dyn PluginRecoverySource>>>,
}

impl ProducerRegistry {
    /// Registers `owner` as a producer of `session_id` (the caller checked that the session exists) and returns
    /// the new producer id.
    pub fn register(&self, session_id: &str, owner: ProducerOwner) -> Result<String, EngineError> {
        let mut registrations = self.registrations.lock();
        let held = registrations.values().filter(|registration| registration.owner == owner).count();
        if held >= MAX_REGISTRATIONS_PER_OWNER {
            return Err(EngineError::TooManyProducers { limit: MAX_REGISTRATIONS_PER_OWNER });
        }
        let producer_id = new_id();
        registrations.insert(
            producer_id.clone(),
            Registration {
                producer_id: producer_id.clone(),
                owner,
                session_id: session_id.to_owned(),
                registered_at: Instant::now(),
            },
        );
        Ok(producer_id)
    }

    /// The registration `producer_id` of `session_id`.
    pub fn get(&self, session_id: &str, producer_id: &str) -> Result<Registration, EngineError> {
        self.registrations
            .lock()
            .get(producer_id)
            .filter(|registration| registration.session_id == session_id)
            .cloned()
            .ok_or_else(|| EngineError::ProducerNotFound {
                session_id: session_id.to_owned(),
                producer_id: producer_id.to_owned(),
            })
    }

    /// Removes a registration; whether it existed. Its accepted messages stay (and may still be discarded).
    pub fn unregister(&self, session_id: &str, producer_id: &str) -> bool {
        let mut registrations = self.registrations.lock();
        let matches = registrations.get(producer_id).is_some_and(|registration| registration.session_id == session_id);
        matches && registrations.remove(producer_id).is_some()
    }

    /// Removes every registration of `owner` (a plugin that restarted or reconnected); how many there were.
    pub fn unregister_owner(&self, owner: &ProducerOwner) -> usize {
        let mut registrations = self.registrations.lock();
        let before = registrations.len();
        registrations.retain(|_, registration| registration.owner != *owner);
        before - registrations.len()
    }

    /// The registrations of `session_id`, oldest first.
    pub fn for_session(&self, session_id: &str) -> Vec<ProducerRegistration> {
        let registrations = self.registrations.lock();
        let mut of_session: Vec<&Registration> =
            registrations.values().filter(|registration| registration.session_id == session_id).collect();
        of_session.sort_by(|a, b| a.registered_at.cmp(&b.registered_at).then(a.producer_id.cmp(&b.producer_id)));
        of_session.into_iter().map(Registration::to_wire).collect()
    }

    /// Installs the plugin hosts' recovery reports (replacing an earlier source).
    pub fn set_recovery_source(&self, source: Arc<dyn PluginRecoverySource>) {
        *self.recovery.write() = Some(source);
    }

    /// The plugins' recovery states for `session_id`; empty when no source is installed.
    pub fn recovery_states(&self, session_id: &str) -> Vec<PluginRecoveryState> {
        let source = self.recovery.read().clone();
        source.map(|source| source.recovery_states(session_id)).unwrap_or_default()
    }
}

/// What a session actor needs to start a run on its own. Cheap to clone.
#[derive(Clone)]
pub struct EngineRunContext {
    pub runtime: Addr<RuntimeActor>,
    pub services: Arc<RunServices>,
    /// `[limits] max_input_bytes`: the most a woken run's input (or one boundary's steer messages) may hold.
    pub max_input_bytes: usize,
}

/// A run ready to be started by a session actor: the selection checked against the runtime snapshot, the agent's
/// chain, the policy, and the tree's approval actor (held in use until the run has started).
pub struct PreparedRun {
    pub selection: RunSelection,
    pub agent_chain: Vec<ModelSelection>,
    pub requested_index: Option<usize>,
    pub policy: Arc<Policy>,
    pub approvals: TreeApprovals,
    pub services: Arc<RunServices>,
}

impl PreparedRun {
    /// The run's start message: an engine-started run (no reset, no skill) with `input`, under a
    /// `<kind>:<new id>` client run id.
    pub fn into_start(self, kind: &str, input: String) -> crate::session_actor::StartRun {
        crate::session_actor::StartRun {
            client_run_id: format!("{kind}:{}", troupe_runtime::clock::new_id()),
            selection: self.selection,
            input,
            reset_fallback: false,
            agent_chain: self.agent_chain,
            requested_index: self.requested_index,
            services: self.services,
            approvals: (*self.approvals).clone(),
            policy: self.policy,
            skill: None,
        }
    }
}

impl EngineRunContext {
    /// Prepares a run of `session_id` with `selection`, as `run.start` would. Fails when the selection no longer
    /// matches the runtime (an agent removed, a provider disconnected).
    pub async fn prepare(
        &self,
        supervisor: &Addr<SessionSupervisor>,
        session_id: &str,
        selection: RunSelection,
    ) -> Result<PreparedRun, EngineError> {
        let snapshot = self.runtime.send(GetSnapshot).await.map_err(|_| EngineError::ShuttingDown)?;
        validate_selection(&snapshot, &selection).map_err(EngineError::InvalidSelection)?;
        let agent_chain = snapshot
            .agents
            .iter()
            .find(|agent| agent.agent == selection.agent)
            .map(|agent| agent.models.clone())
            .unwrap_or_default();
        let requested_index = agent_chain.iter().position(|model| *model == selection.model);
        let (_, approvals) = supervisor
            .send(ApprovalsFor { session_id: session_id.to_owned() })
            .await
            .map_err(|_| EngineError::ShuttingDown)??;
        let policy = self.services.policy_for(&selection.agent)?;
        Ok(PreparedRun { selection, agent_chain, requested_index, policy, approvals, services: self.services.clone() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin(name: &str) -> ProducerOwner {
        ProducerOwner::Plugin { plugin: name.into() }
    }

    #[test]
    fn registrations_are_per_session_and_go_with_their_owner() {
        let registry = ProducerRegistry::default();
        let a1 = registry.register("s1", plugin("a")).unwrap();
        let a2 = registry.register("s2", plugin("a")).unwrap();
        let b1 = registry.register("s1", plugin("b")).unwrap();
        let listed: Vec<String> = registry.for_session("s1").into_iter().map(|r| r.producer_id).collect();
        assert_eq!(listed.len(), 2);
        assert!(listed.contains(&a1) && listed.contains(&b1));
        assert!(registry.get("s2", &a1).is_err(), "a registration belongs to one session");
        assert_eq!(registry.get("s2", &a2).unwrap().owner, plugin("a"));

        assert!(!registry.unregister("s2", &b1), "not a registration of s2");
        assert!(registry.unregister("s1", &b1));
        assert!(!registry.unregister("s1", &b1), "already gone");
        assert_eq!(registry.unregister_owner(&plugin("a")), 2);
        assert!(registry.for_session("s1").is_empty() && registry.for_session("s2").is_empty());
    }

    #[test]
    fn an_owner_holds_a_bounded_number_of_registrations() {
        let registry = ProducerRegistry::default();
        for _ in 0..MAX_REGISTRATIONS_PER_OWNER {
            registry.register("s", plugin("a")).unwrap();
        }
        assert!(matches!(registry.register("s", plugin("a")), Err(EngineError::TooManyProducers { .. })));
        assert!(registry.register("s", plugin("b")).is_ok(), "another owner has its own bound");
    }

    struct Fixed;

    impl PluginRecoverySource for Fixed {
        fn recovery_states(&self, _: &str) -> Vec<PluginRecoveryState> {
            vec![PluginRecoveryState {
                plugin: "a".into(),
                status: troupe_protocol::types::producers::PluginRecoveryStatus::Ready,
            }]
        }
    }

    #[test]
    fn recovery_states_come_from_the_installed_source() {
        let registry = ProducerRegistry::default();
        assert!(registry.recovery_states("s").is_empty());
        registry.set_recovery_source(Arc::new(Fixed));
        assert_eq!(registry.recovery_states("s").len(), 1);
    }
}
