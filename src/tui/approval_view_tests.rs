//! What the approval prompt and the transcript show of a command that is not one plain line: each line, every
//! control and invisible character as an escape, and a cut that says where the rest is. Drawn on `TestBackend`.

use serde_json::{Value, json};

use super::state::App;
use super::tests::{SESSION, draw, event, open_app, run_started};

fn approval_of(command: &str) -> Value {
    json!({
        "session_id": SESSION, "run_id": "run-1", "tool_call_id": "t1", "approval_id": "ap1", "revision": 1,
        "status": "pending",
        "operation": {"tool": "shell", "action": "execute", "resource": command, "summary": format!("run {command}")},
        "operation_fingerprint": "f", "decision": null, "feedback": null, "answered_by": null,
        "constraints": {"allow_once": true, "allow_tree_grant": true, "cancellable": true, "expires_at": null},
        "created_at": "2026-01-01T00:00:00Z", "decided_at": null
    })
}

fn asked(command: &str) -> App {
    let mut app = open_app();
    app.apply(&run_started(2, "do it"));
    app.apply(&event(3, json!({"type": "approval_requested", "approval": approval_of(command)})));
    app
}

/// The drawn screen's rows without a box's right border and the spaces before it.
fn rows(app: &App) -> Vec<String> {
    draw(app).0.lines().map(|row| row.trim_end().trim_end_matches('│').trim_end().to_owned()).collect()
}

#[test]
fn the_prompt_shows_each_line_of_the_command_and_every_control() {
    let app = asked("ls\r\necho \u{202e}hs.txt\u{2066} \u{200b}\u{1b}[2J\n\trm -rf ~");
    let rows = rows(&app);
    let screen = rows.join("\n");
    // The question is one line, marked as going on; the command follows line by line inside the prompt's border.
    assert!(screen.contains("│approve shell: run ls⟨CR⟩ [+2 lines]?"), "{screen}");
    let at = rows.iter().position(|row| row.starts_with("│execute on:")).unwrap_or_else(|| panic!("{screen}"));
    assert_eq!(rows[at + 1], "│  │ ls⟨CR⟩", "{screen}");
    assert_eq!(rows[at + 2], "│  │ echo ⟨U+202E⟩hs.txt⟨U+2066⟩ ⟨U+200B⟩⟨ESC⟩[2J", "{screen}");
    assert_eq!(rows[at + 3], "│  │ ⟨TAB⟩rm -rf ~", "{screen}");
    assert!(rows[at + 4].starts_with("│y once · t for the whole tree"), "{screen}");
    // The transcript's call shows the same command the same way.
    assert!(screen.contains("⚙ shell:\n  │ ls⟨CR⟩\n  │ echo ⟨U+202E⟩hs.txt⟨U+2066⟩"), "{screen}");
    assert!(!screen.chars().any(|c| c.is_control() && c != '\n'), "{screen:?}");
}

#[test]
fn a_long_command_is_cut_in_the_prompt_with_where_to_read_it_whole() {
    let script: String = (1..=40).map(|n| format!("echo {n}\n")).collect();
    let rows = rows(&asked(&script));
    let screen = rows.join("\n");
    assert!(screen.contains("│  │ echo 8\n"), "{screen}");
    assert!(!screen.contains("│  │ echo 9\n"), "{screen}");
    let notice = format!("│  … 255 more bytes, 32 more lines: `troupe approvals {SESSION} --full` shows it whole");
    assert!(rows.iter().any(|row| row.starts_with(&notice)), "{notice}\n{screen}");
    // The keys stay on the screen under the cut command.
    assert!(screen.contains("│y once · t for the whole tree"), "{screen}");
}

#[test]
fn a_write_s_prompt_shows_its_diff_line_by_line() {
    let mut approval = approval_of("/w/a.txt");
    approval["operation"]["tool"] = json!("write_file");
    approval["operation"]["diff"] = json!({
        "path": "/w/a.txt", "kind": "modified", "lines_added": 1, "lines_removed": 2, "bytes_before": 8,
        "bytes_after": 6, "unified": "--- a/w/a.txt\n+++ b/w/a.txt\n@@ -1,2 +1 @@\n-one\n-two\n+three\n"
    });
    let mut app = open_app();
    app.apply(&run_started(2, "do it"));
    app.apply(&event(3, json!({"type": "approval_requested", "approval": approval})));
    let screen = rows(&app).join("\n");
    assert!(
        screen.contains(
            "│change: +1 -2\n│  --- a/w/a.txt\n│  +++ b/w/a.txt\n│  @@ -1,2 +1 @@\n│  -one\n│  -two\n│  +three"
        ),
        "{screen}"
    );
}
