//! The read-only commands (`runs`, `approvals`, `models`, `agents`, `providers`, `skills`, `status`, `config
//! check`) through the real binary against a real daemon: what a person reads, what `--json` gives a script, the
//! refusals for an unknown session and an ambiguous prefix, and exit code 0 when the reader closes the pipe.

use std::process::Stdio;

use serde_json::{Value, json};

use super::cli_support::*;
use super::support::*;
use troupe_test_support::FakeServer;
use troupe_test_support::replies::models_list;

fn parsed(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|error| panic!("not JSON ({error}): {stdout}"))
}

/// Runs `troupe args…` with its stdout closed before it writes anything (`troupe … | head -0`): it must exit 0
/// without a panic or a complaint.
async fn exits_0_on_a_closed_pipe(daemon: &TestDaemon, args: &[&str]) {
    let mut command = troupe_command(daemon, args);
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().expect("spawn troupe");
    drop(child.stdout.take());
    let output = within("troupe with a closed stdout", child.wait_with_output()).await.expect("wait");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "troupe {args:?} with a closed pipe: {stderr}");
    assert!(!stderr.contains("panicked") && !stderr.contains("Broken pipe"), "{stderr}");
}

#[tokio::test]
async fn runs_lists_each_run_with_its_whole_id_state_and_input_and_refuses_unknown_and_ambiguous_sessions() {
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    let session = daemon.create_session(&client).await.session_id;
    client.subscribe(&session, None).await.expect("subscribe");
    run_in_subscribed(&client, &mut deliveries, &session, "local/echo", "first question\nwith a second line").await;
    run_in_subscribed(&client, &mut deliveries, &session, "local/echo", "second \u{1b}[2Jquestion").await;
    let third_run = start_run(&client, &session, echo_selection(), "third").await;
    events_until(&mut deliveries, |event| is_terminal(event) && event.run_id.as_deref() == Some(&third_run)).await;

    // Human: one line per run, oldest first, whole run ids, a short prefix of the session accepted.
    let printed = troupe(&daemon, &["runs", &session[..8]]).await.ok();
    let lines: Vec<&str> = printed.lines().collect();
    assert!(lines[0].starts_with("RUN") && lines[0].contains("STATE") && lines[0].contains("INPUT"), "{printed}");
    assert_eq!(lines.len(), 4, "{printed}");
    assert!(lines[1].contains("completed  default  local/echo") && lines[1].ends_with("first question …"), "{printed}");
    assert!(lines[2].ends_with("second question"), "escapes of the input are removed: {printed}");
    assert!(lines[3].starts_with(&third_run) && lines[3].ends_with("third"), "{printed}");
    assert!(!printed.contains('\u{1b}'), "no colours into a pipe: {printed:?}");

    // JSON: the same runs, for a script.
    let listed = parsed(&troupe(&daemon, &["runs", &session, "--json"]).await.ok());
    assert_eq!(listed["session_id"], json!(session));
    assert_eq!(listed["active_run_id"], Value::Null);
    let runs = listed["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 3);
    assert_eq!(runs[2]["run_id"], json!(third_run));
    assert!(runs.iter().all(|run| run["state"] == json!("completed") && run["model"] == json!("local/echo")));

    // An unknown session and an ambiguous prefix are refused in words, with exit code 1.
    let refused = troupe(&daemon, &["runs", "ffffffff-no-such-session"]).await.refused();
    assert!(refused.contains("no session") && refused.contains("troupe sessions"), "{refused}");
    let other = daemon.create_session(&client).await.session_id;
    let common: String =
        session.chars().zip(other.chars()).take_while(|(a, b)| a == b).map(|(a, _)| a).take(6).collect();
    assert!(common.len() >= 4, "sessions created together share their time prefix: {session} {other}");
    let refused = troupe(&daemon, &["runs", &common]).await.refused();
    assert!(refused.contains("ambiguous"), "{refused}");
    let empty = troupe(&daemon, &["runs", &other]).await.ok();
    assert!(empty.starts_with("no runs in session"), "{empty}");

    exits_0_on_a_closed_pipe(&daemon, &["runs", &session]).await;
}

#[tokio::test]
async fn approvals_lists_a_pending_approval_with_the_command_that_answers_it_and_runs_marks_the_run_active() {
    let (daemon, client, mut deliveries) = scripted_daemon(write_file_script()).await;
    let WaitingRun { session_id: session, run_id, approval } =
        run_waiting_for_approval(&daemon, &client, &mut deliveries).await;
    let approval_id = approval.approval_id;

    // Without a session: every running tree; the line names the tool and the command that answers.
    let printed = troupe(&daemon, &["approvals"]).await.ok();
    assert!(printed.contains(&approval_id) && printed.contains("write_file"), "{printed}");
    assert!(printed.contains(&format!("`troupe approve {session} {approval_id}`")), "{printed}");
    let listed = parsed(&troupe(&daemon, &["approvals", &session[..8], "--json"]).await.ok());
    assert_eq!(listed["approvals"][0]["approval_id"], json!(approval_id));
    assert_eq!(listed["approvals"][0]["status"], json!("pending"));

    // The run waits, active; `runs` says how to reach it.
    let runs = troupe(&daemon, &["runs", &session]).await.ok();
    assert!(runs.contains(&format!("{run_id}  active")), "{runs}");
    assert!(runs.contains(&format!("troupe cancel {run_id}")), "{runs}");
    let listed = parsed(&troupe(&daemon, &["runs", &session, "--json"]).await.ok());
    assert_eq!(listed["active_run_id"], json!(run_id));

    // The printed command works, and then nothing is pending.
    troupe(&daemon, &["approve", &session, &approval_id]).await.ok();
    events_until(&mut deliveries, |event| is_terminal(event) && event.run_id.as_deref() == Some(&run_id)).await;
    assert_eq!(troupe(&daemon, &["approvals", &session]).await.ok(), "no approvals pending in this session's tree\n");
    assert_eq!(troupe(&daemon, &["approvals"]).await.ok(), "no approvals pending\n");
    let refused = troupe(&daemon, &["approvals", "ffffffff-no-such-session"]).await.refused();
    assert!(refused.contains("no session"), "{refused}");
    exits_0_on_a_closed_pipe(&daemon, &["approvals"]).await;
}

#[tokio::test]
async fn models_agents_and_providers_come_from_the_runtime_snapshot_with_base_urls_and_never_keys() {
    let vendor = FakeServer::start(vec![models_list(&["m1"])]).await;
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some(
            "[agents.coder]\ndescription = \"Writes the code\"\nmodels = [\"openai/m1\", \"local/echo\"]\n".into(),
        ),
        ..DaemonSetup::default()
    });
    let (client, _) = daemon.client().await;
    let base_url = format!("{}/v1", vendor.base_url);
    connect_provider(&client, "openai", &[("base_url", &base_url)], Some("sk-NEVER-PRINTED")).await.expect("connect");

    let models = troupe(&daemon, &["models"]).await.ok();
    assert!(
        models.lines().any(|line| line.starts_with("local/echo") && line.contains("local  ") && line.contains("yes")),
        "{models}"
    );
    assert!(
        models.lines().any(|line| line.starts_with("openai/m1") && line.contains("openai") && line.contains("yes")),
        "{models}"
    );
    let listed = parsed(&troupe(&daemon, &["models", "--json"]).await.ok());
    assert!(listed["models"].as_array().unwrap().iter().any(|model| model["model"] == json!("openai/m1")));

    let agents = troupe(&daemon, &["agents"]).await.ok();
    assert!(
        agents.contains("coder") && agents.contains("openai/m1 → local/echo") && agents.contains("Writes the code"),
        "{agents}"
    );
    let listed = parsed(&troupe(&daemon, &["agents", "--json"]).await.ok());
    let coder = listed["agents"].as_array().unwrap().iter().find(|agent| agent["agent"] == json!("coder")).cloned();
    assert_eq!(coder.expect("coder")["models"][0]["model"], json!("openai/m1"));

    // The base URL is read from the daemon's own providers.json (given --data-dir); the key never.
    let data_dir = daemon.data_path().to_str().unwrap().to_owned();
    let providers = troupe(&daemon, &["providers", "--data-dir", &data_dir]).await.ok();
    assert!(
        providers.lines().any(|line| line.starts_with("openai") && line.contains("yes") && line.ends_with(&base_url)),
        "{providers}"
    );
    assert!(providers.lines().any(|line| line.starts_with("anthropic") && line.contains(" no ")), "{providers}");
    let listed = troupe(&daemon, &["providers", "--data-dir", &data_dir, "--json"]).await.ok();
    assert!(!listed.contains("sk-NEVER-PRINTED") && !providers.contains("sk-NEVER-PRINTED"));
    let listed = parsed(&listed);
    let openai = listed["providers"].as_array().unwrap().iter().find(|p| p["provider_id"] == json!("openai")).cloned();
    let openai = openai.expect("openai");
    assert_eq!((openai["connected"].clone(), openai["base_url"].clone()), (json!(true), json!(base_url)));
    // Elsewhere (another data dir) the URL is not guessed.
    let elsewhere = tempfile::tempdir().unwrap();
    let providers = troupe(&daemon, &["providers", "--data-dir", elsewhere.path().to_str().unwrap()]).await.ok();
    assert!(providers.contains("(unknown here)"), "{providers}");

    exits_0_on_a_closed_pipe(&daemon, &["models"]).await;
    exits_0_on_a_closed_pipe(&daemon, &["agents", "--json"]).await;
}

