//! Terminal output references over the wire: a loud shell command's result keeps the head and tail of its output
//! and names the whole of it with `output_ref`, which `tool_output.read` reads back byte for byte; bad reads are
//! typed errors, and the stored output goes with its session. `troupe watch` says where the whole output is, and
//! `troupe output` writes it.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::json;
use troupe_protocol::client::ClientError;
use troupe_protocol::method;
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::session::SessionForkParams;
use troupe_protocol::types::tool_output::{OutputStream, ToolOutputReadParams};

use super::cli_support::*;
use super::support::*;

/// What a result keeps of each stream in these tests.
const KEPT: usize = 1000;

/// The loud command's stdout: `seq 1 30000`, about 170 KB.
fn loud_stdout() -> Vec<u8> {
    (1..=30_000).map(|number| format!("{number}\n")).collect::<String>().into_bytes()
}

fn daemon() -> TestDaemon {
    TestDaemon::start_with(DaemonSetup {
        config_toml: Some(format!("[tools]\nmax_output_bytes = {KEPT}\n")),
        ..DaemonSetup::default()
    })
}

/// Reads a whole stream of a stored output, `piece` bytes a call, checking each reply's offsets.
async fn read_whole(
    client: &troupe_protocol::client::Client,
    session_id: &str,
    output_ref: &str,
    stream: OutputStream,
    piece: u64,
) -> Vec<u8> {
    let mut whole = Vec::new();
    loop {
        let params = ToolOutputReadParams {
            session_id: session_id.to_owned(),
            output_ref: output_ref.to_owned(),
            stream,
            offset: whole.len() as u64,
            limit: Some(piece),
        };
        let read = within("tool_output.read", client.call::<method::ToolOutputRead>(params)).await.expect("read");
        let data = BASE64.decode(&read.data).expect("base64");
        assert_eq!((read.offset, read.next_offset), (whole.len() as u64, (whole.len() + data.len()) as u64));
        assert!(data.len() as u64 <= piece);
        whole.extend_from_slice(&data);
        assert_eq!(read.total_bytes, read.stored_bytes, "nothing was past the store's cap");
        if read.eof {
            assert_eq!(read.stored_bytes, whole.len() as u64);
            return whole;
        }
    }
}

