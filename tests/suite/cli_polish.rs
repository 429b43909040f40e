//! What a new user trying the CLI ran into (issue 12's second pass), each through the real binary against a live
//! daemon: `models` after `disconnect local`, flags before the subcommand, `troupe --url X` starting the TUI there,
//! `token --json`, run id prefixes, reasoning in `run`/`watch`, the man pages, `config check` listing every
//! problem, and the revert marker's wording.

use serde_json::{Value, json};
use troupe_protocol::method;
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::events::EventPayload;

use super::cli_support::*;
use super::support::*;
use super::terminal_support::{Tmux, troupe_on_a_terminal};

fn parsed(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|error| panic!("not JSON ({error}): {stdout}"))
}

/// The row of `model` in `troupe models`.
fn model_row(printed: &str, model: &str) -> String {
    let row = printed.lines().find(|line| line.starts_with(&format!("{model} ")));
    row.unwrap_or_else(|| panic!("no {model} in\n{printed}")).to_owned()
}

#[tokio::test]
async fn models_follow_the_daemons_local_connection_after_disconnect_and_connect() {
    let (daemon, _client, _deliveries) = scripted_daemon(json!({"turns": [{"text": "hi"}]})).await;
    let printed = troupe(&daemon, &["models"]).await.ok();
    assert!(model_row(&printed, "local/scripted").contains(" yes "), "{printed}");

    troupe(&daemon, &["disconnect", "local"]).await.ok();
    // A run on it is refused before it starts (cli_selection_refusals.rs) and says how to give it a script, in CLI
    // words.
    let cwd = daemon.project_path().to_str().unwrap().to_owned();
    let output = troupe(&daemon, &["run", "--model", "local/scripted", "--cwd", &cwd, "hello"]).await;
    assert_eq!(output.code, Some(1), "{output:?}");
    assert!(output.stderr.contains("troupe connect local --script FILE"), "{output:?}");
    assert!(!output.stdout.contains("setup_values") && !output.stderr.contains("setup_values"), "{output:?}");
    let printed = troupe(&daemon, &["models"]).await.ok();
    assert!(model_row(&printed, "local/scripted").contains("no (no script)"), "{printed}");
    assert!(model_row(&printed, "local/echo").contains(" yes "), "local/echo needs nothing: {printed}");
    assert!(printed.contains("troupe connect local --script FILE"), "{printed}");
    let listed = parsed(&troupe(&daemon, &["models", "--json"]).await.ok());
    let usable = |model: &str| {
        let models = listed["models"].as_array().expect("models");
        models.iter().find(|info| info["model"] == json!(model)).expect("listed")["usable"].clone()
    };
    assert_eq!(usable("local/scripted"), json!(false), "{listed}");
    assert_eq!(usable("local/echo"), json!(true), "{listed}");

    let script = daemon.data_path().join("again.json");
    std::fs::write(&script, json!({"turns": [{"text": "again"}]}).to_string()).expect("write script");
    troupe(&daemon, &["connect", "local", "--script", script.to_str().unwrap()]).await.ok();
    let printed = troupe(&daemon, &["models"]).await.ok();
    assert!(model_row(&printed, "local/scripted").contains(" yes "), "{printed}");
}

/// `troupe ARGS…` with no TROUPE_URL/TROUPE_TOKEN in its environment: the flags must say it all.
fn bare_troupe(daemon: &TestDaemon, args: &[&str]) -> tokio::process::Command {
    let mut command = troupe_bare(args);
    command.env("TROUPE_HOME", daemon.data_path().join("nowhere"));
    command
}

