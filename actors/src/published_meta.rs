//! The metadata a live session publishes each time a batch of its events becomes durable, so that `session.get`
//! reads it without a round trip to the session's thread (two cross-thread wake-ups per call, most of the call's
//! cost: docs/performance.md, open finding 3).
//!
//! The session publishes before it acknowledges the batch's requests and before its events reach subscribers, so
//! a client that was told its write is durable, or holds an event, reads that back. What is published is the
//! session's state at that moment: the durable batch and, when more events were accepted while it was written
//! (they wait for the next batch), those too, exactly as the actor's own `GetMeta` answers. Until the session has
//! loaded there is nothing to read, and the engine asks the actor. What `session.get` answers is encoded at most once per publication, by the first reader, and
//! every later reply embeds the same bytes until the session publishes again.

use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;
use troupe_protocol::Encoded;
use troupe_protocol::types::common::SessionMeta;
use troupe_protocol::types::session::SessionResult;

/// One live session's newest published metadata, shared by its actor (the only writer) and the engine.
#[derive(Clone, Default)]
pub struct PublishedMeta(Arc<RwLock<Option<Arc<Published>>>>);

/// One publication: the metadata, and its `session.get` result once a reader encoded it.
pub(crate) struct Published {
    meta: SessionMeta,
    result: OnceLock<Encoded<SessionResult>>,
}

impl Published {
    pub(crate) fn new(meta: SessionMeta) -> Arc<Published> {
        Arc::new(Published { meta, result: OnceLock::new() })
    }

    /// `session.get`'s result for this publication, encoded by its first reader.
    pub(crate) fn result(&self) -> Result<Encoded<SessionResult>, serde_json::Error> {
        if let Some(result) = self.result.get() {
            return Ok(result.clone());
        }
        let encoded = Encoded::new(&SessionResult { session: self.meta.clone() })?;
        // Two readers may race to encode the same publication: both encodings are equal, one is kept.
        Ok(self.result.get_or_init(|| encoded).clone())
    }
}

impl PublishedMeta {
    pub fn publish(&self, meta: SessionMeta) {
        let published = Published::new(meta);
        // The older publication is dropped outside the lock.
        let _older = self.0.write().replace(published);
    }

    /// The newest publication's metadata.
    pub fn meta(&self) -> Option<SessionMeta> {
        let published = self.0.read().clone()?;
        Some(published.meta.clone())
    }

    /// The newest publication's progress: its `last_event_seq` and `last_activity_at`. The supervisor's index
    /// hears of progress alone at most every 100 ms (`session_actor/meta.rs`), and serves a live session's from here.
    pub fn progress(&self) -> Option<(u64, String)> {
        let published = self.0.read().clone()?;
        Some((published.meta.last_event_seq, published.meta.last_activity_at.clone()))
    }

    /// The newest metadata as `session.get`'s result, encoded once per publication; `None` until the session has
    /// loaded.
    pub fn result(&self) -> Option<Result<Encoded<SessionResult>, serde_json::Error>> {
        let published = self.0.read().clone()?;
        Some(published.result())
    }
}

/// A session's metadata with `title`, for tests of what serves it.
#[cfg(test)]
pub(crate) fn sample_meta(session_id: &str, title: &str) -> SessionMeta {
    use troupe_protocol::types::common::{ModelSelection, RunSelection, SessionOrigin, SessionStatus};
    SessionMeta {
        session_id: session_id.to_owned(),
        origin: SessionOrigin::Root,
        cwd: "/work".to_owned(),
        title: Some(title.to_owned()),
        title_updated_seq: Some(2),
        creation_selection: RunSelection {
            agent: "default".to_owned(),
            model: ModelSelection { model: "local/echo".to_owned(), variant: None },
            preset: None,
        },
        status: SessionStatus::Idle,
        last_event_seq: 2,
        created_at: "2026-01-01T00:00:00.000Z".to_owned(),
        last_activity_at: "2026-01-01T00:01:00.000Z".to_owned(),
        skipped_events: Vec::new(),
        archived: false,
        node: None,
        may_be_stale: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(title: &str) -> SessionMeta {
        sample_meta("s", title)
    }

    #[test]
    fn a_result_is_encoded_once_per_publication_and_follows_the_newest() {
        let published = PublishedMeta::default();
        assert!(published.result().is_none(), "nothing before the session loads");
        published.publish(meta("one"));
        let first = published.result().unwrap().unwrap();
        let again = published.result().unwrap().unwrap();
        assert!(std::ptr::eq(first.get(), again.get()), "the same bytes are served again");
        let decoded: SessionResult = serde_json::from_str(first.get()).unwrap();
        assert_eq!(decoded.session, meta("one"));
        published.publish(meta("two"));
        let newer_encoded = published.result().unwrap().unwrap();
        let newer: SessionResult = serde_json::from_str(newer_encoded.get()).unwrap();
        assert_eq!(newer.session.title.as_deref(), Some("two"));
        assert!(!std::ptr::eq(first.get(), newer_encoded.get()), "a new publication is encoded anew");
    }
}
