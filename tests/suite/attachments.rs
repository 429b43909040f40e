//! Images and PDFs a user attaches (`run.start`/`run.steer` `attachments`, `troupe run --attach`): how they reach an
//! OpenAI-compatible vendor's request, how the log names them, and what is refused.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use troupe_protocol::client::{Client, ClientError, Deliveries};
use troupe_protocol::method;
use troupe_protocol::types::attachment::{InputAttachment, SessionAttachmentParams};
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::run::RunStartParams;
use troupe_test_support::FakeServer;
use troupe_test_support::replies::{models_list, openai_text};

use super::cli_support::*;
use super::support::*;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89";
const PDF: &[u8] = b"%PDF-1.4\n1 0 obj << >> endobj\ntrailer << >>\n%%EOF\n";

fn attachment(name: &str, mime_type: &str, bytes: &[u8]) -> InputAttachment {
    InputAttachment { name: name.into(), mime_type: mime_type.into(), data: STANDARD.encode(bytes) }
}

fn start_params(session_id: &str, client_run_id: &str, attachments: Vec<InputAttachment>) -> RunStartParams {
    RunStartParams {
        session_id: session_id.into(),
        client_run_id: client_run_id.into(),
        selection: selection_of("default", "openai/gpt-test"),
        input: "what is in these?".into(),
        reset_fallback: false,
        attachments,
    }
}

/// The content of the last user message of each chat request the vendor received.
fn last_user_contents(vendor: &FakeServer) -> Vec<Value> {
    vendor
        .bodies_to("/chat/completions")
        .iter()
        .map(|body| {
            let messages = body["messages"].as_array().expect("messages");
            let user = messages.iter().rev().find(|message| message["role"] == "user").expect("a user message");
            user["content"].clone()
        })
        .collect()
}

async fn openai_daemon(replies: usize, config_toml: Option<String>) -> (FakeServer, TestDaemon, Client, Deliveries) {
    let mut responses = vec![models_list(&["gpt-test"])];
    responses.extend((0..replies).map(|index| openai_text(&format!("answer {index}"))));
    let vendor = FakeServer::start(responses).await;
    let daemon = TestDaemon::start_with(DaemonSetup { config_toml, ..DaemonSetup::default() });
    let (client, deliveries) = daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some("k")).await.unwrap();
    (vendor, daemon, client, deliveries)
}

fn rpc_code(error: &ClientError) -> (i64, Option<String>, Value) {
    match error {
        ClientError::Rpc(error) => {
            (error.code, error.typed_code().map(str::to_owned), error.data.clone().unwrap_or_default())
        }
        other => panic!("not an RPC error: {other:?}"),
    }
}

