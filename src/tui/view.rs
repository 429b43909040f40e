//! Drawing the state: the picker, the transcript, the approval prompt, the model picker, the input line and the
//! status line. Pure functions of [`App`], tested with ratatui's `TestBackend`.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, List, ListItem, ListState, Paragraph, Wrap};

use super::ansi::styled_lines;
use troupe_protocol::diagnostic::{ShowLimits, show_visibly, visible_line};
use troupe_protocol::types::approval::{ApprovalDecision, ApprovalRecord};
use troupe_protocol::types::run::ToolResultStatus;

use super::state::{App, CallApproval, Entry, InputMode, Screen, ToolEnd};
use crate::style::{clean, id_prefix, relative_time, short_id, unique_prefix_len};

pub fn draw(frame: &mut Frame, app: &App) {
    let [main, status] = Layout::vertical([Constraint::Min(1), Constraint::Length(1)]).areas(frame.area());
    match app.screen {
        Screen::Picker => picker(frame, app, main),
        Screen::Session => session(frame, app, main),
    }
    if let Some(scrolled) = app.servers_shown {
        super::servers::draw(frame, app, main, scrolled);
    }
    frame.render_widget(
        Paragraph::new(status_line_within(app, usize::from(status.width)))
            .style(Style::default().add_modifier(Modifier::REVERSED)),
        status,
    );
}

fn picker(frame: &mut Frame, app: &App, area: Rect) {
    // Long enough to tell every listed session apart (a tree's sessions share their first 8 characters), as
    // `troupe sessions` prints them, so what is shown can be typed as `troupe tui PREFIX`.
    let id_len = unique_prefix_len(app.rows.iter().map(|row| row.session_id.as_str()));
    // Columns as wide as their widest cell (the longest status is "interrupted"), the directory's at most
    // [`DIRECTORY_COLUMN`] characters, cut from the left (the end of a path tells projects apart).
    let dirs: Vec<String> = app
        .rows
        .iter()
        .map(|row| {
            row.cwd.as_deref().map(|cwd| left_cut(&crate::commands::home_shortened(&clean(cwd)), DIRECTORY_COLUMN))
        })
        .map(Option::unwrap_or_default)
        .collect();
    let dir_width = dirs.iter().map(|dir| dir.chars().count()).max().unwrap_or(0);
    let times: Vec<String> = app.rows.iter().map(|row| relative_time(&row.last_activity_at)).collect();
    let time_width = times.iter().map(|time| time.chars().count()).max().unwrap_or(0);
    let id_width = app.rows.iter().map(|row| 2 * row.depth + id_len.min(row.session_id.len())).max().unwrap_or(0);
    let items: Vec<ListItem> = app
        .rows
        .iter()
        .zip(dirs.iter().zip(&times))
        .map(|(row, (dir, time))| {
            let title = row.title.as_deref().map(clean).unwrap_or_else(|| "(untitled)".to_owned());
            let indent = if row.depth > 0 { format!("{}└ ", "  ".repeat(row.depth - 1)) } else { String::new() };
            let id = format!("{indent}{}", id_prefix(&row.session_id, id_len));
            ListItem::new(format!(
                "{id:<id_width$}  {:<11}  {time:<time_width$}  {dir:<dir_width$}  {title}",
                crate::commands::status_name(row.status),
            ))
        })
        .collect();
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" sessions · Enter open · n new · m model · s MCP servers · r refresh · q quit ");
    let list = List::new(items).block(block).highlight_style(Style::default().add_modifier(Modifier::REVERSED));
    let mut state = ListState::default().with_selected((!app.rows.is_empty()).then_some(app.selected));
    frame.render_stateful_widget(list, area, &mut state);
    if app.rows.is_empty() {
        let inner = area.inner(ratatui::layout::Margin { horizontal: 2, vertical: 1 });
        frame.render_widget(Paragraph::new("no sessions yet: press n to create one in this directory"), inner);
    }
    if let Some(chosen) = app.choosing {
        choices(frame, app, chosen, area, " agent · model for new sessions (Enter picks) ");
    }
}

/// The widest directory the picker shows.
const DIRECTORY_COLUMN: usize = 30;

/// `text` cut to its last `width` characters, with `…` in front when cut.
fn left_cut(text: &str, width: usize) -> String {
    let count = text.chars().count();
    if count <= width {
        return text.to_owned();
    }
    let kept: String = text.chars().skip(count - (width - 1)).collect();
    format!("…{kept}")
}

