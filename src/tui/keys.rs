//! Keys to actions. The key map depends on what is on screen (picker, model picker, approval prompt, input
//! line); editing the input line happens here, anything that talks to the daemon becomes an [`Action`].

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use troupe_protocol::types::approval::ApprovalDecision;

use super::state::{App, Choice, InputMode, Screen};

/// What a key asks the connection task to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Refresh,
    Open(String),
    CreateSession,
    /// Start a run when idle, steer the active one.
    Submit(String),
    RecallSteer,
    Cancel,
    Stdin(String),
    Approve {
        decision: ApprovalDecision,
        feedback: Option<String>,
    },
    CycleMode,
    LoadChoices,
    BackToPicker,
    /// Tab on a line ending with `@word`: complete it from the session's folder.
    CompletePath,
    /// Read the runtime snapshot's MCP servers and show them (the overlay).
    ShowServers,
}

/// The notice of a first Ctrl-C that arms quitting.
pub const QUIT_ARMED: &str = "Ctrl-C again quits";

/// Handles one key; returns what to send to the daemon, if anything.
pub fn handle_key(app: &mut App, key: KeyEvent) -> Option<Action> {
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    if ctrl && key.code == KeyCode::Char('c') {
        return ctrl_c(app);
    }
    if std::mem::take(&mut app.quit_armed) && app.notice.as_deref() == Some(QUIT_ARMED) {
        // Any other key disarms it: the notice would no longer be true.
        app.notice = None;
    }
    match app.screen {
        _ if app.servers_shown.is_some() => servers_key(app, key, ctrl),
        _ if app.choosing.is_some() => choice_key(app, key),
        Screen::Picker => picker_key(app, key),
        Screen::Session if app.pending_approval().is_some() && app.input_mode != InputMode::Feedback => {
            approval_key(app, key)
        }
        Screen::Session => session_key(app, key, ctrl),
    }
}

fn ctrl_c(app: &mut App) -> Option<Action> {
    if app.screen == Screen::Session && app.active_run.is_some() && !app.quit_armed {
        app.quit_armed = true;
        app.notice_for_run("cancelling; Ctrl-C again quits");
        return Some(Action::Cancel);
    }
    if app.quit_armed {
        app.quit = true;
    } else {
        app.quit_armed = true;
        app.notice = Some(QUIT_ARMED.to_owned());
    }
    None
}

fn picker_key(app: &mut App, key: KeyEvent) -> Option<Action> {
    match key.code {
        KeyCode::Up | KeyCode::Char('k') => app.selected = app.selected.saturating_sub(1),
        KeyCode::Down | KeyCode::Char('j') => {
            app.selected = (app.selected + 1).min(app.rows.len().saturating_sub(1));
        }
        KeyCode::Enter => return app.rows.get(app.selected).map(|row| Action::Open(row.session_id.clone())),
        KeyCode::Char('n') => return Some(Action::CreateSession),
        // The agent and model new sessions start on.
        KeyCode::Char('m') => return Some(Action::LoadChoices),
        KeyCode::Char('r') => return Some(Action::Refresh),
        KeyCode::Char('s') => return Some(Action::ShowServers),
        KeyCode::Char('q') | KeyCode::Esc => app.quit = true,
        _ => {}
    }
    None
}

/// The MCP servers overlay: arrows and page keys scroll it, Esc (or the key that opened it) closes it.
fn servers_key(app: &mut App, key: KeyEvent, ctrl: bool) -> Option<Action> {
    let scrolled = app.servers_shown.unwrap_or(0);
    match key.code {
        KeyCode::Esc | KeyCode::Char('q') => app.servers_shown = None,
        KeyCode::Char('s') if ctrl || app.screen == Screen::Picker => app.servers_shown = None,
        KeyCode::Up | KeyCode::Char('k') => app.servers_shown = Some(scrolled.saturating_sub(1)),
        KeyCode::Down | KeyCode::Char('j') => app.servers_shown = Some(scrolled.saturating_add(1)),
        KeyCode::PageUp => app.servers_shown = Some(scrolled.saturating_sub(10)),
        KeyCode::PageDown => app.servers_shown = Some(scrolled.saturating_add(10)),
        _ => {}
    }
    None
}