#[tokio::test]
async fn client_flags_and_json_work_before_the_subcommand_as_after_it() {
    let daemon = TestDaemon::start();
    let (client, _deliveries) = daemon.client().await;
    let session = daemon.create_session(&client).await.session_id;
    let url = daemon.url();
    let token = daemon.token.clone();

    let before = finish(bare_troupe(&daemon, &["--url", &url, "--token", &token, "sessions"]), WAIT).await.ok();
    assert!(before.contains(&session[..8]), "{before}");
    let after = finish(bare_troupe(&daemon, &["sessions", "--url", &url, "--token", &token]), WAIT).await.ok();
    assert_eq!(before, after);
    let mixed = finish(bare_troupe(&daemon, &["--url", &url, "sessions", "--token", &token]), WAIT).await.ok();
    assert_eq!(before, mixed);

    let listed = parsed(
        &finish(bare_troupe(&daemon, &["--json", "--url", &url, "--token", &token, "sessions"]), WAIT).await.ok(),
    );
    assert_eq!(listed[0]["session_id"], json!(session), "{listed}");
    let runs = parsed(&troupe(&daemon, &["--json", "runs", &session]).await.ok());
    assert_eq!(runs["session_id"], json!(session));

    // A flag given before the subcommand wins over the environment, as after it does.
    let mut command = troupe_command(&daemon, &["--url", &url, "sessions"]);
    command.env("TROUPE_URL", "ws://127.0.0.1:1/ws");
    assert!(finish(command, WAIT).await.ok().contains(&session[..8]));

    // --data-dir before `token`, and `token --json`.
    let data_dir = daemon.data_path().to_str().unwrap().to_owned();
    let printed = finish(bare_troupe(&daemon, &["--data-dir", &data_dir, "token"]), WAIT).await.ok();
    assert_eq!(printed.trim(), token);
    let printed = parsed(&finish(bare_troupe(&daemon, &["token", "--json", "--data-dir", &data_dir]), WAIT).await.ok());
    assert_eq!(printed["token"], json!(token));
    assert!(printed["path"].as_str().expect("path").starts_with(&data_dir), "{printed}");
    let printed = parsed(&finish(bare_troupe(&daemon, &["--json", "--data-dir", &data_dir, "token"]), WAIT).await.ok());
    assert_eq!(printed["token"], json!(token));
}

#[tokio::test]
async fn troupe_with_only_url_and_token_starts_the_tui_against_that_daemon() {
    let daemon = TestDaemon::start();
    let (client, _deliveries) = daemon.client().await;
    let session = daemon.create_session(&client).await.session_id;
    // No TROUPE_URL in the environment: only the flags name the daemon.
    let command = format!(
        "env -u TROUPE_URL -u TROUPE_TOKEN TROUPE_HOME={} {} --url {} --token {}",
        daemon.data_path().join("nowhere").display(),
        troupe_binary().display(),
        daemon.url(),
        daemon.token
    );
    let tmux = Tmux::start("bare-url", &command);
    tmux.wait_for(&session[..8]).await;
}

/// The session id `troupe run` printed on stderr ("created session ID").
fn created_session(stderr: &str) -> String {
    let line = stderr.lines().find_map(|line| line.strip_prefix("created session "));
    line.unwrap_or_else(|| panic!("no session created: {stderr}")).trim().to_owned()
}

#[tokio::test]
async fn run_and_watch_show_the_models_reasoning_as_thinking_before_its_answer() {
    let script = json!({"turns": [{"reasoning": "first I weigh \u{1b}[2Jit", "text": "the answer"}]});
    let (daemon, _client, _deliveries) = scripted_daemon(script).await;
    let cwd = daemon.project_path().to_str().unwrap().to_owned();
    let output = troupe(&daemon, &["run", "--model", "local/scripted", "--cwd", &cwd, "question"]).await;
    let session = created_session(&output.stderr);
    let printed = output.ok();
    let position = |text: &str, wanted: &str| text.find(wanted).unwrap_or_else(|| panic!("no {wanted:?} in\n{text}"));
    assert!(position(&printed, "  thinking: first I weigh it\n") < position(&printed, "  assistant: the answer"));
    assert!(!printed.contains('\u{1b}'), "no colours (or the script's escapes) into a pipe: {printed:?}");

    let lines = troupe_until(&daemon, &["watch", &session], |line| line.contains("run completed")).await;
    let thinking = lines.iter().position(|line| line.ends_with("  thinking: first I weigh it"));
    let answer = lines.iter().position(|line| line.ends_with("  assistant: the answer"));
    assert!(thinking.is_some() && thinking < answer, "{lines:#?}");
}

