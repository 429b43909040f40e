//! The CLI core through the real binary against a live daemon: which model a run uses (and refusals before any
//! session exists), run ids printed and `--session` for the commands that act on a run, `stdin`'s newline,
//! errors in CLI words, and what `troupe sessions` prints.

use std::time::Duration;

use serde_json::{Value, json};
use troupe_protocol::client::{Client, Deliveries};
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::session::PermissionMode;

use super::cli_support::*;
use super::support::*;
use super::terminal_support::troupe_on_a_terminal;

/// A daemon whose config has an agent `coder` whose chain starts with local/scripted.
fn daemon_with_coder() -> TestDaemon {
    TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[agents.coder]\nmodels = [\"local/scripted\"]\n".to_owned()),
        ..DaemonSetup::default()
    })
}

/// `troupe args…` run in the daemon's project directory.
async fn troupe_here(daemon: &TestDaemon, args: &[&str]) -> CliOutput {
    let mut command = troupe_command(daemon, args);
    command.current_dir(daemon.project_path());
    finish(command, WAIT).await
}

/// The ids of the root sessions the daemon lists.
async fn session_ids(daemon: &TestDaemon) -> Vec<String> {
    let listed = troupe(daemon, &["sessions", "--json"]).await.ok();
    let sessions: Vec<Value> = serde_json::from_str(&listed).expect("sessions --json is JSON");
    sessions.iter().map(|session| session["session_id"].as_str().unwrap_or_default().to_owned()).collect()
}

/// The `(agent, model)` of the `run … started (agent, model)` line a `troupe run` printed.
fn started_with(printed: &str) -> Option<String> {
    let line = printed.lines().find(|line| line.contains(" started ("))?;
    let start = line.find(" started (")? + " started (".len();
    Some(line[start..].trim_end_matches(')').to_owned())
}

#[tokio::test]
async fn the_model_follows_the_documented_precedence_and_nothing_is_filled_in_silently() {
    let daemon = daemon_with_coder();
    let (client, _deliveries) = daemon.client().await;
    connect_script(&client, daemon.data_path(), json!({"turns": [{"text": "one"}, {"text": "two"}, {"text": "3"}]}))
        .await;

    // --agent: its chain, not local/echo.
    let run = troupe_here(&daemon, &["run", "--agent", "coder", "hi"]).await;
    assert!(run.succeeded(), "{run:?}");
    assert_eq!(started_with(&run.stdout).as_deref(), Some("coder, local/scripted"), "{run:?}");
    let sessions = session_ids(&daemon).await;
    assert_eq!(sessions.len(), 1);
    let session = sessions[0].clone();

    // run --session without flags: the session's agent's chain.
    let again = troupe_here(&daemon, &["run", "--session", &session[..8], "again"]).await.ok();
    assert_eq!(started_with(&again).as_deref(), Some("coder, local/scripted"), "{again}");
    // --model wins over the chain.
    let echo = troupe_here(&daemon, &["run", "--session", &session, "--model", "local/echo", "hey"]).await.ok();
    assert_eq!(started_with(&echo).as_deref(), Some("coder, local/echo"), "{echo}");
    // A new session with neither flag: the default agent's chain.
    let fresh = troupe_here(&daemon, &["run", "plain"]).await.ok();
    assert_eq!(started_with(&fresh).as_deref(), Some("default, local/echo"), "{fresh}");
    assert_eq!(session_ids(&daemon).await.len(), 2);

    // Refused before anything is created: empty input, an unconnected provider, an unknown agent.
    let said = troupe_here(&daemon, &["run", ""]).await.refused();
    assert!(said.starts_with("error: the run's input is empty"), "{said}");
    let said = troupe_here(&daemon, &["run", "--model", "openai/gpt-4o", "hi"]).await.refused();
    assert!(said.contains("not connected") && said.contains("troupe connect openai --base-url"), "{said}");
    let said = troupe_here(&daemon, &["run", "--agent", "nosuch", "hi"]).await.refused();
    assert!(said.contains("no agent \"nosuch\"") && said.contains("coder"), "{said}");
    let said = troupe_here(&daemon, &["create", "--model", "anthropic/claude", "--json"]).await.refused();
    assert!(said.contains("troupe connect anthropic"), "{said}");
    assert_eq!(session_ids(&daemon).await.len(), 2, "no refused command created a session");
}

