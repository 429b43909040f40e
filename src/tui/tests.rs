//! Rendering tests: the state after a sequence of events, drawn on ratatui's `TestBackend`, read back as text.

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::style::Color;
use serde_json::{Value, json};
use troupe_protocol::types::common::{SessionMeta, SessionStatus};
use troupe_protocol::types::events::StoredEvent;

use super::state::{App, PickerRow};
use super::view;

pub(super) const SESSION: &str = "0198aaaa-bbbb-7ccc-8ddd-eeeeffff0000";

fn session_meta() -> SessionMeta {
    serde_json::from_value(json!({
        "session_id": SESSION,
        "origin": {"type": "root"},
        "cwd": "/tmp/project",
        "title": "fix the tests",
        "title_updated_seq": null,
        "creation_selection": {"agent": "coder", "model": {"model": "local/echo", "variant": null}},
        "status": "idle",
        "last_event_seq": 1,
        "created_at": "2026-01-01T00:00:00Z",
        "last_activity_at": "2026-01-01T00:00:00Z",
        "skipped_events": []
    }))
    .expect("a session")
}

pub(super) fn event(seq: u64, payload: Value) -> StoredEvent {
    serde_json::from_value(json!({
        "session_id": SESSION,
        "run_id": "run-1",
        "seq": seq,
        "timestamp": "2026-01-01T00:00:00Z",
        "payload": payload,
    }))
    .expect("an event")
}

pub(super) fn open_app() -> App {
    let mut app = App::new("ws://127.0.0.1:7419/ws".to_owned());
    app.open(session_meta());
    app
}

pub(super) fn draw(app: &App) -> (String, ratatui::buffer::Buffer) {
    let mut terminal = Terminal::new(TestBackend::new(120, 24)).expect("a terminal");
    terminal.draw(|frame| view::draw(frame, app)).expect("drawn");
    let buffer = terminal.backend().buffer().clone();
    let mut text = String::new();
    for y in 0..buffer.area.height {
        for x in 0..buffer.area.width {
            text.push_str(buffer[(x, y)].symbol());
        }
        text.push('\n');
    }
    (text, buffer)
}

pub(super) fn run_started(seq: u64, input: &str) -> StoredEvent {
    event(
        seq,
        json!({"type": "run_started", "client_run_id": "c1", "input": input, "fallback_index": 0,
               "selection": {"agent": "coder", "model": {"model": "local/scripted", "variant": null}}}),
    )
}

#[test]
fn the_picker_lists_roots_with_their_children() {
    let mut app = App::new("ws://daemon/ws".to_owned());
    app.rows = vec![
        PickerRow {
            session_id: SESSION.to_owned(),
            title: Some("fix the tests".to_owned()),
            status: SessionStatus::Running,
            last_activity_at: "2026-01-01T00:00:00Z".to_owned(),
            cwd: Some("/srv/projects/app".to_owned()),
            depth: 0,
        },
        PickerRow {
            session_id: "0198bbbb-0000".to_owned(),
            title: Some("(explorer)".to_owned()),
            status: SessionStatus::Idle,
            last_activity_at: "2026-01-01T00:00:00Z".to_owned(),
            cwd: None,
            depth: 1,
        },
        PickerRow {
            session_id: "0198cccc-0000".to_owned(),
            title: Some("port the parser".to_owned()),
            status: SessionStatus::Interrupted,
            last_activity_at: "2026-01-01T00:00:00Z".to_owned(),
            cwd: Some("/srv/projects/a-much-longer-project-name/with/a/deep/path".to_owned()),
            depth: 0,
        },
    ];
    let (text, _) = draw(&app);
    assert!(text.contains("0198aaaa    running"), "{text}");
    assert!(text.contains("fix the tests"), "{text}");
    assert!(text.contains("└ 0198bbbb  idle"), "{text}");
    // Every column starts at the same place, "interrupted" included, and the directory has one of its own (a long
    // one cut from the left).
    let column_of = |needle: &str| {
        let line = text.lines().find(|line| line.contains(needle)).unwrap_or_else(|| panic!("{needle}: {text}"));
        let chars = |at: usize| line[..at].chars().count();
        chars(line.find(needle).expect("found")) - chars(line.find("0198").expect("an id"))
    };
    assert_eq!(column_of("fix the tests"), column_of("port the parser"), "{text}");
    assert_eq!(column_of("/srv/projects/app"), column_of("…"), "{text}");
    assert!(text.contains("/with/a/deep/path") && !text.contains("/srv/projects/a-much"), "{text}");
    assert!(text.contains("(explorer)"), "{text}");
    assert!(text.contains("ws://daemon/ws connected"), "{text}");
}