fn session(frame: &mut Frame, app: &App, area: Rect) {
    let prompt = app.pending_approval().map(|approval| approval_prompt(app, approval));
    // The prompt grows with the command it shows, leaving the transcript at least a few lines.
    let prompt_height = prompt.as_ref().map_or(0, |prompt| {
        (prompt.line_count(area.width.saturating_sub(2)) as u16).min(area.height.saturating_sub(3 + 4).max(4))
    });
    let [transcript_area, prompt_area, input_area] =
        Layout::vertical([Constraint::Min(1), Constraint::Length(prompt_height), Constraint::Length(3)]).areas(area);
    let lines = transcript_lines(app);
    let paragraph = Paragraph::new(lines).wrap(Wrap { trim: false });
    let total = paragraph.line_count(transcript_area.width) as u16;
    let bottom = total.saturating_sub(transcript_area.height);
    let top = bottom.saturating_sub(app.scroll);
    frame.render_widget(paragraph.scroll((top, 0)), transcript_area);
    if let Some(prompt) = prompt {
        frame.render_widget(prompt, prompt_area);
    }
    let label = match app.input_mode {
        InputMode::Prompt if app.active_run.is_some() => {
            " steer (Enter) · Ctrl-R recall · Ctrl-D stdin · Ctrl-C cancel the run · Esc sessions "
        }
        InputMode::Prompt => {
            " prompt (Enter runs) · Ctrl-O mode · Ctrl-P model · Ctrl-T thinking · Ctrl-S MCP servers · Esc sessions "
        }
        InputMode::Stdin => " stdin for the running command (Enter sends a line, Esc leaves) ",
        InputMode::Feedback => " why reject? (Enter sends, Esc back to the question) ",
    };
    let mut block = Block::default().borders(Borders::ALL).title(label);
    if let Some(notice) = &app.notice {
        block = block.title_bottom(Line::from(format!(" {notice} ")).right_aligned());
    }
    let input = Paragraph::new(format!("> {}", app.input)).block(block);
    frame.render_widget(input, input_area);
    if let Some(chosen) = app.choosing {
        choices(frame, app, chosen, transcript_area, " agent · model for the next run (Enter picks) ");
    }
}

/// How much of a command the approval prompt and a transcript's call show: the transcript keeps most of the screen,
/// and `troupe approvals --full` prints the rest.
const SHOWN_COMMAND: ShowLimits = ShowLimits { max_lines: 8, max_bytes: 1024 };

/// The approval prompt: what is asked, then the resource (the whole command) line by line with every control
/// shown as an escape, cut at [`SHOWN_COMMAND`] with where to read the rest, then the keys that answer.
fn approval_prompt(app: &App, approval: &ApprovalRecord) -> Paragraph<'static> {
    let child = if Some(approval.session_id.as_str()) != app.session_id() {
        format!(" (child session {})", short_id(&approval.session_id))
    } else {
        String::new()
    };
    let operation = &approval.operation;
    let action = crate::approvals_cmd::action_name(operation.action);
    let mut text = vec![Line::from(format!(
        "approve {}: {}{child}?",
        visible_line(&operation.tool, 40),
        visible_line(&operation.summary, 100)
    ))];
    let whole = format!("`troupe approvals {} --full` shows it whole", approval.session_id);
    text.extend(command_lines(&operation.resource, &format!("{action} on "), &whole, Style::default()));
    if let Some(diff) = &operation.diff {
        text.extend(diff_lines(diff, &whole));
    }
    text.push(Line::from(
        "y once · t for the whole tree · n reject (with feedback) · Esc withdraw this call · Ctrl-C cancel the run",
    ));
    let block =
        Block::default().borders(Borders::ALL).title(" approval ").border_style(Style::default().fg(Color::Yellow));
    Paragraph::new(text).block(block).wrap(Wrap { trim: false })
}