fn rpc_error(result: Result<impl std::fmt::Debug, ClientError>) -> troupe_protocol::RpcError {
    match result {
        Err(ClientError::Rpc(error)) => error,
        other => panic!("expected an RPC error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loud_commands_result_names_its_whole_output_which_reads_back_exactly() {
    let daemon = daemon();
    let project = daemon.project_path().to_path_buf();
    let script = json!({"turns": [
        {"tool_calls": [
            {"tool": "shell", "arguments": {"command": "seq 1 30000; echo oops >&2"}},
            {"tool": "shell", "arguments": {"command": "echo quiet"}}
        ]},
        {"text": "done"}
    ]});
    let events = run_script_in_yolo(&daemon, &project, script).await;
    let session_id = events[0].session_id.clone();
    let results = tool_results(&events);
    assert_eq!(results.len(), 2, "{:?}", kinds(&events));
    let (loud, quiet) = (&results[0], &results[1]);
    assert!(quiet.output_ref.is_none(), "a result that kept its whole output names no stored one: {quiet:?}");
    let output_ref = loud.output_ref.clone().expect("the cut result names the whole output");
    assert!(loud.output.contains("bytes elided"), "{}", loud.output);

    let (client, _deliveries) = daemon.client().await;
    let stdout = read_whole(&client, &session_id, &output_ref, OutputStream::Stdout, 64 * 1024).await;
    assert!(stdout == loud_stdout(), "stdout reads back exactly ({} bytes)", stdout.len());
    let stderr = read_whole(&client, &session_id, &output_ref, OutputStream::Stderr, 3).await;
    assert_eq!(stderr, b"oops\n");

    // Past the end: nothing, at the end.
    let past = client
        .call::<method::ToolOutputRead>(ToolOutputReadParams {
            session_id: session_id.clone(),
            output_ref: output_ref.clone(),
            stream: OutputStream::Stdout,
            offset: 10_000_000,
            limit: None,
        })
        .await
        .unwrap();
    assert_eq!((past.data.as_str(), past.next_offset, past.eof), ("", 10_000_000, true));

    // Bad reads are typed.
    let read = |session_id: &str, output_ref: &str| {
        client.call::<method::ToolOutputRead>(ToolOutputReadParams {
            session_id: session_id.to_owned(),
            output_ref: output_ref.to_owned(),
            stream: OutputStream::Stdout,
            offset: 0,
            limit: None,
        })
    };
    let malformed = rpc_error(read(&session_id, "../../../etc/passwd").await);
    assert_eq!((malformed.code, malformed.typed_code()), (-32602, Some("invalid_output_ref")));
    assert!(malformed.detail().unwrap_or_default().contains("32 lowercase hexadecimal digits"), "{malformed:?}");
    let unknown = rpc_error(read(&session_id, &"0".repeat(32)).await);
    assert_eq!((unknown.code, unknown.typed_code()), (-32000, Some("output_ref_not_found")));
    let other_session = daemon.create_session(&client).await;
    let elsewhere = rpc_error(read(&other_session.session_id, &output_ref).await);
    assert_eq!(elsewhere.typed_code(), Some("output_ref_not_found"), "a reference reads only in its session");
    let no_session = rpc_error(read("00000000-0000-7000-8000-000000000000", &output_ref).await);
    assert_eq!(no_session.typed_code(), Some("session_not_found"));

    // A fork's copied result reads through the fork.
    let through_seq = events.last().expect("events").seq;
    let fork = client
        .call::<method::SessionFork>(SessionForkParams { session_id: session_id.clone(), through_seq })
        .await
        .expect("fork");

    // The stored output lives in the session's directory and goes with it; the fork keeps its own.
    let stored = daemon.data_path().join("sessions").join(&session_id).join("outputs").join(&output_ref);
    assert!(stored.join("stdout").is_file());
    client.call::<method::SessionDelete>(SessionIdParams { session_id: session_id.clone() }).await.expect("delete");
    eventually("the session's directory is removed", || !stored.exists()).await;
    let gone = rpc_error(read(&session_id, &output_ref).await);
    assert_eq!(gone.typed_code(), Some("session_not_found"));
    let through_fork = read_whole(&client, &fork.session_id, &output_ref, OutputStream::Stdout, 1024 * 1024).await;
    assert!(through_fork == loud_stdout(), "the fork reads the whole output after its source is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stored_output_is_capped_and_says_how_much_the_stream_produced() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some(format!("[tools]\nmax_output_bytes = {KEPT}\nmax_stored_output_bytes = 5000\n")),
        ..DaemonSetup::default()
    });
    let project = daemon.project_path().to_path_buf();
    let script = json!({"turns": [
        {"tool_calls": [{"tool": "shell", "arguments": {"command": "seq 1 30000"}}]},
        {"text": "done"}
    ]});
    let events = run_script_in_yolo(&daemon, &project, script).await;
    let session_id = events[0].session_id.clone();
    let output_ref = tool_results(&events)[0].output_ref.clone().expect("output_ref");
    let (client, _deliveries) = daemon.client().await;
    let read = client
        .call::<method::ToolOutputRead>(ToolOutputReadParams {
            session_id,
            output_ref,
            stream: OutputStream::Stdout,
            offset: 0,
            limit: None,
        })
        .await
        .unwrap();
    let expected = loud_stdout();
    assert_eq!(BASE64.decode(&read.data).unwrap(), &expected[..5000]);
    assert_eq!((read.stored_bytes, read.total_bytes, read.eof), (5000, expected.len() as u64, true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_points_at_the_whole_output_and_troupe_output_writes_it() {
    let daemon = daemon();
    let project = daemon.project_path().to_path_buf();
    let script = json!({"turns": [
        {"tool_calls": [{"tool": "shell", "arguments": {"command": "seq 1 30000; echo oops >&2"}}]},
        {"text": "done"}
    ]});
    let events = run_script_in_yolo(&daemon, &project, script).await;
    let session_id = events[0].session_id.clone();
    let output_ref = tool_results(&events)[0].output_ref.clone().expect("output_ref");

    let hint = format!("output cut; whole output: troupe output {session_id} {output_ref}");
    let lines = troupe_until(&daemon, &["watch", &session_id], |line| line.contains("troupe output")).await;
    assert!(lines.iter().any(|line| line.trim() == hint), "{lines:#?}");

    let stdout = troupe(&daemon, &["output", &session_id[..8], &output_ref]).await.ok();
    assert!(stdout.as_bytes() == loud_stdout(), "troupe output writes the whole stdout ({} bytes)", stdout.len());
    assert_eq!(troupe(&daemon, &["output", &session_id, &output_ref, "--stderr"]).await.ok(), "oops\n");
    let refused = troupe(&daemon, &["output", &session_id, &"f".repeat(32)]).await.refused();
    assert!(refused.contains("no stored output"), "{refused}");
}
