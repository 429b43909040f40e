//! Live output of running tools: the `events.tool_output_*` notifications.
//!
//! Output is not part of the durable log: it streams to subscribed connections as base64 chunks addressed by byte
//! offset within each stream. The daemon retains the last [`TOOL_OUTPUT_RETAINED_BYTES`] of each stream, which a
//! late or lagging subscriber receives as a snapshot; bytes older than that are reported as a gap.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How many of the most recent bytes of each output stream the daemon keeps for snapshots (64 KiB).
pub const TOOL_OUTPUT_RETAINED_BYTES: usize = 64 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    Stdout,
    Stderr,
}

impl OutputStream {
    /// The streams a subscription naming `stream` follows: that one, or both when it names none.
    pub fn selected(stream: Option<OutputStream>) -> Vec<OutputStream> {
        match stream {
            Some(stream) => vec![stream],
            None => vec![OutputStream::Stdout, OutputStream::Stderr],
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            OutputStream::Stdout => "stdout",
            OutputStream::Stderr => "stderr",
        }
    }
}

/// The longest output channel name, in bytes.
pub const MAX_OUTPUT_CHANNEL_BYTES: usize = 32;

/// The name of an output channel a tool declares it streams (protocol 18's declared tool-output channels): 1 to
/// [`MAX_OUTPUT_CHANNEL_BYTES`] bytes of lowercase ASCII letters, digits, `_` and `-`, starting with a letter. The
/// two standard channels are [`OutputStream`]'s `stdout` and `stderr`, the names the `stream` field of the
/// `events.tool_output_*` notifications carries.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct OutputChannel(String);

/// Why a string is not an [`OutputChannel`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "an output channel name is 1 to 32 bytes of lowercase ASCII letters, digits, `_` and `-`, starting with a letter"
)]
pub struct InvalidOutputChannel;

impl OutputChannel {
    pub fn new(name: impl Into<String>) -> Result<Self, InvalidOutputChannel> {
        let name = name.into();
        let mut bytes = name.bytes();
        let starts_with_letter = bytes.next().is_some_and(|first| first.is_ascii_lowercase());
        let rest_allowed =
            bytes.all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_' || byte == b'-');
        if starts_with_letter && rest_allowed && name.len() <= MAX_OUTPUT_CHANNEL_BYTES {
            Ok(OutputChannel(name))
        } else {
            Err(InvalidOutputChannel)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<OutputStream> for OutputChannel {
    fn from(stream: OutputStream) -> Self {
        OutputChannel(stream.as_str().to_owned())
    }
}

impl TryFrom<String> for OutputChannel {
    type Error = InvalidOutputChannel;

    fn try_from(name: String) -> Result<Self, Self::Error> {
        OutputChannel::new(name)
    }
}

impl From<OutputChannel> for String {
    fn from(channel: OutputChannel) -> Self {
        channel.0
    }
}

impl JsonSchema for OutputChannel {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "OutputChannel".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string", "pattern": "^[a-z][a-z0-9_-]{0,31}$"})
    }
}

/// `events.tool_output_delta` notification: new bytes of a stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ToolOutputDeltaParams {
    pub session_id: String,
    pub run_id: String,
    pub tool_call_id: String,
    pub stream: OutputStream,
    /// Offset of the first byte of `data` within the stream.
    pub byte_offset: u64,
    /// Base64 (standard alphabet, padded) of the raw bytes.
    pub data: String,
    /// The named subscription (`tool_output.subscribe`) this is sent for; absent for `events.subscribe`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscription_id: Option<String>,
}

/// `events.tool_output_snapshot` notification: the retained bytes of a stream, `[start_offset, end_offset)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ToolOutputSnapshotParams {
    pub session_id: String,
    pub run_id: String,
    pub tool_call_id: String,
    pub stream: OutputStream,
    /// Offset of the first retained byte.
    pub start_offset: u64,
    /// Offset just past the last byte; the next delta starts here.
    pub end_offset: u64,
    /// Base64 (standard alphabet, padded) of the retained bytes.
    pub data: String,
    /// The named subscription (`tool_output.subscribe`) this is sent for; absent for `events.subscribe`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscription_id: Option<String>,
}

/// `events.tool_output_gap` notification: the subscriber missed bytes and output resumes at `next_offset`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ToolOutputGapParams {
    pub session_id: String,
    pub run_id: String,
    pub tool_call_id: String,
    pub stream: OutputStream,
    /// The offset of the next byte that will be delivered.
    pub next_offset: u64,
    /// The named subscription (`tool_output.subscribe`) this is sent for; absent for `events.subscribe`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscription_id: Option<String>,
}

/// The most bytes one `tool_output.read` returns (1 MiB); a larger or absent `limit` reads this many.
pub const MAX_TOOL_OUTPUT_READ_BYTES: u64 = 1024 * 1024;