#[tokio::test]
async fn skills_lists_the_skills_and_a_skill_file_without_a_description_with_the_reason() {
    let daemon = TestDaemon::start();
    let root = daemon.project_path().join(".troupe/skills");
    for (name, text) in [
        ("review", "---\ndescription: Review a file\n---\nReview $ARGUMENTS.\n"),
        ("bare", "---\nname: bare\n---\nNo description.\n"),
    ] {
        std::fs::create_dir_all(root.join(name)).unwrap();
        std::fs::write(root.join(name).join("SKILL.md"), text).unwrap();
    }
    let (client, _) = daemon.client().await;
    let session = daemon.create_session(&client).await.session_id;

    let printed = troupe(&daemon, &["skills", &session[..8]]).await.ok();
    assert!(
        printed
            .lines()
            .any(|line| line.starts_with("review") && line.contains("project") && line.ends_with("Review a file")),
        "{printed}"
    );
    assert!(printed.contains("1 skill file(s) could not be used:"), "{printed}");
    assert!(printed.contains("bare/SKILL.md (project): ") && printed.contains("description"), "{printed}");
    let listed = parsed(&troupe(&daemon, &["skills", &session, "--json"]).await.ok());
    assert_eq!(listed["skills"][0]["name"], json!("review"));
    assert!(listed["problems"][0]["location"].as_str().unwrap().ends_with("bare/SKILL.md"), "{listed}");
    assert!(listed["problems"][0]["reason"].as_str().unwrap().contains("description"), "{listed}");
    let refused = troupe(&daemon, &["skills", "ffffffff-no-such-session"]).await.refused();
    assert!(refused.contains("no session"), "{refused}");
    exits_0_on_a_closed_pipe(&daemon, &["skills", &session]).await;
}

