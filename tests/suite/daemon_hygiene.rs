//! Daemon hygiene over the wire: a `/name` input naming no skill is refused before anything is written (and `//`
//! sends a literal slash), a broken `SKILL.md` is listed with its reason, `local/scripted` reads its script again
//! when it changes and says when it runs out, plain http off loopback needs `allow_insecure_http`, and the
//! daemon's log (no colours in a file, runs at info, connections at debug).

use std::path::Path;

use serde_json::json;
use troupe_protocol::client::ClientError;
use troupe_protocol::method;
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::run::RunStartParams;

use super::support::*;

fn write_skill(root: &Path, name: &str, text: &str) {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), text).unwrap();
}

async fn try_start(
    client: &troupe_protocol::client::Client,
    session_id: &str,
    input: &str,
) -> Result<String, ClientError> {
    within(
        "run.start",
        client.call::<method::RunStart>(RunStartParams {
            session_id: session_id.into(),
            client_run_id: troupe_runtime::clock::new_id(),
            selection: echo_selection(),
            input: input.into(),
            reset_fallback: false,
            attachments: Vec::new(),
        }),
    )
    .await
    .map(|result| result.run_id)
}

#[tokio::test]
async fn an_unknown_slash_skill_is_refused_before_anything_is_written_and_a_double_slash_is_literal() {
    let daemon = TestDaemon::start();
    let skills = daemon.data_path().join("skills");
    write_skill(&skills, "deploy", "---\ndescription: Deploy\n---\nDeploy now.\n");
    write_skill(&skills, "nodesc", "---\nname: nodesc\n---\nNo description here.\n");
    let (client, mut deliveries) = daemon.client().await;
    let session = daemon.create_session(&client).await;
    let id = session.session_id.as_str();

    let refused = try_start(&client, id, "/nosuch x").await.unwrap_err();
    let ClientError::Rpc(error) = &refused else { panic!("{refused:?}") };
    assert_eq!(error.code, -32602, "{error:?}");
    assert_eq!(error.typed_code(), Some("skill_not_found"));
    let detail = error.detail().unwrap_or_default();
    assert!(detail.contains("`nosuch`") && detail.contains("/deploy") && detail.contains("`//`"), "{detail}");

    // A skill whose file is broken is named with the reason, not as missing.
    let refused = try_start(&client, id, "/nodesc").await.unwrap_err();
    let ClientError::Rpc(error) = &refused else { panic!("{refused:?}") };
    let detail = error.detail().unwrap_or_default();
    assert!(detail.contains("cannot be used") && detail.contains("description"), "{detail}");

    // A path is not a skill name, and `//` sends one slash.
    let run_id = try_start(&client, id, "//nosuch x").await.unwrap();
    client.subscribe(id, None).await.unwrap();
    let events =
        events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    let inputs: Vec<&str> = events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::RunStarted { input, .. } => Some(input.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(inputs, ["/nosuch x"], "the refused runs wrote nothing: {:?}", kinds(&events));
    let EventPayload::RunCompleted { final_text: Some(answer) } = &events.last().unwrap().payload else {
        panic!("{:?}", kinds(&events))
    };
    assert_eq!(answer.trim(), "/nosuch x");

    // skills.list reports the file without a description, with its reason.
    let listed =
        within("skills.list", client.call::<method::SkillsList>(SessionIdParams { session_id: id.to_owned() }))
            .await
            .unwrap();
    assert_eq!(listed.skills.iter().map(|skill| skill.name.as_str()).collect::<Vec<_>>(), ["deploy"]);
    assert_eq!(listed.problems.len(), 1, "{:?}", listed.problems);
    assert!(listed.problems[0].location.ends_with("nodesc/SKILL.md"), "{:?}", listed.problems);
    assert!(listed.problems[0].reason.contains("description"), "{:?}", listed.problems);
}

/// The final text or the failure message of the run `run_id`, from its events.
fn outcome(events: &[troupe_protocol::types::events::StoredEvent]) -> Result<String, String> {
    match &events.last().expect("events").payload {
        EventPayload::RunCompleted { final_text } => Ok(final_text.clone().unwrap_or_default()),
        EventPayload::RunFailed { error, model_error, .. } => Err(format!("{error} {model_error:?}")),
        other => Err(format!("{other:?}")),
    }
}

#[tokio::test]
async fn the_scripted_model_reads_an_edited_script_and_says_when_it_runs_out() {
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    let script = daemon.data_path().join("hygiene-script.json");
    std::fs::write(&script, json!({"turns": [{"text": "one"}]}).to_string()).unwrap();
    connect_provider(&client, "local", &[("script", script.to_str().unwrap())], None).await.unwrap();
    let session = daemon.create_session(&client).await;
    let id = session.session_id.as_str();
    client.subscribe(id, None).await.unwrap();
    let scripted = selection_of("default", "local/scripted");

    let run_id = start_run(&client, id, scripted.clone(), "go").await;
    let events =
        events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    assert_eq!(outcome(&events), Ok("one".to_owned()));

    // The second run of the session is turn 2, which the script lacks.
    let run_id = start_run(&client, id, scripted.clone(), "again").await;
    let events =
        events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    let failure = outcome(&events).unwrap_err();
    assert!(
        failure.contains("the script has no reply for turn 2 (it has 1); add one to")
            && failure.contains("hygiene-script.json"),
        "{failure}"
    );

    // Editing the file (no reconnect) gives turn 2 an answer. A failed run added no assistant message, so the
    // next run is turn 2 again.
    std::fs::write(&script, json!({"turns": [{"text": "one"}, {"text": "the second answer"}]}).to_string()).unwrap();
    let run_id = start_run(&client, id, scripted, "and again").await;
    let events =
        events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    assert_eq!(outcome(&events), Ok("the second answer".to_owned()));
}

/// An IPv4 address of this machine off loopback (the source address of its default route), if it has one.
fn non_loopback_address() -> Option<std::net::IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    // Connecting a UDP socket sends nothing: it only picks the route and so the local address.
    socket.connect("192.0.2.1:9").or_else(|_| socket.connect("10.255.255.1:9")).ok()?;
    Some(socket.local_addr().ok()?.ip()).filter(|address| !address.is_loopback() && !address.is_unspecified())
}

