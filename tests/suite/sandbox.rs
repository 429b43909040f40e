//! The safety boundary over the real wire: a model (the fake OpenAI-compatible vendor) that tries to read the
//! daemon's token and provider key and to change its config, in every permission mode, with the daemon's data
//! directory inside the session's cwd as it is when a session works in `$HOME`. The secrets must be absent from
//! the log, from every frame subscribers get and from the next model request; the results say the sandbox
//! refused. And tool processes must not outlive a daemon killed with SIGKILL.

use base64::Engine as _;
use serde_json::{Value, json};
use troupe_protocol::client::{ClientDelivery, Deliveries};
use troupe_protocol::method;
use troupe_protocol::types::approval::{ApprovalDecision, ApprovalRespondParams};
use troupe_protocol::types::common::{Empty, SessionIdParams};
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::run::ToolResultStatus;
use troupe_protocol::types::runtime::{SandboxEnforcement, SandboxMode};
use troupe_protocol::types::session::PermissionMode;

use super::processes::processes_with;
use super::support::*;
use troupe_test_support::{FakeResponse, FakeServer};

const API_KEY: &str = "sk-test-7f3a9c1e5b2d4f6a8c0e";

fn models_list() -> FakeResponse {
    FakeResponse::status(200, &[], json!({"object": "list", "data": [{"id": "m", "object": "model"}]}).to_string())
}

fn tool_call(id: &str, tool: &str, arguments: Value) -> FakeResponse {
    let chunk = json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": id, "type": "function",
        "function": {"name": tool, "arguments": arguments.to_string()}}]}, "finish_reason": null}]});
    let end = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]});
    FakeResponse::Sse {
        pieces: vec![format!("data: {chunk}\n\n"), format!("data: {end}\n\n"), "data: [DONE]\n\n".into()],
    }
}

fn text(reply: &str) -> FakeResponse {
    let chunk = json!({"choices": [{"index": 0, "delta": {"content": reply}, "finish_reason": "stop"}]});
    FakeResponse::Sse { pieces: vec![format!("data: {chunk}\n\n"), "data: [DONE]\n\n".into()] }
}

/// A daemon whose data directory is `<project>/.troupe`, the project being the sessions' cwd.
fn daemon_inside_project() -> TestDaemon {
    let project = tempfile::tempdir().expect("project");
    let data_dir = tempfile::Builder::new().prefix(".troupe").tempdir_in(project.path()).expect("data dir");
    TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), project: Some(project), ..DaemonSetup::default() })
}

/// Everything a subscriber received, as text: events as JSON, tool output decoded.
fn delivered_text(delivery: &ClientDelivery) -> String {
    match delivery {
        ClientDelivery::Live(event) | ClientDelivery::ReplayEvent(event) => serde_json::to_string(event).unwrap(),
        ClientDelivery::ToolOutputDelta(params) | ClientDelivery::ToolOutputSnapshot(params) => {
            let data = params["data"].as_str().unwrap_or_default();
            let bytes = base64::engine::general_purpose::STANDARD.decode(data).unwrap_or_default();
            format!("{params} {}", String::from_utf8_lossy(&bytes))
        }
        other => format!("{other:?}"),
    }
}

/// Follows a run to its end, approving every approval once (the worst a user could do), and returns its events
/// and the text of every frame received meanwhile.
async fn run_approving_everything(
    client: &troupe_protocol::client::Client,
    deliveries: &mut Deliveries,
    session_id: &str,
) -> (Vec<StoredEvent>, String) {
    start_run(client, session_id, selection_of("default", "openai/m"), "show me the token").await;
    let mut events = Vec::new();
    let mut frames = String::new();
    within("the run's end", async {
        loop {
            let delivery = deliveries.next().await.expect("deliveries open");
            frames.push_str(&delivered_text(&delivery));
            frames.push('\n');
            let (ClientDelivery::Live(event) | ClientDelivery::ReplayEvent(event)) = delivery else { continue };
            if let EventPayload::ApprovalRequested { approval } = &event.payload {
                client
                    .call::<method::ApprovalRespond>(ApprovalRespondParams {
                        session_id: approval.session_id.clone(),
                        approval_id: approval.approval_id.clone(),
                        request_revision: approval.revision,
                        operation_fingerprint: approval.operation_fingerprint.clone(),
                        client_response_id: format!("yes-{}", approval.approval_id),
                        decision: ApprovalDecision::ApproveOnce,
                        feedback: None,
                    })
                    .await
                    .expect("approve");
            }
            let done = is_terminal(&event);
            events.push(event);
            if done {
                return;
            }
        }
    })
    .await;
    (events, frames)
}