#[tokio::test]
async fn status_says_whether_the_daemon_is_reachable_and_exits_1_when_not() {
    let daemon = TestDaemon::start();
    let (client, _) = daemon.client().await;
    let session = daemon.create_session(&client).await;
    let data_dir = daemon.data_path().to_str().unwrap().to_owned();

    let printed = troupe(&daemon, &["status", "--data-dir", &data_dir]).await.ok();
    assert!(printed.contains(&format!("reachable at {} (protocol 20)", daemon.url())), "{printed}");
    assert!(printed.contains(&format!("data dir  {data_dir}")), "{printed}");
    assert!(printed.contains("providers local"), "{printed}");
    assert!(printed.contains("1 root session(s), 0 with an active run"), "{printed}");
    assert!(printed.contains("sandbox   "), "{printed}");
    // (The test daemon's config.toml turns automatic titles off.)
    assert!(printed.contains("config.toml: no problems"), "{printed}");
    let status = parsed(&troupe(&daemon, &["status", "--data-dir", &data_dir, "--json"]).await.ok());
    assert_eq!(status["reachable"], json!(true));
    assert_eq!(status["protocol_version"], json!(20));
    assert_eq!(status["sessions"], json!(1));
    assert!(status["providers"].as_array().unwrap().iter().any(|p| p["provider_id"] == json!("local")));
    drop(session);

    // A config problem shows up (the daemon read its config at start, so it is still reachable: exit 0).
    std::fs::write(daemon.data_path().join("config.toml"), "[limits]\nmax_in_flihgt = 3\n").unwrap();
    let printed = troupe(&daemon, &["status", "--data-dir", &data_dir]).await.ok();
    assert!(printed.contains("config    1 problem(s):\n  error: "), "{printed}");
    assert!(printed.contains("config.toml:2:1: unknown field `max_in_flihgt`"), "{printed}");

    // Nothing listens there: exit 1, still saying what it tried and what it found locally.
    let unreachable = "ws://127.0.0.1:1/ws";
    let output = troupe(&daemon, &["status", "--data-dir", &data_dir, "--url", unreachable]).await;
    assert_eq!(output.code, Some(1), "{output:?}");
    assert!(output.stdout.contains(&format!("not reachable at {unreachable}")), "{output:?}");
    assert!(output.stdout.contains(&format!("data dir  {data_dir}")), "{output:?}");
    // The data dir's daemon runs (elsewhere than that URL): the hint points at --url, not at starting another.
    assert!(output.stdout.contains("but not there: give its address with --url"), "the fix: {output:?}");
    let output = troupe(&daemon, &["status", "--url", unreachable, "--json"]).await;
    assert_eq!(output.code, Some(1), "{output:?}");
    assert_eq!(parsed(&output.stdout)["reachable"], json!(false));
    exits_0_on_a_closed_pipe(&daemon, &["status"]).await;
}

