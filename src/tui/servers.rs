//! The MCP servers overlay (`s` on the picker, Ctrl-S in a session): each server of the daemon's `config.toml`,
//! its transport and state, why it failed or restarts, and the tools a ready one offers with the names the model
//! calls them by, as `troupe mcp list` prints them. And the status line's word when a server is not working.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};
use troupe_protocol::types::mcp::{McpServerState, McpServerStatus};

use super::state::{App, Screen};
use crate::mcp_cmd::render_servers;
use crate::style::Style as TextStyle;

/// The overlay's lines: `troupe mcp list`'s text, each server's line coloured by its state.
pub fn lines(servers: &[McpServerStatus]) -> Vec<Line<'static>> {
    let text = render_servers(servers, TextStyle::plain());
    let mut states = servers.iter().map(|server| server.state);
    text.lines()
        .map(|line| {
            // A server's line starts at the margin, its tools are indented under it.
            let style = if line.starts_with(' ') {
                Style::default()
            } else {
                match states.next() {
                    Some(McpServerState::Ready) => Style::default().fg(Color::Green),
                    Some(McpServerState::Failed) => Style::default().fg(Color::Red),
                    Some(McpServerState::Starting | McpServerState::Restarting) => Style::default().fg(Color::Yellow),
                    Some(McpServerState::Disabled) | None => Style::default().fg(Color::DarkGray),
                }
            };
            Line::from(Span::styled(line.to_owned(), style))
        })
        .collect()
}

/// Draws the overlay over `area`, scrolled `scrolled` lines down.
pub fn draw(frame: &mut Frame, app: &App, area: Rect, scrolled: u16) {
    let lines = match &app.mcp_servers {
        Some(servers) => lines(servers),
        None => vec![Line::from("the daemon has not said yet")],
    };
    let key = if app.screen == Screen::Picker { "s" } else { "Ctrl-S" };
    let popup = Rect {
        x: area.x + 2,
        y: area.y + 1,
        width: area.width.saturating_sub(4),
        height: area.height.saturating_sub(2),
    };
    let block = Block::default()
        .borders(Borders::ALL)
        .title(format!(" MCP servers · ↑/↓ scroll · Esc or {key} closes "))
        .title_style(Style::default().add_modifier(Modifier::BOLD));
    let paragraph = Paragraph::new(lines).wrap(Wrap { trim: false }).block(block);
    // Not past the last line.
    let last =
        (paragraph.line_count(popup.width.saturating_sub(2)) as u16).saturating_sub(popup.height.saturating_sub(2));
    frame.render_widget(Clear, popup);
    frame.render_widget(paragraph.scroll((scrolled.min(last), 0)), popup);
}

/// The status line's part when a server is not working now (failed, restarting), with the key that shows why.
pub fn status_part(app: &App) -> Option<String> {
    let servers = app.mcp_servers.as_deref()?;
    let count = |state| servers.iter().filter(|server| server.state == state).count();
    let mut words = Vec::new();
    for (state, name) in [(McpServerState::Failed, "failed"), (McpServerState::Restarting, "restarting")] {
        match count(state) {
            0 => {}
            1 => words.push(format!("1 MCP server {name}")),
            n => words.push(format!("{n} MCP servers {name}")),
        }
    }
    if words.is_empty() {
        return None;
    }
    let key = if app.screen == Screen::Picker { "s" } else { "Ctrl-S" };
    Some(format!("{} ({key})", words.join(", ")))
}

#[cfg(test)]
mod tests {
    use troupe_protocol::types::mcp::{McpToolInfo, McpTransport};

    use super::*;

    fn servers() -> Vec<McpServerStatus> {
        vec![
            McpServerStatus {
                name: "broken".into(),
                transport: McpTransport::Stdio,
                state: McpServerState::Failed,
                reason: Some("could not start `/nope`: No such file or directory".into()),
                restarts: 0,
                tools: Vec::new(),
            },
            McpServerStatus {
                name: "docs".into(),
                transport: McpTransport::Http,
                state: McpServerState::Ready,
                reason: None,
                restarts: 0,
                tools: vec![McpToolInfo { name: "search".into(), called_as: "mcp__docs__search".into() }],
            },
        ]
    }

    #[test]
    fn each_server_line_is_coloured_by_its_state_and_its_tools_follow() {
        let lines = lines(&servers());
        let text: Vec<String> = lines.iter().map(|line| line.to_string()).collect();
        assert_eq!(
            text,
            [
                "broken (stdio): failed: could not start `/nope`: No such file or directory",
                "docs (http): ready, 1 tool(s)",
                "  mcp__docs__search  search",
            ]
        );
        assert_eq!(lines[0].spans[0].style.fg, Some(Color::Red));
        assert_eq!(lines[1].spans[0].style.fg, Some(Color::Green));
        assert_eq!(lines[2].spans[0].style.fg, None);
    }

    #[test]
    fn the_status_line_names_servers_that_do_not_work() {
        let mut app = App::new("ws://x".into());
        assert_eq!(status_part(&app), None);
        app.mcp_servers = Some(servers());
        assert_eq!(status_part(&app).as_deref(), Some("1 MCP server failed (s)"));
        app.screen = Screen::Session;
        assert_eq!(status_part(&app).as_deref(), Some("1 MCP server failed (Ctrl-S)"));
        app.mcp_servers = Some(servers().into_iter().skip(1).collect());
        assert_eq!(status_part(&app), None);
    }
}
