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