/// A yolo session whose run waits in `read line` under a shell tool call; returns (session, run, call).
async fn waiting_command(
    daemon: &TestDaemon,
    client: &Client,
    deliveries: &mut Deliveries,
) -> (String, String, String) {
    connect_script(
        client,
        daemon.data_path(),
        json!({"turns": [
            {"tool_calls": [{"tool": "shell", "arguments": {"command": "read line; echo \"got [$line]\""}}]},
            {"text": "all done"}
        ]}),
    )
    .await;
    let session = daemon.create_session(client).await;
    set_mode(client, &session.session_id, PermissionMode::Yolo).await;
    client.subscribe(&session.session_id, None).await.expect("subscribe");
    let run_id = start_run(client, &session.session_id, selection_of("default", "local/scripted"), "go").await;
    let events = events_until(deliveries, |event| matches!(event.payload, EventPayload::ToolCallStarted { .. })).await;
    let Some(EventPayload::ToolCallStarted { tool_call_id, .. }) = events.last().map(|event| &event.payload) else {
        unreachable!("events_until stops at tool_call_started")
    };
    (session.session_id, run_id, tool_call_id.clone())
}

#[tokio::test]
async fn watch_prints_the_ids_a_second_client_needs_and_session_flags_reach_the_active_run() {
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    let (session, run_id, call_id) = waiting_command(&daemon, &client, &mut deliveries).await;

    // watch prints the whole run id and the tool call id (it is stopped once both were seen).
    let mut watch = troupe_command(&daemon, &["watch", &session[..8]]);
    watch.stdout(std::process::Stdio::piped());
    let mut child = watch.spawn().expect("spawn watch");
    let stdout = child.stdout.take().expect("stdout");
    let printed = within("watch prints the ids", async {
        use tokio::io::AsyncBufReadExt;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let mut printed = String::new();
        while let Ok(Some(line)) = lines.next_line().await {
            printed.push_str(&line);
            printed.push('\n');
            if printed.contains(&format!("run {run_id} started")) && printed.contains(&call_id) {
                break;
            }
        }
        printed
    })
    .await;
    assert!(printed.contains(&format!("run {run_id} started (default, local/scripted)")), "{printed}");
    child.kill().await.expect("stop watch");

    // steer and recall by --session (a prefix).
    let printed = troupe(&daemon, &["steer", "--session", &session[..8], "later"]).await.ok();
    assert!(printed.contains("queued"), "{printed}");
    let printed = troupe(&daemon, &["recall", "--session", &session[..8], "--json"]).await.ok();
    let recalled: Value = serde_json::from_str(printed.trim()).expect("recall --json");
    assert_eq!(recalled["recalled"], "later");
    assert_eq!(recalled["run_id"], run_id.as_str());

    // stdin by --session goes to the one running command, with the newline a `read` needs.
    troupe(&daemon, &["stdin", "--session", &session[..8], "yes"]).await.ok();
    let events = events_until(&mut deliveries, is_terminal).await;
    let output = events.iter().find_map(|event| match &event.payload {
        EventPayload::ToolCallTerminated { result, .. } => Some(result.output.clone()),
        _ => None,
    });
    assert!(output.as_deref().is_some_and(|output| output.contains("got [yes]")), "{output:?}");

    // The run has ended: --session says there is no active run; an unknown run id is "no run X".
    let said = troupe(&daemon, &["cancel", "--session", &session]).await.refused();
    assert!(said.contains("has no active run") && said.contains("troupe run --session"), "{said}");
    let said = troupe(&daemon, &["cancel", "no-such-run"]).await.refused();
    assert!(said.starts_with("error: no run no-such-run"), "{said}");
    assert!(!said.contains("-32000") && !said.contains("active run of its session"), "{said}");
    // Usage errors exit 2.
    let both = troupe(&daemon, &["cancel", &run_id, "--session", &session]).await;
    assert_eq!(both.code, Some(2), "{both:?}");
    let neither = troupe(&daemon, &["stdin"]).await;
    assert_eq!(neither.code, Some(2), "{neither:?}");
}