#[test]
fn streaming_text_appends_to_the_answer_and_the_status_line_counts_tokens() {
    let mut app = open_app();
    app.apply(&run_started(2, "say hello"));
    app.apply(&event(3, json!({"type": "text_delta", "attempt_id": "a1", "text": "Hello, "})));
    app.apply(&event(4, json!({"type": "text_delta", "attempt_id": "a1", "text": "world"})));
    app.apply(&event(
        5,
        json!({"type": "model_usage_recorded", "attempt_id": "a1", "model": "local/scripted", "agent": "coder",
               "input_tokens": 12, "output_tokens": 3}),
    ));
    let (text, _) = draw(&app);
    assert!(text.contains("you> say hello"), "{text}");
    assert!(text.contains("Hello, world"), "{text}");
    assert!(text.contains("0198aaaa fix the tests"), "{text}");
    assert!(text.contains("run-1 running"), "{text}");
    assert!(text.contains("coder/local/scripted"), "{text}");
    assert!(text.contains("12↑3↓"), "{text}");
    // A replayed event the cursor has passed changes nothing.
    app.apply(&event(4, json!({"type": "text_delta", "attempt_id": "a1", "text": "world"})));
    assert!(!draw(&app).0.contains("worldworld"));
    app.apply(&event(6, json!({"type": "run_completed", "final_text": "Hello, world"})));
    let (text, _) = draw(&app);
    assert!(text.contains("── run completed ──"), "{text}");
    assert!(text.contains("idle · mode"), "{text}");
}

#[test]
fn tool_output_keeps_its_colours_and_loses_other_controls() {
    let mut app = open_app();
    app.apply(&run_started(2, "list"));
    app.apply(&event(
        3,
        json!({"type": "tool_call_started", "tool_call_id": "t1", "tool": "shell", "arguments": {"command": "ls"},
               "action": "execute", "resource": "ls --color"}),
    ));
    app.apply(&event(
        4,
        json!({"type": "tool_call_progress", "tool_call_id": "t1", "stream": "stdout", "offset": 0,
               "text": "\u{1b}[32mgreen.txt\u{1b}[0m\u{1b}[2J\n"}),
    ));
    let (text, buffer) = draw(&app);
    assert!(text.contains("⚙ shell ls --color"), "{text}");
    assert!(text.contains("│ green.txt"), "{text}");
    assert!(text.contains("… running"), "{text}");
    assert!(!text.contains("[2J"), "{text}");
    let row =
        (0..buffer.area.height).find(|y| (0..buffer.area.width).any(|x| buffer[(x, *y)].symbol() == "│")).unwrap();
    let green = (0..buffer.area.width).find(|x| buffer[(*x, row)].symbol() == "g").expect("the file name");
    assert_eq!(buffer[(green, row)].fg, Color::Green);
    app.apply(&event(
        5,
        json!({"type": "tool_call_terminated", "tool_call_id": "t1", "result": {"status": "ok", "output": "exit 0"}}),
    ));
    assert!(draw(&app).0.contains("✓ exit 0"));
}

#[test]
fn an_edit_shows_as_a_diff() {
    let mut app = open_app();
    app.apply(&run_started(2, "fix"));
    app.apply(&event(
        3,
        json!({"type": "tool_call_started", "tool_call_id": "t1", "tool": "edit_file", "action": "write",
               "resource": "src/lib.rs",
               "arguments": {"path": "src/lib.rs", "old_string": "let a = 1;", "new_string": "let a = 2;"}}),
    ));
    let (text, _) = draw(&app);
    assert!(text.contains("edit src/lib.rs"), "{text}");
    assert!(text.contains("- let a = 1;"), "{text}");
    assert!(text.contains("+ let a = 2;"), "{text}");
}

