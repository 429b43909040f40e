//! What the session layer tells an observer (the daemon's metrics) as it works: handshakes, finished requests,
//! notifications dropped for slow clients and gap notices written.
//!
//! The layer knows nothing of how these are counted: the daemon passes an implementation in (the gateway's
//! config), anything else gets [`NoObserver`]. Every hook is called inline on the path it observes, so an
//! implementation must be cheap and must not block (atomic increments, not locks held for long, no I/O).

use std::sync::Arc;
use std::time::Duration;

use crate::error::RpcError;

/// Whether a `handshake` request was accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HandshakeOutcome {
    Accepted,
    /// Malformed params, an unsupported protocol version, or a handler that failed.
    Refused,
}

/// Which kind of notification found no room in a connection's outbound queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DroppedNotification {
    /// An event of a subscription: the subscription is closed and gets its one `gap` notice.
    Event,
    /// A transient frame (live tool output), dropped without closing anything.
    Transient,
}

/// Receives what the session layer observes. Every method has a no-op default.
pub trait ServerObserver: Send + Sync + 'static {
    /// A `handshake` request was answered (or refused before it ran).
    fn handshake(&self, outcome: HandshakeOutcome) {
        let _ = outcome;
    }

    /// A request (or notification) with a parsed method was answered. `method` is the method's name from the
    /// table, or `"unknown"` for a name the table does not have (so a client cannot create label values at
    /// will). `elapsed` is the handler's time; `None` when the request was refused before dispatch (handshake
    /// required, overloaded).
    fn request_finished(&self, method: &'static str, result: Result<(), &RpcError>, elapsed: Option<Duration>) {
        let _ = (method, result, elapsed);
    }

    /// A notification found no room in the outbound queue.
    fn notification_dropped(&self, kind: DroppedNotification) {
        let _ = kind;
    }

    /// A subscription's `gap` notice was handed to the connection's writer.
    fn gap_sent(&self) {}
}

/// The observer that observes nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoObserver;

impl ServerObserver for NoObserver {}

/// A shared observer, as the connections hold it.
pub type SharedObserver = Arc<dyn ServerObserver>;

/// The observer of a server without one.
pub fn no_observer() -> SharedObserver {
    Arc::new(NoObserver)
}

/// The table's name of `method`, or `"unknown"`: a `&'static str`, so that counting by method allocates nothing
/// and cannot be made to grow by a client sending made-up names.
pub fn method_label(method: &str) -> &'static str {
    crate::methods::table_name(method).unwrap_or("unknown")
}

#[cfg(test)]
mod tests {
    use super::method_label;

    #[test]
    fn method_labels_come_from_the_table() {
        assert_eq!(method_label("session.get"), "session.get");
        assert_eq!(method_label("handshake"), "handshake");
        assert_eq!(method_label("made.up"), "unknown");
        assert_eq!(method_label(""), "unknown");
    }
}