#[tokio::test]
async fn stdin_text_keeps_no_newline_only_when_asked() {
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    let (_session, run_id, call_id) = waiting_command(&daemon, &client, &mut deliveries).await;
    // Without a newline the `read` keeps waiting; the end of input then completes the line.
    troupe(&daemon, &["stdin", &run_id, &call_id, "ab", "--no-newline"]).await.ok();
    troupe(&daemon, &["stdin", &run_id, &call_id, "cd", "--eof"]).await.ok();
    let events = events_until(&mut deliveries, is_terminal).await;
    let output = events.iter().find_map(|event| match &event.payload {
        EventPayload::ToolCallTerminated { result, .. } => Some(result.output.clone()),
        _ => None,
    });
    assert!(output.as_deref().is_some_and(|output| output.contains("got [abcd]")), "{output:?}");
}

#[tokio::test]
async fn stdin_with_a_run_id_alone_types_lines_into_its_one_running_command() {
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    let (_session, run_id, _call_id) = waiting_command(&daemon, &client, &mut deliveries).await;
    let mut typing = troupe_command(&daemon, &["stdin", &run_id]);
    typing.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
    let mut child = typing.spawn().expect("spawn stdin");
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"typed\n").await.expect("write");
    }
    let output = within("troupe stdin", child.wait_with_output()).await.expect("stdin ran");
    assert!(output.status.success(), "{output:?}");
    let events = events_until(&mut deliveries, is_terminal).await;
    let output = events.iter().find_map(|event| match &event.payload {
        EventPayload::ToolCallTerminated { result, .. } => Some(result.output.clone()),
        _ => None,
    });
    assert!(output.as_deref().is_some_and(|output| output.contains("got [typed]")), "{output:?}");
}

#[tokio::test]
async fn sessions_are_short_readable_and_untrusted_text_is_cleaned() {
    let (daemon, _client, _deliveries) =
        scripted_daemon(json!({"turns": [{"text": "safe \u{1b}]0;pwned\u{7}text \u{1b}[2Jend"}]})).await;
    let mut run = troupe_command(&daemon, &["run", "--model", "local/scripted", "hi"]);
    run.current_dir(daemon.project_path());
    let run = finish(run, WAIT).await;
    assert!(run.succeeded(), "{run:?}");
    assert!(!run.stdout.contains('\u{1b}') && !run.stdout.contains("]0;pwned"), "{:?}", run.stdout);
    assert!(run.stdout.contains("safe"), "{}", run.stdout);

    let session = session_ids(&daemon).await.remove(0);
    troupe(&daemon, &["rename", &session[..8], "Fix the parser"]).await.ok();
    let mut list = troupe_command(&daemon, &["sessions"]);
    let home = daemon.project_path().parent().expect("parent").to_path_buf();
    list.env("HOME", &home);
    let printed = finish(list, WAIT).await.ok();
    let line = printed.lines().next().expect("a line");
    assert!(line.starts_with(&format!("{}  completed ", &session[..8])), "{line}");
    assert!(!line.contains(&session), "the whole id is for --json: {line}");
    assert!(line.contains("just now") && line.contains("Fix the parser"), "{line}");
    assert!(line.contains("~/"), "the cwd under HOME is shortened: {line}");
    assert!(!line.contains('\u{1b}'), "{line:?}");
}

