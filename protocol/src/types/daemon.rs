//! `daemon.status` (a troupe extension): what the daemon is doing right now, for `troupe status` and monitors.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A point-in-time view of the daemon. Every count is read at the moment of the request; none is durable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DaemonStatusResult {
    /// The daemon's build version (the `troupe` crate version), as in the handshake's `server.version`.
    pub version: String,
    /// When this daemon process started serving, RFC 3339 UTC.
    pub started_at: String,
    /// Milliseconds since `started_at`, measured on the daemon's monotonic clock.
    pub uptime_ms: u64,
    /// Protocol connections open now (WebSockets accepted, handshaken or not), this one included.
    pub connections: u64,
    /// Sessions whose actor is loaded in memory (serving subscribers, running, or not yet idle long enough).
    pub sessions_live: u64,
    /// Sessions known on disk (roots and delegated children) whose actor is not loaded; the next request to one
    /// loads it from its log.
    pub sessions_hibernated: u64,
    /// Runs with a live run actor, across every session (a delegated child's run counts separately).
    pub runs_active: u64,
    /// Approval requests waiting for an answer, across every session.
    pub approvals_pending: u64,
    /// The daemon's data directory, absolute. Omitted by a daemon that does not want to reveal it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<String>,
    /// Where the daemon listens: `host:port` for TCP, `unix:/path` for a unix socket.
    pub listen: String,
    /// troupe extension: this node of a cluster (`deploy/cluster.md`). Omitted on a single node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterStatus>,
}

/// A cluster node's view of its cluster, in `daemon.status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ClusterStatus {
    /// This node's name.
    pub node: String,
    /// Whether the node is connected to a NATS server now (while it is not, writes answer `cluster_unavailable`).
    pub nats_connected: bool,
    /// The nodes whose heartbeat is current, this one included, by name; empty when NATS could not be asked.
    pub live_nodes: Vec<String>,
}

/// `console.login_code` (a troupe extension): a one-time code that signs a browser in to the web console.
///
/// The daemon keeps only the code's hash. The code is good for one `POST /login` within a few minutes; the browser
/// then holds an `HttpOnly` session cookie instead, and the page never sees the bearer token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ConsoleLoginCodeResult {
    /// The sign-in page relative to the daemon's base URL, e.g. `login?code=…`: a client joins it to the HTTP(S)
    /// address it reached the daemon at (behind a proxy's path prefix too).
    pub path: String,
    /// When the code stops being accepted, RFC 3339 UTC.
    pub expires_at: String,
}
