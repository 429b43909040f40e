//! The TUI for a working day, under a real terminal (tmux): the session picker has a directory column; `m` picks
//! the model of new sessions among every model that can run (not only the agents' chains), and `n` starts a
//! session on it; the answer's markdown is rendered and its reasoning folded (Ctrl-T unfolds it); "steer queued"
//! and "cancelling" end with their run, other notices after a few seconds; a 60-column terminal still shows the
//! run's state and the mode.

use serde_json::json;

use super::support::*;
use super::terminal_support::{Tmux, tui_command};

#[tokio::test]
async fn pick_a_model_for_a_new_session_read_markdown_and_thinking_and_keep_run_labels_to_their_run() {
    let daemon = TestDaemon::start();
    let (client, _deliveries) = daemon.client().await;
    connect_script(
        &client,
        daemon.data_path(),
        json!({"turns": [
            {"reasoning": "first I look around\nthen I answer", "text": "## Result\n\nIt is **done** and `checked`."},
            {"text": "never", "delay_ms": 600000}
        ]}),
    )
    .await;
    // An older session in another directory: the picker names its directory.
    let elsewhere = tempfile::tempdir().expect("a directory");
    create_session_in(&client, elsewhere.path()).await;
    let elsewhere_name = elsewhere.path().file_name().expect("a name").to_string_lossy().into_owned();

    let command = tui_command(&daemon, "");
    let tmux = Tmux::start("tui-daily", &command);
    let screen = tmux.wait_for("n new · m model").await;
    assert!(screen.contains(&elsewhere_name), "the directory column: {screen}");

    // `m`: local/scripted is in no agent's chain, yet it can run (a script is connected), so it is offered.
    tmux.keys(&["m"]);
    tmux.wait_for("agent · model for new sessions").await;
    tmux.wait_for("default · local/scripted").await;
    let screen = tmux.screen();
    let lines: Vec<&str> = screen.lines().filter(|line| line.contains("default · local/")).collect();
    let down = lines.iter().position(|line| line.contains("local/scripted")).expect("listed");
    for _ in 0..down {
        tmux.keys(&["Down"]);
    }
    tmux.keys(&["Enter"]);
    tmux.wait_for("new sessions: default/local/scripted").await;
    // `n`: the new session starts on it.
    tmux.keys(&["n"]);
    tmux.wait_for("prompt (Enter runs)").await;
    tmux.wait_for("default/local/scripted").await;
    tmux.keys(&["-l", "explain"]);
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("It is done and checked.").await;
    assert!(!screen.contains("**") && !screen.contains("## Result"), "markdown is rendered: {screen}");
    assert!(screen.contains("▸ thinking (2 lines) · Ctrl-T shows"), "{screen}");
    assert!(!screen.contains("first I look around"), "reasoning is folded: {screen}");
    tmux.keys(&["C-t"]);
    tmux.wait_for("first I look around").await;
    tmux.wait_for("── run completed ──").await;

    // A run that waits on its model: a steer and a cancel are said while it lasts, not after.
    tmux.keys(&["-l", "take your time"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("steer (Enter)").await;
    tmux.keys(&["-l", "and the docs"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("steer queued").await;
    tmux.keys(&["C-c"]);
    let screen = tmux.wait_for("── run cancelled ──").await;
    let ended = holds_within(SCREEN_WAIT_SHORT, || {
        let screen = tmux.screen();
        !screen.contains("steer queued") && !screen.contains("cancelling")
    })
    .await;
    assert!(ended, "the run's labels outlived it: {screen}\n{}", tmux.screen());

    // 60 columns: the status line keeps the run's state, the mode and the model.
    tmux.tmux(&["resize-window", "-t", "tui", "-x", "60"]);
    let screen = tmux.wait_for("idle · mode").await;
    let status = screen.lines().rev().find(|line| line.contains("idle · mode")).expect("the status line");
    assert!(status.contains("default/local/scripted"), "{screen}");
}

/// How long a label may take to go once its run has ended.
const SCREEN_WAIT_SHORT: std::time::Duration = std::time::Duration::from_secs(10);

/// A notice that is not about a run goes by itself: a line sent to the stdin of a command that is not running says
/// so, and the words are gone a few seconds later without another key.
#[tokio::test]
async fn a_notice_goes_by_itself() {
    let daemon = TestDaemon::start();
    let (client, _deliveries) = daemon.client().await;
    let session_id = daemon.create_session(&client).await.session_id;
    let command = tui_command(&daemon, &session_id);
    let tmux = Tmux::start("tui-notice", &command);
    tmux.wait_for("prompt (Enter runs)").await;
    tmux.keys(&["C-d"]);
    tmux.wait_for("stdin for the running command").await;
    tmux.keys(&["-l", "hello"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("no command is running").await;
    // NOTICE_LIFETIME (8 s), and a margin for a slow machine.
    let gone =
        holds_within(std::time::Duration::from_secs(20), || !tmux.screen().contains("no command is running")).await;
    assert!(gone, "the notice stayed: {}", tmux.screen());
}