/// `resource` after `lead` when it is one line shown whole; else `lead` alone and one `│ `-guttered line per line,
/// and what [`SHOWN_COMMAND`] left out with `whole_hint`. Every control and invisible character is an escape.
fn command_lines(resource: &str, lead: &str, whole_hint: &str, style: Style) -> Vec<Line<'static>> {
    let shown = show_visibly(resource, SHOWN_COMMAND);
    if let ([line], None) = (shown.lines.as_slice(), shown.left_out) {
        return vec![Line::from(Span::styled(format!("{lead}{line}").trim_end().to_owned(), style))];
    }
    let mut lines = vec![Line::from(Span::styled(format!("{}:", lead.trim_end()), style))];
    lines.extend(shown.lines.iter().map(|line| Line::from(Span::styled(format!("  │ {line}"), style))));
    if let Some(left_out) = shown.left_out {
        let notice = format!("  … {}: {whole_hint}", left_out.describe());
        lines.push(Line::from(Span::styled(notice, Style::default().fg(Color::DarkGray))));
    }
    lines
}

/// How much of a write's diff the approval prompt shows.
const SHOWN_DIFF: ShowLimits = ShowLimits { max_lines: 12, max_bytes: 2048 };

/// A write's change under its approval: the counts, then the unified diff coloured by line, every control as an
/// escape, cut at [`SHOWN_DIFF`] with where to read the rest.
fn diff_lines(diff: &troupe_protocol::types::changes::FileDiff, whole_hint: &str) -> Vec<Line<'static>> {
    let mut counts = format!("change: {}", troupe_runtime::changes::diff::stats(diff));
    if let Some(note) = &diff.note {
        counts.push_str(&format!(" ({})", visible_line(note, 120)));
    }
    let mut lines = vec![Line::from(counts)];
    let Some(unified) = &diff.unified else {
        return lines;
    };
    let shown = show_visibly(unified, SHOWN_DIFF);
    lines.extend(shown.lines.iter().map(|line| {
        let color = if line.starts_with("+++") || line.starts_with("---") {
            Color::Reset
        } else if line.starts_with('+') {
            Color::Green
        } else if line.starts_with('-') {
            Color::Red
        } else if line.starts_with("@@") {
            Color::Cyan
        } else {
            Color::Reset
        };
        Line::from(Span::styled(format!("  {line}"), Style::default().fg(color)))
    }));
    if let Some(left_out) = shown.left_out {
        let notice = format!("  … {} of the diff: {whole_hint}", left_out.describe());
        lines.push(Line::from(Span::styled(notice, Style::default().fg(Color::DarkGray))));
    }
    lines
}

fn choices(frame: &mut Frame, app: &App, chosen: usize, area: Rect, title: &str) {
    let items: Vec<ListItem> = app
        .choices
        .iter()
        .map(|choice| {
            let name = clean(&format!("{} · {}", choice.selection.agent, choice.selection.model.model));
            match &choice.unusable {
                None => ListItem::new(name),
                Some(why) => ListItem::new(format!("{name}  (cannot run: {})", clean(why)))
                    .style(Style::default().fg(Color::DarkGray)),
            }
        })
        .collect();
    let height = (items.len() as u16 + 2).min(area.height);
    let popup = Rect { x: area.x + 2, y: area.y + 1, width: area.width.saturating_sub(4), height };
    frame.render_widget(Clear, popup);
    let block = Block::default().borders(Borders::ALL).title(title.to_owned());
    let list = List::new(items).block(block).highlight_style(Style::default().add_modifier(Modifier::REVERSED));
    frame.render_stateful_widget(list, popup, &mut ListState::default().with_selected(Some(chosen)));
}

