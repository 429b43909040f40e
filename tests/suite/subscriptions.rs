//! Live subscriptions: identical ordered sequences for every subscriber, cursor replay, and gaps for a
//! subscriber that falls behind while the others are unaffected.

use serde_json::json;
use troupe_protocol::client::{ClientDelivery, ReplayReason};
use troupe_protocol::types::events::StoredEvent;

use super::support::*;

async fn collect_events(deliveries: &mut troupe_protocol::client::Deliveries, through_seq: u64) -> Vec<StoredEvent> {
    let mut events: Vec<StoredEvent> = Vec::new();
    within("events", async {
        while events.last().is_none_or(|event| event.seq < through_seq) {
            match deliveries.next().await.expect("deliveries open") {
                ClientDelivery::Live(event) | ClientDelivery::ReplayEvent(event) => events.push(event),
                _ => {}
            }
        }
    })
    .await;
    events
}

#[tokio::test]
async fn three_subscribers_see_identical_sequences() {
    let daemon = TestDaemon::start();
    let (writer, _) = daemon.client().await;
    let session = daemon.create_session(&writer).await;
    let mut subscribers = Vec::new();
    for _ in 0..3 {
        let (client, deliveries) = daemon.client().await;
        within("subscribe", client.subscribe(&session.session_id, None)).await.unwrap();
        subscribers.push((client, deliveries));
    }
    rename_many(&writer, &session.session_id, "t", 200, 0).await;
    let mut sequences = Vec::new();
    for (_, deliveries) in &mut subscribers {
        sequences.push(collect_events(deliveries, 201).await);
    }
    let seqs: Vec<u64> = sequences[0].iter().map(|event| event.seq).collect();
    assert_eq!(seqs, (1..=201).collect::<Vec<_>>());
    assert_eq!(sequences[0], sequences[1]);
    assert_eq!(sequences[1], sequences[2]);
}

#[tokio::test]
async fn the_subscribe_reply_comes_before_live_events_and_a_cursor_replays_only_later_events() {
    let daemon = TestDaemon::start();
    let (writer, _) = daemon.client().await;
    let session = daemon.create_session(&writer).await;
    rename_many(&writer, &session.session_id, "early", 5, 0).await;

    let mut socket = daemon.raw().await;
    socket.handshake().await;
    // Keep appending while subscribing, so live events race the reply.
    let renames = rename_many(&writer, &session.session_id, "racing", 50, 0);
    let subscribe = async {
        socket.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "events.subscribe", "params": {"session_id": session.session_id, "cursor": 3}})).await;
        let mut frames = Vec::new();
        loop {
            let frame = socket.recv().await;
            if frame["method"] == "runtime.changed" {
                continue;
            }
            let is_reply = frame["id"] == 1;
            frames.push(frame);
            if is_reply {
                break;
            }
        }
        frames
    };
    let (frames, ()) = tokio::join!(subscribe, renames);
    assert_eq!(frames.len(), 1, "no event notification may precede the reply: {frames:?}");
    let reply = &frames[0]["result"];
    let replayed: Vec<u64> = reply["events"].as_array().unwrap().iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    let last_seq = reply["last_seq"].as_u64().unwrap();
    assert_eq!(replayed.first(), Some(&4));
    assert_eq!(replayed.last(), Some(&last_seq));
    // Live notifications continue exactly after the reply, with nothing missing or repeated, up to 56.
    let mut expected = last_seq + 1;
    while expected <= 56 {
        let frame = socket.recv().await;
        assert_eq!(frame["method"], "events.subscription", "{frame}");
        assert_eq!(frame["params"]["type"], "event");
        assert_eq!(frame["params"]["session_id"], json!(session.session_id));
        assert_eq!(frame["params"]["event"]["seq"], expected);
        expected += 1;
    }
}

/// The largest send buffer the kernel lets a TCP socket grow to: what it can absorb for a reader that stalls,
/// besides that reader's own (small) receive buffer.
fn kernel_send_buffer_max() -> usize {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem")
        .ok()
        .and_then(|text| text.split_whitespace().nth(2)?.parse().ok())
        .unwrap_or(4 * 1024 * 1024)
}

/// A raw WebSocket whose receive buffer is made small before connecting, so that when it stops reading the
/// kernel holds little more than the daemon's send buffer for it.
async fn raw_with_small_receive_buffer(daemon: &TestDaemon) -> RawSocket {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("receive buffer");
    let stream = within("connect", socket.connect(daemon.addr)).await.expect("connect");
    let mut request = daemon.url().into_client_request().expect("request");
    request.headers_mut().insert("Authorization", format!("Bearer {}", daemon.token).parse().expect("header"));
    let stream = tokio_tungstenite::MaybeTlsStream::Plain(stream);
    let (stream, _) = within("upgrade", tokio_tungstenite::client_async(request, stream)).await.expect("upgrade");
    RawSocket { stream }
}

/// Reads a subscribe reply (with `id`) and the replayed notifications that follow it, until `through`. Fails on a
/// gap or on an event notification before the reply.
async fn read_subscription_until(socket: &mut RawSocket, id: u64, through: u64) -> Vec<u64> {
    let mut seqs = Vec::new();
    let mut replied = false;
    while seqs.last().is_none_or(|seq| *seq < through) {
        let frame = socket.recv().await;
        if frame["id"] == id {
            assert!(!replied, "one reply: {frame}");
            replied = true;
            let events = frame["result"]["events"].as_array().expect("events");
            seqs.extend(events.iter().map(|event| event["seq"].as_u64().expect("seq")));
            continue;
        }
        match frame["params"]["type"].as_str() {
            Some("event") => {
                assert!(replied, "an event before the subscribe reply: {frame}");
                seqs.push(frame["params"]["event"]["seq"].as_u64().expect("seq"));
            }
            Some("gap") => panic!("a second gap while reading actively: {frame}"),
            _ if frame["method"] == "runtime.changed" => {}
            _ => panic!("unexpected frame {frame}"),
        }
    }
    seqs
}

