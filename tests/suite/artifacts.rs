//! Artifacts (the stored files that inputs attach and tools emit) over the real wire: `session.attachment` reads
//! only what the asking session's own log names, and the files no session names any more are collected, after a
//! deletion and at the daemon's start, while a file another session names (or a young one) stays.

use std::path::Path;
use std::time::{Duration, SystemTime};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::json;
use troupe_protocol::client::{Client, ClientError, Deliveries};
use troupe_protocol::method;
use troupe_protocol::types::attachment::{
    AttachedFile, InputAttachment, SessionAttachmentParams, SessionAttachmentResult,
};
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::run::RunStartParams;
use troupe_protocol::types::session::SessionForkParams;

use super::support::*;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89";
const PDF: &[u8] = b"%PDF-1.4\n1 0 obj << >> endobj\ntrailer << >>\n%%EOF\n";

fn attachment(name: &str, mime_type: &str, bytes: &[u8]) -> InputAttachment {
    InputAttachment { name: name.into(), mime_type: mime_type.into(), data: STANDARD.encode(bytes) }
}

/// Runs `local/echo` in the session with `files` attached (the client is subscribed to it) and returns the
/// files as its `run_started` names them, once the run ended.
async fn run_with(
    client: &Client,
    deliveries: &mut Deliveries,
    session_id: &str,
    files: Vec<InputAttachment>,
) -> Vec<AttachedFile> {
    let params = RunStartParams {
        session_id: session_id.into(),
        client_run_id: troupe_runtime::clock::new_id(),
        selection: echo_selection(),
        input: "look at this".into(),
        reset_fallback: false,
        attachments: files,
    };
    let run_id = within("run.start", client.call::<method::RunStart>(params)).await.expect("run.start").run_id;
    let events = events_until(deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    assert!(matches!(events.last().map(|event| &event.payload), Some(EventPayload::RunCompleted { .. })));
    events
        .into_iter()
        .find_map(|event| match event.payload {
            EventPayload::RunStarted { attachments, .. } if event.run_id.as_deref() == Some(&run_id) => {
                Some(attachments)
            }
            _ => None,
        })
        .expect("run_started")
}

async fn read(client: &Client, session_id: &str, path: &str) -> Result<SessionAttachmentResult, ClientError> {
    let params = SessionAttachmentParams { session_id: session_id.into(), path: path.into() };
    within("session.attachment", client.call::<method::SessionAttachment>(params)).await
}

/// The error's code, typed code, and `data` with its `path` and the detail's mention of it taken out, so that two
/// refusals of different paths compare equal when they say the same thing.
fn refusal_of(result: Result<SessionAttachmentResult, ClientError>, path: &str) -> serde_json::Value {
    let Err(ClientError::Rpc(error)) = result else { panic!("expected a JSON-RPC error, got {result:?}") };
    let mut data = error.data.clone().unwrap_or_default();
    assert_eq!(data["path"], json!(path));
    data["path"] = json!("<path>");
    let detail = data["detail"].as_str().unwrap_or_default().replace(path, "<path>");
    data["detail"] = json!(detail);
    json!({"code": error.code, "message": error.message, "data": data})
}

async fn subscribe(client: &Client, session_id: &str) {
    within("events.subscribe", client.subscribe(session_id, None)).await.expect("subscribe");
}

#[tokio::test]
async fn a_session_reads_back_only_the_files_its_own_log_names_and_a_fork_inherits_them() {
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    let a = daemon.create_session(&client).await.session_id;
    let b = daemon.create_session(&client).await.session_id;
    subscribe(&client, &a).await;
    subscribe(&client, &b).await;
    let a_files = run_with(&client, &mut deliveries, &a, vec![attachment("shot.png", "image/png", PNG)]).await;
    let b_files = run_with(&client, &mut deliveries, &b, vec![attachment("spec.pdf", "application/pdf", PDF)]).await;
    let (a_png, b_pdf) = (&a_files[0].path, &b_files[0].path);

    let own = read(&client, &a, a_png).await.expect("A reads its own file");
    assert_eq!(STANDARD.decode(&own.data).unwrap(), PNG);
    assert_eq!(read(&client, &b, b_pdf).await.expect("B reads its own file").size, PDF.len() as u64);

    // Each file exists, yet the other session is answered exactly as for a file that does not exist.
    assert!(daemon.data_path().join(a_png).is_file() && daemon.data_path().join(b_pdf).is_file());
    let missing = "artifacts/0000000000000000000000000000000000000000000000000000000000000000.png";
    let not_there = refusal_of(read(&client, &b, missing).await, missing);
    assert_eq!(not_there["code"], json!(-32000));
    assert_eq!(not_there["data"]["code"], json!("attachment_not_found"));
    assert_eq!(refusal_of(read(&client, &b, a_png).await, a_png), not_there);
    assert_eq!(refusal_of(read(&client, &a, b_pdf).await, b_pdf), not_there);

    // A fork names what its copied prefix names.
    let through_seq =
        within("session.get", client.call::<method::SessionGet>(SessionIdParams { session_id: a.clone() }))
            .await
            .expect("session.get")
            .session
            .last_event_seq;
    let fork = within(
        "session.fork",
        client.call::<method::SessionFork>(SessionForkParams { session_id: a.clone(), through_seq }),
    )
    .await
    .expect("session.fork")
    .session_id;
    assert_eq!(STANDARD.decode(&read(&client, &fork, a_png).await.expect("the fork reads it").data).unwrap(), PNG);
    assert_eq!(refusal_of(read(&client, &fork, b_pdf).await, b_pdf), not_there);
}

fn artifact_exists(data_dir: &Path, path: &str) -> bool {
    data_dir.join(path).exists()
}

#[tokio::test]
async fn deleting_a_session_collects_the_files_only_it_named_and_keeps_those_another_names() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[limits]\nartifact_grace_secs = 0\n".into()),
        ..DaemonSetup::default()
    });
    let (client, mut deliveries) = daemon.client().await;
    let a = daemon.create_session(&client).await.session_id;
    let b = daemon.create_session(&client).await.session_id;
    subscribe(&client, &a).await;
    subscribe(&client, &b).await;
    let both = vec![attachment("shot.png", "image/png", PNG), attachment("spec.pdf", "application/pdf", PDF)];
    let a_files = run_with(&client, &mut deliveries, &a, both).await;
    // B attaches the same image: the same file.
    let b_files = run_with(&client, &mut deliveries, &b, vec![attachment("copy.png", "image/png", PNG)]).await;
    let (png, pdf) = (a_files[0].path.clone(), a_files[1].path.clone());
    assert_eq!(b_files[0].path, png);

    let params = SessionIdParams { session_id: a.clone() };
    within("session.delete", client.call::<method::SessionDelete>(params)).await.expect("session.delete");
    let data_dir = daemon.data_path().to_path_buf();
    eventually("the deleted session's own file is collected", || !artifact_exists(&data_dir, &pdf)).await;
    // The same sweep kept the file B names.
    assert!(artifact_exists(&data_dir, &png));
    assert_eq!(STANDARD.decode(&read(&client, &b, &png).await.expect("B still reads it").data).unwrap(), PNG);
}

