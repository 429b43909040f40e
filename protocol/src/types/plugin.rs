//! Plugin events: the `events.plugin` notification.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `events.plugin` notification: a session-scoped, non-durable event a plugin emitted. Sent only to connections
/// subscribed to the session with `events.subscribe`; never replayed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PluginEventParams {
    pub session_id: String,
    /// The plugin's configured name.
    pub plugin: String,
    /// The event name the plugin chose.
    pub name: String,
    /// Arbitrary JSON chosen by the plugin.
    pub payload: serde_json::Value,
}
