//! Live subscriptions: identical ordered sequences for every subscriber, cursor replay, and gaps for a
//! subscriber that falls behind while the others are unaffected.

use serde_json::{Value, json};
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

#[tokio::test]
async fn a_slow_subscriber_gets_a_gap_and_recovers_while_others_are_unaffected() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[limits]\noutbound_queue = 8\n".into()),
        ..DaemonSetup::default()
    });
    let (writer, _) = daemon.client().await;
    let session = daemon.create_session(&writer).await;

    // A raw subscriber that stops reading: the kernel buffers fill, then its bounded queue, then it gets a gap.
    let mut stalled = daemon.raw().await;
    stalled.handshake().await;
    let reply = stalled.call(1, "events.subscribe", json!({"session_id": session.session_id})).await;
    assert_eq!(reply["result"]["last_seq"], 1);

    // A well-behaved subscriber through the shared client.
    let (reader, mut deliveries) = daemon.client().await;
    reader.subscribe(&session.session_id, None).await.unwrap();

    // Loopback sockets absorb a few MB for a reader that stalls; send well past that.
    let total = 6000u64;
    rename_many(&writer, &session.session_id, "r", total as usize, 400).await;
    let last = total + 1;

    // The good subscriber got every event exactly once, in order.
    let events = collect_events(&mut deliveries, last).await;
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), (1..=last).collect::<Vec<_>>());

    // The stalled one now reads: a prefix of events in order, then exactly one gap naming the last delivered.
    let mut delivered = Vec::new();
    let gap = loop {
        let frame = stalled.recv().await;
        match frame["params"]["type"].as_str() {
            Some("event") => delivered.push(frame["params"]["event"]["seq"].as_u64().unwrap()),
            Some("gap") => break frame,
            _ => panic!("unexpected frame {frame}"),
        }
    };
    assert!((delivered.len() as u64) < total, "the stalled subscriber should have fallen behind");
    assert_eq!(delivered, (2..2 + delivered.len() as u64).collect::<Vec<_>>());
    assert_eq!(gap["params"]["last_delivered_seq"].as_u64(), Some(1 + delivered.len() as u64), "{gap}");
    // Re-subscribing from the cursor fills the gap; the connection is still healthy.
    let cursor = 1 + delivered.len() as u64;
    let resumed =
        stalled.call(2, "events.subscribe", json!({"session_id": session.session_id, "cursor": cursor})).await;
    let replayed = resumed["result"]["events"].as_array().unwrap();
    assert_eq!(replayed.first().map(|e| e["seq"].clone()), Some(Value::from(cursor + 1)));
    assert_eq!(replayed.len() as u64, last - cursor);
}

#[tokio::test]
async fn the_shared_client_recovers_from_a_gap_by_itself() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[limits]\noutbound_queue = 4\n".into()),
        ..DaemonSetup::default()
    });
    let (writer, _) = daemon.client().await;
    let session = daemon.create_session(&writer).await;
    // A tiny delivery buffer and a consumer that waits: the client stops reading the socket, falls behind, and
    // must recover through a gap.
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