fn transcript_lines(app: &App) -> Vec<Line<'static>> {
    let dim = Style::default().fg(Color::DarkGray);
    let mut lines = Vec::new();
    for entry in &app.entries {
        match entry {
            Entry::User(text) => {
                for line in text.lines() {
                    lines.push(Line::from(vec![
                        Span::styled("you> ", Style::default().fg(Color::Cyan)),
                        Span::raw(line.to_owned()),
                    ]));
                }
            }
            Entry::Recalled(text) => {
                for line in text.lines() {
                    lines.push(Line::from(vec![
                        Span::styled("you> (recalled) ", dim),
                        Span::styled(line.to_owned(), dim),
                    ]));
                }
            }
            Entry::Assistant { text, .. } => lines.extend(super::markdown::lines(text)),
            Entry::Reasoning { text, .. } => {
                let count = text.trim().lines().count();
                let (marker, hint) = if app.show_reasoning { ("▾", "Ctrl-T folds") } else { ("▸", "Ctrl-T shows") };
                let head = format!("{marker} thinking ({count} line{}) · {hint}", if count == 1 { "" } else { "s" });
                lines.push(Line::from(Span::styled(head, dim.add_modifier(Modifier::ITALIC))));
                if app.show_reasoning {
                    lines.extend(super::markdown::lines(text).into_iter().map(|line| {
                        let mut spans = vec![Span::styled("  ", dim)];
                        spans.extend(line.spans.into_iter().map(|span| {
                            let style = span.style.patch(dim).add_modifier(Modifier::ITALIC);
                            Span::styled(span.content, style)
                        }));
                        Line::from(spans)
                    }));
                }
            }
            Entry::Tool { tool, resource, approval, started, output, result, .. } => {
                let whole = "`troupe watch --json` has it whole";
                lines.extend(command_lines(
                    resource,
                    &format!("⚙ {tool} "),
                    whole,
                    Style::default().fg(Color::Magenta),
                ));
                lines.extend(approval.as_ref().and_then(|approval| approval_line(approval, result.is_some())));
                lines.extend(styled_lines(output).into_iter().map(|line| {
                    let mut spans = vec![Span::styled("  │ ", dim)];
                    spans.extend(line.spans);
                    Line::from(spans)
                }));
                let rejected =
                    approval.as_ref().is_some_and(|approval| approval.answer == Some(ApprovalDecision::Reject));
                match result {
                    // A person's rejection is said once, by the approval's line (the result repeats it to the model).
                    Some(end) if rejected && end.status == ToolResultStatus::Denied => {}
                    Some(end) => lines.push(end_line(end)),
                    None if *started => lines.push(Line::from(Span::styled("  … running", dim))),
                    None => {}
                }
            }
            Entry::Diff { path, removed, added } => {
                lines.push(Line::from(Span::styled(
                    format!("edit {path}"),
                    Style::default().add_modifier(Modifier::BOLD),
                )));
                lines.extend(
                    removed
                        .iter()
                        .map(|line| Line::from(Span::styled(format!("- {line}"), Style::default().fg(Color::Red)))),
                );
                lines.extend(
                    added
                        .iter()
                        .map(|line| Line::from(Span::styled(format!("+ {line}"), Style::default().fg(Color::Green)))),
                );
            }
            Entry::RunBoundary(words) => lines.push(Line::from(Span::styled(format!("── {words} ──"), dim))),
            Entry::Error(text) => {
                lines.push(Line::from(Span::styled(format!("error: {text}"), Style::default().fg(Color::Red))))
            }
            Entry::ModelSwitch(text) => {
                lines.push(Line::from(Span::styled(format!("note: {text}"), Style::default().fg(Color::Yellow))))
            }
        }
    }
    lines
}

/// What was asked and answered about a call: waiting, approved, rejected with its feedback, withdrawn.
fn approval_line(approval: &CallApproval, ended: bool) -> Option<Line<'static>> {
    let (text, color) = match (approval.answer, &approval.feedback) {
        (None, _) if ended => return None,
        (None, _) => ("  ? waiting for your approval".to_owned(), Color::Yellow),
        (Some(ApprovalDecision::ApproveOnce), _) => ("  ✓ approved once".to_owned(), Color::DarkGray),
        (Some(ApprovalDecision::ApproveTree), _) => ("  ✓ approved for the whole tree".to_owned(), Color::DarkGray),
        (Some(ApprovalDecision::Reject), Some(feedback)) => (format!("  ✗ rejected: {feedback}"), Color::Red),
        (Some(ApprovalDecision::Reject), None) => ("  ✗ rejected (no feedback)".to_owned(), Color::Red),
        (Some(ApprovalDecision::Cancel), _) => ("  ⊘ approval withdrawn".to_owned(), Color::DarkGray),
    };
    Some(Line::from(Span::styled(text, Style::default().fg(color))))
}

/// How a call ended: ✓ ok, ✗ error or denied (by the policy), ⊘ cancelled; with the first line of its result.
fn end_line(end: &ToolEnd) -> Line<'static> {
    let first = clean(end.text.lines().next().unwrap_or(""));
    let (text, color) = match end.status {
        ToolResultStatus::Ok => (format!("  ✓ {first}"), Color::Green),
        ToolResultStatus::Error => (format!("  ✗ {first}"), Color::Red),
        ToolResultStatus::Denied => (format!("  ✗ denied: {first}"), Color::Red),
        ToolResultStatus::Cancelled => (format!("  ⊘ cancelled: {first}"), Color::Yellow),
    };
    Line::from(Span::styled(text, Style::default().fg(color)))
}