#[tokio::test]
async fn an_image_and_a_pdf_attached_with_the_cli_reach_the_openai_request_as_image_and_file_parts() {
    let (vendor, daemon, _client, _) = openai_daemon(1, None).await;
    let project = daemon.project_path();
    std::fs::write(project.join("screen.png"), PNG).unwrap();
    std::fs::write(project.join("spec.pdf"), PDF).unwrap();
    let mut command = troupe_command(
        &daemon,
        &["exec", "--model", "openai/gpt-test", "--attach", "screen.png", "--attach", "spec.pdf", "what is in these?"],
    );
    command.current_dir(project);
    let answer = finish(command, WAIT).await.ok();
    assert_eq!(answer.trim(), "answer 0");

    let content = &last_user_contents(&vendor)[0];
    let png_url = format!("data:image/png;base64,{}", STANDARD.encode(PNG));
    assert_eq!(
        *content,
        json!([
            {"type": "text", "text": "what is in these?"},
            {"type": "image_url", "image_url": {"url": png_url}},
            {"type": "file", "file": {"filename": "spec.pdf", "file_data": format!("data:application/pdf;base64,{}", STANDARD.encode(PDF))}},
        ]),
    );

    // The log names the stored artifacts, content-addressed, with the names the user knows.
    let (watcher, mut deliveries) = daemon.client().await;
    let sessions = troupe(&daemon, &["sessions", "--json"]).await.ok();
    let sessions: Vec<Value> = serde_json::from_str(&sessions).unwrap();
    let session_id = sessions[0]["session_id"].as_str().unwrap().to_owned();
    within("subscribe", watcher.subscribe(&session_id, None)).await.unwrap();
    let events = events_until(&mut deliveries, is_terminal).await;
    let attachments = events
        .iter()
        .find_map(|event| match &event.payload {
            EventPayload::RunStarted { attachments, .. } => Some(attachments.clone()),
            _ => None,
        })
        .unwrap();
    let names: Vec<(&str, &str, u64)> =
        attachments.iter().map(|file| (file.name.as_str(), file.mime_type.as_str(), file.size)).collect();
    assert_eq!(
        names,
        [("screen.png", "image/png", PNG.len() as u64), ("spec.pdf", "application/pdf", PDF.len() as u64)]
    );
    for file in &attachments {
        assert!(file.path.starts_with("artifacts/") && file.path.len() > 70, "{}", file.path);
        let stored = std::fs::read(daemon.data_path().join(&file.path)).unwrap();
        assert_eq!(stored.len() as u64, file.size);
    }

    // A client reads them back to show them.
    let read = |path: &str| {
        let params = SessionAttachmentParams { session_id: session_id.clone(), path: path.into() };
        let watcher = watcher.clone();
        async move { within("session.attachment", watcher.call::<method::SessionAttachment>(params)).await }
    };
    let image = read(&attachments[0].path).await.unwrap();
    assert_eq!((image.mime_type.as_str(), image.size), ("image/png", PNG.len() as u64));
    assert_eq!(STANDARD.decode(&image.data).unwrap(), PNG);
    let (code, typed, _) = rpc_code(&read("artifacts/../config.toml").await.unwrap_err());
    assert_eq!((code, typed.as_deref()), (-32602, Some("invalid_attachment")));
    let (code, typed, data) = rpc_code(&read("artifacts/nothing.png").await.unwrap_err());
    assert_eq!(
        (code, typed.as_deref(), &data["path"]),
        (-32000, Some("attachment_not_found"), &json!("artifacts/nothing.png"))
    );
}

#[tokio::test]
async fn the_cli_refuses_missing_large_and_unsupported_files_before_creating_a_session() {
    let daemon = TestDaemon::start();
    let project = daemon.project_path();
    std::fs::write(project.join("notes.txt"), "plain text").unwrap();
    std::fs::write(project.join("fake.png"), "not really a png").unwrap();
    std::fs::File::create(project.join("huge.png")).unwrap().set_len(11 * 1024 * 1024).unwrap();
    let cases: [(&str, &str); 4] = [
        ("missing.png", "--attach missing.png: no such file"),
        ("notes.txt", "--attach notes.txt: not an image or PDF the daemon accepts"),
        ("fake.png", "image/png, image/jpeg, image/gif, image/webp, application/pdf"),
        ("huge.png", "at most 10 MiB can be attached"),
    ];
    for (file, expected) in cases {
        let mut command = troupe_command(&daemon, &["run", "--attach", file, "look"]);
        command.current_dir(project);
        let stderr = finish(command, WAIT).await.refused();
        assert!(stderr.contains(expected), "{file}: {stderr}");
    }
    let sessions = troupe(&daemon, &["sessions", "--json"]).await.ok();
    assert_eq!(serde_json::from_str::<Vec<Value>>(&sessions).unwrap(), Vec::<Value>::new());
}

#[tokio::test]
async fn the_daemon_refuses_attachments_that_are_not_what_they_say_or_past_the_bounds() {
    let daemon = TestDaemon::start();
    let (client, _) = daemon.client().await;
    let session = daemon.create_session(&client).await;
    let mut params = start_params(&session.session_id, "c1", vec![attachment("a.png", "image/jpeg", PNG)]);
    params.selection = selection_of("default", "local/echo");
    let refused = |params: RunStartParams| {
        let client = client.clone();
        async move { within("run.start", client.call::<method::RunStart>(params)).await.unwrap_err() }
    };
    let (code, typed, data) = rpc_code(&refused(params.clone()).await);
    assert_eq!((code, typed.as_deref(), &data["index"]), (-32602, Some("invalid_attachment"), &json!(0)));
    assert!(data["detail"].as_str().unwrap().contains("declared image/jpeg but its bytes are image/png"), "{data}");

    params.attachments = vec![attachment("a.png", "image/png", PNG); 9];
    let (_, typed, data) = rpc_code(&refused(params.clone()).await);
    assert_eq!((typed.as_deref(), &data["limit"]), (Some("invalid_attachment"), &json!(8)), "{data}");

    let mut big = PNG.to_vec();
    // 11 MiB together: over the bound, while its base64 still fits the 16 MiB frame.
    big.resize(11 * 512 * 1024, 0);
    params.attachments = vec![attachment("a.png", "image/png", &big), attachment("b.png", "image/png", &big)];
    let (_, typed, data) = rpc_code(&refused(params.clone()).await);
    assert_eq!((typed.as_deref(), &data["limit"]), (Some("invalid_attachment"), &json!(10 * 1024 * 1024)), "{data}");

    params.attachments = vec![attachment("a.tif", "image/tiff", b"II*\0")];
    let (_, _, data) = rpc_code(&refused(params.clone()).await);
    assert!(data["detail"].as_str().unwrap().contains("image/tiff is not accepted; the accepted types are"), "{data}");

    // Nothing refused was stored.
    assert!(!daemon.data_path().join("artifacts").exists());
}

