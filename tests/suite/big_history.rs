//! Any history size in bounded memory: paged replay of a 100,000-event session to a client with a small frame
//! limit, bounded daemon memory under unread pipelined subscribes, and logs damaged in their first line or in a
//! sequence still loading what is intact.

use std::path::Path;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use troupe_protocol::method;
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::session::SessionListParams;

use super::support::*;

/// Writes a complete log of `count` events (session_created, one run of text deltas, run_completed) whose
/// deltas carry `padding` bytes of text each. Returns the log's size.
fn write_big_log(data_dir: &Path, session_id: &str, count: u64, padding: usize) -> u64 {
    assert!(count >= 3);
    let dir = data_dir.join("sessions").join(session_id);
    std::fs::create_dir_all(&dir).expect("session dir");
    let mut text = String::with_capacity(count as usize * (padding + 200));
    let line = |seq: u64, run: bool, payload: Value| {
        json!({"session_id": session_id, "run_id": if run { json!("run-1") } else { Value::Null }, "seq": seq,
            "timestamp": "2026-01-01T00:00:00.000Z", "payload": payload})
        .to_string()
    };
    text.push_str(&session_created_line(session_id, json!({"type": "root"})));
    text.push('\n');
    let started = json!({"type": "run_started", "client_run_id": "c-1", "selection": echo_selection(),
        "input": "go", "fallback_index": 0});
    text.push_str(&line(2, true, started));
    text.push('\n');
    let filler = "x".repeat(padding);
    for seq in 3..count {
        text.push_str(&line(
            seq,
            true,
            json!({"type": "text_delta", "attempt_id": "a-1", "text": format!("{seq} {filler}")}),
        ));
        text.push('\n');
    }
    text.push_str(&line(count, true, json!({"type": "run_completed", "final_text": "done"})));
    text.push('\n');
    std::fs::write(dir.join("events.jsonl"), &text).expect("write log");
    text.len() as u64
}

