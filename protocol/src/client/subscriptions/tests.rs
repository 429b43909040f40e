//! Unit tests of the subscriptions, without a task or a daemon: the requests they write are read back from
//! [`Calls`], their deliveries from the stream behind the [`Outbox`].

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use tokio::sync::{mpsc, oneshot};

use super::*;
use crate::types::events::EventPayload;

fn event(seq: u64) -> StoredEvent {
    StoredEvent {
        session_id: "s".to_owned(),
        run_id: None,
        seq,
        timestamp: "2026-01-01T00:00:00Z".to_owned(),
        origin: Some("user".to_owned()),
        payload: EventPayload::UserInputAdmitted {
            input_id: format!("input-{seq}"),
            input: format!("m {seq}"),
            attachments: Vec::new(),
        },
    }
}

fn notice(seq: u64) -> String {
    let event = serde_json::to_value(event(seq)).unwrap();
    serde_json::json!({"type": "event", "session_id": "s", "event": event}).to_string()
}

/// The `events.subscribe` written under `id`: its cursor, and the epoch and reply it awaits with.
fn subscribe_written(calls: &mut Calls, id: u64) -> (Option<u64>, u64, Option<SubscribeReply>) {
    let Some(OutgoingText::Plain(frame)) = calls.next_frame() else { panic!("expected a plain frame") };
    let frame: serde_json::Value = serde_json::from_str(&frame).unwrap();
    assert_eq!(frame["method"], "events.subscribe");
    assert_eq!(frame["id"], id);
    let Some(Pending::Subscribe { epoch, reply, .. }) = calls.answered(id) else {
        panic!("expected an events.subscribe under id {id}")
    };
    (frame["params"]["cursor"].as_u64(), epoch, reply)
}

#[test]
fn a_reply_is_replayed_held_events_follow_it_once_and_duplicates_are_dropped() {
    let mut calls = Calls::new(Arc::new(AtomicU64::new(1)));
    let (sender, mut deliveries) = mpsc::channel(64);
    let mut outbox = Outbox::new(sender);
    let mut subscriptions = Subscriptions::new();
    let mut io = Io { ready: true, calls: &mut calls, outbox: &mut outbox };
    let (reply, mut answer) = oneshot::channel();
    subscriptions.subscribe("s".to_owned(), Some(1), reply, &mut io);
    let (cursor, epoch, reply) = subscribe_written(io.calls, 1);
    assert_eq!(cursor, Some(1));
    // Live events read while the subscribe is in flight are held back.
    subscriptions.notice(&notice(3), &mut io);
    subscriptions.notice(&notice(4), &mut io);
    assert!(deliveries.try_recv().is_err());

    subscriptions.answered("s".to_owned(), epoch, reply, Ok((vec![event(1), event(2), event(3)], 3)), &mut io);
    subscriptions.notice(&notice(4), &mut io);
    subscriptions.notice(&notice(5), &mut io);
    assert_eq!(answer.try_recv().unwrap().unwrap(), 3);
    let mut seen = Vec::new();
    while let Ok(delivery) = deliveries.try_recv() {
        seen.push(match delivery {
            ClientDelivery::ReplayStart { after_seq, .. } => format!("start after {after_seq}"),
            ClientDelivery::ReplayEvent(event) => format!("replay {}", event.seq),
            ClientDelivery::ReplayEnd { last_seq, .. } => format!("end {last_seq}"),
            ClientDelivery::Live(event) => format!("live {}", event.seq),
            other => format!("{other:?}"),
        });
    }
    assert_eq!(seen, ["start after 1", "replay 2", "replay 3", "end 3", "live 4", "live 5"]);
}

#[test]
fn a_gap_subscribes_again_from_the_cursor_and_a_lost_link_parks_the_session() {
    let mut calls = Calls::new(Arc::new(AtomicU64::new(1)));
    let (sender, _deliveries) = mpsc::channel(64);
    let mut outbox = Outbox::new(sender);
    let mut subscriptions = Subscriptions::new();
    let mut io = Io { ready: true, calls: &mut calls, outbox: &mut outbox };
    let (reply, _answer) = oneshot::channel();
    subscriptions.subscribe("s".to_owned(), None, reply, &mut io);
    let (cursor, epoch, reply) = subscribe_written(io.calls, 1);
    assert_eq!(cursor, None);
    subscriptions.answered("s".to_owned(), epoch, reply, Ok((vec![event(1), event(2)], 2)), &mut io);

    subscriptions.notice(r#"{"type": "gap", "session_id": "s", "last_delivered_seq": 1}"#, &mut io);
    let (cursor, _, reply) = subscribe_written(io.calls, 2);
    assert_eq!(cursor, Some(2));
    assert!(reply.is_none(), "a recovery has no consumer waiting for it");

    // The link drops before the answer: the session waits for the link, then subscribes again from its cursor.
    subscriptions.link_lost(&[], true);
    let mut io = Io { ready: true, calls: &mut calls, outbox: &mut outbox };
    subscriptions.link_ready(&mut io);
    let (cursor, _, _) = subscribe_written(io.calls, 3);
    assert_eq!(cursor, Some(2));
    assert!(!io.calls.has_unwritten());
}