#[tokio::test]
async fn the_same_client_run_id_with_the_same_files_is_the_same_run_and_with_others_a_conflict() {
    let (_vendor, daemon, client, _) = openai_daemon(1, None).await;
    let session = daemon.create_session(&client).await;
    let files = vec![attachment("a.png", "image/png", PNG)];
    let start = |params: RunStartParams| {
        let client = client.clone();
        async move { within("run.start", client.call::<method::RunStart>(params)).await }
    };
    let first = start(start_params(&session.session_id, "same", files.clone())).await.unwrap().run_id;
    let again = start(start_params(&session.session_id, "same", files)).await.unwrap().run_id;
    assert_eq!(first, again);
    let other = vec![attachment("a.pdf", "application/pdf", PDF)];
    let (_, typed, _) = rpc_code(&start(start_params(&session.session_id, "same", other)).await.unwrap_err());
    assert_eq!(typed.as_deref(), Some("idempotency_conflict"));
    let none = start(start_params(&session.session_id, "same", Vec::new())).await.unwrap_err();
    assert_eq!(rpc_code(&none).1.as_deref(), Some("idempotency_conflict"));
}

#[tokio::test]
async fn a_model_configured_without_attachments_gets_a_note_and_a_restarted_daemon_still_sends_the_image() {
    let config = "[models.\"openai/gpt-test\"]\nattachments = false\n".to_owned();
    let (vendor, daemon, client, mut deliveries) = openai_daemon(1, Some(config)).await;
    let session = daemon.create_session(&client).await;
    client.subscribe(&session.session_id, None).await.unwrap();
    let params = start_params(&session.session_id, "c1", vec![attachment("chart.png", "image/png", PNG)]);
    let run_id = within("run.start", client.call::<method::RunStart>(params)).await.unwrap().run_id;
    let events =
        events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCompleted { .. }), "{events:?}");
    let text = last_user_contents(&vendor)[0].as_str().expect("text only").to_owned();
    assert!(text.starts_with("what is in these?\n\n[file: artifacts/"), "{text}");
    assert!(
        text.contains("\"chart.png\" (image/png); not attached: openai/gpt-test is not sent images or PDFs"),
        "{text}"
    );

    // After a restart (without the setting), the history rebuilt from the log sends the image itself.
    drop(client);
    let data_dir = daemon.stop();
    let vendor = FakeServer::start(vec![models_list(&["gpt-test"]), openai_text("again")]).await;
    let setup = DaemonSetup { data_dir: Some(data_dir), config_toml: Some(String::new()), ..DaemonSetup::default() };
    let daemon = TestDaemon::start_with(setup);
    let (client, _) = daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some("k")).await.unwrap();
    let mut follow_up = start_params(&session.session_id, "c2", Vec::new());
    follow_up.input = "and now?".into();
    within("run.start", client.call::<method::RunStart>(follow_up)).await.unwrap();
    let body = within("the request", async {
        loop {
            if let Some(body) = vendor.bodies_to("/chat/completions").into_iter().next() {
                return body;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let first_user = &body["messages"][1];
    assert_eq!(first_user["content"][1]["image_url"]["url"], format!("data:image/png;base64,{}", STANDARD.encode(PNG)));
}

#[tokio::test]
async fn the_session_folder_is_listed_for_completion_and_its_images_read_to_attach_but_nothing_outside() {
    use troupe_protocol::types::attachment::{FileEntryKind, SessionFileParams, SessionFilesParams};
    let daemon = TestDaemon::start();
    let (client, _) = daemon.client().await;
    let session = daemon.create_session(&client).await;
    let project = daemon.project_path();
    std::fs::create_dir_all(project.join("docs")).unwrap();
    std::fs::write(project.join("docs/shot.png"), PNG).unwrap();
    std::fs::write(project.join("notes.txt"), "text").unwrap();
    let files = |dir: &str| {
        let params = SessionFilesParams { session_id: session.session_id.clone(), dir: dir.into() };
        let client = client.clone();
        async move { within("session.files", client.call::<method::SessionFiles>(params)).await }
    };
    let file = |path: &str| {
        let params = SessionFileParams { session_id: session.session_id.clone(), path: path.into() };
        let client = client.clone();
        async move { within("session.file", client.call::<method::SessionFile>(params)).await }
    };
    let top = files("").await.unwrap();
    let names: Vec<(&str, FileEntryKind)> = top.entries.iter().map(|entry| (entry.name.as_str(), entry.kind)).collect();
    assert_eq!(names, [("docs", FileEntryKind::Dir), ("notes.txt", FileEntryKind::File)]);
    assert!(!top.truncated);
    assert_eq!(files("docs").await.unwrap().entries[0].name, "shot.png");

    let read = file("docs/shot.png").await.unwrap();
    assert_eq!((read.attachment.name.as_str(), read.attachment.mime_type.as_str()), ("shot.png", "image/png"));
    assert_eq!(STANDARD.decode(&read.attachment.data).unwrap(), PNG);

    let (code, typed, data) = rpc_code(&file("notes.txt").await.unwrap_err());
    assert_eq!((code, typed.as_deref()), (-32602, Some("invalid_attachment")));
    assert!(data["detail"].as_str().unwrap().contains("the accepted types are image/png"), "{data}");
    for outside in ["../", "/etc"] {
        let (code, typed, data) = rpc_code(&files(outside).await.unwrap_err());
        assert_eq!((code, typed.as_deref()), (-32000, Some("cwd_path_unusable")), "{outside}: {data}");
    }
    let (_, typed, _) = rpc_code(&file("../x.png").await.unwrap_err());
    assert_eq!(typed.as_deref(), Some("cwd_path_unusable"));
    let (_, typed, _) = rpc_code(&file("missing.png").await.unwrap_err());
    assert_eq!(typed.as_deref(), Some("cwd_path_unusable"));
}

#[tokio::test]
async fn a_steer_attaches_an_image_that_reaches_the_next_request_after_the_boundary() {
    use troupe_protocol::types::run::RunSteerParams;
    use troupe_protocol::types::session::PermissionMode;
    use troupe_test_support::replies::openai_tool_call;
    let vendor = FakeServer::start(vec![
        models_list(&["gpt-test"]),
        openai_tool_call("shell", json!({"command": "while [ ! -e release ]; do sleep 0.05; done"})),
        openai_text("seen it"),
    ])
    .await;
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some("k")).await.unwrap();
    let session = daemon.create_session(&client).await;
    set_mode(&client, &session.session_id, PermissionMode::Yolo).await;
    client.subscribe(&session.session_id, None).await.unwrap();
    let run_id =
        within("run.start", client.call::<method::RunStart>(start_params(&session.session_id, "c1", Vec::new())))
            .await
            .unwrap()
            .run_id;
    events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::ToolCallStarted { .. })).await;
    let steer = RunSteerParams {
        run_id: run_id.clone(),
        input: "and this one".into(),
        attachments: vec![attachment("later.png", "image/png", PNG)],
    };
    assert!(within("run.steer", client.call::<method::RunSteer>(steer)).await.unwrap().accepted);
    let admitted =
        events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::UserInputAdmitted { .. })).await;
    let EventPayload::UserInputAdmitted { attachments, .. } = &admitted.last().unwrap().payload else { unreachable!() };
    assert_eq!(attachments[0].name, "later.png");
    std::fs::write(daemon.project_path().join("release"), "").unwrap();
    let events =
        events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCompleted { .. }), "{events:?}");
    let submitted = events.iter().find_map(|event| match &event.payload {
        EventPayload::UserInputSubmitted { attachments, .. } => Some(attachments.clone()),
        _ => None,
    });
    assert_eq!(submitted.unwrap()[0].name, "later.png");
    let content = &last_user_contents(&vendor)[1];
    assert_eq!(
        *content,
        json!([
            {"type": "text", "text": "and this one"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{}", STANDARD.encode(PNG))}},
        ])
    );
}