#[tokio::test]
async fn exec_prints_the_answer_alone_and_its_exit_code_says_how_the_run_ended() {
    let (daemon, client, _deliveries) = scripted_daemon(json!({"turns": [{"text": "the answer"}]})).await;
    let printed = troupe_here(&daemon, &["exec", "--model", "local/scripted", "question"]).await;
    assert_eq!(printed.code, Some(0), "{printed:?}");
    assert_eq!(printed.stdout, "the answer\n");
    assert_eq!(printed.stderr, "", "no progress without --verbose");

    // The prompt from stdin when it is not a terminal.
    let mut piped = troupe_command(&daemon, &["exec", "--json"]);
    piped.current_dir(daemon.project_path()).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
    let mut child = piped.spawn().expect("spawn exec");
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"from a pipe").await.expect("write");
    }
    let output = within("exec --json", child.wait_with_output()).await.expect("exec ran");
    assert!(output.status.success(), "{output:?}");
    let lines: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .collect();
    assert!(lines.iter().any(|event| event["payload"]["input"] == "from a pipe"), "{lines:?}");
    // Every line, the outcome too, names its kind in `.payload.type`.
    assert!(lines.iter().all(|line| line["payload"]["type"].is_string()), "{lines:?}");
    let end = lines.last().expect("an outcome");
    assert_eq!(end["payload"], json!({"type": "exec_end", "status": "completed", "exit_code": 0}), "{lines:?}");

    // An approval nobody can answer: the run is cancelled, the approval named, exit code 2.
    connect_script(
        &client,
        daemon.data_path(),
        json!({"turns": [{"tool_calls": [{"tool": "shell", "arguments": {"command": "touch made-by-exec"}}]}]}),
    )
    .await;
    let stopped = troupe_here(&daemon, &["exec", "--model", "local/scripted", "--mode", "ask", "make a file"]).await;
    assert_eq!(stopped.code, Some(2), "{stopped:?}");
    assert!(
        stopped.stderr.contains("needs approval") && stopped.stderr.contains("--mode auto_approve_y"),
        "{stopped:?}"
    );
    // What it asked, said once (not `run touch made-by-exec (shell)` and then `execute on touch made-by-exec`).
    assert!(stopped.stderr.contains("it asked: shell: run touch made-by-exec\n"), "{stopped:?}");
    assert_eq!(stopped.stderr.matches("touch made-by-exec").count(), 1, "{stopped:?}");
    assert!(!daemon.project_path().join("made-by-exec").exists());
    let listed = troupe(&daemon, &["sessions", "--json"]).await.ok();
    let sessions: Vec<Value> = serde_json::from_str(&listed).expect("JSON");
    assert!(sessions.iter().all(|session| session["status"] != "running"), "the run was cancelled: {listed}");
}

#[tokio::test]
async fn continue_runs_in_the_latest_session_of_the_current_directory() {
    let daemon = TestDaemon::start();
    let first = troupe_here(&daemon, &["run", "first"]).await.ok();
    assert!(first.contains("started (default, local/echo)"), "{first}");
    let again = troupe_here(&daemon, &["continue", "second"]).await;
    assert!(again.succeeded(), "{again:?}");
    assert_eq!(session_ids(&daemon).await.len(), 1, "continue used the session: {again:?}");
    // Elsewhere there is nothing to continue.
    let elsewhere = tempfile::tempdir().expect("dir");
    let mut command = troupe_command(&daemon, &["continue", "third"]);
    command.current_dir(elsewhere.path());
    let said = finish(command, WAIT).await.refused();
    assert!(said.contains("no session in") && said.contains("troupe run"), "{said}");
}

#[tokio::test]
async fn a_closed_pipe_ends_sessions_and_watch_quietly() {
    let daemon = TestDaemon::start();
    let (client, _deliveries) = daemon.client().await;
    for _ in 0..3 {
        daemon.create_session(&client).await;
    }
    let session = session_ids(&daemon).await.remove(0);
    let binary = troupe_binary();
    // `true` reads nothing and exits at once, so troupe's first write meets a closed pipe; pipefail makes the
    // pipeline's status troupe's own (101 after a panic).
    let script = format!(
        "set -o pipefail; {bin} sessions | head -1 >/dev/null; {bin} watch {session} | head -1 >/dev/null; \
         {bin} sessions | true; echo \"sessions:$?\"; {bin} watch {session} | true; echo \"watch:$?\"; \
         {bin} sessions --json | true; echo \"json:$?\"",
        bin = binary.display()
    );
    let mut shell = tokio::process::Command::new("bash");
    shell
        .args(["-c", &script])
        .env("TROUPE_URL", daemon.url())
        .env("TROUPE_TOKEN", &daemon.token)
        .env("RUST_BACKTRACE", "1")
        .kill_on_drop(true);
    let output = finish(shell, Duration::from_secs(15)).await;
    assert!(
        output.stdout.contains("sessions:0") && output.stdout.contains("watch:0") && output.stdout.contains("json:0"),
        "{output:?}"
    );
    assert!(!output.stderr.contains("panicked") && !output.stderr.contains("Broken pipe"), "{output:?}");
}

