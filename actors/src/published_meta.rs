//! The metadata a live session publishes each time a batch of its events becomes durable, so that `session.get`
//! reads it without a round trip to the session's thread (two cross-thread wake-ups per call, most of the call's
//! cost: docs/performance.md, open finding 3).
//!
//! The session publishes before it acknowledges the batch's requests, so a client that was told its write is
//! durable reads that write back. Until the session has loaded there is nothing to read, and the engine asks the
//! actor as before.

use std::sync::Arc;

use parking_lot::RwLock;
use troupe_protocol::types::common::SessionMeta;

/// One live session's newest published metadata, shared by its actor (the only writer) and the engine.
#[derive(Clone, Default)]
pub struct PublishedMeta(Arc<RwLock<Option<SessionMeta>>>);

impl PublishedMeta {
    pub fn publish(&self, meta: SessionMeta) {
        *self.0.write() = Some(meta);
    }

    /// The newest metadata, once the session has loaded.
    pub fn read(&self) -> Option<SessionMeta> {
        self.0.read().clone()
    }
}