/// A raw WebSocket that accepts frames of at most `max_frame` bytes, handshaken.
async fn raw_with_frame_limit(
    url: &str,
    token: &str,
    max_frame: usize,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    let mut request = url.into_client_request().expect("request");
    request.headers_mut().insert("Authorization", format!("Bearer {token}").parse().expect("header"));
    let mut config = WebSocketConfig::default();
    config.max_message_size = Some(max_frame);
    config.max_frame_size = Some(max_frame);
    let (mut stream, _) = within("connect", tokio_tungstenite::connect_async_with_config(request, Some(config), false))
        .await
        .expect("connect");
    let handshake = json!({"jsonrpc": "2.0", "id": 0, "method": "handshake", "params": {"protocol_version": 20}});
    within("send", stream.send(Message::text(handshake.to_string()))).await.expect("send");
    loop {
        let frame = within("handshake reply", stream.next()).await.expect("open").expect("frame");
        if let Message::Text(text) = frame {
            let value: Value = serde_json::from_str(&text).expect("json");
            assert_eq!(value["result"]["protocol_version"], 20, "{value}");
            return stream;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100k_event_session_replays_from_zero_in_order_through_a_2_mib_frame_limit() {
    const COUNT: u64 = 100_000;
    let data_dir = tempfile::tempdir().expect("temp dir");
    let session_id = "0190f5c2-0000-7000-8000-00000000b16a";
    let log_bytes = write_big_log(data_dir.path(), session_id, COUNT, 120);
    assert!(log_bytes > 20 * 1024 * 1024, "the log is larger than any page or queue: {log_bytes}");
    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..Default::default() });
    let mut stream = raw_with_frame_limit(&daemon.url(), &daemon.token, 2 * 1024 * 1024).await;

    let subscribe =
        json!({"jsonrpc": "2.0", "id": 1, "method": "events.subscribe", "params": {"session_id": session_id}});
    within("send", stream.send(Message::text(subscribe.to_string()))).await.expect("send");
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut next_seq = 1u64;
    let mut reply_last_seq = None;
    while next_seq <= COUNT {
        assert!(Instant::now() < deadline, "replay stalled at seq {next_seq}");
        let frame = within("a replay frame", stream.next()).await.expect("open").expect("frame within the limit");
        let Message::Text(text) = frame else { continue };
        let value: Value = serde_json::from_str(&text).expect("json");
        if value.get("id") == Some(&json!(1)) {
            let result = &value["result"];
            let events = result["events"].as_array().expect("events");
            assert!(!events.is_empty() && (events.len() as u64) < COUNT, "the reply is one page: {}", events.len());
            for event in events {
                assert_eq!(event["seq"], next_seq);
                next_seq += 1;
            }
            assert_eq!(result["last_seq"], next_seq - 1, "last_seq is the page's last event");
            reply_last_seq = Some(next_seq - 1);
            continue;
        }
        if value["method"] != "events.subscription" {
            continue;
        }
        assert!(reply_last_seq.is_some(), "the reply comes before any notification: {value}");
        assert_eq!(value["params"]["type"], "event", "no gap for a reader that keeps up: {value}");
        assert_eq!(value["params"]["event"]["seq"], next_seq);
        next_seq += 1;
    }
    assert_eq!(next_seq, COUNT + 1);

    // Then the subscription is live: a rename shows up as the next event.
    let rename = json!({"jsonrpc": "2.0", "id": 2, "method": "session.rename",
        "params": {"session_id": session_id, "client_rename_id": "r-1", "change": {"type": "set", "title": "live"}}});
    within("send", stream.send(Message::text(rename.to_string()))).await.expect("send");
    let mut saw_live = false;
    while !saw_live {
        let frame = within("live frame", stream.next()).await.expect("open").expect("frame");
        let Message::Text(text) = frame else { continue };
        let value: Value = serde_json::from_str(&text).expect("json");
        if value["method"] == "events.subscription" {
            assert_eq!(value["params"]["event"]["seq"], COUNT + 1, "{value}");
            saw_live = true;
        }
    }
}

/// The daemon's resident memory, from `/proc`.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_pipelined_subscribes_leave_the_daemon_small() {
    let data_dir = tempfile::tempdir().expect("temp dir");
    let session_id = "0190f5c2-0000-7000-8000-00000000b16b";
    let log_bytes = write_big_log(data_dir.path(), session_id, 20_000, 100);
    assert!(log_bytes > 4_000_000, "{log_bytes}");
    let mut daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let pid = daemon.child.id();

    // Load the session once, so its load is not counted as the subscribes' growth.
    let (client, _deliveries) = daemon.client().await;
    let meta = within("get", client.call::<method::SessionGet>(SessionIdParams { session_id: session_id.to_owned() }))
        .await
        .expect("session.get");
    assert_eq!(meta.session.last_event_seq, 20_000);
    let before = rss_bytes(pid);

    let mut raw = RawSocket::connect(&daemon.url, &daemon.token).await;
    raw.handshake().await;
    let mut batch = String::new();
    for id in 1..=120 {
        batch.push_str(
            &json!({"jsonrpc": "2.0", "id": id, "method": "events.subscribe", "params": {"session_id": session_id}})
                .to_string(),
        );
        within("send", raw.stream.send(Message::text(std::mem::take(&mut batch)))).await.expect("send");
    }
    // Watch the daemon while the replies stay unread (a measuring window: the pauses are samples, not a wait).
    let mut peak = 0;
    let watch_until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < watch_until {
        peak = peak.max(rss_bytes(pid));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let growth = peak.saturating_sub(before);
    eprintln!("RSS before {} MB, peak growth {} MB", before / (1024 * 1024), growth / (1024 * 1024));
    assert!(growth < 50 * 1024 * 1024, "RSS grew by {} MB with 120 unread subscribes", growth / (1024 * 1024));

    // The connection still answers once read, and leaving frees what it held.
    let first = raw.recv_response().await;
    assert!(first["result"]["events"].is_array(), "{first}");
    drop(raw);
    // The requests still waiting when the client left build nothing: the daemon stays small afterwards too (a
    // second measuring window).
    let mut after_peak = 0;
    let watch_until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < watch_until {
        after_peak = after_peak.max(rss_bytes(pid));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let left = after_peak.saturating_sub(before);
    assert!(left < 50 * 1024 * 1024, "RSS grew by {} MB after the client left", left / (1024 * 1024));
    let meta = within("get", client.call::<method::SessionGet>(SessionIdParams { session_id: session_id.to_owned() }))
        .await
        .expect("session.get after");
    assert_eq!(meta.session.last_event_seq, 20_000);
    daemon.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_damaged_in_their_first_line_or_a_sequence_load_what_is_intact() {
    let data_dir = tempfile::tempdir().expect("temp dir");
    let damaged_first = "0190f5c2-0000-7000-8000-00000000da01";
    let damaged_seq = "0190f5c2-0000-7000-8000-00000000da02";
    let line = |session_id: &str, seq: u64, title: &str| {
        json!({"session_id": session_id, "run_id": null, "seq": seq, "timestamp": "2026-01-01T00:00:00.000Z",
            "payload": {"type": "session_title_committed", "title": title, "change": "set",
                "client_rename_id": format!("r-{seq}")}})
        .to_string()
    };
    let dir = data_dir.path().join("sessions");
    std::fs::create_dir_all(dir.join(damaged_first)).unwrap();
    std::fs::create_dir_all(dir.join(damaged_seq)).unwrap();
    let first_lines =
        ["{\"session_id\": garbage".to_owned(), line(damaged_first, 2, "two"), line(damaged_first, 3, "three")];
    std::fs::write(dir.join(damaged_first).join("events.jsonl"), first_lines.join("\n") + "\n").unwrap();
    let seq_lines = [
        session_created_line(damaged_seq, json!({"type": "root"})),
        line(damaged_seq, 2, "two"),
        line(damaged_seq, 3, "three"),
        line(damaged_seq, 999_999, "four, damaged"),
        line(damaged_seq, 5, "five"),
    ];
    std::fs::write(dir.join(damaged_seq).join("events.jsonl"), seq_lines.join("\n") + "\n").unwrap();

    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..Default::default() });
    let (client, _deliveries) = daemon.client().await;
    let listed =
        within("list", client.call::<method::SessionList>(SessionListParams::default())).await.expect("session.list");
    let listed_ids: Vec<&str> = listed.sessions.iter().map(|meta| meta.session_id.as_str()).collect();
    assert!(listed_ids.contains(&damaged_first), "a damaged first line still lists the session: {listed_ids:?}");

    let mut raw = daemon.raw().await;
    raw.handshake().await;
    let reply = raw.call(1, "events.subscribe", json!({"session_id": damaged_first})).await;
    let seqs: Vec<u64> =
        reply["result"]["events"].as_array().unwrap().iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [2, 3], "{reply}");
    let meta = raw.call(2, "session.get", json!({"session_id": damaged_first})).await;
    assert_eq!(meta["result"]["session"]["title"], "three", "{meta}");
    assert_eq!(meta["result"]["session"]["skipped_events"][0]["line"], 1, "{meta}");
    let run = raw
        .call(
            3,
            "run.start",
            json!({"session_id": damaged_first, "client_run_id": "c-1",
            "selection": echo_selection(), "input": "hello"}),
        )
        .await;
    assert_eq!(run["error"]["data"]["code"], "session_damaged", "{run}");

    let reply = raw.call(4, "events.subscribe", json!({"session_id": damaged_seq})).await;
    let seqs: Vec<u64> =
        reply["result"]["events"].as_array().unwrap().iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [1, 2, 3, 5], "the intact lines after a damaged seq load: {reply}");
    // Appends continue from the last good sequence.
    let renamed = raw
        .call(
            5,
            "session.rename",
            json!({"session_id": damaged_seq, "client_rename_id": "r-new",
            "change": {"type": "set", "title": "six"}}),
        )
        .await;
    assert_eq!(renamed["result"]["session"]["last_event_seq"], 6, "{renamed}");
}