#[test]
fn an_approval_request_shows_a_prompt_until_it_is_answered() {
    let mut app = open_app();
    app.apply(&run_started(2, "write it"));
    let approval = json!({
        "session_id": SESSION, "run_id": "run-1", "tool_call_id": "t1", "approval_id": "ap1", "revision": 1,
        "status": "pending",
        "operation": {"tool": "write_file", "action": "write", "resource": "notes.txt", "summary": "write notes.txt"},
        "operation_fingerprint": "f", "decision": null, "feedback": null, "answered_by": null,
        "constraints": {"allow_once": true, "allow_tree_grant": true, "cancellable": true, "expires_at": null},
        "created_at": "2026-01-01T00:00:00Z", "decided_at": null
    });
    app.apply(&event(3, json!({"type": "approval_requested", "approval": approval})));
    let (text, _) = draw(&app);
    assert!(text.contains("approve write_file: write notes.txt?"), "{text}");
    assert!(text.contains("y once · t for the whole tree · n reject"), "{text}");
    assert!(text.contains("awaiting approval"), "{text}");
    app.apply(&event(
        4,
        json!({"type": "approval_finalized", "approval_id": "ap1", "revision": 2, "status": "approved"}),
    ));
    assert!(!draw(&app).0.contains("approve write_file"));
}

#[test]
fn live_output_and_durable_progress_show_each_byte_once() {
    use troupe_protocol::types::tool_output::OutputStream;
    let mut app = open_app();
    app.apply(&run_started(2, "count"));
    app.apply(&event(
        3,
        json!({"type": "tool_call_started", "tool_call_id": "t1", "tool": "shell", "arguments": {"command": "seq 3"},
               "action": "execute", "resource": "seq 3"}),
    ));
    app.tool_output("t1", OutputStream::Stdout, 0, b"one\ntw");
    assert!(draw(&app).0.contains("│ tw"));
    app.apply(&event(
        4,
        json!({"type": "tool_call_progress", "tool_call_id": "t1", "stream": "stdout", "offset": 0,
               "text": "one\ntwo\nthree\n"}),
    ));
    app.tool_output("t1", OutputStream::Stdout, 6, b"o\nthree\n");
    let (text, _) = draw(&app);
    assert_eq!(text.matches("│ one").count(), 1, "{text}");
    assert_eq!(text.matches("│ two").count(), 1, "{text}");
    assert_eq!(text.matches("│ three").count(), 1, "{text}");
}

#[test]
fn the_model_picker_lists_agents_with_their_models_and_the_pick_shows_in_the_status_line() {
    use troupe_protocol::types::common::RunSelection;
    let mut app = open_app();
    let choice = |agent: &str, model: &str| super::state::Choice {
        selection: serde_json::from_value::<RunSelection>(
            json!({"agent": agent, "model": {"model": model, "variant": null}}),
        )
        .unwrap(),
        unusable: None,
    };
    app.choices = vec![choice("coder", "local/scripted"), choice("reviewer", "openai/gpt-4o")];
    app.choosing = Some(1);
    let (text, _) = draw(&app);
    assert!(text.contains("agent · model for the next run"), "{text}");
    assert!(text.contains("coder · local/scripted"), "{text}");
    assert!(text.contains("reviewer · openai/gpt-4o"), "{text}");
    let enter = crossterm::event::KeyEvent::from(crossterm::event::KeyCode::Enter);
    assert_eq!(super::keys::handle_key(&mut app, enter), None);
    let (text, _) = draw(&app);
    assert!(!text.contains("agent · model for the next run"), "{text}");
    assert!(text.contains("reviewer/openai/gpt-4o"), "{text}");
}

