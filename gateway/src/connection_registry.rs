//! The live connections of one gateway, so that a graceful stop can close each of them with 1001.
//!
//! Connection actors live on different worker threads; each registers a type-erased [`Recipient`] when it
//! starts and removes it when it stops. Registration and the start of a shutdown take the same lock, so a
//! connection that starts while the gateway is stopping learns it at once instead of slipping past the
//! shutdown.

use std::collections::HashMap;

use actix::Recipient;
use parking_lot::Mutex;

use crate::connection_actor::GoingAway;

#[derive(Default)]
pub(crate) struct ConnectionRegistry {
    inner: Mutex<RegistryInner>,
}

#[derive(Default)]
struct RegistryInner {
    stopping: bool,
    live: HashMap<u64, Recipient<GoingAway>>,
}

impl ConnectionRegistry {
    /// Whether a graceful stop has begun; new upgrades are refused from then on.
    pub(crate) fn is_stopping(&self) -> bool {
        self.inner.lock().stopping
    }

    /// Adds a connection. Returns `false` when the gateway is already stopping: the caller closes at once.
    pub(crate) fn register(&self, connection_id: u64, recipient: Recipient<GoingAway>) -> bool {
        let mut inner = self.inner.lock();
        if inner.stopping {
            return false;
        }
        inner.live.insert(connection_id, recipient);
        true
    }

    pub(crate) fn unregister(&self, connection_id: u64) {
        self.inner.lock().live.remove(&connection_id);
    }

    /// Starts the shutdown and returns every connection that is live at this moment.
    pub(crate) fn begin_shutdown(&self) -> Vec<Recipient<GoingAway>> {
        let mut inner = self.inner.lock();
        inner.stopping = true;
        inner.live.values().cloned().collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.inner.lock().live.len()
    }
}
