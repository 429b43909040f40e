//! Presence across a cluster: which connections of other nodes follow a session. Each node publishes its own
//! subscribers of each session and hears every other node's, so `session.presence` on any node lists everyone who
//! follows the session, wherever they are attached. Implemented by the cluster (`cluster/`, on a JetStream
//! key-value bucket); a single node has none.

use troupe_protocol::types::presence::PresenceClient;

/// One other node's subscribers of one session, as they are now (empty: it has none left, or the node is gone).
#[derive(Clone, Debug, PartialEq)]
pub struct RemotePresence {
    pub session_id: String,
    pub node: String,
    pub clients: Vec<PresenceClient>,
}

/// Where `watch` delivers other nodes' lists; called on the share's own threads, so it must not block.
pub type PresenceSink = Box<dyn Fn(RemotePresence) + Send + Sync>;

/// Presence as the engine shares it. Publishing never blocks: lists are sent in the background, coalesced per
/// session (the newest list of a session wins).
pub trait PresenceShare: Send + Sync + std::fmt::Debug + 'static {
    /// This node's name: its connections are listed as `connection-<n>@<node>`, unique in the cluster.
    fn node(&self) -> &str;
    /// Publishes this node's subscribers of `session_id` (an empty list: none).
    fn publish(&self, session_id: &str, clients: Vec<PresenceClient>);
    /// Feeds `sink` every other live node's non-empty lists, then every change, until the daemon stops. A node that
    /// stops being live is reported as an empty list for each session it had.
    fn watch(&self, sink: PresenceSink);
}