fn results(events: &[StoredEvent]) -> Vec<(ToolResultStatus, String)> {
    tool_results(events).into_iter().map(|result| (result.status, result.output)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_mode_lets_a_run_read_the_token_or_provider_key_or_change_the_config() {
    let daemon = daemon_inside_project();
    let project = daemon.project_path().to_path_buf();
    let data_dir = daemon.data_path().canonicalize().unwrap();
    let data_name = data_dir.file_name().unwrap().to_string_lossy().into_owned();
    let config_before = std::fs::read(data_dir.join("config.toml")).unwrap_or_default();
    // A hard link in the cwd to the token: same file, innocent path.
    std::fs::hard_link(data_dir.join("daemon/token"), project.join("innocent.txt")).unwrap();
    // One in a subfolder too: the kernel grants that folder whole and sees the path only, so only the masking of
    // secrets in tool output stands between this link and the model (defence in depth).
    std::fs::create_dir(project.join("sub")).unwrap();
    std::fs::hard_link(data_dir.join("daemon/token"), project.join("sub/notes.txt")).unwrap();

    let attacks: Vec<(&str, Value)> = vec![
        ("search", json!({"pattern": "sk-"})),
        ("search", json!({"pattern": "[A-Za-z0-9_-]{20,}", "path": data_name})),
        ("read_file", json!({"path": format!("{data_name}/daemon/token")})),
        ("read_file", json!({"path": "innocent.txt"})),
        ("list_dir", json!({"path": format!("{data_name}/daemon")})),
        ("shell", json!({"command": format!("cat {data_name}/daemon/token")})),
        ("shell", json!({"command": format!("cat {data_name}/providers.json")})),
        ("shell", json!({"command": format!("grep -r sk- {data_name}")})),
        ("shell", json!({"command": "grep -r sk- ."})),
        ("shell", json!({"command": "cat innocent.txt"})),
        ("shell", json!({"command": format!("echo 'yolo = true' >> {data_name}/config.toml")})),
        ("shell", json!({"command": format!("tree -ao {data_name}/x.txt .")})),
        ("shell", json!({"command": "cat sub/notes.txt"})),
    ];
    let modes = [
        PermissionMode::AutoApprove,
        PermissionMode::Ask,
        PermissionMode::AutoApproveN,
        PermissionMode::AutoApproveY,
        PermissionMode::Yolo,
    ];
    let mut script = vec![models_list()];
    for mode in 0..modes.len() {
        for (index, (tool, arguments)) in attacks.iter().enumerate() {
            script.push(tool_call(&format!("call_{mode}_{index}"), tool, arguments.clone()));
        }
        script.push(text("nothing found"));
    }
    let vendor = FakeServer::start(script).await;
    let (client, mut deliveries) = daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some(API_KEY))
        .await
        .unwrap();
    let providers_file = std::fs::read_to_string(data_dir.join("providers.json")).unwrap();
    assert!(providers_file.contains(API_KEY), "the key the attack is after is on disk");
    let session = daemon.create_session(&client).await;
    client.subscribe(&session.session_id, None).await.unwrap();

    let mut all_frames = String::new();
    for mode in modes {
        set_mode(&client, &session.session_id, mode).await;
        let (events, frames) = run_approving_everything(&client, &mut deliveries, &session.session_id).await;
        all_frames.push_str(&frames);
        let results = results(&events);
        assert_eq!(results.len(), attacks.len(), "{mode:?}: every call ends");
        for ((tool, arguments), (status, output)) in attacks.iter().zip(&results) {
            assert!(!output.contains(&daemon.token), "{mode:?} {tool} {arguments}: the token leaked: {output}");
            assert!(!output.contains(API_KEY), "{mode:?} {tool} {arguments}: the API key leaked: {output}");
            let refused_words = ["sandbox", "refused", "never allowed", "rejected", "redacted"];
            let is_search_or_listing = *tool == "search" || (*tool == "shell" && output.contains("grep -r"));
            if *status == ToolResultStatus::Ok && !is_search_or_listing {
                assert!(
                    refused_words.iter().any(|word| output.contains(word)),
                    "{mode:?} {tool} {arguments}: succeeded without a word of refusal: {output}"
                );
            }
        }
        // The file tools refuse by the file, not the path: the hard link and the data dir itself.
        assert_eq!(results[3].0, ToolResultStatus::Denied, "{mode:?}: read_file of a hard link to the token");
        assert!(results[3].1.contains("sandbox"), "{mode:?}: {}", results[3].1);
        assert_ne!(results[2].0, ToolResultStatus::Ok, "{mode:?}: read_file of the token");
        assert_ne!(results[5].0, ToolResultStatus::Ok, "{mode:?}: cat of the token");
    }

    assert_eq!(std::fs::read(data_dir.join("config.toml")).unwrap_or_default(), config_before, "config changed");
    assert!(!data_dir.join("x.txt").exists(), "tree -o wrote into the data dir");
    // Not in any frame subscribers got, live or replayed.
    assert!(!all_frames.contains(&daemon.token), "the token reached a subscriber");
    assert!(!all_frames.contains(API_KEY), "the API key reached a subscriber");
    // Not in the durable log, as a late subscriber replays it.
    let last_seq = session_last_seq(&client, &session.session_id).await;
    let (late, mut late_deliveries) = daemon.client().await;
    late.subscribe(&session.session_id, None).await.unwrap();
    let log = events_until(&mut late_deliveries, |event| event.seq >= last_seq).await;
    let log_text: String = log.iter().map(|event| serde_json::to_string(event).unwrap()).collect();
    assert!(log_text.contains("innocent.txt"), "the log holds the attack");
    assert!(!log_text.contains(&daemon.token) && !log_text.contains(API_KEY), "a secret is in the log");
    // Not in any request the model vendor received.
    for request in vendor.requests() {
        let body = String::from_utf8_lossy(&request.body);
        assert!(!body.contains(&daemon.token) && !body.contains(API_KEY), "a secret was sent to the model");
    }
}

async fn session_last_seq(client: &troupe_protocol::client::Client, session_id: &str) -> u64 {
    client
        .call::<method::SessionGet>(SessionIdParams { session_id: session_id.to_owned() })
        .await
        .expect("session.get")
        .session
        .last_event_seq
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_snapshot_and_sandbox_explain_say_what_commands_may_touch() {
    let daemon = daemon_inside_project();
    let (client, _deliveries) = daemon.client().await;
    let snapshot = within("snapshot", client.call::<method::RuntimeSnapshotGet>(Empty {})).await.unwrap().snapshot;
    let sandbox = snapshot.sandbox.expect("the snapshot reports the sandbox");
    assert_eq!(sandbox.mode, SandboxMode::WorkspaceWrite);
    assert_eq!(sandbox.enforcement, SandboxEnforcement::Landlock, "this machine's kernel has Landlock");
    assert_eq!(sandbox.tools_refused, None);
    let data_dir = daemon.data_path().canonicalize().unwrap();
    assert_eq!(sandbox.denied.first().map(String::as_str), data_dir.to_str());
    let session = daemon.create_session(&client).await;

    let output = std::process::Command::new(troupe_binary())
        .args(["sandbox", "explain", &session.session_id, "--url", &daemon.url(), "--token", &daemon.token])
        .output()
        .expect("troupe sandbox explain");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text} {}", String::from_utf8_lossy(&output.stderr));
    assert!(text.contains("Landlock ABI"), "{text}");
    assert!(text.contains(&format!("{}  (troupe's data directory", data_dir.display())), "{text}");
    assert!(text.contains(&format!("{}  (the session's directory)", session.cwd)), "{text}");
    assert!(text.contains("holds paths commands may not touch"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_left_running_by_a_sigkilled_daemon_is_killed_at_restart_and_its_run_interrupted() {
    let data_dir = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    // Unique, so that only this test's processes match; a pipeline, so that the shell forks the sleep (whose
    // death signal is not inherited) and only the durable record can find it after the daemon is gone.
    let seconds = format!("599.{}", std::process::id());
    let command = format!("sleep {seconds} | cat");
    let script = json!({"turns": [
        {"tool_calls": [{"tool": "shell", "arguments": {"command": command, "timeout_ms": 600_000}}]},
        {"text": "done"}
    ]});
    let mut daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let (client, mut deliveries) = daemon.client().await;
    connect_script(&client, data_dir.path(), script).await;
    let session = create_session_in(&client, project.path()).await;
    set_mode(&client, &session.session_id, PermissionMode::Yolo).await;
    client.subscribe(&session.session_id, None).await.unwrap();
    let run_id = start_run(&client, &session.session_id, selection_of("default", "local/scripted"), "sleep").await;
    events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::ToolCallStarted { .. })).await;
    let marker = format!("sleep {seconds}");
    eventually("the sleep runs", || !processes_with(&marker).is_empty()).await;
    drop(client);
    daemon.kill();

    let daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    eventually("the sleep is gone after the restart", || processes_with(&marker).is_empty()).await;
    let (client, mut deliveries) = daemon.client().await;
    client.subscribe(&session.session_id, None).await.unwrap();
    let events = events_until(&mut deliveries, |event| {
        matches!(event.payload, EventPayload::RunInterrupted { .. }) && event.run_id.as_deref() == Some(&run_id)
    })
    .await;
    assert!(kinds(&events).contains(&"run_interrupted"));
    let records = std::fs::read_dir(data_dir.path().join("daemon/process-groups")).map_or(0, |dir| dir.count());
    assert_eq!(records, 0, "the records of killed groups are removed");
    use troupe_runtime::sandbox::temp_roots;
    let temp_root = temp_roots::temp_root_of(&data_dir.path().canonicalize().unwrap());
    let left = std::fs::read_dir(&temp_root).map_or(0, |dir| {
        dir.filter(|entry| entry.as_ref().is_ok_and(|entry| entry.file_name() != temp_roots::OWNER_NOTE)).count()
    });
    assert_eq!(left, 0, "the killed run's temp dir in {} is removed at restart", temp_root.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_classifier_runs_only_what_stays_read_only_and_inside_and_hard_denies_see_through_syntax() {
    // The session works in `sub/` of a git repository whose root holds a file outside the session's directory.
    let daemon = TestDaemon::start();
    let repository = daemon.project_path().to_path_buf();
    std::fs::write(repository.join("outside.txt"), "outside the cwd").unwrap();
    std::fs::create_dir(repository.join("sub")).unwrap();
    std::fs::write(repository.join("sub/inside.txt"), "inside").unwrap();
    git(&repository, &["init", "-q"]);
    git(&repository, &["add", "."]);
    git(&repository, &["commit", "-q", "-m", "first"]);
    let cwd = repository.join("sub");

    // (command, what must happen): "ran", "asked" (not low risk: auto_approve_n refuses it), "never" (hard deny).
    let cases = [
        // A repository's config can make git run programs (core.fsmonitor, diff drivers, filters): never low risk.
        ("git status", "asked"),
        ("ls -la", "ran"),
        ("cat inside.txt", "ran"),
        ("git show HEAD:outside.txt", "asked"),
        ("git log -p", "asked"),
        ("tree -ao out.txt .", "asked"),
        ("file -zC inside.txt", "asked"),
        ("cat ../outside.txt", "asked"),
        ("{ rm -rf /; }", "never"),
        ("if true; then rm -rf /; fi", "never"),
        ("! rm -rf /", "never"),
        ("timeout 5 rm -rf /", "never"),
        ("echo $(rm -rf ~)", "never"),
    ];
    let mut script = vec![models_list()];
    for (index, (command, _)) in cases.iter().enumerate() {
        script.push(tool_call(&format!("call_{index}"), "shell", json!({"command": command})));
    }
    script.push(text("done"));
    let vendor = FakeServer::start(script).await;
    let (client, mut deliveries) = daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some(API_KEY))
        .await
        .unwrap();
    let session = create_session_in(&client, &cwd).await;
    set_mode(&client, &session.session_id, PermissionMode::AutoApproveN).await;
    client.subscribe(&session.session_id, None).await.unwrap();
    let (events, _) = run_approving_everything(&client, &mut deliveries, &session.session_id).await;
    let results = results(&events);
    assert_eq!(results.len(), cases.len());
    for ((command, expected), (status, output)) in cases.iter().zip(&results) {
        match *expected {
            "ran" => assert_eq!(*status, ToolResultStatus::Ok, "{command}: {output}"),
            "asked" => {
                assert_eq!(*status, ToolResultStatus::Denied, "{command}: {output}");
                assert!(output.contains("rejected by auto_approve_n"), "{command}: {output}");
            }
            _ => {
                assert_eq!(*status, ToolResultStatus::Denied, "{command}: {output}");
                assert!(output.contains("never allowed"), "{command}: {output}");
            }
        }
        assert!(!output.contains("outside the cwd"), "{command} printed a file outside the cwd: {output}");
    }
    assert!(!cwd.join("out.txt").exists(), "tree -o wrote a file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_in_a_repository_subfolder_can_commit_but_not_write_beside_it() {
    // Opted in: by default the repository's git dir, outside the session's folder, is not written.
    let config_toml = Some("[sandbox]\nenclosing_git_dir = \"writable\"\n".to_owned());
    let daemon = TestDaemon::start_with(DaemonSetup { config_toml, ..DaemonSetup::default() });
    let repository = daemon.project_path().canonicalize().unwrap();
    std::fs::create_dir(repository.join("sub")).unwrap();
    std::fs::write(repository.join("README"), "root").unwrap();
    git(&repository, &["init", "-q"]);
    git(&repository, &["add", "."]);
    git(&repository, &["commit", "-q", "-m", "first"]);
    let cwd = repository.join("sub");
    let script = json!({"turns": [
        {"tool_calls": [{"tool": "shell", "arguments": {"command":
            "echo hi > new.txt && git add new.txt && git -c user.name=t -c user.email=t@example.com commit -qm agent && git log --oneline | wc -l"}}]},
        {"tool_calls": [{"tool": "shell", "arguments": {"command": "echo x > ../README"}}]},
        {"text": "done"}
    ]});
    let events = run_script_in_yolo(&daemon, &cwd, script).await;
    let results = results(&events);
    assert_eq!(results[0].0, ToolResultStatus::Ok, "{}", results[0].1);
    assert!(results[0].1.contains("\n2\n"), "two commits: {}", results[0].1);
    assert_eq!(results[1].0, ToolResultStatus::Error, "{}", results[1].1);
    assert_eq!(std::fs::read_to_string(repository.join("README")).unwrap(), "root");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connected_providers_key_in_a_project_file_is_masked_in_what_the_model_and_the_log_get() {
    // The key pasted into a project file, which the sandbox rightly lets a command read.
    let daemon = TestDaemon::start();
    std::fs::write(daemon.project_path().join("notes.txt"), format!("deploy with {API_KEY} please\n")).unwrap();
    let vendor = FakeServer::start(vec![
        models_list(),
        tool_call("call_1", "shell", json!({"command": "cat notes.txt"})),
        tool_call("call_2", "read_file", json!({"path": "notes.txt"})),
        text("done"),
    ])
    .await;
    let (client, mut deliveries) = daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some(API_KEY))
        .await
        .unwrap();
    let session = daemon.create_session(&client).await;
    set_mode(&client, &session.session_id, PermissionMode::Yolo).await;
    client.subscribe(&session.session_id, None).await.unwrap();
    let (events, frames) = run_approving_everything(&client, &mut deliveries, &session.session_id).await;
    let results = results(&events);
    assert_eq!(results.len(), 2);
    for (_, output) in &results {
        assert!(output.contains("deploy with") && !output.contains(API_KEY), "{output}");
        assert!(output.contains("masked its own secrets in this output: provider openai api_key"), "{output}");
    }
    assert!(!frames.contains(API_KEY), "the key reached a subscriber");
    for request in vendor.requests() {
        assert!(!String::from_utf8_lossy(&request.body).contains(API_KEY), "the key was sent to the model");
    }
}
