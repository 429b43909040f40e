//! What a tool call runs with: the session's cwd, limits, the live output channel, stdin and cancellation.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use troupe_protocol::types::tool_output::{OutputStream, TOOL_OUTPUT_RETAINED_BYTES};

use super::PermissionRequest;
use crate::sandbox::Sandbox;

/// Bounds on what one call may cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolLimits {
    /// How long `shell` runs before its process group is killed, unless the call asks for another timeout.
    pub shell_timeout: Duration,
    /// How much of each shell stream the result keeps (head and tail). The live stream is not bounded by this.
    pub max_output_bytes: usize,
    /// How much of a file `read_file` returns in one call.
    pub max_read_bytes: usize,
    /// How many matching lines `search` returns.
    pub max_search_results: usize,
    /// `web_fetch` may reach loopback, private and link-local addresses (`[tools] web_fetch_local`).
    pub web_fetch_local: bool,
    /// `shell` snapshots the git work tree around each command for `session.diff` (`[tools] shell_snapshots`).
    pub shell_snapshots: bool,
}

impl Default for ToolLimits {
    fn default() -> Self {
        Self {
            shell_timeout: Duration::from_secs(120),
            // The same as the daemon retains for live snapshots, so the result never says less than a late
            // subscriber could have seen.
            max_output_bytes: TOOL_OUTPUT_RETAINED_BYTES,
            max_read_bytes: 256 * 1024,
            max_search_results: 200,
            web_fetch_local: false,
            shell_snapshots: true,
        }
    }
}

/// One piece of live output of a running shell call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputChunk {
    pub stream: OutputStream,
    /// Byte offset of the first byte of `data` within its stream.
    pub offset: u64,
    pub data: Bytes,
}

/// Input for a running shell call, from `run.tool_stdin`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StdinInput {
    Data(Vec<u8>),
    /// Close the child's stdin.
    Eof,
}

/// Everything a call runs with besides its arguments.
#[derive(Debug)]
pub struct ToolContext {
    /// The session's working directory; file paths are resolved and confined against it.
    pub cwd: PathBuf,
    pub limits: ToolLimits,
    /// Where `shell` streams its output as it arrives. Sending waits when the channel is full, so a slow reader
    /// slows the child instead of growing memory; a closed channel only stops the streaming.
    pub output: Option<mpsc::Sender<OutputChunk>>,
    /// Input for the child's stdin, bounded in unread bytes (`tool_stdin`). `None` gives the child `/dev/null`; a
    /// closed queue counts as end of input.
    pub stdin: Option<crate::tool_stdin::StdinReceiver>,
    /// Cancels the call: `shell` kills its whole process group and the result is `cancelled`.
    pub cancel: CancellationToken,
    /// The request the policy or the user allowed for this call, when it reaches outside the cwd. A file tool
    /// executes outside the cwd only for exactly that resolved path; with `None`, or when the path now resolves
    /// elsewhere, anything outside the cwd is `denied`.
    pub approved_request: Option<PermissionRequest>,
    /// The kernel's bounds on processes the call starts, and the denied paths file tools check by identity.
    pub sandbox: Arc<Sandbox>,
    /// The run's private temp dir (`TMPDIR` of tool processes, writable in every sandbox mode). `None` uses a
    /// fresh directory per call.
    pub temp_dir: Option<PathBuf>,
    /// Further roots the call's processes may write in `workspace-write`: the git directory of the repository
    /// that holds the cwd when it lies outside it (a subfolder of a repository, a worktree), so that commits work.
    pub writable: Vec<PathBuf>,
    /// Where `write_file` and `edit_file` record what they replace, before they write (`crate::changes`); `None`
    /// records nothing.
    pub changes: Option<crate::changes::ChangeRecorder>,
}

impl ToolContext {
    /// A context with default limits, no live output, no stdin, a fresh cancellation token and no sandbox.
    pub fn new(cwd: impl Into<PathBuf>) -> Self {
        Self {
            cwd: cwd.into(),
            limits: ToolLimits::default(),
            output: None,
            stdin: None,
            cancel: CancellationToken::new(),
            approved_request: None,
            sandbox: Arc::new(Sandbox::unconfined()),
            temp_dir: None,
            writable: Vec::new(),
            changes: None,
        }
    }
}