/// Every `troupe-NAME(1)` a page refers to.
fn referenced_pages(page: &str) -> Vec<String> {
    let mut pages = Vec::new();
    let mut rest = page;
    while let Some(start) = rest.find("troupe\\-") {
        let tail = &rest[start..];
        if let Some(end) = tail.find("(1)") {
            let name = tail[..end].replace('\\', "");
            if name.chars().all(|c| c.is_ascii_lowercase() || c == '-') {
                pages.push(name);
            }
        }
        rest = &tail[1..];
    }
    pages
}

#[tokio::test]
async fn every_man_page_the_pages_list_is_written_and_each_prints_alone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut command = troupe_bare(&["man", "--dir"]);
    command.arg(dir.path());
    let written = finish(command, WAIT).await.ok();
    let main_page = std::fs::read_to_string(dir.path().join("troupe.1")).expect("troupe.1 written");
    let listed = referenced_pages(&main_page);
    assert!(listed.len() > 30 && listed.contains(&"troupe-run".to_owned()), "{listed:?}");
    assert!(!listed.iter().any(|page| page == "troupe-help"), "help has no page: {listed:?}");
    let mut pages = vec!["troupe".to_owned()];
    let mut index = 0;
    while index < pages.len() {
        let path = dir.path().join(format!("{}.1", pages[index]));
        let page =
            std::fs::read_to_string(&path).unwrap_or_else(|_| panic!("{} is listed but not written", pages[index]));
        assert!(written.contains(path.to_str().unwrap()), "{written}");
        for name in referenced_pages(&page) {
            if !pages.contains(&name) {
                pages.push(name);
            }
        }
        index += 1;
    }
    assert!(pages.contains(&"troupe-goal-set".to_owned()), "{pages:?}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), pages.len(), "written and listed agree: {pages:?}");

    let printed = finish(troupe_bare(&["man", "goal", "set"]), WAIT).await.ok();
    assert_eq!(printed, std::fs::read_to_string(dir.path().join("troupe-goal-set.1")).unwrap());
    let refused = finish(troupe_bare(&["man", "nosuch"]), WAIT).await;
    assert_eq!(refused.code, Some(2), "{refused:?}");
    assert!(refused.stderr.contains("no command `nosuch`"), "{refused:?}");
}