/// The form of an `output_ref`: 32 lowercase hexadecimal digits, naming one call's stored output in its session.
pub fn is_output_ref(output_ref: &str) -> bool {
    output_ref.len() == 32 && output_ref.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
}

/// `tool_output.read` params: bytes of one stream of a stored whole output (`PersistedToolResult.output_ref`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolOutputReadParams {
    pub session_id: String,
    /// The `output_ref` of the call's `PersistedToolResult`.
    pub output_ref: String,
    pub stream: OutputStream,
    /// The first byte to read, within the stream.
    #[serde(default)]
    pub offset: u64,
    /// The most bytes to return; at most (and by default) [`MAX_TOOL_OUTPUT_READ_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

/// `tool_output.read` result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ToolOutputReadResult {
    /// Base64 (standard alphabet, padded) of the bytes `[offset, next_offset)`.
    pub data: String,
    pub offset: u64,
    /// Where the next read starts.
    pub next_offset: u64,
    /// Whether `next_offset` is the end of what is stored.
    pub eof: bool,
    /// Bytes of the stream that are stored (at most `[tools] max_stored_output_bytes`).
    pub stored_bytes: u64,
    /// Bytes the stream produced; more than `stored_bytes` when the store's cap cut it.
    pub total_bytes: u64,
}

/// The most named tool-output subscriptions a connection may have that have not ended.
pub const MAX_TOOL_OUTPUT_SUBSCRIPTIONS: usize = 64;

/// The longest `subscription_id`, in bytes.
pub const MAX_SUBSCRIPTION_ID_BYTES: usize = 128;

/// Whether `subscription_id` is a valid name for a subscription: 1 to [`MAX_SUBSCRIPTION_ID_BYTES`] ASCII letters,
/// digits, `.`, `_`, `:` or `-`.
pub fn is_subscription_id(subscription_id: &str) -> bool {
    !subscription_id.is_empty()
        && subscription_id.len() <= MAX_SUBSCRIPTION_ID_BYTES
        && subscription_id.bytes().all(|byte| byte.is_ascii_alphanumeric() || b"._:-".contains(&byte))
}

/// `tool_output.subscribe` params: one tool call's output, to this connection, under a name the client chose.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolOutputSubscribeParams {
    pub session_id: String,
    pub tool_call_id: String,
    /// The client's name for the subscription, echoed in its notifications; subscribing again under the same name
    /// replaces it.
    pub subscription_id: String,
    /// One stream; both when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<OutputStream>,
    /// The first byte wanted, within each stream.
    #[serde(default)]
    pub from_offset: u64,
}

/// `tool_output.subscribe` result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ToolOutputSubscribeResult {
    pub subscription_id: String,
    /// Whether the call is still running; when not, the retained output and the end notice follow at once.
    pub running: bool,
}

/// `tool_output.unsubscribe` params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolOutputUnsubscribeParams {
    pub subscription_id: String,
}

/// `tool_output.unsubscribe` result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ToolOutputUnsubscribeResult {
    /// Whether the subscription was live (not ended, not replaced, not unknown).
    pub unsubscribed: bool,
}

/// `events.tool_output_end` notification: the named subscription's call ended and everything it asked for was
/// offered; nothing more comes for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ToolOutputEndParams {
    pub session_id: String,
    pub run_id: String,
    pub tool_call_id: String,
    pub subscription_id: String,
    /// Where each stream the subscription followed ended (its length), by stream.
    pub end_offsets: std::collections::BTreeMap<OutputStream, u64>,
}

/// A tool the daemon offers runs, as `tools.list` describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ToolDescriptor {
    /// The name a `tool_call_started` event carries.
    pub name: String,
    pub description: String,
    /// The output channels the tool streams while it runs, in the order a UI should show them; empty for a tool
    /// whose output arrives only with its result.
    pub output_channels: Vec<OutputChannel>,
}

/// `tools.list` result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ToolsListResult {
    /// Built-in tools, then the ready plugins' tools, each in name order.
    pub tools: Vec<ToolDescriptor>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_channel_names_are_bounded_and_plain() {
        for good in ["stdout", "stderr", "a", "build-log", "test_2", &"x".repeat(32)] {
            assert_eq!(OutputChannel::new(good).map(|channel| channel.as_str().to_owned()), Ok(good.to_owned()));
        }
        for bad in ["", "Stdout", "2nd", "-x", "a b", "a/b", "é", &"x".repeat(33)] {
            assert_eq!(OutputChannel::new(bad), Err(InvalidOutputChannel), "{bad:?}");
        }
        assert_eq!(serde_json::to_value(OutputChannel::from(OutputStream::Stderr)).unwrap(), "stderr");
        assert!(serde_json::from_value::<OutputChannel>(serde_json::json!("../x")).is_err());
    }
}