#[test]
fn n_asks_for_feedback_and_enter_rejects_with_it() {
    use super::keys::{Action, handle_key};
    use crossterm::event::{KeyCode, KeyEvent};
    use troupe_protocol::types::approval::ApprovalDecision;
    let mut app = open_app();
    app.apply(&run_started(2, "write it"));
    let approval = json!({
        "session_id": SESSION, "run_id": "run-1", "tool_call_id": "t1", "approval_id": "ap1", "revision": 1,
        "status": "pending",
        "operation": {"tool": "shell", "action": "execute", "resource": "rm -rf x", "summary": "run rm -rf x"},
        "operation_fingerprint": "f", "decision": null, "feedback": null, "answered_by": null,
        "constraints": {"allow_once": true, "allow_tree_grant": false, "cancellable": true, "expires_at": null},
        "created_at": "2026-01-01T00:00:00Z", "decided_at": null
    });
    app.apply(&event(3, json!({"type": "approval_requested", "approval": approval})));
    let key = |code| KeyEvent::from(code);
    assert_eq!(handle_key(&mut app, key(KeyCode::Char('t'))), None, "no tree grant for this one");
    assert_eq!(handle_key(&mut app, key(KeyCode::Char('n'))), None);
    assert!(draw(&app).0.contains("why reject?"));
    for c in "not that".chars() {
        assert_eq!(handle_key(&mut app, key(KeyCode::Char(c))), None);
    }
    assert_eq!(
        handle_key(&mut app, key(KeyCode::Enter)),
        Some(Action::Approve { decision: ApprovalDecision::Reject, feedback: Some("not that".to_owned()) })
    );
}

fn approval_json(approval_id: &str, tool_call_id: &str, cancellable: bool) -> Value {
    json!({
        "session_id": SESSION, "run_id": "run-1", "tool_call_id": tool_call_id, "approval_id": approval_id,
        "revision": 1, "status": "pending",
        "operation": {"tool": "shell", "action": "execute", "resource": "rm -rf build", "summary": "run rm -rf build"},
        "operation_fingerprint": "f", "decision": null, "feedback": null, "answered_by": null,
        "constraints": {"allow_once": true, "allow_tree_grant": true, "cancellable": cancellable, "expires_at": null},
        "created_at": "2026-01-01T00:00:00Z", "decided_at": null
    })
}

#[test]
fn a_rejected_call_shows_with_its_feedback_and_a_policy_denied_one_with_why() {
    let mut app = open_app();
    app.apply(&run_started(2, "clean up"));
    app.apply(&event(
        3,
        json!({"type": "model_turn_committed", "attempt_id": "a1", "model": "local/scripted", "fallback_index": 0,
               "text": "", "tool_calls": [
                   {"tool_call_id": "t1", "tool": "shell", "arguments": {"command": "rm -rf build"}},
                   {"tool_call_id": "t2", "tool": "write_file", "arguments": {"path": "/etc/passwd"}}]}),
    ));
    app.apply(&event(4, json!({"type": "approval_requested", "approval": approval_json("ap1", "t1", true)})));
    let (text, _) = draw(&app);
    assert!(text.contains("⚙ shell rm -rf build"), "the call shows while it waits: {text}");
    assert!(text.contains("? waiting for your approval"), "{text}");
    assert!(!text.contains("… running"), "it does not run yet: {text}");
    app.apply(&event(
        5,
        json!({"type": "approval_user_decision_recorded", "approval_id": "ap1", "revision": 2, "decision": "reject",
               "feedback": "keep the build dir", "answered_by": "client:connection-1", "client_response_id": "r1"}),
    ));
    app.apply(&event(
        6,
        json!({"type": "approval_finalized", "approval_id": "ap1", "revision": 3, "status": "rejected"}),
    ));
    app.apply(&event(
        7,
        json!({"type": "tool_call_terminated", "tool_call_id": "t1", "result": {"status": "denied",
               "output": "The user rejected this call (run rm -rf build). Their feedback: keep the build dir"}}),
    ));
    // The second call never asked: the policy refused it, and it still shows, with why.
    app.apply(&event(
        8,
        json!({"type": "tool_call_terminated", "tool_call_id": "t2", "result": {"status": "denied",
               "output": "writing outside the session's directory is not allowed"}}),
    ));
    let (text, buffer) = draw(&app);
    assert!(text.contains("✗ rejected: keep the build dir"), "{text}");
    assert_eq!(text.matches("keep the build dir").count(), 1, "the rejection is said once: {text}");
    assert!(!text.contains("waiting for your approval"), "{text}");
    assert!(text.contains("⚙ write_file"), "{text}");
    assert!(text.contains("✗ denied: writing outside the session's directory is not allowed"), "{text}");
    let row = (0..buffer.area.height)
        .find(|y| (0..buffer.area.width).any(|x| buffer[(x, *y)].symbol() == "✗"))
        .expect("the rejection line");
    let mark = (0..buffer.area.width).find(|x| buffer[(*x, row)].symbol() == "✗").unwrap();
    assert_eq!(buffer[(mark, row)].fg, Color::Red);
}