#[tokio::test]
async fn completions_and_the_man_page_come_from_the_command_line_itself() {
    let daemon = TestDaemon::start();
    // The scripts call `troupe` back at each Tab (`TROUPE_COMPLETE=SHELL troupe -- …`).
    let bash = troupe(&daemon, &["completions", "bash"]).await.ok();
    assert!(bash.contains("_clap_complete_troupe") && bash.contains("TROUPE_COMPLETE=\"bash\""), "{bash}");
    let zsh = troupe(&daemon, &["completions", "zsh"]).await.ok();
    assert!(zsh.starts_with("#compdef troupe"), "{zsh}");
    let fish = troupe(&daemon, &["completions", "fish"]).await.ok();
    assert!(fish.contains("complete") && fish.contains("TROUPE_COMPLETE=fish"), "{fish}");

    // What a Tab offers (fish's format: one `value<TAB>help` a line): commands and flags, and what only the daemon
    // knows: session ids as their short prefix with the title, the modes, the agents and the models.
    let complete = |line: &'static [&'static str]| {
        let mut command = troupe_command(&daemon, &[&["--", "troupe"][..], line].concat());
        command.env("TROUPE_COMPLETE", "fish");
        finish(command, WAIT)
    };
    let (client, _deliveries) = daemon.client().await;
    let session = daemon.create_session(&client).await.session_id;
    let mut command = troupe_command(&daemon, &["--", "troupe", "watch", &session[..4]]);
    command.env("TROUPE_COMPLETE", "fish");
    let offered = finish(command, WAIT).await.ok();
    assert!(offered.starts_with(&format!("{}\t(untitled) (idle)", &session[..8])), "{offered}");
    let offered = complete(&["wat"]).await.ok();
    assert!(offered.starts_with("watch\t"), "{offered}");
    let offered = complete(&["exec", "--mode", "auto"]).await.ok();
    let modes: Vec<&str> = offered.lines().filter_map(|line| line.split('\t').next()).collect();
    assert_eq!(modes, ["auto_approve", "auto_approve_n", "auto_approve_y"], "{offered}");
    let offered = complete(&["run", "--agent", "d"]).await.ok();
    assert!(offered.starts_with("default\t"), "{offered}");
    let offered = complete(&["run", "--model", "local/e"]).await.ok();
    assert!(offered.starts_with("local/echo\t"), "{offered}");
    let man = troupe(&daemon, &["man"]).await.ok();
    assert!(man.contains(".TH troupe 1") && man.contains("exec"), "{man}");
    let unknown = troupe(&daemon, &["completions", "tcsh"]).await;
    assert_eq!(unknown.code, Some(2), "{unknown:?}");
}

#[tokio::test]
async fn every_session_argument_takes_a_unique_prefix() {
    let daemon = TestDaemon::start();
    let (client, _deliveries) = daemon.client().await;
    let session = daemon.create_session(&client).await.session_id;
    let prefix = &session[..8];
    for args in [
        vec!["tree", prefix],
        vec!["usage", "--session", prefix],
        vec!["usage", "--tree", prefix],
        vec!["goal", "show", prefix, "--json"],
        vec!["sandbox", "explain", prefix, "--json"],
        vec!["mode", prefix, "ask", "--json"],
        vec!["rename", prefix, "Named by prefix", "--json"],
    ] {
        let output = troupe(&daemon, &args).await;
        assert!(output.succeeded(), "{args:?}: {output:?}");
    }
    let said = troupe(&daemon, &["tree", "zzzzzzzz"]).await.refused();
    assert!(said.contains("no session") && said.contains("troupe sessions"), "{said}");
}

