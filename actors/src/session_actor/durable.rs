//! A session's reply that holds once its event is durable, waited for by whoever asked.
//!
//! A handler that answered with a future (`ResponseFuture`) had actix spawn a task on the session's thread per
//! request, only to wait for the write lane's receiver and forward the value: an allocation, a wake-up and a poll
//! on the session's thread for every request, between the commit and the reply. Answering at once with the value
//! and the receiver leaves the wait to the asker's own task (docs/performance.md, figure 4).

use super::write_lane::Durability;
use crate::error::EngineError;

/// `value`, valid once the event it reports is durable.
#[must_use = "the value holds only once its event is durable: wait for it"]
pub struct Durable<T> {
    durable: Durability,
    value: T,
}

impl<T> Durable<T> {
    pub(super) fn new(durable: Durability, value: T) -> Durable<T> {
        Durable { durable, value }
    }

    /// The value, and the wait for its event to be durable, apart: the caller keeps the value itself while it
    /// waits, rather than inside the wait's future beside the reply it came in (a request's future is boxed, and
    /// holding a 400-byte `SessionMeta` twice made it a large allocation: docs/performance.md, figure 4).
    pub fn into_parts(self) -> (T, DurableWait) {
        (self.value, DurableWait(self.durable))
    }
}

/// The wait for an event to be durable, from [`Durable::into_parts`].
#[must_use = "the value holds only once its event is durable: wait for it"]
pub struct DurableWait(Durability);

impl DurableWait {
    /// The wait on a write lane's receiver (`SessionActor::when_durable`).
    pub(super) fn of(durable: Durability) -> DurableWait {
        DurableWait(durable)
    }

    /// Ends once the event is durable; the write's error if it failed, or `Unavailable` naming `session_id` if
    /// the session stopped first.
    pub async fn wait(self, session_id: &str) -> Result<(), EngineError> {
        let stopped =
            |_| EngineError::Unavailable { session_id: session_id.to_owned(), detail: "the session stopped".into() };
        self.0.await.map_err(stopped)?
    }
}
