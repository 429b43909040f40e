//! The supervisor's session index as the engine reads it without a message: `session.get` of a hibernated session
//! (the first thing a client asks after connecting, for each session it shows) answers from here, encoded once per
//! change, instead of a round trip through the supervisor's mailbox (docs/performance.md, figure 12).
//!
//! The supervisor is the only writer: it sets an entry in the same handler that changes its index, so the view
//! never holds what the index no longer says. A live session's `session.get` answers from its own publication
//! (`published_meta`); a session leaves the live registry only in a later supervisor handler than the one that
//! indexed its last report, so a reader that no longer finds it live finds that report here. A miss is never an
//! answer: the engine then asks the supervisor (a session indexed meanwhile, or an unknown id's error).
//!
//! On a cluster node the view is off: the index's answer about another node's session depends on whether the
//! cluster's directory is current (`may_be_stale`), which only the supervisor knows.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dashmap::DashMap;
use troupe_protocol::Encoded;
use troupe_protocol::types::common::SessionMeta;
use troupe_protocol::types::session::SessionResult;

use crate::published_meta::Published;

/// The indexed metadata of every session, shared by the supervisor (the writer) and the engine.
#[derive(Clone)]
pub struct IndexView(Arc<Inner>);

struct Inner {
    on: AtomicBool,
    entries: DashMap<String, Arc<Published>>,
}

impl IndexView {
    /// An empty view; off from the start on a cluster node.
    pub fn new(on: bool) -> IndexView {
        IndexView(Arc::new(Inner { on: AtomicBool::new(on), entries: DashMap::new() }))
    }

    /// Records the session's indexed metadata, replacing what was there.
    pub(crate) fn set(&self, meta: &SessionMeta) {
        if self.0.on.load(Ordering::Acquire) {
            self.0.entries.insert(meta.session_id.clone(), Published::new(meta.clone()));
        }
    }

    /// Forgets a deleted session.
    pub(crate) fn remove(&self, session_id: &str) {
        self.0.entries.remove(session_id);
    }

    /// Turns the view off for good (a cluster node) and drops what it held.
    pub(crate) fn turn_off(&self) {
        self.0.on.store(false, Ordering::Release);
        self.0.entries.clear();
    }

    /// The session's `session.get` result, when the view holds it.
    pub fn result(&self, session_id: &str) -> Option<Result<Encoded<SessionResult>, serde_json::Error>> {
        if !self.0.on.load(Ordering::Acquire) {
            return None;
        }
        let published = self.0.entries.get(session_id).map(|entry| Arc::clone(entry.value()))?;
        Some(published.result())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::published_meta::sample_meta as meta;

    fn title(view: &IndexView, session_id: &str) -> Option<String> {
        let encoded = view.result(session_id)?.unwrap();
        serde_json::from_str::<SessionResult>(encoded.get()).unwrap().session.title
    }

    #[test]
    fn the_view_follows_the_index_and_says_nothing_once_off() {
        let view = IndexView::new(true);
        assert!(view.result("a").is_none());
        view.set(&meta("a", "one"));
        view.set(&meta("b", "other"));
        let first = view.result("a").unwrap().unwrap();
        assert!(std::ptr::eq(first.get(), view.result("a").unwrap().unwrap().get()), "encoded once per change");
        view.set(&meta("a", "two"));
        assert_eq!(title(&view, "a").as_deref(), Some("two"));
        view.remove("a");
        assert!(view.result("a").is_none());
        view.turn_off();
        assert!(view.result("b").is_none(), "a cluster node asks the supervisor");
        view.set(&meta("b", "again"));
        assert!(view.result("b").is_none(), "nothing is recorded once off");
        let cluster = IndexView::new(false);
        cluster.set(&meta("a", "one"));
        assert!(cluster.result("a").is_none());
    }
}