#[tokio::test]
async fn the_daemons_protocol_words_reach_the_terminal_as_flags() {
    let daemon = TestDaemon::start();
    let (client, _deliveries) = daemon.client().await;
    let session = daemon.create_session(&client).await.session_id;
    let said = troupe(&daemon, &["connect", "local"]).await.refused();
    assert!(said.contains("--script FILE") && !said.contains("setup_values"), "{said}");
    let said = troupe(&daemon, &["rename", &session[..8], ""]).await.refused();
    assert!(said.contains("--clear") && !said.contains("`clear`"), "{said}");
    assert!(!said.contains("-32000") && !said.contains("Engine error"), "{said}");
    // No spinner and no colour when stderr and stdout are not terminals.
    let run = troupe_here(&daemon, &["run", "plain"]).await;
    assert!(run.succeeded(), "{run:?}");
    assert!(!run.stderr.contains("waiting for") && !run.stderr.contains('\u{1b}'), "{run:?}");
    assert!(!run.stdout.contains('\u{1b}'), "{run:?}");
}

#[tokio::test]
async fn on_a_terminal_run_shows_a_spinner_while_the_model_thinks_and_colours_its_lines() {
    let (daemon, _client, _deliveries) =
        scripted_daemon(json!({"turns": [{"text": "thought about it", "delay_ms": 1500}]})).await;
    let output = troupe_on_a_terminal(&daemon, "run --model local/scripted hi").await;
    assert!(output.stdout.contains("waiting for the model"), "{:?}", output.stdout);
    assert!(output.stdout.contains("\u{1b}[2m#"), "the prefixes are dimmed: {:?}", output.stdout);
    assert!(output.stdout.contains("\u{1b}[32m") && output.stdout.contains("run completed"), "{:?}", output.stdout);
    assert!(output.stdout.contains("thought about it"), "{:?}", output.stdout);
}

#[tokio::test]
async fn a_goals_selection_follows_the_same_precedence_and_is_checked_first() {
    let daemon = daemon_with_coder();
    let (client, _deliveries) = daemon.client().await;
    let session = daemon.create_session(&client).await.session_id;
    let said = troupe(&daemon, &["goal", "set", &session[..8], "tidy up", "--model", "openai/gpt-4o"]).await.refused();
    assert!(said.contains("not connected") && said.contains("troupe connect openai"), "{said}");
    let shown = troupe(&daemon, &["goal", "show", &session[..8], "--json"]).await.ok();
    let shown: Value = serde_json::from_str(&shown).expect("goal show --json");
    assert_eq!(shown["goal"], Value::Null, "nothing was set: {shown}");
    // --agent alone: its chain (no more "--agent needs --model").
    connect_script(&client, daemon.data_path(), json!({"turns": [{"text": "done"}]})).await;
    let set = troupe(&daemon, &["goal", "set", &session[..8], "tidy up", "--agent", "coder", "--json"]).await.ok();
    let goal: Value = serde_json::from_str(&set).expect("goal set --json");
    assert_eq!(goal["selection"]["agent"], "coder", "{goal}");
    assert_eq!(goal["selection"]["model"]["model"], "local/scripted", "{goal}");
}

/// An IPv4 address of this machine off loopback (the source address of its default route), if it has one.
fn non_loopback_address() -> Option<std::net::IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    // Connecting a UDP socket sends nothing: it only picks the route and so the local address.
    socket.connect("192.0.2.1:9").or_else(|_| socket.connect("10.255.255.1:9")).ok()?;
    Some(socket.local_addr().ok()?.ip()).filter(|address| !address.is_loopback() && !address.is_unspecified())
}

#[tokio::test]
async fn connect_allow_insecure_http_reaches_a_plain_http_server_off_loopback_with_a_warning() {
    use troupe_test_support::FakeServer;
    use troupe_test_support::replies::models_list;
    let Some(address) = non_loopback_address() else {
        super::unavailable::skip(super::unavailable::Missing::OffLoopbackAddress);
        return;
    };
    let vendor = FakeServer::start_on(&format!("{address}:0"), vec![models_list(&["lan-model"])]).await;
    let base_url = format!("{}/v1", vendor.base_url);
    let daemon = TestDaemon::start();

    let said = troupe(&daemon, &["connect", "openai", "--base-url", &base_url]).await.refused();
    assert!(said.contains("--allow-insecure-http") && !said.contains("setup_values"), "{said}");
    let connected = troupe(&daemon, &["connect", "openai", "--base-url", &base_url, "--allow-insecure-http"]).await;
    assert!(connected.succeeded(), "{connected:?}");
    assert!(
        connected.stdout.contains("connected openai") && connected.stdout.contains("openai/lan-model"),
        "{connected:?}"
    );
    assert!(connected.stderr.starts_with("warning: --allow-insecure-http"), "{connected:?}");
}

