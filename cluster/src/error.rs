//! What can go wrong between a node and NATS, typed so that the engine can answer clients with the right code.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The settings cannot work (a missing credentials file, a password variable that is not set, …).
    #[error("cluster settings: {0}")]
    Settings(String),
    /// NATS could not be reached, or did not answer in time; nothing was stored.
    #[error("NATS is unreachable ({what}): {detail}")]
    Unreachable { what: &'static str, detail: String },
    /// JetStream refused or failed an operation.
    #[error("JetStream could not {what}: {detail}")]
    JetStream { what: &'static str, detail: String },
    /// Another writer appended to the session's log since this node last did: this node is not (or no longer)
    /// the session's writer, and appended nothing.
    #[error("session {session_id}'s log moved on without this node (another node writes it now)")]
    Fenced { session_id: String },
    /// Another live node holds the session's lease.
    #[error("session {session_id} is hosted by node {node} (its lease runs for {remaining:?} more unless renewed)")]
    LeaseHeld { session_id: String, node: String, remaining: Duration },
    /// This node held the session's lease and lost it (it expired, or another node took it).
    #[error("this node lost its lease on session {session_id}")]
    LeaseLost { session_id: String },
    /// Stored data that does not read as what troupe wrote.
    #[error("{what} in NATS is not what troupe wrote: {detail}")]
    Corrupt { what: &'static str, detail: String },
}

impl ClusterError {
    /// The runtime's kind of this failure, for the engine's typed answer.
    pub fn into_replica_error(self) -> troupe_runtime::event_log::ReplicaError {
        use troupe_runtime::event_log::{ReplicaError, ReplicaFailure};
        let failure = match &self {
            ClusterError::Unreachable { .. } => ReplicaFailure::Unreachable,
            ClusterError::Fenced { .. } | ClusterError::LeaseLost { .. } => ReplicaFailure::Fenced,
            ClusterError::LeaseHeld { node, .. } => ReplicaFailure::HostedElsewhere { node: node.clone() },
            _ => ReplicaFailure::Failed,
        };
        ReplicaError { failure, detail: self.to_string() }
    }
}
