//! The MCP servers in the TUI, under a real terminal (tmux): with a server that starts and one that cannot, the
//! status line says one failed, `s` on the picker (and Ctrl-S in a session) opens the overlay listing each server
//! with its state, the failed one's reason and the ready one's tools, and Esc closes it.

use super::mcp::{probe_section, server_script};
use super::support::*;
use super::terminal_support::{SCREEN_WAIT, Tmux, tui_command};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_overlay_shows_each_server_its_state_the_reason_it_failed_and_its_tools() {
    let (_dir, script) = server_script();
    let config =
        format!("{}[mcp_servers.broken]\ncommand = \"/nonexistent/troupe-mcp-server\"\n", probe_section(&script, ""));
    let daemon = TestDaemon::start_with(DaemonSetup { config_toml: Some(config), ..DaemonSetup::default() });
    let command = tui_command(&daemon, "");
    let tmux = Tmux::start("tui-mcp", &command);
    tmux.wait_for("s MCP servers").await;
    // The status line says so without asking (`runtime.changed` brings the failure).
    tmux.wait_for("1 MCP server failed (s)").await;

    tmux.keys(&["s"]);
    tmux.wait_for("MCP servers · ↑/↓ scroll").await;
    let screen = tmux.wait_for("probe (stdio): ready, 5 tool(s)").await;
    assert!(screen.contains("broken (stdio): failed: could not start `/nonexistent/troupe-mcp-server`"), "{screen}");
    assert!(screen.contains("No such file or directory"), "the reason: {screen}");
    assert!(screen.contains("mcp__probe__echo  echo"), "the tools: {screen}");
    tmux.keys(&["Escape"]);
    let closed = holds_within(SCREEN_WAIT, || !tmux.screen().contains("MCP servers · ↑/↓ scroll")).await;
    assert!(closed, "Esc closes the overlay: {}", tmux.screen());
    assert!(!tmux.screen().contains("troupe-mcp-server"), "{}", tmux.screen());

    // In a session: Ctrl-S, and the status line's word names that key.
    tmux.keys(&["n"]);
    tmux.wait_for("prompt (Enter runs)").await;
    tmux.wait_for("1 MCP server failed (Ctrl-S)").await;
    tmux.keys(&["C-s"]);
    let screen = tmux.wait_for("Esc or Ctrl-S closes").await;
    assert!(screen.contains("broken (stdio): failed"), "{screen}");
    tmux.keys(&["C-s"]);
    let closed = holds_within(SCREEN_WAIT, || !tmux.screen().contains("Esc or Ctrl-S closes")).await;
    assert!(closed, "Ctrl-S closes it again: {}", tmux.screen());
}