#[test]
fn an_approved_call_starts_in_its_entry_and_a_withdrawn_one_ends_cancelled() {
    let mut app = open_app();
    app.apply(&run_started(2, "build"));
    app.apply(&event(3, json!({"type": "approval_requested", "approval": approval_json("ap1", "t1", true)})));
    app.apply(&event(
        4,
        json!({"type": "approval_user_decision_recorded", "approval_id": "ap1", "revision": 2,
               "decision": "approve_once", "answered_by": "client:connection-1", "client_response_id": "r1"}),
    ));
    app.apply(&event(
        5,
        json!({"type": "tool_call_started", "tool_call_id": "t1", "tool": "shell",
               "arguments": {"command": "rm -rf build"}, "action": "execute", "resource": "rm -rf build"}),
    ));
    let (text, _) = draw(&app);
    assert_eq!(text.matches("⚙ shell rm -rf build").count(), 1, "one entry per call: {text}");
    assert!(text.contains("✓ approved once"), "{text}");
    assert!(text.contains("… running"), "{text}");
    app.apply(&event(6, json!({"type": "approval_requested", "approval": approval_json("ap2", "t2", true)})));
    app.apply(&event(
        7,
        json!({"type": "approval_user_decision_recorded", "approval_id": "ap2", "revision": 2, "decision": "cancel",
               "answered_by": "client:connection-1", "client_response_id": "r2"}),
    ));
    app.apply(&event(
        8,
        json!({"type": "tool_call_terminated", "tool_call_id": "t2", "result": {"status": "cancelled",
               "output": "the approval was cancelled: withdrawn by the user"}}),
    ));
    let (text, _) = draw(&app);
    assert!(text.contains("⊘ approval withdrawn"), "{text}");
    assert!(text.contains("⊘ cancelled: the approval was cancelled"), "{text}");
}

#[test]
fn esc_withdraws_the_asked_call_not_the_run_and_the_prompt_says_so() {
    use super::keys::{Action, handle_key};
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    use troupe_protocol::types::approval::ApprovalDecision;
    let mut app = open_app();
    app.apply(&run_started(2, "clean up"));
    app.apply(&event(3, json!({"type": "approval_requested", "approval": approval_json("ap1", "t1", true)})));
    let text = draw(&app).0;
    assert!(text.contains("Esc withdraw this call · Ctrl-C cancel the run"), "{text}");
    assert_eq!(
        handle_key(&mut app, KeyEvent::from(KeyCode::Esc)),
        Some(Action::Approve { decision: ApprovalDecision::Cancel, feedback: None })
    );
    // Ctrl-C is still the whole run's cancel.
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(handle_key(&mut app, ctrl_c), Some(Action::Cancel));
    // From the feedback line, Esc goes back to the question, answering nothing.
    let mut app = open_app();
    app.apply(&run_started(2, "clean up"));
    app.apply(&event(3, json!({"type": "approval_requested", "approval": approval_json("ap1", "t1", true)})));
    assert_eq!(handle_key(&mut app, KeyEvent::from(KeyCode::Char('n'))), None);
    assert_eq!(handle_key(&mut app, KeyEvent::from(KeyCode::Esc)), None);
    assert!(draw(&app).0.contains("approve shell"));
    // An approval that cannot be withdrawn says so instead.
    let mut app = open_app();
    app.apply(&run_started(2, "clean up"));
    app.apply(&event(3, json!({"type": "approval_requested", "approval": approval_json("ap1", "t1", false)})));
    assert_eq!(handle_key(&mut app, KeyEvent::from(KeyCode::Esc)), None);
    assert!(draw(&app).0.contains("cannot be withdrawn"));
}

