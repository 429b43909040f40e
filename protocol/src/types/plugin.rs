//! Plugins: the `events.plugin` notification clients receive, and the messages of the plugin extension protocol
//! (version [`EXTENSION_VERSION`]) the daemon speaks with each plugin subprocess over its stdin and stdout.
//!
//! The extension messages are not part of the client protocol's method table: they travel between the daemon and
//! its plugins only, as newline-delimited JSON-RPC 2.0. They are declared here, next to the notification, so that
//! one crate owns every wire shape. `docs/plugins.md` describes them with examples.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::types::run::ToolEmittedMessage;

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

/// The extension protocol version the daemon speaks; a plugin must answer `plugin/initialize` with exactly this.
pub const EXTENSION_VERSION: &str = "0.0.6";

/// Method names of the extension protocol.
pub mod methods {
    /// Daemon → plugin request: the handshake.
    pub const INITIALIZE: &str = "plugin/initialize";
    /// Daemon → plugin request: liveness.
    pub const PING: &str = "plugin/ping";
    /// Daemon → plugin notification: exit now (the daemon kills the process after the grace).
    pub const SHUTDOWN: &str = "plugin/shutdown";
    /// Daemon → plugin request: run one of the plugin's tools.
    pub const TOOLS_CALL: &str = "plugin/tools/call";
    /// Daemon → plugin notification: the call's run was cancelled; the plugin should stop and answer.
    pub const TOOLS_CANCEL: &str = "plugin/tools/cancel";
    /// Daemon → plugin notification after each (re)start: re-register producers, then complete recovery.
    pub const RECOVERY_START: &str = "plugin/recovery/start";
    /// Plugin → daemon request: recovery finished.
    pub const RECOVERY_COMPLETE: &str = "plugin/recovery/complete";
    /// Plugin → daemon request: a session-scoped event.
    pub const EMIT: &str = "plugin/emit";
    /// Plugin → daemon requests: producer messaging.
    pub const PRODUCER_REGISTER: &str = "plugin/producer/register";
    pub const PRODUCER_SEND: &str = "plugin/producer/send";
    pub const PRODUCER_DISCARD: &str = "plugin/producer/discard";
    pub const PRODUCER_UNREGISTER: &str = "plugin/producer/unregister";
}

/// What the daemon offers a plugin, or what a plugin says it uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ExtensionCapabilities {
    /// The plugin offers tools to the model (`plugin/tools/call`).
    #[serde(default)]
    pub tools: bool,
    /// The plugin sends producer messages into sessions (`plugin/producer/*`, the recovery handshake).
    #[serde(default)]
    pub producer_messaging: bool,
}

/// `plugin/initialize` params (daemon → plugin).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PluginInitializeParams {
    pub protocol_version: String,
    pub engine_version: String,
    pub capabilities: ExtensionCapabilities,
}

/// One tool a plugin offers, declared in its `plugin/initialize` answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PluginToolDeclaration {
    /// `[A-Za-z0-9_-]`, at most 40 characters; the model sees it as `plugin__<plugin>__<name>`.
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// The JSON Schema of the arguments object; an empty object schema when omitted.
    #[serde(default)]
    pub input_schema: Option<serde_json::Value>,
}

/// `plugin/initialize` result (plugin → daemon).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PluginInitializeResult {
    /// Must equal [`EXTENSION_VERSION`].
    pub protocol_version: String,
    /// Must equal the plugin's key in `config.toml`.
    pub name: String,
    /// The plugin's own version, for the logs.
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub capabilities: ExtensionCapabilities,
    #[serde(default)]
    pub tools: Vec<PluginToolDeclaration>,
}

/// `plugin/tools/call` params (daemon → plugin).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PluginToolCallParams {
    /// The tool's name as the plugin declared it.
    pub tool: String,
    pub session_id: String,
    pub run_id: String,
    /// The model's tool call id; `plugin/tools/cancel` names it.
    pub tool_call_id: String,
    pub arguments: serde_json::Value,
    /// The permission resource the call was allowed on: `plugin:<plugin>/<tool>`.
    pub resource: String,
}

/// The terminal output of a plugin tool call, typed by `type`: one text, or several named ones.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PluginToolOutput {
    Single {
        text: String,
    },
    /// Named outputs, shown to the model in name order as `[name]` sections.
    Named {
        outputs: BTreeMap<String, String>,
    },
}

