//! troupe extension: the MCP servers of the daemon's `config.toml` (`[mcp_servers.<name>]`), as `mcp_servers` in
//! the runtime snapshot (`runtime.snapshot.get`, `runtime.changed`), for `troupe status`, `troupe mcp list` and
//! clients that show them. A client that does not know the field ignores it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How the daemon reaches a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum McpTransport {
    /// A child process of the daemon speaking MCP on its stdin and stdout (`command`).
    Stdio,
    /// Streamable HTTP (`url`).
    Http,
}

/// Where a server stands now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum McpServerState {
    /// Its first start is under way.
    Starting,
    /// It answered the handshake and listed its tools, which runs offer the model.
    Ready,
    /// It was ready and went away (its process exited, its connection closed); it is being started again.
    Restarting,
    /// Its last start failed (`reason` says why); it is tried again after a delay that grows with each failure.
    Failed,
    /// `enabled = false` in the config: never started.
    Disabled,
}

impl McpServerState {
    pub fn as_str(self) -> &'static str {
        match self {
            McpServerState::Starting => "starting",
            McpServerState::Ready => "ready",
            McpServerState::Restarting => "restarting",
            McpServerState::Failed => "failed",
            McpServerState::Disabled => "disabled",
        }
    }
}

/// One tool a ready server offers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct McpToolInfo {
    /// The tool's name on the server (its permission resource is `mcp:<server>/<name>`).
    pub name: String,
    /// The name the model calls it by: `mcp__<server>__<name>`, with characters model APIs refuse replaced by `_`
    /// and a long name shortened.
    pub called_as: String,
}

/// One configured MCP server, in the runtime snapshot's `mcp_servers` (sorted by name).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct McpServerStatus {
    pub name: String,
    pub transport: McpTransport,
    pub state: McpServerState,
    /// Why it is `failed` or `restarting`: at most 1,024 bytes, without terminal controls; `null` otherwise.
    #[serde(default)]
    pub reason: Option<String>,
    /// How many times it was started again after its first start.
    #[serde(default)]
    pub restarts: u32,
    /// Its tools while it is `ready`, by name; empty otherwise.
    #[serde(default)]
    pub tools: Vec<McpToolInfo>,
}
