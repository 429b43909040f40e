//! Runs: `run.start`, `run.steer`, `run.recall_steer`, `run.cancel`, `run.tool_stdin`, and the persisted result
//! of a tool call that `tool_call_terminated` events carry.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::types::common::RunSelection;

/// `run.start` params. Idempotent by `client_run_id`: the same key with the same content returns the same
/// `run_id`; different content under it is `idempotency_conflict`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunStartParams {
    pub session_id: String,
    /// Idempotency key: 1..=256 bytes, no control characters.
    pub client_run_id: String,
    pub selection: RunSelection,
    /// The user's message.
    pub input: String,
    /// True for an explicit model reset: start at the selected model instead of trimming the fallback chain to
    /// the session's latest successful fallback.
    #[serde(default)]
    pub reset_fallback: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunStartResult {
    pub run_id: String,
}

/// `run.steer` params: input for the active run, promoted at its next tool-batch or completion boundary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunSteerParams {
    pub run_id: String,
    pub input: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunSteerResult {
    /// True once the input is admitted (`user_input_admitted` is durable).
    pub accepted: bool,
}

/// Params of the methods that name only a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunIdParams {
    pub run_id: String,
}

/// `run.recall_steer` result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunRecallSteerResult {
    /// The newest pending input, now removed; null when nothing was pending. Always present.
    pub recalled: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunCancelResult {
    /// False when the run had already ended.
    pub cancelled: bool,
}

/// `run.tool_stdin` params: write to, or close, the stdin of a running tool call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunToolStdinParams {
    pub run_id: String,
    pub tool_call_id: String,
    /// UTF-8 text written to the tool's stdin as is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// Close stdin after writing `data`.
    pub eof: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunToolStdinResult {
    pub accepted: bool,
}

/// The most messages a tool result may emit.
pub const MAX_ADDITIONAL_MESSAGES: usize = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolResultStatus {
    Ok,
    /// The tool ran and failed.
    Error,
    /// The permission policy or the user refused the call.
    Denied,
    /// The run or the call was cancelled.
    Cancelled,
}

/// The terminal result of a tool call, as recorded in `tool_call_terminated`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PersistedToolResult {
    pub status: ToolResultStatus,
    /// What the model receives.
    pub output: String,
    /// What a UI shows instead of `output`, when it differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<String>,
    /// A reference to the full output stored as an artifact, when `output` was shortened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_ref: Option<String>,
    /// Messages the tool adds to the history after its result, in order; at most 4. Omitted when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_messages: Vec<ToolEmittedMessage>,
}

impl PersistedToolResult {
    /// Checks the bounds of `additional_messages`: at most [`MAX_ADDITIONAL_MESSAGES`], each with a part.
    pub fn validate(&self) -> Result<(), String> {
        if self.additional_messages.len() > MAX_ADDITIONAL_MESSAGES {
            return Err(format!(
                "a tool result may emit at most {MAX_ADDITIONAL_MESSAGES} additional messages, not {}",
                self.additional_messages.len()
            ));
        }
        if let Some(index) = self.additional_messages.iter().position(|message| message.parts.is_empty()) {
            return Err(format!("additional message {index} has no content parts; each needs at least one"));
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageRole {
    /// Materialized as a user turn that opens with a marker, so the system prefix stays stable.
    System,
    User,
}

/// A message a tool result adds to the model history, after the result itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ToolEmittedMessage {
    pub role: MessageRole,
    /// One or more parts, in order.
    pub parts: Vec<MessagePart>,
}

/// One content part of a tool-emitted message, tagged by `type`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MessagePart {
    Text {
        text: String,
    },
    /// An attachment: a stored artifact.
    File {
        /// The artifact's path.
        path: String,
        mime_type: String,
        /// The name to show, when it differs from the path's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(messages: Vec<ToolEmittedMessage>) -> PersistedToolResult {
        PersistedToolResult {
            status: ToolResultStatus::Ok,
            output: "done".into(),
            display: None,
            output_ref: None,
            additional_messages: messages,
        }
    }

    fn text_message() -> ToolEmittedMessage {
        ToolEmittedMessage { role: MessageRole::User, parts: vec![MessagePart::Text { text: "hi".into() }] }
    }

    #[test]
    fn empty_additional_messages_and_absent_options_are_omitted() {
        let value = serde_json::to_value(result(Vec::new())).unwrap();
        assert_eq!(value, json!({"status": "ok", "output": "done"}));
        assert_eq!(serde_json::from_value::<PersistedToolResult>(value).unwrap(), result(Vec::new()));
    }

    #[test]
    fn message_parts_are_tagged_by_type() {
        let message = ToolEmittedMessage {
            role: MessageRole::System,
            parts: vec![
                MessagePart::Text { text: "see".into() },
                MessagePart::File { path: "artifacts/ab12".into(), mime_type: "image/png".into(), name: None },
            ],
        };
        let value = serde_json::to_value(result(vec![message])).unwrap();
        assert_eq!(
            value["additional_messages"],
            json!([{"role": "system", "parts": [
                {"type": "text", "text": "see"},
                {"type": "file", "path": "artifacts/ab12", "mime_type": "image/png"}
            ]}])
        );
    }

    #[test]
    fn validate_bounds_messages_and_parts() {
        assert!(result(vec![text_message(); MAX_ADDITIONAL_MESSAGES]).validate().is_ok());
        assert!(result(vec![text_message(); MAX_ADDITIONAL_MESSAGES + 1]).validate().is_err());
        let empty = ToolEmittedMessage { role: MessageRole::User, parts: Vec::new() };
        assert!(result(vec![text_message(), empty]).validate().is_err());
    }

    #[test]
    fn start_params_default_reset_fallback_and_reject_unknown_fields() {
        let params = json!({
            "session_id": "s", "client_run_id": "r-1", "input": "hello",
            "selection": {"agent": "default", "model": {"model": "local/echo", "variant": null}}
        });
        let decoded: RunStartParams = serde_json::from_value(params.clone()).unwrap();
        assert!(!decoded.reset_fallback);
        let mut extra = params;
        extra["priority"] = json!(1);
        assert!(serde_json::from_value::<RunStartParams>(extra).is_err());
    }
}