/// The status line whole: run · mode · agent/model · session · tokens · daemon (and, on the picker, the latest
/// notice). See [`status_line_within`] for a terminal narrower than it.
pub fn status_line(app: &App) -> String {
    status_parts(app).iter().map(|(_, part)| part.as_str()).collect::<Vec<_>>().join(" · ")
}

/// The status line in `width` columns: the parts that matter most while working (whether the daemon is there, the
/// run's state, the mode, the model) come first and stay; the ones after them are left out, whole, when they do
/// not fit, and a session title is cut (with `…`) rather than dropped. Never cut in the middle of a word the way a
/// too-long line is.
pub fn status_line_within(app: &App, width: usize) -> String {
    let mut shown = String::new();
    for (kind, part) in status_parts(app) {
        let separator = if shown.is_empty() { "" } else { " · " };
        let room = width.saturating_sub(shown.chars().count() + separator.chars().count());
        let length = part.chars().count();
        if length <= room {
            shown.push_str(separator);
            shown.push_str(&part);
        } else if kind == Part::Session && room > 12 {
            let cut: String = part.chars().take(room - 1).collect();
            shown.push_str(separator);
            shown.push_str(&cut);
            shown.push('…');
        }
    }
    shown
}

/// What a part of the status line says, for [`status_line_within`]'s choice of what to cut.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Daemon,
    Run,
    Mode,
    Selection,
    Session,
    Tokens,
    Mcp,
    Notice,
}

/// The parts of the status line, most needed first.
fn status_parts(app: &App) -> Vec<(Part, String)> {
    let mut parts = Vec::new();
    // A daemon away is the first thing to know; one that is there is said last.
    if !app.connected {
        parts.push((Part::Daemon, format!("{} reconnecting…", app.url)));
    }
    if let Some(session) = &app.session {
        parts.push((
            Part::Run,
            match &app.active_run {
                Some(run) if app.pending_approval().is_some() => format!("{} awaiting approval", short_id(run)),
                Some(run) => format!("{} running", short_id(run)),
                None => "idle".to_owned(),
            },
        ));
        // The tree's mode as the daemon reports it (`session.tree`); unknown until it has (or from a daemon that
        // does not).
        parts.push((Part::Mode, format!("mode {}", app.mode.map(mode_name).unwrap_or("unknown"))));
        // Picked, else the session's last, else its creation selection. (The agent's chain is applied by
        // `selection::decide` when the run starts.)
        let selection = app.picked.as_ref().or(app.last_selection.as_ref()).unwrap_or(&session.creation_selection);
        parts.push((Part::Selection, clean(&format!("{}/{}", selection.agent, selection.model.model))));
        let title = session.title.as_deref().map(clean).unwrap_or_else(|| "(untitled)".to_owned());
        parts.push((Part::Session, format!("{} {title}", short_id(&session.session_id))));
        parts.push((Part::Tokens, format!("{}↑{}↓", app.tokens.0, app.tokens.1)));
    } else if let Some(picked) = &app.picked {
        // On the picker: what a new session (n) starts on.
        parts.push((Part::Selection, clean(&format!("new sessions: {}/{}", picked.agent, picked.model.model))));
    }
    if let Some(part) = super::servers::status_part(app) {
        parts.push((Part::Mcp, part));
    }
    // On the session screen the notice sits under the input line.
    if let Some(notice) = app.notice.as_ref().filter(|_| app.screen == Screen::Picker) {
        parts.push((Part::Notice, notice.clone()));
    }
    if app.connected {
        parts.push((Part::Daemon, format!("{} connected", app.url)));
    }
    parts
}

pub fn mode_name(mode: troupe_protocol::types::session::PermissionMode) -> &'static str {
    use troupe_protocol::types::session::PermissionMode::*;
    match mode {
        AutoApprove => "auto_approve",
        AutoApproveN => "auto_approve_n",
        AutoApproveY => "auto_approve_y",
        Ask => "ask",
        Yolo => "yolo",
    }
}