#[tokio::test]
async fn config_check_names_the_file_position_and_key_and_says_when_the_running_daemon_needs_a_restart() {
    let data_dir = tempfile::tempdir().unwrap();
    let path = data_dir.path().to_str().unwrap().to_owned();
    let config = data_dir.path().join("config.toml");
    let check = |json: bool| {
        let mut command = tokio::process::Command::new(troupe_binary());
        command.args(["config", "check", "--data-dir", &path]).env("RUST_LOG", "off").env_remove("TROUPE_HOME");
        if json {
            command.arg("--json");
        }
        finish(command, WAIT)
    };

    // No daemon is needed; a bad key is an error with its position, exit 1.
    std::fs::write(&config, "[limits]\nmax_in_flight = 8\nhibernate_after = 3\n").unwrap();
    let output = check(false).await;
    assert_eq!(output.code, Some(1), "{output:?}");
    assert!(output.stdout.contains("error: ") && output.stdout.contains("config.toml:3:1"), "{output:?}");
    assert!(output.stdout.contains("hibernate_after"), "{output:?}");
    assert!(output.stdout.contains("no daemon is running on this data dir"), "{output:?}");
    assert!(output.stdout.contains("fix them first"), "{output:?}");
    let listed = parsed(&check(true).await.stdout);
    assert_eq!(listed["problems"][0]["severity"], json!("error"));

    // An agent naming a provider or model that does not exist is a warning, with its key: exit 0.
    std::fs::write(&config, "[agents.coder]\nmodels = [\"nosuch/x\", \"local/echo\"]\n").unwrap();
    let output = check(false).await;
    assert_eq!(output.code, Some(0), "{output:?}");
    assert!(output.stdout.contains("warning: ") && output.stdout.contains("agents.coder.models[0]"), "{output:?}");
    assert!(output.stdout.contains("no provider is named `nosuch`"), "{output:?}");

    // A good file with a daemon running on it: it has this config, until the file changes.
    std::fs::write(&config, "[limits]\nmax_in_flight = 8\n").unwrap();
    let daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let output = check(false).await;
    assert_eq!(output.code, Some(0), "{output:?}");
    assert!(output.stdout.contains("config.toml: no problems"), "{output:?}");
    assert!(output.stdout.contains(&format!("the running daemon (pid {}", daemon.child.id())), "{output:?}");
    std::fs::write(&config, "[limits]\nmax_in_flight = 16\n").unwrap();
    let output = check(false).await;
    assert!(output.stdout.contains("changed after the running daemon"), "{output:?}");
    assert!(output.stdout.contains("restart it"), "{output:?}");
    assert_eq!(parsed(&check(true).await.stdout)["restart_needed"], json!(true));
}

