//! Live sinks: held frames, gaps, and connection-wide notices.

use bytestring::ByteString;

use super::{connection, context, limits};
use crate::server::SinkError;

#[test]
fn a_held_transient_frame_that_finds_no_room_does_not_close_the_subscription() {
    let (connection, _outbound, ctx) = connection(limits(2, 1 << 20));
    let sink = ctx.event_sink("s");
    // While the subscribe reply is pending, tool output is held.
    assert_eq!(sink.offer_transient(&ByteString::from("output")), Ok(true));
    // The queue fills up before the reply is written, so the held output finds no room when the gate opens.
    for _ in 0..2 {
        connection.shared.queue.try_push(&ByteString::from("reply")).unwrap();
    }
    sink.channel.open();
    assert!(!sink.is_closed(), "losing a transient frame keeps the subscription");
    // An event that does not fit is different: the subscriber fell behind and gets its gap.
    assert_eq!(sink.offer(1, &ByteString::from("event")), Err(SinkError::Lagging));
    assert!(sink.is_closed());
    assert_eq!(connection.shared.queue.side_len(), 1, "one gap notice");
}

#[test]
fn a_live_event_that_does_not_fit_the_bytes_gets_a_gap_naming_the_last_delivered() {
    let (connection, _outbound, ctx) = connection(limits(100, 100));
    let sink = ctx.event_sink("s");
    sink.mark_replayed_through(7);
    sink.channel.open();
    sink.offer(8, &ByteString::from("x".repeat(60))).unwrap();
    assert_eq!(sink.offer(9, &ByteString::from("x".repeat(60))), Err(SinkError::Lagging));
    assert_eq!(sink.offer(10, &ByteString::from("x")), Err(SinkError::Closed), "only one gap");
    assert_eq!(connection.shared.queue.side_len(), 1);
    assert!(connection.shared.subscriptions.lock().is_empty());
}

#[tokio::test]
async fn a_batch_of_live_events_queues_what_fits_in_order_then_ends_with_a_gap_after_the_last_queued() {
    let (connection, mut outbound, ctx) = connection(limits(3, 1 << 20));
    let sink = ctx.event_sink("s");
    sink.mark_replayed_through(7);
    sink.channel.open();
    let events: Vec<(u64, ByteString)> = (8..=12).map(|seq| (seq, ByteString::from(format!("event {seq}")))).collect();
    sink.offer_all(&events[..2]).unwrap();
    assert_eq!(connection.shared.queue.usage().0, 2, "both queued, under one lock");
    // One slot left: the next batch's first event fits, its second does not.
    assert_eq!(sink.offer_all(&events[2..]), Err(SinkError::Lagging));
    assert_eq!(sink.offer_all(&events[4..]), Err(SinkError::Closed), "only one gap");
    let mut frames = Vec::new();
    for _ in 0..4 {
        frames.push(outbound.next().await.unwrap().to_string());
    }
    assert_eq!(frames[..3], ["event 8", "event 9", "event 10"]);
    assert!(frames[3].contains(r#""last_delivered_seq":10"#), "{frames:?}");
}

#[test]
fn a_batch_offered_while_gated_is_held_and_queued_when_the_gate_opens() {
    let (connection, _outbound, ctx) = connection(limits(8, 1 << 20));
    let sink = ctx.event_sink("s");
    let events: Vec<(u64, ByteString)> = (1..=3).map(|seq| (seq, ByteString::from(format!("event {seq}")))).collect();
    sink.offer_all(&events).unwrap();
    assert_eq!(sink.channel.held_len(), 3);
    assert_eq!(connection.shared.queue.usage().0, 0, "nothing before the subscribe reply");
    sink.channel.open();
    assert_eq!(connection.shared.queue.usage().0, 3);
}

#[tokio::test]
async fn gaps_waiting_on_the_side_list_stay_one_per_session() {
    let (connection, mut outbound, ctx) = connection(limits(1, 1 << 20));
    connection.shared.queue.try_push(&ByteString::from("reply")).unwrap();
    for round in 0..50u64 {
        let request = context(&connection);
        let sink = request.event_sink(if round % 2 == 0 { "a" } else { "b" });
        sink.mark_replayed_through(round);
        sink.channel.open();
        assert_eq!(sink.offer(round + 1, &ByteString::from("event")), Err(SinkError::Lagging));
    }
    drop(ctx);
    assert_eq!(connection.shared.queue.side_len(), 2, "a newer gap of a session replaces the older one");
    outbound.next().await.unwrap();
    let gaps = [outbound.next().await.unwrap(), outbound.next().await.unwrap()];
    assert!(gaps.iter().any(|gap| gap.contains(r#""last_delivered_seq":48"#)), "{gaps:?}");
    assert!(gaps.iter().any(|gap| gap.contains(r#""last_delivered_seq":49"#)), "{gaps:?}");
}

#[tokio::test]
async fn resubscribing_drops_the_replaced_subscriptions_waiting_gap() {
    let (connection, _outbound, _ctx) = connection(limits(1, 1 << 20));
    connection.shared.queue.try_push(&ByteString::from("reply")).unwrap();
    let old_request = context(&connection);
    let old = old_request.event_sink("a");
    old.mark_replayed_through(9093);
    old.channel.open();
    assert_eq!(old.offer(9094, &ByteString::from("event")), Err(SinkError::Lagging));
    assert_eq!(connection.shared.queue.side_len(), 1, "the old subscription's gap waits");
    // The client subscribes again before the gap was written: the new reply tells it where to resume, and a gap
    // pointing at 9093 arriving after it would restart a healthy replay.
    let new_request = context(&connection);
    let _new = new_request.event_sink("a");
    assert_eq!(connection.shared.queue.side_len(), 0);
}

#[tokio::test]
async fn a_sink_can_end_its_subscription_with_a_gap() {
    let (connection, _outbound, ctx) = connection(limits(8, 1 << 20));
    let sink = ctx.event_sink("a");
    sink.mark_replayed_through(7);
    sink.end_with_gap();
    assert!(sink.is_closed());
    assert_eq!(connection.shared.queue.side_len(), 1, "one gap notice");
}

#[tokio::test]
async fn a_client_that_does_not_read_holds_only_the_newest_connection_notice() {
    use crate::methods::notification::RuntimeChanged;
    use crate::types::runtime::{RuntimeChangedParams, RuntimeSnapshot};
    let (connection, mut outbound, ctx) = connection(limits(2, 1 << 20));
    let notifier = ctx.connection_notifier();
    let snapshot = |revision| RuntimeChangedParams {
        previous_revision: Some(revision - 1),
        snapshot: RuntimeSnapshot {
            revision,
            providers: vec![],
            models: vec![],
            agents: vec![],
            sandbox: None,
            mcp_servers: vec![],
        },
        reasons: vec!["provider_connected".to_owned()],
    };
    // Before the gate opens only the newest notice is held.
    for revision in 1..=10 {
        notifier.notify::<RuntimeChanged>(&snapshot(revision)).unwrap();
    }
    notifier.channel.open();
    for revision in 11..=1000 {
        notifier.notify::<RuntimeChanged>(&snapshot(revision)).unwrap();
    }
    // Two fit the queue (the held 10 and 11); of the 989 that did not, only the newest waits.
    assert_eq!(connection.shared.queue.side_len(), 1);
    let mut frames = Vec::new();
    for _ in 0..3 {
        frames.push(outbound.next().await.unwrap().to_string());
    }
    assert!(frames[0].contains("\"revision\":10"), "{}", frames[0]);
    assert!(frames[2].contains("\"revision\":1000"), "{}", frames[2]);
}