/// Sets a file's modification time `age` in the past.
fn age_file(path: &Path, age: Duration) {
    let file = std::fs::File::options().write(true).open(path).expect("open");
    file.set_modified(SystemTime::now() - age).expect("set mtime");
}

#[tokio::test]
async fn a_restarted_daemon_collects_old_files_no_session_names_and_keeps_young_or_named_ones() {
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    let a = daemon.create_session(&client).await.session_id;
    subscribe(&client, &a).await;
    let named = run_with(&client, &mut deliveries, &a, vec![attachment("shot.png", "image/png", PNG)]).await;
    drop(client);
    let data_dir = daemon.stop();
    let artifacts = data_dir.path().join("artifacts");
    // What a deletion leaves when the daemon stops before it collects: a file no log names, stored long ago; and one
    // stored a moment ago, whose event may not be appended yet. The named file is old too.
    let two_hours = Duration::from_secs(2 * 3600);
    std::fs::write(artifacts.join("orphan.png"), PNG).unwrap();
    age_file(&artifacts.join("orphan.png"), two_hours);
    std::fs::write(artifacts.join("fresh.png"), PNG).unwrap();
    age_file(&data_dir.path().join(&named[0].path), two_hours);

    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..DaemonSetup::default() });
    eventually("the old orphan is collected at start", || !artifacts.join("orphan.png").exists()).await;
    assert!(artifacts.join("fresh.png").is_file(), "a young file is kept");
    assert!(daemon.data_path().join(&named[0].path).is_file(), "a named file is kept");
    let (client, _) = daemon.client().await;
    assert_eq!(read(&client, &a, &named[0].path).await.expect("still readable").size, PNG.len() as u64);
}
