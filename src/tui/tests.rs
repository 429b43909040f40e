//! Rendering tests: the state after a sequence of events, drawn on ratatui's `TestBackend`, read back as text.

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::style::Color;
use serde_json::{Value, json};
use troupe_protocol::types::common::{SessionMeta, SessionStatus};
use troupe_protocol::types::events::StoredEvent;

use super::state::{App, PickerRow};
use super::view;

const SESSION: &str = "0198aaaa-bbbb-7ccc-8ddd-eeeeffff0000";

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

fn event(seq: u64, payload: Value) -> StoredEvent {
    serde_json::from_value(json!({
        "session_id": SESSION,
        "run_id": "run-1",
        "seq": seq,
        "timestamp": "2026-01-01T00:00:00Z",
        "payload": payload,
    }))
    .expect("an event")
}

fn open_app() -> App {
    let mut app = App::new("ws://127.0.0.1:7419/ws".to_owned());
    app.open(session_meta());
    app
}

fn draw(app: &App) -> (String, ratatui::buffer::Buffer) {
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

fn run_started(seq: u64, input: &str) -> StoredEvent {
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
            depth: 0,
        },
        PickerRow {
            session_id: "0198bbbb-0000".to_owned(),
            title: Some("(explorer)".to_owned()),
            status: SessionStatus::Idle,
            last_activity_at: "2026-01-01T00:00:00Z".to_owned(),
            depth: 1,
        },
    ];
    let (text, _) = draw(&app);
    assert!(text.contains("0198aaaa  running"), "{text}");
    assert!(text.contains("fix the tests"), "{text}");
    assert!(text.contains("└ 0198bbbb  idle"), "{text}");
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
    assert!(text.contains(" idle "), "{text}");
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
    let choice = |agent: &str, model: &str| -> RunSelection {
        serde_json::from_value(json!({"agent": agent, "model": {"model": model, "variant": null}})).unwrap()
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
