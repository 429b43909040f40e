//! One task per enabled server: start it, run the MCP handshake and list its tools within `startup_timeout_sec`,
//! offer the tools while it lives (listing them again when it says they changed), and start it again with a growing
//! delay when it dies or fails to start. Nothing a server does reaches past its task: a server that fails is a
//! status (`failed`, with the reason), never an error of the daemon.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::{ClientCapabilities, Implementation, InitializeRequestParams, ProtocolVersion};
use rmcp::service::{NotificationContext, Peer, RoleClient, RunningService};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use troupe_protocol::types::mcp::McpServerState;

use super::names::acceptable_tool_name;
use super::stdio::{self, ServerProcess};
use super::tool::McpTool;
use super::{McpServers, ServerTools};
use crate::config::McpServerConfig;
use crate::sandbox::Sandbox;

/// The first delay before a server is started again; doubled after each start that did not last, up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A server that stayed ready this long counts as healthy: its next restart waits the first delay again.
const HEALTHY_AFTER: Duration = Duration::from_secs(60);
/// The most tools one server offers; the rest are left out (and logged).
const MAX_TOOLS_PER_SERVER: usize = 256;

/// troupe as an MCP client: its name and version at `initialize`, no client capabilities (no sampling, roots or
/// elicitation), and a wake-up when the server says its tools changed.
#[derive(Clone)]
pub(super) struct ClientSide {
    tools_changed: Arc<Notify>,
}