#[tokio::test]
async fn config_check_lists_every_problem_of_the_file_at_once() {
    let data_dir = tempfile::tempdir().unwrap();
    std::fs::write(
        data_dir.path().join("config.toml"),
        "allowed_origins = [\"nope\"]\n[limits]\nmax_frame_bites = 3\nmax_in_flight = 0\n[tools]\nshel = 1\n\
         [agents.a]\nmodels = [\"no-slash\"]\n[agents.b]\nmodels = []\n",
    )
    .unwrap();
    let mut command = troupe_bare(&["config", "check", "--json", "--data-dir"]);
    command.arg(data_dir.path());
    let output = finish(command, WAIT).await;
    assert_eq!(output.code, Some(1), "{output:?}");
    let listed = parsed(&output.stdout);
    let messages: Vec<String> = listed["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .map(|problem| format!("{} {}", problem["location"].as_str().unwrap(), problem["message"].as_str().unwrap()))
        .collect();
    let text = messages.join("\n");
    // The refused keys by position, then what each section's values break.
    assert!(messages[0].contains("config.toml:3:1") && messages[0].contains("max_frame_bites"), "{text}");
    assert!(messages[1].contains("config.toml:6:1") && messages[1].contains("shel"), "{text}");
    for expected in [
        "limits.max_in_flight must be greater than 0",
        "agents.a.models: `no-slash` is not of the form",
        "agents.b.models must name at least one model",
        "allowed_origins[0] is not an origin",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in\n{text}");
    }
}

#[tokio::test]
async fn a_daemon_refused_for_its_config_names_the_command_that_lists_every_problem() {
    let data_dir = tempfile::tempdir().unwrap();
    std::fs::write(data_dir.path().join("config.toml"), "[limits]\nmax_frame_bites = 3\nshel = 1\n").unwrap();
    let mut command = troupe_bare(&["serve", "--listen", "127.0.0.1:0", "--data-dir"]);
    command.arg(data_dir.path());
    let output = finish(command, WAIT).await;
    assert_eq!(output.code, Some(1), "{output:?}");
    assert!(output.stderr.contains("max_frame_bites"), "{output:?}");
    let hint = format!("hint: `troupe config check --data-dir {}` lists every problem", data_dir.path().display());
    assert!(output.stderr.contains(&hint), "{output:?}");
}

#[tokio::test]
async fn revert_names_the_hidden_events_the_marker_and_what_followed_it_by_their_watch_numbers() {
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    let (id, runs) =
        session_after_echo_runs(&daemon, &client, &mut deliveries, &["question one", "question two"]).await;
    let end_of_first = runs[0].last().unwrap().seq;
    let end_of_second = runs[1].last().unwrap().seq;

    let printed = troupe(&daemon, &["revert", &id, &end_of_first.to_string()]).await.ok();
    let marker =
        events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::SessionReverted { .. })).await;
    let marker = marker.last().unwrap().seq;
    assert_eq!(marker, end_of_second + 1);
    let lines: Vec<&str> = printed.lines().collect();
    assert!(lines[0].starts_with(&id) && !lines[0].contains("marker"), "{printed}");
    assert_eq!(lines[1], format!("the conversation now ends with #{end_of_first}: run completed"), "{printed}");
    assert!(
        lines[2].starts_with(&format!(
            "events #{} to #{end_of_second} are no longer part of the conversation",
            end_of_first + 1
        )),
        "{printed}"
    );
    assert_eq!(lines[3], format!("#{marker}: the revert marker"), "{printed}");
    assert_eq!(lines.len(), 4, "{printed}");
    // watch says the same range on the marker's line.
    let watched = troupe_until(&daemon, &["watch", &id], |line| line.contains("reverted to")).await;
    assert!(
        watched.last().unwrap().starts_with(&format!("#{marker} "))
            && watched.last().unwrap().contains(&format!("events #{} to #{end_of_second}", end_of_first + 1)),
        "{watched:#?}"
    );

    // Reverting into the middle of a run: the daemon closes that run after the marker, and revert says so.
    let into_run = runs[0][1].seq;
    let printed = troupe(&daemon, &["revert", &id, &into_run.to_string()]).await.ok();
    let after = events_until(
        &mut deliveries,
        |event| matches!(event.payload, EventPayload::SessionReverted { through_seq } if through_seq == into_run),
    )
    .await;
    let marker = after.last().unwrap().seq;
    assert!(printed.contains(&format!("\n#{marker}: the revert marker\n")), "{printed}");
    let session = within("session.get", client.call::<method::SessionGet>(SessionIdParams { session_id: id.clone() }))
        .await
        .expect("session.get")
        .session;
    for seq in marker + 1..=session.last_event_seq {
        assert!(printed.contains(&format!("\n#{seq}: ")), "#{seq} after the marker is named: {printed}");
    }
}

#[tokio::test]
async fn watch_from_n_starts_at_event_n_as_watch_numbers_it() {
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    let (id, runs) = session_after_echo_runs(&daemon, &client, &mut deliveries, &["question one"]).await;
    let completed = runs[0].last().unwrap().seq;
    let lines =
        troupe_until(&daemon, &["watch", &id, "--from", &completed.to_string()], |line| line.contains("run completed"))
            .await;
    assert_eq!(lines[1], format!("from #{completed} (events before it are not printed)"), "{lines:#?}");
    assert!(lines[2].starts_with(&format!("#{completed} ")), "the first event printed is #{completed}: {lines:#?}");
    let help = troupe(&daemon, &["watch", "--help"]).await.ok();
    assert!(help.contains("Print from event #N on"), "{help}");
}

