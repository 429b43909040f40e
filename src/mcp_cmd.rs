//! `troupe mcp list`: the MCP servers of the daemon's `config.toml`, where each stands (starting, ready, restarting,
//! failed with the reason, disabled) and the tools of the ready ones, as the daemon reports them in its runtime
//! snapshot (`mcp_servers`).

use clap::Subcommand;
use troupe_protocol::client::{ClientOptions, ClientProtocol};
use troupe_protocol::types::mcp::{McpServerState, McpServerStatus, McpTransport};

use crate::cli_errors::explained;
use crate::client_args::ClientArgs;
use crate::output::{pretty_json, text};
use crate::style::{Style, clean};

/// `troupe mcp …`, flattened into the `troupe` command line.
#[derive(Subcommand, Debug)]
pub enum McpCommand {
    /// The MCP servers of the daemon's config.toml (`[mcp_servers.NAME]`), whose tools runs offer the model.
    Mcp {
        #[command(subcommand)]
        command: McpSubcommand,
    },
}

#[derive(Subcommand, Debug)]
pub enum McpSubcommand {
    /// Each server, its state (starting, ready, restarting, failed with the reason, disabled) and its tools, with
    /// the names the model calls them by.
    List {
        #[command(flatten)]
        client: ClientArgs,
        /// Print the servers as the daemon reports them, as JSON.
        #[arg(long)]
        json: bool,
    },
}

impl McpCommand {
    pub fn run(self) -> anyhow::Result<u8> {
        let McpCommand::Mcp { command: McpSubcommand::List { client, json } } = self;
        crate::commands::block_on(async move {
            let connection = client.connection();
            let connected = connection.open(ClientOptions::default()).await?;
            let snapshot = connected.client.runtime_snapshot_get(Default::default()).await.map_err(explained)?.snapshot;
            connected.client.close().await;
            if json {
                return pretty_json(&serde_json::json!({ "mcp_servers": snapshot.mcp_servers }));
            }
            text(&render_servers(&snapshot.mcp_servers, Style::stdout()));
            // Servers added to config.toml after the daemon started are not running yet: say why they are missing.
            if connection.targets_local_data_dir()
                && let Ok(data_dir) = troupe_runtime::data_dir::DataDir::resolve(client.data_dir.clone())
                && let (note, Some(true)) = crate::config_check_cmd::restart_note(&data_dir)
            {
                text(&format!("{note}\n"));
            }
            Ok(())
        })?;
        Ok(0)
    }
}

/// One server's state in words, coloured.
pub fn state_words(server: &McpServerStatus, style: Style) -> String {
    let state = server.state.as_str();
    match server.state {
        McpServerState::Ready => style.green(state),
        McpServerState::Failed => style.red(state),
        McpServerState::Starting | McpServerState::Restarting => style.yellow(state),
        McpServerState::Disabled => style.dim(state),
    }
}

/// Each server on a line (name, transport, state, restarts, why), its tools below it.
pub fn render_servers(servers: &[McpServerStatus], style: Style) -> String {
    if servers.is_empty() {
        return "no MCP servers (add one as [mcp_servers.NAME] with `command` or `url` to the daemon's config.toml, \
                then restart it)\n"
            .to_owned();
    }
    let mut text = String::new();
    for server in servers {
        let transport = match server.transport {
            McpTransport::Stdio => "stdio",
            McpTransport::Http => "http",
        };
        text.push_str(&format!("{} ({transport}): {}", clean(&server.name), state_words(server, style)));
        if server.state == McpServerState::Ready {
            text.push_str(&format!(", {} tool(s)", server.tools.len()));
        }
        if server.restarts > 0 {
            text.push_str(&format!(", {} restart(s)", server.restarts));
        }
        if let Some(reason) = &server.reason {
            text.push_str(&format!(": {}", crate::inspect_cmd::first_line(reason, 300)));
        }
        text.push('\n');
        let width = server.tools.iter().map(|tool| clean(&tool.called_as).chars().count()).max().unwrap_or(0);
        for tool in &server.tools {
            let called_as = clean(&tool.called_as);
            let padding = " ".repeat(width - called_as.chars().count());
            text.push_str(&format!("  {called_as}{padding}  {}\n", style.dim(&clean(&tool.name))));
        }
    }
    text
}

/// `troupe status`'s line: how many servers, and each one's state.
pub fn status_line(servers: &[McpServerStatus], style: Style) -> Option<String> {
    if servers.is_empty() {
        return None;
    }
    let each: Vec<String> = servers
        .iter()
        .map(|server| {
            let tools = if server.state == McpServerState::Ready {
                format!(", {} tool(s)", server.tools.len())
            } else {
                String::new()
            };
            format!("{} {}{tools}", clean(&server.name), state_words(server, style))
        })
        .collect();
    Some(format!("mcp       {} (`troupe mcp list` for more)\n", each.join("; ")))
}

#[cfg(test)]
mod tests {
    use troupe_protocol::types::mcp::McpToolInfo;

    use super::*;

    #[test]
    fn servers_show_their_state_reason_and_tools() {
        let servers = vec![
            McpServerStatus {
                name: "broken".into(),
                transport: McpTransport::Stdio,
                state: McpServerState::Failed,
                reason: Some("could not start `/nope`: No such file or directory".into()),
                restarts: 2,
                tools: Vec::new(),
            },
            McpServerStatus {
                name: "docs".into(),
                transport: McpTransport::Stdio,
                state: McpServerState::Ready,
                reason: None,
                restarts: 0,
                tools: vec![
                    McpToolInfo { name: "search".into(), called_as: "mcp__docs__search".into() },
                    McpToolInfo { name: "a.b".into(), called_as: "mcp__docs__a_b".into() },
                ],
            },
        ];
        let text = render_servers(&servers, Style::plain());
        assert_eq!(
            text,
            "broken (stdio): failed, 2 restart(s): could not start `/nope`: No such file or directory\n\
             docs (stdio): ready, 2 tool(s)\n  mcp__docs__search  search\n  mcp__docs__a_b     a.b\n"
        );
        assert_eq!(
            status_line(&servers, Style::plain()).unwrap(),
            "mcp       broken failed; docs ready, 2 tool(s) (`troupe mcp list` for more)\n"
        );
        assert!(render_servers(&[], Style::plain()).starts_with("no MCP servers"));
    }
}
