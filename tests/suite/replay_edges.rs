//! The edges of paged replay and tolerant loading, found by attacking them: a batch of subscribes within one reply
//! budget, a replay whose log cannot be read any more, cursors past the end, and logs that are empty or cannot be
//! opened when the daemon starts.

use std::path::Path;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use super::support::*;

/// A complete log: `session_created`, then `count - 1` renames with `padding` bytes of title each.
fn write_rename_log(data_dir: &Path, session_id: &str, count: u64, padding: usize) {
    let dir = data_dir.join("sessions").join(session_id);
    std::fs::create_dir_all(&dir).expect("session dir");
    let mut text = session_created_line(session_id, json!({"type": "root"}));
    text.push('\n');
    let filler = "t".repeat(padding);
    for seq in 2..=count {
        let line = json!({"session_id": session_id, "run_id": null, "seq": seq, "timestamp": "2026-01-01T00:00:00.000Z",
            "payload": {"type": "session_title_committed", "title": format!("{seq} {filler}"), "change": "set",
                "client_rename_id": format!("r-{seq}")}});
        text.push_str(&line.to_string());
        text.push('\n');
    }
    std::fs::write(dir.join("events.jsonl"), text).expect("write log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_subscribes_holds_at_most_one_reply_budget_and_the_rest_are_told_why() {
    let data_dir = tempfile::tempdir().expect("temp dir");
    let session_id = "0190f5c2-0000-7000-8000-0000000e0001";
    write_rename_log(data_dir.path(), session_id, 20_000, 200);
    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..Default::default() });
    let mut raw = daemon.raw().await;
    raw.handshake().await;
    let batch: Vec<Value> = (1..=30)
        .map(|id| json!({"jsonrpc": "2.0", "id": id, "method": "events.subscribe", "params": {"session_id": session_id}}))
        .collect();
    let reply = raw.call_raw(Value::Array(batch)).await;
    let replies = reply.as_array().expect("a batch reply");
    assert_eq!(replies.len(), 30);
    let answered = replies.iter().filter(|member| member.get("result").is_some()).count();
    let refused: Vec<&Value> = replies.iter().filter(|member| member.get("error").is_some()).collect();
    // The default budget is 4 MiB and a page 1 MiB: four members fit, the others are refused at once.
    assert_eq!(answered, 4, "{reply}");
    for member in refused {
        assert_eq!(member["error"]["code"], -32003, "{member}");
        assert!(member["error"]["data"]["detail"].as_str().unwrap().contains("smaller batches"), "{member}");
    }
    // The connection stays usable.
    let list = raw.call(99, "session.get", json!({"session_id": session_id})).await;
    assert_eq!(list["result"]["session"]["last_event_seq"], 20_000, "{list}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_that_cannot_read_the_log_ends_with_a_gap_and_the_client_recovers() {
    let data_dir = tempfile::tempdir().expect("temp dir");
    let session_id = "0190f5c2-0000-7000-8000-0000000e0002";
    // Much more than the page, the tail, the tiny queue and what sockets buffer.
    write_rename_log(data_dir.path(), session_id, 60_000, 300);
    let log = data_dir.path().join("sessions").join(session_id).join("events.jsonl");
    let moved = data_dir.path().join("events.jsonl.aside");
    let daemon = TestDaemon::start_with(DaemonSetup {
        data_dir: Some(data_dir),
        config_toml: Some("[limits]\noutbound_queue = 16\noutbound_queue_bytes = 65536\n".to_owned()),
        ..Default::default()
    });
    let mut raw = daemon.raw().await;
    raw.handshake().await;
    let reply = raw.call(1, "events.subscribe", json!({"session_id": session_id})).await;
    let mut last = reply["result"]["last_seq"].as_u64().expect("last_seq");
    assert!(last < 60_000, "the reply is one page");

    // The pump now waits for room; the log goes away before it reads its next chunk.
    std::fs::rename(&log, &moved).expect("move the log aside");
    let deadline = Instant::now() + Duration::from_secs(60);
    let gap = loop {
        assert!(Instant::now() < deadline, "no gap after the log went away (delivered through {last})");
        let frame = raw.recv().await;
        if frame["method"] != "events.subscription" {
            continue;
        }
        match frame["params"]["type"].as_str() {
            Some("event") => {
                let seq = frame["params"]["event"]["seq"].as_u64().expect("seq");
                assert_eq!(seq, last + 1, "in order until the gap");
                last = seq;
            }
            Some("gap") => break frame,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert!(last < 60_000, "the replay stopped early (the log was gone), at {last}");
    assert_eq!(gap["params"]["last_delivered_seq"], last, "{gap}");

    // Once the log is back, resubscribing from the cursor delivers the rest, then live events.
    std::fs::rename(&moved, &log).expect("put the log back");
    let reply = raw.call(2, "events.subscribe", json!({"session_id": session_id, "cursor": last})).await;
    for event in reply["result"]["events"].as_array().expect("events") {
        assert_eq!(event["seq"], last + 1);
        last += 1;
    }
    while last < 60_000 {
        let frame = raw.recv().await;
        if frame["method"] == "events.subscription" {
            assert_eq!(frame["params"]["type"], "event", "{frame}");
            assert_eq!(frame["params"]["event"]["seq"], last + 1);
            last += 1;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_past_the_last_event_is_refused() {
    let daemon = TestDaemon::start();
    let (client, _deliveries) = daemon.client().await;
    let session = daemon.create_session(&client).await;
    let mut raw = daemon.raw().await;
    raw.handshake().await;
    let reply = raw.call(1, "events.subscribe", json!({"session_id": session.session_id, "cursor": 5})).await;
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    assert_eq!(reply["error"]["data"]["code"], "cursor_ahead", "{reply}");
    assert_eq!(reply["error"]["data"]["last_seq"], 1, "{reply}");
    let reply = raw.call(2, "events.subscribe", json!({"session_id": session.session_id, "cursor": 1})).await;
    assert_eq!(reply["result"]["last_seq"], 1, "a cursor at the end is fine: {reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_log_is_listed_and_refuses_writes_it_could_not_keep() {
    let data_dir = tempfile::tempdir().expect("temp dir");
    let session_id = "0190f5c2-0000-7000-8000-0000000e0003";
    let dir = data_dir.path().join("sessions").join(session_id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("events.jsonl"), b"").unwrap();
    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..Default::default() });
    let mut raw = daemon.raw().await;
    raw.handshake().await;
    let listed = raw.call(1, "session.list", json!({})).await;
    let ids: Vec<&str> = listed["result"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|meta| meta["session_id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&session_id), "{listed}");
    let renamed = raw
        .call(
            2,
            "session.rename",
            json!({"session_id": session_id, "client_rename_id": "r-1",
            "change": {"type": "set", "title": "kept?"}}),
        )
        .await;
    assert_eq!(renamed["error"]["data"]["code"], "session_damaged", "{renamed}");
    assert_eq!(std::fs::read(dir.join("events.jsonl")).unwrap(), b"", "nothing was written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_that_cannot_be_opened_at_start_is_served_once_it_is_repaired() {
    let data_dir = tempfile::tempdir().expect("temp dir");
    let session_id = "0190f5c2-0000-7000-8000-0000000e0004";
    let dir = data_dir.path().join("sessions").join(session_id);
    // A directory where the log should be: it cannot be opened.
    std::fs::create_dir_all(dir.join("events.jsonl")).unwrap();
    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..Default::default() });
    let mut raw = daemon.raw().await;
    raw.handshake().await;
    let meta = raw.call(1, "session.get", json!({"session_id": session_id})).await;
    assert!(
        meta["result"]["session"]["skipped_events"][0]["reason"].as_str().unwrap().contains("could not be opened"),
        "{meta}"
    );
    let failed = raw.call(2, "events.subscribe", json!({"session_id": session_id})).await;
    assert!(failed.get("error").is_some(), "{failed}");

    // Repaired on disk: the next request loads it, no restart needed.
    std::fs::remove_dir(dir.join("events.jsonl")).unwrap();
    std::fs::write(dir.join("events.jsonl"), session_created_line(session_id, json!({"type": "root"})) + "\n").unwrap();
    let mut id = 2;
    let reply = eventually_some("the repaired session to be served", WAIT, async || {
        id += 1;
        let reply = raw.call(id, "events.subscribe", json!({"session_id": session_id})).await;
        reply.get("result").is_some().then_some(reply)
    })
    .await;
    assert_eq!(reply["result"]["last_seq"], 1, "{reply}");
    let raw_stream = &mut raw.stream;
    let _ = raw_stream.send(Message::Close(None)).await;
    let _ = raw_stream.next().await;
}

/// A script that reads `events.subscribe`'s reply once can tell whether the stored history continues past the page
/// (`history_last_seq` above `last_seq`) and which notifications are replay and which live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reply_says_where_stored_history_ends_past_its_page() {
    let data_dir = tempfile::tempdir().unwrap();
    let session_id = "01957a1c-0000-7000-8000-0000000000d1";
    write_rename_log(data_dir.path(), session_id, 20, 2000);
    let daemon = TestDaemon::start_with(DaemonSetup {
        data_dir: Some(data_dir),
        config_toml: Some("[limits]\nreplay_page_bytes = 8192\n".into()),
        ..DaemonSetup::default()
    });
    let mut raw = daemon.raw().await;
    raw.handshake().await;
    let reply = raw.call(1, "events.subscribe", json!({"session_id": session_id})).await;
    let result = &reply["result"];
    let page = result["events"].as_array().expect("events");
    let last_seq = result["last_seq"].as_u64().expect("last_seq");
    assert!(!page.is_empty() && page.len() < 20, "one page, not the whole history: {}", page.len());
    assert_eq!(page.last().unwrap()["seq"].as_u64(), Some(last_seq), "last_seq is the page's last event");
    assert_eq!(result["history_last_seq"], 20, "the stored history goes on to seq 20");
    // The rest of the history arrives as notifications, up to `history_last_seq`.
    let mut next = last_seq + 1;
    while next <= 20 {
        let notification = raw.recv().await;
        assert_eq!(notification["method"], "events.subscription", "{notification}");
        assert_eq!(notification["params"]["event"]["seq"].as_u64(), Some(next), "{notification}");
        next += 1;
    }

    // Subscribed at the end, the history holds nothing more than the reply.
    let reply = raw.call(2, "events.subscribe", json!({"session_id": session_id, "cursor": 20})).await;
    assert_eq!((&reply["result"]["last_seq"], &reply["result"]["history_last_seq"]), (&json!(20), &json!(20)));
}