#[tokio::test]
async fn plain_http_off_loopback_is_refused_naming_the_flag_and_accepted_with_it() {
    use troupe_test_support::FakeServer;
    use troupe_test_support::replies::{models_list, openai_text};
    let Some(address) = non_loopback_address() else {
        super::unavailable::skip(super::unavailable::Missing::OffLoopbackAddress);
        return;
    };
    let vendor =
        FakeServer::start_on(&format!("{address}:0"), vec![models_list(&["lan-model"]), openai_text("over the lan")])
            .await;
    let base_url = format!("{}/v1", vendor.base_url);
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;

    let refused = connect_provider(&client, "openai", &[("base_url", &base_url)], Some("sk-lan")).await.unwrap_err();
    let ClientError::Rpc(error) = &refused else { panic!("{refused:?}") };
    assert_eq!(error.typed_code(), Some("invalid_provider_setup"), "{error:?}");
    let detail = error.detail().unwrap_or_default();
    assert!(
        detail.contains("allow_insecure_http")
            && detail.contains(&format!("troupe connect openai --base-url {base_url} --allow-insecure-http")),
        "{detail}"
    );
    assert!(!detail.contains("sk-lan"), "{detail}");
    assert!(vendor.requests().is_empty(), "nothing was sent to the vendor before the refusal");

    connect_provider(&client, "openai", &[("base_url", &base_url), ("allow_insecure_http", "true")], Some("sk-lan"))
        .await
        .expect("accepted with allow_insecure_http");
    let stored = std::fs::read_to_string(daemon.data_path().join("providers.json")).unwrap();
    assert!(
        stored.contains("\"allow_insecure_http\": \"true\"") || stored.contains("\"allow_insecure_http\":\"true\"")
    );

    let session = daemon.create_session(&client).await;
    client.subscribe(&session.session_id, None).await.unwrap();
    let run_id = start_run(&client, &session.session_id, selection_of("default", "openai/lan-model"), "hi").await;
    let events =
        events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    assert_eq!(outcome(&events), Ok("over the lan".to_owned()));
}

/// `troupe serve` as a child with the default log level (no RUST_LOG) and stderr written to `log`.
fn serve_logging_to(data_dir: &Path, log: &Path) -> ChildDaemon {
    troupe_serve(data_dir)
        .listen("127.0.0.1:0")
        .default_log_level()
        .no_default_config()
        .log(DaemonLog::File(log.to_path_buf()))
        .spawn()
}

#[tokio::test]
async fn the_daemon_log_has_config_and_runs_at_info_no_connections_and_no_colours_in_a_file() {
    let data_dir = tempfile::tempdir().unwrap();
    std::fs::write(
        data_dir.path().join("config.toml"),
        "[agents.coder]\nmodels = [\"nosuch/model\", \"local/echo\"]\n",
    )
    .unwrap();
    let log = data_dir.path().join("daemon.log");
    let mut daemon = serve_logging_to(data_dir.path(), &log);
    let (client, mut deliveries) = daemon.client().await;
    let session = create_session_in(&client, data_dir.path()).await;
    client.subscribe(&session.session_id, None).await.unwrap();
    let run_id = start_run(&client, &session.session_id, selection_of("coder", "local/echo"), "hello log").await;
    events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    drop(client);
    eventually("the run's end is logged", || {
        std::fs::read_to_string(&log).is_ok_and(|text| text.contains("run ended"))
    })
    .await;
    daemon.kill();

    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("\u{1b}["), "no ANSI escapes in a log file:\n{text}");
    for expected in [
        "config loaded",
        "changes to config.toml apply when the daemon restarts",
        "agents.coder.models[0]",
        "no provider is named `nosuch`",
        "run started",
        "run ended",
        &format!("run={run_id}"),
        "outcome=\"completed\"",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in the log:\n{text}");
    }
    assert!(!text.contains("WebSocket connected") && !text.contains("WebSocket disconnected"), "{text}");
}