/// `plugin/tools/call` result (plugin → daemon).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PluginToolCallResult {
    pub output: PluginToolOutput,
    /// What a UI shows instead of the output, when it differs.
    #[serde(default)]
    pub display: Option<String>,
    /// The call failed: recorded as an `error` result.
    #[serde(default)]
    pub is_error: bool,
    /// Messages the tool adds to the model's history after its result, in order (the reference's tool-emitted
    /// messages: at most four, role `system` or `user`, text and file parts within the bounds of
    /// [`PersistedToolResult::validate`](crate::types::run::PersistedToolResult::validate)). A result whose
    /// messages break them is recorded as an `error` result without them, saying why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_messages: Vec<ToolEmittedMessage>,
}

/// `plugin/tools/cancel` params (daemon → plugin, notification).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PluginToolCancelParams {
    pub tool_call_id: String,
}

/// `plugin/emit` params (plugin → daemon).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PluginEmitParams {
    pub session_id: String,
    /// At most [`MAX_EMIT_NAME_CHARS`] characters.
    pub name: String,
    /// At most [`MAX_EMIT_PAYLOAD_BYTES`] bytes of JSON.
    pub payload: serde_json::Value,
    /// The reference's one-shot context token; accepted and ignored (this daemon has no contexts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
}

/// `plugin/emit` result: the `seq` of the durable `plugin_event_added`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PluginEmitResult {
    pub seq: u64,
}

/// The largest `plugin/emit` payload, in bytes of JSON.
pub const MAX_EMIT_PAYLOAD_BYTES: usize = 256 * 1024;
/// The longest `plugin/emit` name, in characters.
pub const MAX_EMIT_NAME_CHARS: usize = 128;

/// How a plugin's recovery ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExtensionRecoveryStatus {
    Ready,
    Failed,
}

/// `plugin/recovery/complete` outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ExtensionRecoveryOutcome {
    pub status: ExtensionRecoveryStatus,
    /// Why it failed, for the daemon's log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// `plugin/recovery/complete` params (plugin → daemon); the result is `{}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtensionRecoveryCompleteParams {
    pub outcome: ExtensionRecoveryOutcome,
}

/// `plugin/producer/register` params: become a producer of the session. Registrations last while the plugin's
/// process runs; a restarted plugin registers again (during recovery).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtensionProducerRegisterParams {
    pub session_id: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ExtensionProducerRegisterResult {
    pub producer_id: String,
}

/// `plugin/producer/send` params. Answered once `producer_message_accepted` is durable; a retry with the same
/// key and body returns the original `message_id`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtensionProducerSendParams {
    pub session_id: String,
    pub producer_id: String,
    pub mode: crate::types::producers::ProducerMessageMode,
    pub idempotency_key: String,
    pub body: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ExtensionProducerSendResult {
    pub message_id: String,
}

/// `plugin/producer/discard` params: withdraw one of the plugin's messages no run has claimed yet. Idempotent;
/// works after unregister. The result is `{}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtensionProducerDiscardParams {
    pub session_id: String,
    pub message_id: String,
}

/// `plugin/producer/unregister` params. The result is `{}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtensionProducerUnregisterParams {
    pub session_id: String,
    pub producer_id: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_outputs_are_tagged_by_type() {
        let single: PluginToolCallResult =
            serde_json::from_value(json!({"output": {"type": "single", "text": "hi"}})).unwrap();
        assert_eq!(single.output, PluginToolOutput::Single { text: "hi".into() });
        assert!(!single.is_error && single.display.is_none() && single.additional_messages.is_empty());
        let named: PluginToolOutput =
            serde_json::from_value(json!({"type": "named", "outputs": {"b": "2", "a": "1"}})).unwrap();
        let PluginToolOutput::Named { outputs } = named else { panic!("not named") };
        assert_eq!(outputs.keys().collect::<Vec<_>>(), ["a", "b"]);
    }

    #[test]
    fn recovery_outcome_reads_the_reference_shape() {
        let params: ExtensionRecoveryCompleteParams =
            serde_json::from_value(json!({"outcome": {"status": "ready"}})).unwrap();
        assert_eq!(params.outcome.status, ExtensionRecoveryStatus::Ready);
        assert!(serde_json::from_value::<PluginEmitParams>(json!({"session_id": "s", "name": "n"})).is_err());
    }
}
