//! `RuntimeActor`: the one owner of the runtime snapshot (providers, models, agents) and its revision.
//!
//! The engine asks it for the snapshot; each connection registers a notifier at handshake, and every change of
//! the snapshot is broadcast to all of them as `runtime.changed`. Provider connections will live here too.

use std::collections::HashMap;

use actix::prelude::*;
use troupe_protocol::notification::RuntimeChanged;
use troupe_protocol::server::ConnectionNotifier;
use troupe_protocol::types::runtime::{RuntimeChangedParams, RuntimeSnapshot};
use troupe_runtime::catalog::builtin_snapshot;

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

pub struct RuntimeActor {
    /// The current snapshot; its `revision` increases with every change.
    snapshot: RuntimeSnapshot,
    /// Connections that completed a handshake, by connection id.
    notifiers: HashMap<u64, ConnectionNotifier>,
}

impl RuntimeActor {
    pub fn new() -> Self {
        RuntimeActor {
            snapshot: builtin_snapshot(1),
            notifiers: HashMap::new(),
        }
    }

    /// Sends `runtime.changed` to every connection and drops the ones that are gone. Used by provider changes.
    #[allow(dead_code)]
    fn broadcast(&mut self, previous_revision: u64, mut reasons: Vec<String>) {
        reasons.sort();
        let params = RuntimeChangedParams {
            previous_revision: Some(previous_revision),
            snapshot: self.snapshot.clone(),
            reasons,
        };
        self.notifiers
            .retain(|_, notifier| notifier.notify::<RuntimeChanged>(&params).is_ok());
    }
}

impl Default for RuntimeActor {
    fn default() -> Self {
        Self::new()
    }
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
        self.notifiers
            .insert(message.notifier.connection_id(), message.notifier);
        MessageResult(self.snapshot.clone())
    }
}

impl Handler<UnregisterConnection> for RuntimeActor {
    type Result = ();

    fn handle(&mut self, message: UnregisterConnection, _: &mut Context<Self>) {
        self.notifiers.remove(&message.connection_id);
    }
}
