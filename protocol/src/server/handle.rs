//! [`ConnectionHandle`]: what the engine may keep about a connection beyond one request (its id, its
//! handshake's `client_info`, whether it is still open and which sessions it follows), without being able to
//! send on it.

use std::sync::Arc;

use super::connection::ConnectionShared;
use crate::types::runtime::ClientInfo;

/// A read-only view of one connection, cheap to clone. It keeps the connection's bookkeeping alive (not its
/// queued frames, which closing frees), so a holder should drop it once [`is_closed`](Self::is_closed).
#[derive(Clone)]
pub struct ConnectionHandle {
    pub(super) shared: Arc<ConnectionShared>,
}

impl ConnectionHandle {
    pub fn connection_id(&self) -> u64 {
        self.shared.id
    }

    /// The `client_info` the connection's handshake gave, if any.
    pub fn client_info(&self) -> Option<Arc<ClientInfo>> {
        self.shared.client_info.lock().clone()
    }

    /// Whether the connection is gone.
    pub fn is_closed(&self) -> bool {
        self.shared.is_closed()
    }

    /// Whether the connection's current subscription to `session_id` is open: `false` once the connection
    /// closes, or the subscription ended with a gap (the subscriber fell behind, or the session was deleted).
    pub fn is_subscribed(&self, session_id: &str) -> bool {
        !self.shared.is_closed()
            && self.shared.subscriptions.lock().get(session_id).is_some_and(|channel| !channel.is_closed())
    }
}

impl std::fmt::Debug for ConnectionHandle {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("ConnectionHandle").field("connection_id", &self.shared.id).finish()
    }
}
