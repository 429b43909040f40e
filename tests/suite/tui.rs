//! The TUI under a real terminal: the built `troupe` binary runs in a detached tmux session (120×40) against a
//! live daemon; keys go in with `send-keys` and the screen is read back with `capture-pane`, polled under a
//! timeout. One whole flow: pick the session, switch to `ask` (and see another client's mode changes), run,
//! approve a command with `y`, see its coloured output and the answer, type a line into a waiting command, reject a
//! call with feedback and withdraw another with Esc (the run goes on), steer a running run, cancel it with Ctrl-C,
//! quit with a second Ctrl-C. Without a terminal the TUI refuses to start.

use std::process::Command;

use serde_json::json;
use troupe_protocol::types::session::PermissionMode;

use super::support::*;
use super::terminal_support::{SCREEN_WAIT, Tmux};

#[tokio::test]
async fn pick_run_approve_steer_and_cancel_in_a_real_terminal() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[agents.coder]\nmodels = [\"local/scripted\"]\n".to_owned()),
        ..DaemonSetup::default()
    });
    let (client, _deliveries) = daemon.client().await;
    let script = json!({"turns": [
        {"tool_calls": [{"tool": "shell", "arguments": {"command": "printf '\\033[32mcoloured-out\\033[0m\\n'"}}]},
        {"text": "all done here"},
        {"tool_calls": [{"tool": "shell", "arguments": {"command": "read line; echo \"got $line\""}}]},
        {"text": "it read the line"},
        {"tool_calls": [{"tool": "shell", "arguments": {"command": "rm -rf build"}}]},
        {"tool_calls": [{"tool": "shell", "arguments": {"command": "echo withdrawn"}}]},
        {"text": "left them alone"},
        {"text": "never", "delay_ms": 600000}
    ]});
    connect_script(&client, daemon.data_path(), script).await;
    let session = within(
        "session.create",
        client.call::<troupe_protocol::method::SessionCreate>(troupe_protocol::types::session::SessionCreateParams {
            selection: selection_of("coder", "local/scripted"),
            cwd: Some(daemon.project_path().to_string_lossy().into_owned()),
        }),
    )
    .await
    .expect("session.create")
    .session;
    let short = &session.session_id[..8];

    let command = format!("{} tui --url {} --token {}", env!("CARGO_BIN_EXE_troupe"), daemon.url(), daemon.token);
    let tmux = Tmux::start("tui", &command);

    // The picker lists the session; Enter opens it.
    tmux.wait_for(short).await;
    tmux.keys(&["Enter"]);
    tmux.wait_for("prompt (Enter runs)").await;
    // Ctrl-O: the permission mode moves from the default to `ask`, so the command needs an approval.
    tmux.keys(&["C-o"]);
    tmux.wait_for("mode ask").await;
    // The mode is the tree's: another client's change shows too.
    set_mode(&client, &session.session_id, PermissionMode::Yolo).await;
    tmux.wait_for("mode yolo").await;
    set_mode(&client, &session.session_id, PermissionMode::Ask).await;
    tmux.wait_for("mode ask").await;

    tmux.keys(&["-l", "show me colours"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("you> show me colours").await;
    let screen = tmux.wait_for("y once · t for the whole tree").await;
    assert!(screen.contains("approve shell"), "{screen}");
    assert!(screen.contains("awaiting approval"), "{screen}");
    tmux.keys(&["y"]);
    tmux.wait_for("│ coloured-out").await;
    let screen = tmux.wait_for("── run completed ──").await;
    assert!(screen.contains("all done here"), "{screen}");
    let output_line = screen.lines().find(|line| line.contains("│ coloured-out")).expect("the output line");
    assert_eq!(output_line.trim(), "│ coloured-out", "no escape codes as text: {screen}");
    let styled = tmux.tmux(&["capture-pane", "-p", "-e", "-t", "tui"]).stdout;
    let styled = String::from_utf8_lossy(&styled);
    // tmux reports green (ratatui's Color::Green, index 2) in its 256-colour form.
    assert!(styled.contains("\u{1b}[38;5;2mcoloured-out"), "the output keeps its colour: {styled:?}");

    // A command that waits for a line gets one through the stdin mode (Ctrl-D).
    tmux.keys(&["-l", "ask me"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("approve shell: ").await;
    tmux.keys(&["y"]);
    tmux.wait_for("… running").await;
    tmux.keys(&["C-d"]);
    tmux.wait_for("stdin for the running command").await;
    tmux.keys(&["-l", "hello"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("│ got hello").await;
    tmux.wait_for("it read the line").await;

    // A call rejected with feedback shows with it; a call withdrawn with Esc ends cancelled and the run goes on.
    tmux.keys(&["-l", "clean up"]);
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("approve shell: ").await;
    assert!(screen.contains("Esc withdraw this call · Ctrl-C cancel the run"), "{screen}");
    assert!(screen.contains("? waiting for your approval"), "{screen}");
    tmux.keys(&["n"]);
    tmux.wait_for("why reject?").await;
    tmux.keys(&["-l", "keep the build dir"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("✗ rejected: keep the build dir").await;
    tmux.wait_for("⚙ shell echo withdrawn").await;
    tmux.wait_for("approve shell: ").await;
    tmux.keys(&["Escape"]);
    tmux.wait_for("⊘ approval withdrawn").await;
    tmux.wait_for("left them alone").await;
    let screen = tmux.wait_for("idle · mode").await;
    assert!(!screen.contains("run cancelled"), "Esc withdrew the call, not the run: {screen}");
    assert!(!screen.contains("│ withdrawn"), "the withdrawn call never ran: {screen}");

    // A fourth run waits on its model: Enter steers it, Ctrl-C cancels it.
    tmux.keys(&["-l", "take your time"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("steer (Enter)").await;
    tmux.keys(&["-l", "also look at the docs"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("steer queued").await;
    tmux.wait_for("you> also look at the docs").await;
    tmux.keys(&["C-c"]);
    // "cancelling" lasts as long as the run does: once it is cancelled, what is left to say is the second Ctrl-C.
    let screen = tmux.wait_for("── run cancelled ──").await;
    tmux.wait_for("Ctrl-C again quits").await;
    assert!(screen.contains("idle · mode"), "{screen}");
    // The second Ctrl-C quits: the pane's command ends and tmux closes the session.
    tmux.keys(&["C-c"]);
    let quit = holds_within(SCREEN_WAIT, || !tmux.tmux(&["has-session", "-t", "tui"]).status.success()).await;
    assert!(quit, "the TUI did not quit: {}", tmux.screen());
}

/// The TUI outlives a daemon restart: it shows `reconnecting…`, dials again, resumes the session from its cursor
/// (nothing shown twice) and the next run works. Opened by a session prefix given on the command line.
#[tokio::test]
async fn a_daemon_restart_is_survived_and_the_session_resumes_from_its_cursor() {
    let data_dir = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let mut daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let session = {
        let (client, _deliveries) = daemon.client().await;
        create_session_in(&client, project.path()).await
    };
    let command = format!(
        "{} tui --url {} --token {} {}",
        env!("CARGO_BIN_EXE_troupe"),
        daemon.url,
        daemon.token,
        &session.session_id[..8]
    );
    let tmux = Tmux::start("tui-restart", &command);
    tmux.wait_for("prompt (Enter runs)").await;
    tmux.wait_for("mode auto_approve · ").await;
    tmux.keys(&["C-o"]);
    tmux.wait_for("mode ask · ").await;
    tmux.keys(&["-l", "first words"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("── run completed ──").await;

    let port = daemon.port();
    daemon.terminate();
    tmux.wait_for("reconnecting…").await;
    let _daemon = spawn_daemon(data_dir.path(), &format!("127.0.0.1:{port}"));
    tmux.wait_for("/ws connected").await;
    // The mode is runtime-only: the new daemon starts the tree in the default, and the status line says so.
    tmux.wait_for("mode auto_approve · ").await;
    tmux.keys(&["-l", "second words"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("you> second words").await;
    let mut screen = String::new();
    let completed = holds_within(SCREEN_WAIT, || {
        screen = tmux.screen();
        screen.matches("── run completed ──").count() == 2
    })
    .await;
    assert!(completed, "the second run never completed: {screen}");
    assert_eq!(screen.matches("you> first words").count(), 1, "nothing is shown twice: {screen}");
}

/// `troupe` with no arguments and no terminal (a pipe) does not start the TUI: it says why and what to use, exit 2.
#[test]
fn without_a_terminal_the_tui_refuses_and_names_the_commands_to_use() {
    let output = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .env("TROUPE_URL", "ws://127.0.0.1:9/ws")
        .env("TROUPE_TOKEN", "unused")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("troupe runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(output.stdout.is_empty(), "nothing drawn into the pipe: {:?}", output.stdout);
    assert!(stderr.contains("the TUI needs a terminal"), "{stderr}");
    assert!(stderr.contains("troupe sessions") && stderr.contains("troupe run"), "{stderr}");
}
