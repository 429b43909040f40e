//! The names the cluster uses in NATS, in one place: the event stream and its subjects, the buckets, and the
//! request subjects of each node.

/// The stream of every session's events: one subject per session, `troupe.events.<session id>`.
pub const EVENT_STREAM: &str = "TROUPE_EVENTS";
/// The subjects of [`EVENT_STREAM`].
pub const EVENT_SUBJECTS: &str = "troupe.events.*";
/// Session leases: key = session id, value = the holding node's lease record.
pub const LEASE_BUCKET: &str = "troupe_leases";
/// The session directory: key = session id, value = the session's metadata and owner.
pub const DIRECTORY_BUCKET: &str = "troupe_sessions";
/// Live nodes: key = node name, value = what other nodes need to know of it; renewed by heartbeat.
pub const NODE_BUCKET: &str = "troupe_nodes";
/// Who follows which session: key = `<session id>.<node>`, value = that node's subscribers of the session.
pub const PRESENCE_BUCKET: &str = "troupe_presence";
/// The web console's sign-ins: key = `<token scope>.code.<digest>` or `<token scope>.session.<digest>`, value =
/// the expiry (and a session's page key digest); see `console_share.rs`.
pub const CONSOLE_BUCKET: &str = "troupe_console";
/// Provider connections: key = provider id, value = its latest state (connection with API keys, or none).
pub const PROVIDER_BUCKET: &str = "troupe_providers";
/// Answers of `provider.connect`/`provider.disconnect`: key = the client id in hex, value = the recorded answer;
/// expire with [`PROVIDER_ANSWER_AGE`].
pub const PROVIDER_ANSWER_BUCKET: &str = "troupe_provider_answers";
/// How long a recorded provider answer is kept: as long as a node keeps it in `providers.json`.
pub const PROVIDER_ANSWER_AGE: std::time::Duration = troupe_runtime::provider_store::RECORDED_ANSWER_AGE;

/// The subject of one session's events.
pub fn event_subject(session_id: &str) -> String {
    format!("troupe.events.{session_id}")
}

/// The plain (not JetStream) subject of one session's live tool output (`live_output.rs`).
pub fn output_subject(session_id: &str) -> String {
    format!("troupe.output.{session_id}")
}

/// The subject a node answers forwarded requests on.
pub fn node_request_subject(node: &str) -> String {
    format!("troupe.node.{node}.rpc")
}

/// Whether `session_id` can be a subject token and a key (no dots, wildcards, spaces or controls). Session ids
/// are UUIDs; this guards against anything else reaching a subject.
pub fn is_subject_token(session_id: &str) -> bool {
    !session_id.is_empty()
        && session_id.len() <= 128
        && session_id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}