#[tokio::test]
async fn steer_and_cancel_take_a_unique_prefix_of_an_active_runs_id() {
    let script = json!({"turns": [{"text": "slow", "delay_ms": 600000}, {"text": "slow too", "delay_ms": 600000}]});
    let (daemon, client, _deliveries) = scripted_daemon(script).await;
    let one = daemon.create_session(&client).await.session_id;
    let two = daemon.create_session(&client).await.session_id;
    let selection = selection_of("default", "local/scripted");
    let run_one = start_run(&client, &one, selection.clone(), "first").await;
    let run_two = start_run(&client, &two, selection, "second").await;
    let common: String = run_one.chars().zip(run_two.chars()).take_while(|(a, b)| a == b).map(|(a, _)| a).collect();
    assert!(common.len() >= 4, "runs started together share their time prefix: {run_one} {run_two}");
    let unique = &run_one[..common.len() + 1];

    let queued = troupe(&daemon, &["steer", unique, "look again"]).await.ok();
    assert!(queued.contains("queued"), "{queued}");
    let refused = troupe(&daemon, &["cancel", &common]).await.refused();
    assert!(refused.contains("ambiguous") && refused.contains(&run_one) && refused.contains(&run_two), "{refused}");
    let refused = troupe(&daemon, &["cancel", "01a"]).await.refused();
    assert!(refused.contains("at least 4 characters"), "{refused}");
    let refused = troupe(&daemon, &["cancel", "ffffffff"]).await.refused();
    assert!(
        refused.contains("no run ffffffff: the id of no active run starts with it")
            && refused.contains("troupe runs SESSION"),
        "{refused}"
    );
    let cancelled = parsed(&troupe(&daemon, &["cancel", unique, "--json"]).await.ok());
    assert_eq!(cancelled["run_id"], json!(run_one));
    assert_eq!(cancelled["cancelled"], json!(true));
    troupe(&daemon, &["cancel", &run_two]).await.ok();
}

#[tokio::test]
async fn approve_takes_a_prefix_of_the_approval_id_and_refuses_one_that_names_none() {
    let (daemon, client, mut deliveries) = scripted_daemon(write_file_script()).await;
    let WaitingRun { session_id: session, run_id, approval } =
        run_waiting_for_approval(&daemon, &client, &mut deliveries).await;
    let approval_id = approval.approval_id;

    let refused = troupe(&daemon, &["approve", &session, "ffffffff"]).await.refused();
    assert!(refused.contains("no pending approval ffffffff") && refused.contains("troupe approvals"), "{refused}");
    troupe(&daemon, &["approve", &session, &approval_id[..8]]).await.ok();
    let ended = events_until(&mut deliveries, |event| is_terminal(event) && event.run_id.as_deref() == Some(&run_id));
    assert!(matches!(ended.await.last().unwrap().payload, EventPayload::RunCompleted { .. }));
    let refused = troupe(&daemon, &["approve", &session]).await.refused();
    assert!(refused.contains("no approval is pending"), "{refused}");
}

#[tokio::test]
async fn on_a_terminal_the_reasoning_is_dimmed_and_the_answer_is_not() {
    let (daemon, _client, _deliveries) =
        scripted_daemon(json!({"turns": [{"reasoning": "weighing it", "text": "plain answer"}]})).await;
    let output = troupe_on_a_terminal(&daemon, "run --model local/scripted hi").await;
    assert!(output.stdout.contains("\u{1b}[2mthinking: \u{1b}[0m"), "the label is dimmed: {:?}", output.stdout);
    assert!(output.stdout.contains("\u{1b}[2mweighing it\u{1b}[0m"), "the reasoning is dimmed: {:?}", output.stdout);
    assert!(output.stdout.contains("assistant: plain answer"), "the answer is not: {:?}", output.stdout);
}