/// Found by trying the CLI: `create --model` was ignored by later runs, an agent whose first model's provider is
/// not connected was refused although its chain goes on (it runs, and its fallback is recorded and printed), and
/// an input the daemon refused left an empty session.
#[tokio::test]
async fn the_session_keeps_its_model_chains_fall_back_and_a_refused_input_leaves_no_session() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[agents.remote]\nmodels = [\"openai/gpt-4o\", \"local/echo\"]\n".to_owned()),
        ..DaemonSetup::default()
    });
    let (client, _deliveries) = daemon.client().await;
    connect_script(&client, daemon.data_path(), json!({"turns": [{"text": "one"}, {"text": "two"}]})).await;

    let session = troupe_here(&daemon, &["create", "--model", "local/scripted"]).await.ok().trim().to_owned();
    let run = troupe_here(&daemon, &["run", "--session", &session, "hi"]).await.ok();
    assert_eq!(started_with(&run).as_deref(), Some("default, local/scripted"), "{run}");

    // The agent's first model is asked for; its run falls back along the chain, and says so.
    let run = troupe_here(&daemon, &["run", "--agent", "remote", "hi"]).await.ok();
    assert_eq!(started_with(&run).as_deref(), Some("remote, openai/gpt-4o"), "{run}");
    assert!(run.contains("falling back from openai/gpt-4o to local/echo"), "{run}");
    let before = session_ids(&daemon).await.len();

    let said = troupe_here(&daemon, &["run", "/nosuch x"]).await.refused();
    assert!(said.contains("nosuch"), "{said}");
    assert_eq!(session_ids(&daemon).await.len(), before, "the refused run's session is gone");
}

/// Found by trying the CLI: `troupe serve` on an address another daemon holds panicked ("there is no reactor
/// running") before its error. Now: one error, a hint naming --listen, no panic, exit 1.
#[tokio::test]
async fn serve_on_a_taken_address_says_so_in_words_without_a_panic() {
    let daemon = TestDaemon::start();
    let data_dir = tempfile::tempdir().expect("data dir");
    let mut command = troupe_command(&daemon, &["serve", "--listen", &daemon.addr.to_string()]);
    command.arg("--data-dir").arg(data_dir.path()).env("RUST_BACKTRACE", "1").env("RUST_LOG", "warn");
    let said = finish(command, WAIT).await.refused();
    assert!(said.contains("cannot listen on") && said.contains("--listen"), "{said}");
    assert!(!said.contains("panicked") && !said.contains("stack backtrace"), "{said}");
}

/// Found by trying the CLI: `sessions --cwd .` was resolved in the daemon's directory, and an `http://` URL got no
/// hint that the daemon speaks WebSocket.
#[tokio::test]
async fn sessions_cwd_dot_is_this_directory_and_an_http_url_is_corrected() {
    let daemon = TestDaemon::start();
    troupe_here(&daemon, &["run", "here"]).await.ok();
    let listed = troupe_here(&daemon, &["sessions", "--cwd", ".", "--json"]).await.ok();
    let sessions: Vec<Value> = serde_json::from_str(&listed).expect("JSON");
    assert_eq!(sessions.len(), 1, "{listed}");
    let mut elsewhere = troupe_command(&daemon, &["sessions", "--cwd", ".", "--json"]);
    elsewhere.current_dir(std::env::temp_dir());
    let listed = finish(elsewhere, WAIT).await.ok();
    assert_eq!(serde_json::from_str::<Vec<Value>>(&listed).expect("JSON").len(), 0, "{listed}");

    let mut command = troupe_command(&daemon, &["sessions"]);
    command.env("TROUPE_URL", format!("http://{}", daemon.addr));
    let said = finish(command, WAIT).await.refused();
    assert!(said.contains(&format!("ws://{}/ws", daemon.addr)), "{said}");
}