#[test]
fn the_model_picker_greys_models_that_cannot_run_and_refuses_them() {
    use crossterm::event::{KeyCode, KeyEvent};
    use troupe_protocol::types::common::ModelSelection;
    use troupe_protocol::types::runtime::{AgentInfo, AgentMode};
    let mut snapshot = troupe_runtime::catalog::builtin_snapshot(1);
    snapshot.agents.push(AgentInfo {
        agent: "scripted".into(),
        description: String::new(),
        mode: AgentMode::Primary,
        models: vec![ModelSelection { model: "local/scripted".into(), variant: None }],
    });
    let without_script = super::conn::choices(&snapshot);
    let scripted = without_script.iter().find(|choice| choice.selection.model.model == "local/scripted").unwrap();
    assert!(scripted.unusable.as_deref().is_some_and(|why| why.contains("no script")), "{without_script:?}");
    snapshot.agents.pop();
    // A script is connected (`troupe connect local --script`), so local/scripted can run; openai is not connected.
    let local = snapshot.providers.iter_mut().find(|provider| provider.provider_id == "local").expect("local");
    local.generation = 1;
    snapshot.agents.push(AgentInfo {
        agent: "coder".into(),
        description: String::new(),
        mode: AgentMode::Primary,
        models: vec![
            ModelSelection { model: "openai/gpt-4o".into(), variant: None },
            ModelSelection { model: "local/scripted".into(), variant: None },
        ],
    });
    let choices = super::conn::choices(&snapshot);
    let of = |model: &str| choices.iter().find(|choice| choice.selection.model.model == model).expect(model);
    assert!(of("openai/gpt-4o").unusable.as_deref().is_some_and(|why| why.contains("not connected")), "{choices:?}");
    assert_eq!(of("local/scripted").unusable, None);

    let mut app = open_app();
    app.choices = choices.clone();
    let unusable = app.choices.iter().position(|choice| choice.unusable.is_some()).unwrap();
    app.choosing = Some(unusable);
    let (text, buffer) = draw(&app);
    assert!(text.contains("coder · openai/gpt-4o  (cannot run: openai/gpt-4o needs provider openai"), "{text}");
    let row = text.lines().position(|line| line.contains("cannot run:")).expect("the greyed line") as u16;
    let column = (0..buffer.area.width).find(|x| buffer[(*x, row)].symbol() == "c").expect("its agent");
    assert_eq!(buffer[(column, row)].fg, Color::DarkGray, "{text}");
    let usable = text.lines().position(|line| line.contains("coder · local/scripted")).expect("the usable line");
    assert_ne!(buffer[(column, usable as u16)].fg, Color::DarkGray, "{text}");
    assert_eq!(super::keys::handle_key(&mut app, KeyEvent::from(KeyCode::Enter)), None);
    assert_eq!(app.picked, None, "a model that cannot run is not picked");
    assert_eq!(app.choosing, Some(unusable), "the picker stays open");
    assert!(draw(&app).0.contains("cannot run now"));
}

#[test]
fn the_picker_prints_ids_as_long_as_it_takes_to_tell_them_apart() {
    let mut app = App::new("ws://daemon/ws".to_owned());
    let row = |session_id: &str, depth| PickerRow {
        session_id: session_id.to_owned(),
        title: None,
        status: SessionStatus::Idle,
        last_activity_at: "2026-01-01T00:00:00Z".to_owned(),
        cwd: None,
        depth,
    };
    // A root and its child created within the same minute share their first 10 characters.
    app.rows = vec![row("0198aaaa-bb11-7000-8000-000000000001", 0), row("0198aaaa-bb22-7000-8000-000000000002", 1)];
    let (text, _) = draw(&app);
    assert!(text.contains("0198aaaa-bb1    idle"), "{text}");
    assert!(text.contains("└ 0198aaaa-bb2  idle"), "{text}");
}

#[test]
fn the_status_line_shows_the_mode_the_daemon_reports() {
    use troupe_protocol::types::session::PermissionMode;
    let mut app = open_app();
    assert!(view::status_line(&app).contains("mode unknown"), "not a guess before the daemon says");
    app.mode = Some(PermissionMode::Yolo);
    assert!(view::status_line(&app).contains("mode yolo"));
    // Another session is another tree: its mode is read again.
    app.open(session_meta());
    assert!(view::status_line(&app).contains("mode unknown"));
}

