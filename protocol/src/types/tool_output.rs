//! Live output of running tools: the `events.tool_output_*` notifications.
//!
//! Output is not part of the durable log: it streams to subscribed connections as base64 chunks addressed by byte
//! offset within each stream. The daemon retains the last [`TOOL_OUTPUT_RETAINED_BYTES`] of each stream, which a
//! late or lagging subscriber receives as a snapshot; bytes older than that are reported as a gap.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How many of the most recent bytes of each output stream the daemon keeps for snapshots (64 KiB).
pub const TOOL_OUTPUT_RETAINED_BYTES: usize = 64 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
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