fn choice_key(app: &mut App, key: KeyEvent) -> Option<Action> {
    let chosen = app.choosing.unwrap_or(0);
    match key.code {
        KeyCode::Up => app.choosing = Some(chosen.saturating_sub(1)),
        KeyCode::Down => app.choosing = Some((chosen + 1).min(app.choices.len().saturating_sub(1))),
        KeyCode::Enter => match app.choices.get(chosen) {
            Some(Choice { unusable: Some(why), selection }) => {
                app.notice = Some(crate::style::clean(&format!("{} cannot run now: {why}", selection.model.model)));
            }
            Some(choice) => {
                app.picked = Some(choice.selection.clone());
                app.choosing = None;
            }
            None => app.choosing = None,
        },
        KeyCode::Esc => app.choosing = None,
        _ => {}
    }
    None
}

fn approval_key(app: &mut App, key: KeyEvent) -> Option<Action> {
    match key.code {
        KeyCode::Char('y') => Some(Action::Approve { decision: ApprovalDecision::ApproveOnce, feedback: None }),
        KeyCode::Char('t') if app.pending_approval().is_some_and(|approval| !approval.constraints.allow_tree_grant) => {
            app.notice = Some("this approval cannot be granted for the whole tree; y or n".to_owned());
            None
        }
        KeyCode::Char('t') => Some(Action::Approve { decision: ApprovalDecision::ApproveTree, feedback: None }),
        KeyCode::Char('n') => {
            app.input_mode = InputMode::Feedback;
            app.input.clear();
            None
        }
        // Withdraws this one call's request, as `troupe approve --cancel` does: the run goes on (the model sees the
        // call cancelled). Ctrl-C cancels the whole run.
        KeyCode::Esc if app.pending_approval().is_some_and(|approval| !approval.constraints.cancellable) => {
            app.notice = Some("this approval cannot be withdrawn; y or n (Ctrl-C cancels the run)".to_owned());
            None
        }
        KeyCode::Esc => Some(Action::Approve { decision: ApprovalDecision::Cancel, feedback: None }),
        _ => None,
    }
}

fn session_key(app: &mut App, key: KeyEvent, ctrl: bool) -> Option<Action> {
    match key.code {
        KeyCode::Enter => {
            let line = std::mem::take(&mut app.input);
            let mode = std::mem::replace(&mut app.input_mode, InputMode::Prompt);
            match mode {
                InputMode::Feedback => {
                    let feedback = Some(line).filter(|line| !line.trim().is_empty());
                    return Some(Action::Approve { decision: ApprovalDecision::Reject, feedback });
                }
                InputMode::Stdin => return Some(Action::Stdin(line)),
                InputMode::Prompt if line.trim().is_empty() => {}
                InputMode::Prompt => return Some(Action::Submit(line)),
            }
        }
        KeyCode::Esc if app.input_mode != InputMode::Prompt => {
            app.input_mode = InputMode::Prompt;
            app.input.clear();
        }
        KeyCode::Esc if !app.input.is_empty() => app.input.clear(),
        // Esc closes things, it never cancels work: a second Esc after withdrawing an approval must not cancel the
        // run. The run goes on in the daemon (Ctrl-C cancels it).
        KeyCode::Esc => return Some(Action::BackToPicker),
        KeyCode::Char('r') if ctrl => return Some(Action::RecallSteer),
        KeyCode::Char('d') if ctrl => {
            app.input_mode = InputMode::Stdin;
            app.input.clear();
        }
        KeyCode::Char('o') if ctrl => return Some(Action::CycleMode),
        KeyCode::Char('p') if ctrl => return Some(Action::LoadChoices),
        KeyCode::Char('t') if ctrl => app.show_reasoning = !app.show_reasoning,
        KeyCode::Char('s') if ctrl => return Some(Action::ShowServers),
        KeyCode::Tab if app.input_mode == InputMode::Prompt => return Some(Action::CompletePath),
        KeyCode::Backspace => {
            app.input.pop();
        }
        KeyCode::PageUp => app.scroll = app.scroll.saturating_add(10),
        KeyCode::PageDown => app.scroll = app.scroll.saturating_sub(10),
        KeyCode::Char(c) if !ctrl => app.input.push(c),
        _ => {}
    }
    None
}
