//! The cluster-wide directory of sessions: which node hosts each session, and its metadata, so that every node lists
//! every session and knows where to send a request for it. Implemented by the cluster (`cluster/`, on a JetStream
//! key-value bucket); a single node has none.

use troupe_protocol::types::common::SessionMeta;

/// A change to the directory, as a node's watch sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum DirectoryChange {
    /// `meta` of a session hosted by `node` (any node, this one included).
    Put { meta: Box<SessionMeta>, node: String },
    /// The session was deleted.
    Removed { session_id: String },
    /// Every entry the directory held when the watch began was delivered; what follows is new. (A watch started
    /// again after NATS came back delivers the whole directory and this again.)
    CaughtUp,
}

/// Where `watch` delivers changes; called on the directory's own threads, so it must not block.
pub type DirectorySink = Box<dyn Fn(DirectoryChange) + Send + Sync>;

/// The directory as the engine uses it. Publishing never blocks: changes are sent in the background, coalesced per
/// session, so a session that commits many batches a second publishes its newest metadata, not each one.
pub trait SessionDirectory: Send + Sync + std::fmt::Debug + 'static {
    /// This node's name.
    fn node(&self) -> &str;
    /// Publishes `meta` as hosted by this node.
    fn publish(&self, meta: &SessionMeta);
    /// Removes a deleted session.
    fn remove(&self, session_id: &str);
    /// Whether this node's copy of the directory follows the cluster now (NATS reachable); when not, what it
    /// holds of other nodes' sessions may be behind.
    fn is_current(&self) -> bool;
    /// Feeds `sink` the whole directory, then every later change, until the daemon stops.
    fn watch(&self, sink: DirectorySink);
    /// The nodes alive now (their heartbeats current), by name; `Err` (in words) when that cannot be read now.
    fn live_nodes(&self) -> futures::future::BoxFuture<'static, Result<Vec<String>, String>>;
    /// Reads one session's entry now (its metadata and the node that hosts it): for a session the watch has not
    /// delivered yet. `Ok(None)` when the directory has none; `Err` (in words) when it cannot be read now.
    fn lookup(&self, session_id: &str) -> futures::future::BoxFuture<'static, Result<Option<DirectoryEntry>, String>>;
    /// How much longer `session_id`'s lease stays with the node that holds it: `Ok(None)` when it can be taken now
    /// (nobody holds it, or it expired); `Err` (in words) when that cannot be read now. One read of the lease, far
    /// cheaper than opening the session to find out.
    fn lease_remaining(
        &self,
        session_id: &str,
    ) -> futures::future::BoxFuture<'static, Result<Option<std::time::Duration>, String>>;
}

/// One session's entry in the directory: its metadata and the node that hosts it.
#[derive(Clone, Debug, PartialEq)]
pub struct DirectoryEntry {
    pub meta: SessionMeta,
    pub node: String,
}
