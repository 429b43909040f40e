//! `EventSink::offer_replay`: it waits for the gate and for room, turns a stall into exactly one gap, and
//! reports a closed connection or subscription.

use std::time::Duration;

use bytestring::ByteString;
use futures::FutureExt;

use super::{connection, context};
use crate::server::{ServerLimits, SinkError};

fn replay_limits(outbound_queue: usize) -> ServerLimits {
    ServerLimits { replay_stall: Duration::from_secs(30), ..super::limits(outbound_queue, 1 << 20) }
}

fn event(seq: u64) -> ByteString {
    ByteString::from(format!(r#"{{"seq":{seq}}}"#))
}

fn assert_send<T: Send>(_: &T) {}

#[tokio::test]
async fn a_replayed_event_waits_for_the_reply_then_for_room() {
    let (connection, mut outbound, ctx) = connection(replay_limits(1));
    let sink = ctx.event_sink("s");
    sink.mark_replayed_through(3);
    let mut offer = Box::pin(sink.offer_replay(4, &event(4)));
    assert_send(&offer);
    assert!((&mut offer).now_or_never().is_none(), "the subscribe reply is not queued yet");
    // The reply takes the only slot, then the gate opens.
    connection.shared.queue.try_push(&ByteString::from("reply")).unwrap();
    ctx.group.reply_queued();
    ctx.group.release(&connection.shared).await;
    assert!((&mut offer).now_or_never().is_none(), "no room behind the reply");
    assert_eq!(&*outbound.next().await.unwrap(), "reply");
    assert_eq!((&mut offer).now_or_never(), Some(Ok(())));
    assert_eq!(&*outbound.next().await.unwrap(), r#"{"seq":4}"#);
    assert!(!sink.is_closed());
}

#[tokio::test]
async fn a_replay_that_finds_no_room_for_the_stall_time_becomes_exactly_one_gap() {
    let limits = ServerLimits { replay_stall: Duration::from_millis(20), ..replay_limits(2) };
    let (connection, mut outbound, ctx) = connection(limits);
    let sink = ctx.event_sink("s");
    sink.mark_replayed_through(3);
    sink.channel.open();
    sink.offer_replay(4, &event(4)).await.unwrap();
    sink.offer_replay(5, &event(5)).await.unwrap();
    // The client reads nothing more: after the stall time the subscriber is declared too slow.
    let stalled = tokio::time::timeout(Duration::from_secs(20), sink.offer_replay(6, &event(6))).await;
    assert_eq!(stalled.expect("the stall ends the wait"), Err(SinkError::Lagging));
    assert_eq!(sink.offer_replay(7, &event(7)).await, Err(SinkError::Closed));
    assert_eq!(sink.offer(8, &event(8)), Err(SinkError::Closed));
    assert_eq!(connection.shared.queue.side_len(), 1, "exactly one gap");
    let frames: Vec<ByteString> =
        vec![outbound.next().await.unwrap(), outbound.next().await.unwrap(), outbound.next().await.unwrap()];
    assert_eq!(&*frames[1], r#"{"seq":5}"#);
    assert!(frames[2].contains(r#""type":"gap""#) && frames[2].contains(r#""last_delivered_seq":5"#), "{frames:?}");
}

#[tokio::test]
async fn a_replay_reports_a_closed_connection_or_a_replaced_subscription() {
    let (connection, outbound, ctx) = connection(replay_limits(1));
    let sink = ctx.event_sink("s");
    let mut at_gate = Box::pin(sink.offer_replay(1, &event(1)));
    assert!((&mut at_gate).now_or_never().is_none());
    let resubscribe = context(&connection);
    let replacement = resubscribe.event_sink("s");
    assert_eq!((&mut at_gate).now_or_never(), Some(Err(SinkError::Closed)), "replaced while at the gate");

    replacement.channel.open();
    connection.shared.queue.try_push(&ByteString::from("reply")).unwrap();
    let mut for_room = Box::pin(replacement.offer_replay(1, &event(1)));
    assert!((&mut for_room).now_or_never().is_none());
    drop(outbound);
    assert_eq!((&mut for_room).now_or_never(), Some(Err(SinkError::Closed)), "the connection closed");
    assert_eq!(replacement.offer_replay(2, &event(2)).await, Err(SinkError::Closed));
}

#[tokio::test]
async fn a_cancelled_replay_offer_queues_and_records_nothing() {
    let (connection, mut outbound, ctx) = connection(replay_limits(1));
    let sink = ctx.event_sink("s");
    sink.mark_replayed_through(3);
    sink.channel.open();
    connection.shared.queue.try_push(&ByteString::from("reply")).unwrap();
    let mut offer = Box::pin(sink.offer_replay(4, &event(4)));
    assert!((&mut offer).now_or_never().is_none());
    drop(offer);
    assert_eq!(&*outbound.next().await.unwrap(), "reply");
    assert_eq!(connection.shared.queue.usage(), (0, 0));
    // The next live event that does not fit names 3, not the cancelled 4, as the last delivered.
    connection.shared.queue.try_push(&ByteString::from("other")).unwrap();
    assert_eq!(sink.offer(4, &event(4)), Err(SinkError::Lagging));
    outbound.next().await.unwrap();
    assert!(outbound.next().await.unwrap().contains(r#""last_delivered_seq":3"#));
}