impl rmcp::ClientHandler for ClientSide {
    fn get_info(&self) -> InitializeRequestParams {
        InitializeRequestParams::new(
            ClientCapabilities::default(),
            Implementation::new("troupe", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) -> impl Future<Output = ()> + Send + '_ {
        self.tools_changed.notify_one();
        std::future::ready(())
    }
}

/// A server that answered the handshake.
struct Connected {
    service: RunningService<RoleClient, ClientSide>,
    /// `None` for a server reached over the network.
    process: Option<ServerProcess>,
    tools_changed: Arc<Notify>,
}

/// Runs the server `name` until `stop`.
pub(super) async fn supervise(
    servers: Arc<McpServers>,
    name: String,
    config: McpServerConfig,
    sandbox: Arc<Sandbox>,
    stop: CancellationToken,
) {
    let mut backoff = FIRST_BACKOFF;
    // Each turn is a start; `restarts` counts those before it but the first, as the status shows them.
    for restarts in 0u32.. {
        let started = tokio::select! {
            started = tokio::time::timeout(config.startup_timeout(), start(&name, &config, &sandbox)) => started,
            () = stop.cancelled() => return,
        };
        let connected = match started {
            Ok(Ok(connected)) => connected,
            Ok(Err(reason)) => {
                fail(&servers, &name, reason, restarts);
                if !wait(&stop, &mut backoff).await {
                    return;
                }
                continue;
            }
            Err(_) => {
                let seconds = config.startup_timeout().as_secs_f64();
                fail(
                    &servers,
                    &name,
                    format!(
                        "it did not start, answer `initialize` and list its tools within {seconds} s (startup_timeout_sec)"
                    ),
                    restarts,
                );
                if !wait(&stop, &mut backoff).await {
                    return;
                }
                continue;
            }
        };
        let ready_at = Instant::now();
        let ending = serve(&servers, &name, &config, connected, &stop, restarts).await;
        servers.set_tools(&name, None);
        let Some(reason) = ending else {
            return;
        };
        tracing::warn!(mcp_server = %name, %reason, "an MCP server went away; it is started again");
        servers.update(&name, |status| {
            status.state = McpServerState::Restarting;
            status.reason = Some(super::bounded(&reason));
        });
        if ready_at.elapsed() >= HEALTHY_AFTER {
            backoff = FIRST_BACKOFF;
        }
        if !wait(&stop, &mut backoff).await {
            return;
        }
    }
}

/// Marks the server failed, with why, and logs it.
fn fail(servers: &McpServers, name: &str, reason: String, restarts: u32) {
    tracing::warn!(mcp_server = %name, %reason, "an MCP server could not be started; it is tried again later");
    servers.update(name, |status| {
        status.state = McpServerState::Failed;
        status.reason = Some(super::bounded(&reason));
        status.restarts = restarts;
    });
}

/// Waits the backoff (doubling it for next time); false when stopped meanwhile.
async fn wait(stop: &CancellationToken, backoff: &mut Duration) -> bool {
    let delay = *backoff;
    *backoff = (*backoff * 2).min(MAX_BACKOFF);
    tokio::select! {
        () = tokio::time::sleep(delay) => true,
        () = stop.cancelled() => false,
    }
}

/// Starts the process (or opens the connection) and runs the handshake.
async fn start(name: &str, config: &McpServerConfig, sandbox: &Arc<Sandbox>) -> Result<Connected, String> {
    let tools_changed = Arc::new(Notify::new());
    let client = ClientSide { tools_changed: tools_changed.clone() };
    if config.is_http() {
        let service = super::http::connect(client, config).await?;
        return Ok(Connected { service, process: None, tools_changed });
    }
    let stdio::Started { process, stdout, stdin } = stdio::spawn(name, config, sandbox).await?;
    match client.serve((stdout, stdin)).await {
        Ok(service) => Ok(Connected { service, process: Some(process), tools_changed }),
        Err(error) => {
            process.kill().await;
            Err(format!("the MCP handshake failed: {}", handshake_failure(&error)))
        }
    }
}

/// Why a handshake failed, in words: a transport's error without the transport's Rust type name.
pub(super) fn handshake_failure(error: &rmcp::service::ClientInitializeError) -> String {
    match error {
        rmcp::service::ClientInitializeError::TransportError { error, context } => {
            format!("{} ({context})", error.error)
        }
        other => other.to_string(),
    }
}

/// Offers the server's tools until it goes away (`Some(why)`) or `stop` (`None`); kills its process either way.
async fn serve(
    servers: &Arc<McpServers>,
    name: &str,
    config: &McpServerConfig,
    connected: Connected,
    stop: &CancellationToken,
    restarts: u32,
) -> Option<String> {
    let Connected { service, mut process, tools_changed } = connected;
    let peer = service.peer().clone();
    let listed = tokio::time::timeout(config.startup_timeout(), list_tools(name, config, &peer)).await;
    let tools = match listed {
        Ok(Ok(tools)) => tools,
        Ok(Err(reason)) => {
            end(service, process).await;
            return Some(reason);
        }
        Err(_) => {
            end(service, process).await;
            return Some("it did not list its tools within its startup_timeout_sec".into());
        }
    };
    tracing::info!(mcp_server = %name, tools = tools.tools.len(), "an MCP server is ready");
    servers.set_tools(name, Some(tools));
    servers.update(name, |status| {
        status.state = McpServerState::Ready;
        status.reason = None;
        status.restarts = restarts;
    });
    let closed = service.cancellation_token();
    let mut waiting = Box::pin(service.waiting());
    let ending = loop {
        let exited = async {
            match process.as_mut() {
                Some(process) => process.child.wait().await.map(|status| status.to_string()),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            status = exited => break Some(match status {
                Ok(status) => format!("its process ended ({status})"),
                Err(error) => format!("its process could not be waited for: {error}"),
            }),
            quit = &mut waiting => break Some(match quit {
                Ok(reason) => format!("its connection closed ({reason:?})"),
                Err(error) => format!("its connection task failed: {error}"),
            }),
            () = tools_changed.notified() => {
                match list_tools(name, config, &peer).await {
                    Ok(tools) => servers.set_tools(name, Some(tools)),
                    Err(reason) => tracing::warn!(mcp_server = %name, %reason, "listing the changed tools of an MCP server failed"),
                }
            }
            () = stop.cancelled() => break None,
        }
    };
    closed.cancel();
    drop(waiting);
    if let Some(process) = process {
        process.kill().await;
    }
    ending
}

async fn end(mut service: RunningService<RoleClient, ClientSide>, process: Option<ServerProcess>) {
    let _ = service.close_with_timeout(Duration::from_secs(1)).await;
    if let Some(process) = process {
        process.kill().await;
    }
}

/// The server's tools as runs see them: those `enabled_tools`/`disabled_tools` let through whose names a
/// permission rule can match, each once by the name the model calls it.
async fn list_tools(name: &str, config: &McpServerConfig, peer: &Peer<RoleClient>) -> Result<ServerTools, String> {
    let listed = peer.list_all_tools().await.map_err(|error| format!("listing its tools failed: {error}"))?;
    let mut tools = ServerTools::default();
    for tool in listed {
        if !acceptable_tool_name(&tool.name) {
            tracing::warn!(mcp_server = %name, "a tool whose name is not 1 to 128 of A-Z a-z 0-9 _ - . / is not offered");
            continue;
        }
        if !config.offers(&tool.name) {
            continue;
        }
        if tools.tools.len() == MAX_TOOLS_PER_SERVER {
            tracing::warn!(mcp_server = %name, "the server offers more than {MAX_TOOLS_PER_SERVER} tools; the rest are left out");
            break;
        }
        let tool = McpTool::new(name, tool, peer.clone(), config.tool_timeout());
        if tools.tools.iter().any(|known| known.called_as() == tool.called_as()) {
            tracing::warn!(mcp_server = %name, tool = tool.name(), called_as = tool.called_as(), "two tools would have the same name for the model; the second is not offered");
            continue;
        }
        tools.tools.push(Arc::new(tool));
    }
    Ok(tools)
}
