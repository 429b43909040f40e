//! The live connections of one gateway, so that a graceful stop can close each of them with 1001, and a console
//! sign-out the ones its cookie opened.
//!
//! Connection actors live on different worker threads; each registers a type-erased [`Recipient`] when it
//! starts and removes it when it stops. Registration and the start of a shutdown take the same lock, so a
//! connection that starts while the gateway is stopping learns it at once instead of slipping past the
//! shutdown.

use std::collections::HashMap;

use actix::{Message, Recipient};
use parking_lot::Mutex;

use crate::console_book::SessionKey;

/// What the registry can tell a live connection (the `ConnectionActor` handles it): close and stop, for a reason
/// decided outside the connection. Answered once the close frame is queued. It lives here, with the registry that
/// holds its recipients, so that the registry and whoever ends connections need not know the actor's type.
#[derive(Message, Clone, Copy, Debug, PartialEq, Eq)]
#[rtype(result = "()")]
pub(crate) enum GoingAway {
    /// The gateway is stopping: 1001 (Going Away).
    DaemonStopping,
    /// The console session the connection rode was signed out: 1008 (Policy Violation).
    SignedOut,
}

#[derive(Default)]
pub(crate) struct ConnectionRegistry {
    inner: Mutex<RegistryInner>,
}

#[derive(Default)]
struct RegistryInner {
    stopping: bool,
    live: HashMap<u64, Live>,
}

struct Live {
    recipient: Recipient<GoingAway>,
    /// The console session whose cookie authorized the connection.
    console: Option<SessionKey>,
}

impl ConnectionRegistry {
    /// Whether a graceful stop has begun; new upgrades are refused from then on.
    pub(crate) fn is_stopping(&self) -> bool {
        self.inner.lock().stopping
    }

    /// Adds a connection. Returns `false` when the gateway is already stopping: the caller closes at once.
    pub(crate) fn register(
        &self,
        connection_id: u64,
        recipient: Recipient<GoingAway>,
        console: Option<SessionKey>,
    ) -> bool {
        let mut inner = self.inner.lock();
        if inner.stopping {
            return false;
        }
        inner.live.insert(connection_id, Live { recipient, console });
        true
    }

    /// The connections a console session's cookie opened.
    pub(crate) fn of_console_session(&self, session: &SessionKey) -> Vec<Recipient<GoingAway>> {
        let inner = self.inner.lock();
        inner
            .live
            .values()
            .filter(|live| live.console.as_ref() == Some(session))
            .map(|live| live.recipient.clone())
            .collect()
    }

    pub(crate) fn unregister(&self, connection_id: u64) {
        self.inner.lock().live.remove(&connection_id);
    }

    /// Starts the shutdown and returns every connection that is live at this moment.
    pub(crate) fn begin_shutdown(&self) -> Vec<Recipient<GoingAway>> {
        let mut inner = self.inner.lock();
        inner.stopping = true;
        inner.live.values().map(|live| live.recipient.clone()).collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.inner.lock().live.len()
    }
}
