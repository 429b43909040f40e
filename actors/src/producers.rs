//! Producers: who may send messages into a session from outside the user.
//!
//! - [`ProducerRegistry`]: the runtime registrations `{producer_id, owner, session_id, registered_at}`. They are
//!   never persisted: a restart (or, for a plugin, a reconnect: its host calls
//!   [`ProducerRegistry::unregister_owner`]) forgets them, and the producer registers again. The messages
//!   themselves are durable events of the session's log (`troupe_runtime::producer_book`).
//! - [`PluginRecoverySource`]: the hook through which the plugin hosts report each plugin's recovery handshake
//!   for `session.producers`; without one, `plugin_recovery` is empty.
//!
//! What the runs those messages wake need is `run_start`'s, shared with every other way a run starts.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, RwLock};
use troupe_protocol::types::producers::{PluginRecoveryState, ProducerOwner, ProducerRegistration};
use troupe_runtime::clock::new_id;

use crate::error::EngineError;

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