#[test]
fn model_and_agent_names_reach_the_screen_cleaned() {
    use troupe_protocol::types::common::{ModelSelection, RunSelection};
    let mut app = open_app();
    let hostile = RunSelection {
        agent: "co\u{1b}]0;owned\u{7}der".into(),
        model: ModelSelection { model: "local/e\u{1b}[2Jcho".into(), variant: None },
        preset: None,
    };
    app.picked = Some(hostile.clone());
    let status = view::status_line(&app);
    assert!(status.contains("coder/local/echo") && !status.contains('\u{1b}'), "{status:?}");
    let mut started = run_started(2, "hi");
    started.payload = serde_json::from_value(json!({"type": "run_started", "client_run_id": "c1", "input": "hi",
        "fallback_index": 0, "selection": hostile}))
    .expect("a run_started");
    app.apply(&started);
    assert!(draw(&app).0.contains("run started · coder · local/echo"), "{}", draw(&app).0);
    app.choices = vec![super::state::Choice { selection: hostile, unusable: None }];
    app.choosing = Some(0);
    let (text, _) = draw(&app);
    assert!(text.contains("coder · local/echo"), "{text}");
}

#[test]
fn a_recalled_steer_shows_as_recalled() {
    let mut app = open_app();
    app.apply(&run_started(2, "list the files"));
    app.apply(&event(3, json!({"type": "user_input_admitted", "input_id": "i1", "input": "also hidden ones"})));
    assert!(draw(&app).0.contains("you> also hidden ones"));
    app.apply(&event(4, json!({"type": "user_input_recalled", "input_id": "i1", "input": "also hidden ones"})));
    let (text, _) = draw(&app);
    assert!(text.contains("you> (recalled) also hidden ones"), "{text}");
    assert!(!text.contains("you> also hidden ones"), "{text}");
}

#[test]
fn a_fallback_and_a_start_on_a_sticky_fallback_are_shown() {
    let mut app = open_app();
    app.apply(&event(
        2,
        json!({"type": "run_started", "client_run_id": "c1", "input": "go on", "fallback_index": 1,
               "selection": {"agent": "coder", "model": {"model": "local/echo", "variant": null}},
               "requested_model": {"model": "openai/gpt-4o", "variant": null}}),
    ));
    app.apply(&event(
        3,
        json!({"type": "model_fallback", "from": "local/echo", "to": "local/scripted", "from_fallback_index": 1,
               "to_fallback_index": 2, "attempts_on_from": 1,
               "error": {"kind": "auth", "message": "no", "retryable": false, "stage": "connect",
                         "http_status": null, "vendor_code": null, "request_id": null, "retry_after_ms": null}}),
    ));
    let (text, _) = draw(&app);
    assert!(text.contains("note: openai/gpt-4o was asked for: the run starts on local/echo"), "{text}");
    assert!(text.contains("note: falling back from local/echo to local/scripted"), "{text}");
}

#[test]
fn run_notices_end_with_their_run() {
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    let mut app = open_app();
    app.apply(&run_started(2, "first"));
    app.notice_for_run("steer queued");
    assert!(draw(&app).0.contains("steer queued"));
    app.apply(&event(3, json!({"type": "run_completed"})));
    assert!(!draw(&app).0.contains("steer queued"), "{}", draw(&app).0);
    // Ctrl-C cancels; once the run has ended, the next run's Ctrl-C cancels it too instead of quitting.
    app.apply(&run_started(4, "second"));
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(super::keys::handle_key(&mut app, ctrl_c), Some(super::keys::Action::Cancel));
    assert!(draw(&app).0.contains("cancelling"));
    app.apply(&event(5, json!({"type": "run_cancelled"})));
    assert!(!draw(&app).0.contains("cancelling"), "{}", draw(&app).0);
    assert!(draw(&app).0.contains("Ctrl-C again quits"), "{}", draw(&app).0);
    // The next prompt typed disarms it (and its notice goes); the next run's Ctrl-C cancels that run.
    assert_eq!(super::keys::handle_key(&mut app, KeyEvent::from(KeyCode::Char('x'))), None);
    assert!(!draw(&app).0.contains("Ctrl-C again quits"), "{}", draw(&app).0);
    app.apply(&run_started(6, "third"));
    assert_eq!(super::keys::handle_key(&mut app, ctrl_c), Some(super::keys::Action::Cancel));
    assert!(!app.quit);
}