/// `troupe runs` on a session of 100,000 events (1,000 runs, the last one left open by a daemon that died): every
/// run is listed, the last one interrupted, without the command holding the history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_reads_a_session_of_100000_events() {
    const SESSION_ID: &str = "01900000-0000-7000-8000-000000200000";
    const RUNS: u64 = 1_000;
    const EVENTS_PER_RUN: u64 = 100;
    let data_dir = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let line = |seq: u64, run: Option<String>, payload: Value| {
        json!({"session_id": SESSION_ID, "run_id": run, "seq": seq, "timestamp": "2026-01-01T00:00:00.000Z",
            "payload": payload})
        .to_string()
            + "\n"
    };
    let mut log = line(
        1,
        None,
        json!({"type": "session_created", "origin": {"type": "root"}, "cwd": project.path(), "selection": echo_selection()}),
    );
    let mut seq = 1;
    for run in 1..=RUNS {
        let run_id = format!("01900000-0000-7000-8000-{run:012}");
        seq += 1;
        log.push_str(&line(
            seq,
            Some(run_id.clone()),
            json!({"type": "run_started", "client_run_id": format!("c-{run}"), "selection": echo_selection(),
                "input": format!("task {run}"), "fallback_index": 0}),
        ));
        for filler in 2..EVENTS_PER_RUN {
            seq += 1;
            let title = json!({"type": "session_title_committed", "title": format!("title {filler}"), "change": "set",
                "client_rename_id": format!("rename-{seq}")});
            log.push_str(&line(seq, None, title));
        }
        if run < RUNS {
            seq += 1;
            log.push_str(&line(seq, Some(run_id), json!({"type": "run_completed", "final_text": "done"})));
        }
    }
    assert!(seq >= 99_000, "{seq} events");
    let dir = data_dir.path().join("sessions").join(SESSION_ID);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("events.jsonl"), log).unwrap();
    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..DaemonSetup::default() });

    let output = troupe_within(&daemon, &["runs", SESSION_ID, "--json"], std::time::Duration::from_secs(120)).await;
    let listed = parsed(&output.ok());
    let runs = listed["runs"].as_array().expect("runs");
    assert_eq!(runs.len() as u64, RUNS);
    assert!(runs[..RUNS as usize - 1].iter().all(|run| run["state"] == json!("completed")));
    assert_eq!(runs[RUNS as usize - 1]["state"], json!("interrupted"), "{}", runs[RUNS as usize - 1]);
    assert_eq!(runs[RUNS as usize - 1]["input"], json!(format!("task {RUNS}")));
    assert_eq!(listed["active_run_id"], Value::Null);
}