#[tokio::test]
async fn a_subscriber_that_stops_reading_gets_one_gap_and_recovers_while_others_are_unaffected() {
    // A tiny queue (4 frames, 16 KiB), so that what is not in the kernel's buffers overflows it at once.
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[limits]\noutbound_queue = 4\noutbound_queue_bytes = 16384\n".into()),
        ..DaemonSetup::default()
    });
    let (writer, _) = daemon.client().await;
    let session = daemon.create_session(&writer).await;

    let mut stalled = raw_with_small_receive_buffer(&daemon).await;
    stalled.handshake().await;
    let reply = stalled.call(1, "events.subscribe", json!({"session_id": session.session_id})).await;
    assert_eq!(reply["result"]["last_seq"], 1);

    // A well-behaved subscriber through the shared client.
    let (reader, mut deliveries) = daemon.client().await;
    reader.subscribe(&session.session_id, None).await.unwrap();

    // More than the kernel can hold for the stalled reader: its send buffer at the largest, plus 2 MiB. Each
    // event frame is more than `padding` bytes.
    let padding = 480;
    let total = ((kernel_send_buffer_max() + 2 * 1024 * 1024) / padding) as u64;
    rename_many(&writer, &session.session_id, "r", total as usize, padding).await;
    let last = total + 1;

    // The good subscriber got every event exactly once, in order.
    let events = collect_events(&mut deliveries, last).await;
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), (1..=last).collect::<Vec<_>>());

    // The stalled one now reads: a prefix of events in order, then one gap naming the last one delivered.
    let mut delivered = Vec::new();
    let gap = loop {
        let frame = stalled.recv().await;
        match frame["params"]["type"].as_str() {
            Some("event") => delivered.push(frame["params"]["event"]["seq"].as_u64().unwrap()),
            Some("gap") => break frame,
            _ if frame["method"] == "runtime.changed" => {}
            _ => panic!("unexpected frame {frame}"),
        }
    };
    assert!((delivered.len() as u64) < total, "the stalled subscriber should have fallen behind");
    assert_eq!(delivered, (2..2 + delivered.len() as u64).collect::<Vec<_>>());
    let cursor = delivered.last().copied().unwrap_or(1);
    assert_eq!(gap["params"]["last_delivered_seq"].as_u64(), Some(cursor), "{gap}");
    assert_eq!(gap["params"]["session_id"], json!(session.session_id));

    // Resubscribing from the cursor gives every missed event once, in order (in the reply, then as replayed
    // notifications), and nothing else: no second gap.
    stalled
        .send(&json!({"jsonrpc": "2.0", "id": 2, "method": "events.subscribe",
        "params": {"session_id": session.session_id, "cursor": cursor}}))
        .await;
    let replayed = read_subscription_until(&mut stalled, 2, last).await;
    assert_eq!(replayed, (cursor + 1..=last).collect::<Vec<_>>());

    // The connection is still usable, and the new subscription is live.
    let get = stalled.call(3, "session.get", json!({"session_id": session.session_id})).await;
    assert_eq!(get["result"]["session"]["session_id"], json!(session.session_id), "{get}");
    set_title(&writer, &session.session_id, "after", "after the gap").await.unwrap();
    let frame = loop {
        let frame = stalled.recv().await;
        if frame["method"] != "runtime.changed" {
            break frame;
        }
    };
    assert_eq!(frame["params"]["type"], "event", "{frame}");
    assert_eq!(frame["params"]["event"]["seq"], last + 1);
}

#[tokio::test]
async fn the_shared_client_recovers_from_a_gap_by_itself() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[limits]\noutbound_queue = 4\n".into()),
        ..DaemonSetup::default()
    });
    let (writer, _) = daemon.client().await;
    let session = daemon.create_session(&writer).await;
    // A tiny delivery buffer and a consumer that waits until every rename is done: the subscription falls behind
    // (noticed by the client, or by the daemon as a gap) and must recover by itself.
    let options = troupe_protocol::client::ClientOptions { delivery_buffer: 1, ..Default::default() };
    let (reader, mut deliveries) = daemon.client_with(options).await;
    reader.subscribe(&session.session_id, None).await.unwrap();
    rename_many(&writer, &session.session_id, "g", 6000, 400).await;
    let mut seqs = Vec::new();
    let mut gaps = 0;
    within("all events", async {
        while seqs.last() != Some(&6001) {
            match deliveries.next().await.expect("open") {
                ClientDelivery::Live(event) | ClientDelivery::ReplayEvent(event) => seqs.push(event.seq),
                ClientDelivery::ReplayStart { reason: ReplayReason::Gap, .. } => gaps += 1,
                ClientDelivery::RecoveryFailed { detail, .. } => {
                    panic!("recovery failed: {detail}")
                }
                _ => {}
            }
        }
    })
    .await;
    assert_eq!(seqs, (1..=6001).collect::<Vec<_>>(), "every event exactly once, in order");
    assert!(gaps >= 1, "the consumer was slow enough to fall behind at least once");
}
