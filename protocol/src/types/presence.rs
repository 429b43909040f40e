//! Presence (troupe extension): which connections follow a session's events, with the `client_info` they gave
//! in their handshake. Opt-in: only a connection that called `session.presence` is sent
//! `session.presence_changed`, so a strict protocol-20 client sees nothing new.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One connection subscribed to a session's events (`events.subscribe`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PresenceClient {
    /// Opaque and stable for the life of the connection (the same text as in an approval's
    /// `answered_by: "client:<connection_id>"`). Another connection of the same program has another one.
    pub connection_id: String,
    /// `client_info.name` of its handshake; `null` when it sent none.
    pub name: Option<String>,
    /// `client_info.version` of its handshake; `null` when it sent none.
    pub version: Option<String>,
    /// When this connection subscribed to the session (RFC 3339 UTC); a subscribe that replaces its own earlier
    /// subscription keeps the first time.
    pub since: String,
}

/// `session.presence` result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionPresenceResult {
    pub session_id: String,
    /// Each subscribed connection once (the caller too, when it is subscribed), oldest connection first.
    pub clients: Vec<PresenceClient>,
    /// The caller's own `connection_id`, so that it can tell itself from the others in this list and in every
    /// `session.presence_changed` after it.
    pub you: String,
}

/// `session.presence_changed` notification: the whole new list, which supersedes every earlier one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionPresenceChangedParams {
    pub session_id: String,
    /// Each subscribed connection once, oldest connection first.
    pub clients: Vec<PresenceClient>,
}
