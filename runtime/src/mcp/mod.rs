//! MCP servers as tools: troupe is an MCP client (on the `rmcp` SDK) of the servers `[mcp_servers.<name>]`
//! configures (`crate::config::mcp`), and offers their tools to the model as `mcp__<server>__<tool>`.
//!
//! - `supervisor`: one task per enabled server: start, handshake, tools, restarts with backoff;
//! - `stdio`: a stdio server's process, sandboxed like a tool process, its stderr in the daemon's log; `http`: a
//!   streamable-HTTP server's connection, its headers from the config and the daemon's variables;
//! - `tool`: a server's tool as a [`crate::tools::Tool`]: `execute` on `mcp:<server>/<tool>`, called within the
//!   server's tool timeout; `results`: a `tools/call` result as the tool result (text, images as artifacts,
//!   resource links); `names`: model names and permission resources.
//!
//! [`McpServers`] is what the engine and runs see: every configured server's status (the runtime snapshot's
//! `mcp_servers`) and the tools of the ready ones, with a change counter the runtime actor follows to publish
//! `runtime.changed`.

mod http;
mod names;
mod results;
mod stdio;
mod supervisor;
mod tool;

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use troupe_protocol::types::mcp::{McpServerState, McpServerStatus, McpToolInfo, McpTransport};

use crate::config::McpServerConfig;
use crate::sandbox::Sandbox;
use crate::tools::{Tool, ToolDefinition};

pub use names::{MCP_TOOL_PREFIX, acceptable_tool_name, mcp_resource, model_tool_name};
pub use tool::McpTool;

/// The tools of one ready server, in the order it listed them.
#[derive(Default)]
pub(crate) struct ServerTools {
    tools: Vec<Arc<McpTool>>,
}

/// The longest `reason` a status carries, in bytes.
const MAX_REASON_BYTES: usize = 1024;

/// A reason as a status shows it: terminal controls removed, at most [`MAX_REASON_BYTES`].
fn bounded(reason: &str) -> String {
    let cleaned = troupe_protocol::diagnostic::strip_terminal_controls(reason);
    let mut end = cleaned.len().min(MAX_REASON_BYTES);
    while !cleaned.is_char_boundary(end) {
        end -= 1;
    }
    cleaned[..end].to_owned()
}

/// Every configured server's status and the tools of the ready ones; written by the supervisors, read by runs and
/// the runtime snapshot.
pub struct McpServers {
    statuses: RwLock<BTreeMap<String, McpServerStatus>>,
    /// By the name the model calls them.
    tools: RwLock<BTreeMap<String, Arc<McpTool>>>,
    /// Counts changes of the statuses, for whoever publishes them.
    changes: watch::Sender<u64>,
    stop: CancellationToken,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Default for McpServers {
    fn default() -> Self {
        McpServers {
            statuses: RwLock::default(),
            tools: RwLock::default(),
            changes: watch::Sender::new(0),
            stop: CancellationToken::new(),
            tasks: Mutex::default(),
        }
    }
}

impl McpServers {
    /// Starts a supervisor per enabled server (disabled ones are listed as such). Must be called on a thread that
    /// lives as long as the daemon, inside its tokio runtime: the server processes die when the thread that
    /// started them ends.
    pub fn start(configs: &BTreeMap<String, McpServerConfig>, sandbox: Arc<Sandbox>) -> Arc<McpServers> {
        let servers = Arc::new(McpServers::default());
        {
            let mut statuses = servers.statuses.write();
            for (name, config) in configs {
                let state = if config.enabled { McpServerState::Starting } else { McpServerState::Disabled };
                let transport = if config.is_http() { McpTransport::Http } else { McpTransport::Stdio };
                statuses.insert(
                    name.clone(),
                    McpServerStatus {
                        name: name.clone(),
                        transport,
                        state,
                        reason: None,
                        restarts: 0,
                        tools: Vec::new(),
                    },
                );
            }
        }
        let mut tasks = servers.tasks.lock();
        for (name, config) in configs.iter().filter(|(_, config)| config.enabled) {
            let task = supervisor::supervise(
                servers.clone(),
                name.clone(),
                config.clone(),
                sandbox.clone(),
                servers.stop.child_token(),
            );
            tasks.push(tokio::spawn(task));
        }
        drop(tasks);
        servers
    }

    /// Every configured server's status, by name.
    pub fn statuses(&self) -> Vec<McpServerStatus> {
        self.statuses.read().values().cloned().collect()
    }

    /// The MCP tool the model calls `name`, while its server is ready.
    pub fn tool(&self, name: &str) -> Option<Arc<McpTool>> {
        self.tools.read().get(name).cloned()
    }

    /// The definitions of every ready server's tools, by the names the model calls them.
    pub fn tool_definitions(&self) -> Vec<ToolDefinition> {
        self.tools.read().values().map(|tool| tool.definition()).collect()
    }

    /// Follows the statuses: the value changes whenever one does.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Stops every server (their processes killed) and waits for the supervisors to end.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        let tasks = std::mem::take(&mut *self.tasks.lock());
        for task in tasks {
            let _ = task.await;
        }
    }

    fn changed(&self) {
        self.changes.send_modify(|count| *count += 1);
    }

    fn update(&self, name: &str, change: impl FnOnce(&mut McpServerStatus)) {
        if let Some(status) = self.statuses.write().get_mut(name) {
            change(status);
        }
        self.changed();
    }

    /// Replaces the tools of `server` (none when it is not ready), in its status too.
    fn set_tools(&self, server: &str, tools: Option<ServerTools>) {
        let tools = tools.map(|tools| tools.tools).unwrap_or_default();
        {
            let mut all = self.tools.write();
            all.retain(|_, tool| tool.server() != server);
            for tool in &tools {
                all.insert(tool.called_as().to_owned(), tool.clone());
            }
        }
        self.update(server, |status| {
            status.tools = tools
                .iter()
                .map(|tool| McpToolInfo { name: tool.name().to_owned(), called_as: tool.called_as().to_owned() })
                .collect();
        });
    }
}
