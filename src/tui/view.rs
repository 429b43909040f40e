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
    frame.render_widget(
        Paragraph::new(status_line(app)).style(Style::default().add_modifier(Modifier::REVERSED)),
        status,
    );
}

fn picker(frame: &mut Frame, app: &App, area: Rect) {
    // Long enough to tell every listed session apart (a tree's sessions share their first 8 characters), as
    // `troupe sessions` prints them, so what is shown can be typed as `troupe tui PREFIX`.
    let id_len = unique_prefix_len(app.rows.iter().map(|row| row.session_id.as_str()));
    let items: Vec<ListItem> = app
        .rows
        .iter()
        .map(|row| {
            let title = row.title.as_deref().map(clean).unwrap_or_else(|| "(untitled)".to_owned());
            let indent = "  ".repeat(row.depth);
            let marker = if row.depth > 0 { "└ " } else { "" };
            ListItem::new(format!(
                "{indent}{marker}{}  {:<9} {:<14} {title}",
                id_prefix(&row.session_id, id_len),
                format!("{:?}", row.status).to_lowercase(),
                relative_time(&row.last_activity_at),
            ))
        })
        .collect();
    let block = Block::default().borders(Borders::ALL).title(" sessions · Enter open · n new · r refresh · q quit ");
    let list = List::new(items).block(block).highlight_style(Style::default().add_modifier(Modifier::REVERSED));
    let mut state = ListState::default().with_selected((!app.rows.is_empty()).then_some(app.selected));
    frame.render_stateful_widget(list, area, &mut state);
    if app.rows.is_empty() {
        let inner = area.inner(ratatui::layout::Margin { horizontal: 2, vertical: 1 });
        frame.render_widget(Paragraph::new("no sessions yet: press n to create one in this directory"), inner);
    }
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
        InputMode::Prompt => " prompt (Enter runs) · Ctrl-O mode · Ctrl-P model · Esc sessions ",
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
        choices(frame, app, chosen, transcript_area);
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

fn choices(frame: &mut Frame, app: &App, chosen: usize, area: Rect) {
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
    let block = Block::default().borders(Borders::ALL).title(" agent · model for the next run (Enter picks) ");
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
            Entry::Assistant { text, .. } => lines.extend(clean(text).lines().map(|line| Line::from(line.to_owned()))),
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

/// daemon · connection · session · run · mode · agent/model · tokens (and the latest notice).
pub fn status_line(app: &App) -> String {
    let mut parts = vec![format!("{} {}", app.url, if app.connected { "connected" } else { "reconnecting…" })];
    if let Some(session) = &app.session {
        let title = session.title.as_deref().map(clean).unwrap_or_else(|| "(untitled)".to_owned());
        parts.push(format!("{} {title}", short_id(&session.session_id)));
        parts.push(match &app.active_run {
            Some(run) if app.pending_approval().is_some() => format!("{} awaiting approval", short_id(run)),
            Some(run) => format!("{} running", short_id(run)),
            None => "idle".to_owned(),
        });
        // The tree's mode as the daemon reports it (`session.tree`); unknown until it has (or from a daemon that
        // does not).
        parts.push(format!("mode {}", app.mode.map(mode_name).unwrap_or("unknown")));
        // Picked, else the session's last, else its creation selection. (The agent's chain is applied by
        // `selection::decide` when the run starts.)
        let selection = app.picked.as_ref().or(app.last_selection.as_ref()).unwrap_or(&session.creation_selection);
        parts.push(clean(&format!("{}/{}", selection.agent, selection.model.model)));
        parts.push(format!("{}↑{}↓", app.tokens.0, app.tokens.1));
    }
    // On the session screen the notice sits under the input line.
    if let Some(notice) = app.notice.as_ref().filter(|_| app.screen == Screen::Picker) {
        parts.push(notice.clone());
    }
    parts.join(" · ")
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