#[test]
fn other_notices_go_after_a_while_or_when_the_next_run_starts() {
    use super::state::NOTICE_LIFETIME;
    use std::time::{Duration, Instant};
    let mut app = open_app();
    let start = Instant::now();
    app.notice = Some("no command is running".to_owned());
    assert_eq!(app.expire_notice(start), Some(start + NOTICE_LIFETIME));
    // Seen again later: still the same deadline, then gone.
    assert_eq!(app.expire_notice(start + Duration::from_secs(3)), Some(start + NOTICE_LIFETIME));
    assert!(draw(&app).0.contains("no command is running"));
    assert_eq!(app.expire_notice(start + NOTICE_LIFETIME), None);
    assert_eq!(app.notice, None);
    // A new notice starts its own time.
    app.notice = Some("another".to_owned());
    let later = start + Duration::from_secs(20);
    assert_eq!(app.expire_notice(later), Some(later + NOTICE_LIFETIME));
    // The next run's start takes it away.
    app.apply(&run_started(2, "go"));
    assert_eq!(app.notice, None);
    // A run's label stays however long the run lasts.
    app.notice_for_run("steer queued");
    assert_eq!(app.expire_notice(later + Duration::from_secs(600)), None);
    assert_eq!(app.notice.as_deref(), Some("steer queued"));
}

#[test]
fn a_narrow_status_line_keeps_the_run_and_the_mode_and_cuts_the_title() {
    use troupe_protocol::types::session::PermissionMode;
    let mut app = open_app();
    app.url = "wss://troupe.example.com/agent/ws".to_owned();
    app.mode = Some(PermissionMode::Ask);
    if let Some(session) = app.session.as_mut() {
        session.title = Some("a rather long title for the work of the day".to_owned());
    }
    app.apply(&run_started(2, "go"));
    for width in [60, 120] {
        let line = view::status_line_within(&app, width);
        assert!(line.chars().count() <= width, "{width}: {line}");
        assert!(line.contains("running") && line.contains("mode ask") && line.contains("coder/"), "{width}: {line}");
    }
    assert!(view::status_line_within(&app, 120).contains("0198aaaa a rather long"), "the title is cut, not dropped");
    assert!(view::status_line_within(&app, 200).contains("wss://troupe.example.com/agent/ws connected"));
}

#[test]
fn the_answer_is_rendered_markdown_and_the_reasoning_folds() {
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    let mut app = open_app();
    app.apply(&run_started(2, "explain"));
    app.apply(&event(3, json!({"type": "reasoning_delta", "attempt_id": "a1", "text": "first I look\nthen I answer"})));
    app.apply(&event(4, json!({"type": "text_delta", "attempt_id": "a1", "text": "## Result\n\nIt is **done**."})));
    let (text, _) = draw(&app);
    assert!(text.contains("▸ thinking (2 lines) · Ctrl-T shows"), "{text}");
    assert!(!text.contains("first I look"), "{text}");
    assert!(text.contains("Result") && !text.contains("## Result"), "{text}");
    assert!(text.contains("It is done.") && !text.contains("**"), "{text}");
    let ctrl_t = KeyEvent::new(KeyCode::Char('t'), KeyModifiers::CONTROL);
    assert_eq!(super::keys::handle_key(&mut app, ctrl_t), None);
    let (text, _) = draw(&app);
    assert!(text.contains("▾ thinking") && text.contains("first I look"), "{text}");
}

#[test]
fn the_model_picker_offers_every_model_that_can_run() {
    let mut snapshot = troupe_runtime::catalog::builtin_snapshot(1);
    // The default agent's chain has local/echo; local/scripted can run once a script is connected.
    let local = snapshot.providers.iter_mut().find(|provider| provider.provider_id == "local").expect("local");
    local.generation = 1;
    let choices = super::conn::choices(&snapshot);
    let models: Vec<(&str, &str)> =
        choices.iter().map(|choice| (choice.selection.agent.as_str(), choice.selection.model.model.as_str())).collect();
    assert!(models.contains(&("default", "local/scripted")), "{models:?}");
    assert!(choices.iter().all(|choice| choice.unusable.is_none()), "{choices:?}");
}
