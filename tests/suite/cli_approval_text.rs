//! What `troupe approvals` and `troupe watch` show of a command waiting for approval, through the real binary: a
//! command of several lines holding a carriage return, bidi controls and an escape sequence reads line by line with
//! every control seen (never cleaned away, never run by the terminal), a long one is cut with how much is left, and
//! `--full` prints it whole.

use serde_json::json;

use super::cli_support::*;
use super::support::*;

/// 42 lines: a first line ending in a carriage return, a second hiding a bidi override, an isolate and an escape
/// sequence behind a comment, then 40 harmless ones.
fn hostile_command() -> String {
    let mut command = "ls\r\nrm -rf build #\u{202e}\u{2066}txt.sh\u{1b}[2J\n".to_owned();
    command.extend((1..=40).map(|n| format!("echo step {n}\n")));
    command
}

/// No character a terminal would act on or hide, other than the line breaks.
fn assert_no_controls(printed: &str) {
    let hidden: Vec<char> =
        printed.chars().filter(|&c| c != '\n' && troupe_protocol::diagnostic::is_invisible(c)).collect();
    assert!(hidden.is_empty(), "printed {hidden:?}: {printed:?}");
}

#[tokio::test]
async fn approvals_and_watch_show_every_line_and_control_of_a_command_and_full_shows_it_whole() {
    let command = hostile_command();
    let script = json!({"turns": [
        {"tool_calls": [{"tool": "shell", "arguments": {"command": command}}]},
        {"text": "done"}
    ]});
    let (daemon, client, mut deliveries) = scripted_daemon(script).await;
    let WaitingRun { session_id: session, approval, .. } =
        run_waiting_for_approval(&daemon, &client, &mut deliveries).await;
    assert_eq!(approval.operation.resource, command, "the daemon asks about the whole command");

    let printed = troupe(&daemon, &["approvals"]).await.ok();
    assert_no_controls(&printed);
    let lines: Vec<&str> = printed.lines().collect();
    // The command is printed once, under the table, where the summary quotes it.
    assert!(!lines[1].contains("ls⟨CR⟩"), "{printed}");
    assert_eq!(printed.matches("rm -rf build").count(), 1, "{printed}");
    let at = lines.iter().position(|line| line.ends_with(": run:")).unwrap_or_else(|| panic!("{printed}"));
    assert_eq!(lines[at + 1], "  │ ls⟨CR⟩", "{printed}");
    assert_eq!(lines[at + 2], "  │ rm -rf build #⟨U+202E⟩⟨U+2066⟩txt.sh⟨ESC⟩[2J", "{printed}");
    assert_eq!(lines[at + 24], "  │ echo step 22", "{printed}");
    let shown_bytes = "ls\r\nrm -rf build #\u{202e}\u{2066}txt.sh\u{1b}[2J\n".len()
        + (1..=22).map(|n| format!("echo step {n}\n").len()).sum::<usize>();
    let left = command.len() - shown_bytes;
    let left = if left >= 1000 { format!("{},{:03}", left / 1000, left % 1000) } else { left.to_string() };
    assert_eq!(
        lines[at + 25],
        format!("  … {left} more bytes, 18 more lines: `troupe approvals {session} --full` shows it whole"),
        "{printed}"
    );
    assert!(lines[at + 26].starts_with(&format!("  answer: `troupe approve {session} ")), "{printed}");

    // --full: every line, and nothing left out.
    let full = troupe(&daemon, &["approvals", &session[..8], "--full"]).await.ok();
    assert_no_controls(&full);
    let shown: Vec<&str> = full.lines().filter_map(|line| line.strip_prefix("  │ ")).collect();
    assert_eq!(shown.len(), 42, "{full}");
    assert_eq!(shown[41], "echo step 40", "{full}");
    assert!(!full.contains("more bytes"), "{full}");

    // `watch` shows the approval the same way, indented under its line.
    let watched =
        troupe_until(&daemon, &["watch", &session], |line| line.contains("answer: troupe approve")).await.join("\n");
    assert_no_controls(&watched);
    // The command is shown once, where the summary quotes it.
    assert!(
        watched.contains(
            "approval needed: shell: run:\n        │ ls⟨CR⟩\n        │ rm -rf build #⟨U+202E⟩⟨U+2066⟩txt.sh⟨ESC⟩[2J\n"
        ),
        "{watched}"
    );
    assert!(
        watched.contains(&format!("18 more lines: `troupe approvals {session} --full` shows it whole")),
        "{watched}"
    );
}
