//! The outbound queue: bounded in frames and in bytes, a frame always fits an empty queue, replies wait for room,
//! and a closed connection frees everything.

use bytestring::ByteString;
use futures::FutureExt;

use super::{connection, limits};
use crate::server::outbound::Refused;

fn frame(bytes: usize) -> ByteString {
    ByteString::from("x".repeat(bytes))
}

#[tokio::test]
async fn the_queue_is_bounded_in_bytes_as_well_as_frames() {
    let (connection, mut outbound, _ctx) = connection(limits(100, 1000));
    let queue = &connection.shared.queue;
    // Small frames: ten of 100 bytes fill the bytes long before the 100 frames.
    for _ in 0..10 {
        queue.try_push(&frame(100)).unwrap();
    }
    assert_eq!(queue.try_push(&frame(1)), Err(Refused::Full));
    assert_eq!(queue.usage(), (10, 1000));
    for _ in 0..10 {
        outbound.next().await.unwrap();
    }
    assert_eq!(queue.usage(), (0, 0));
    // One frame larger than the whole byte bound fits an empty queue, and then nothing else does.
    queue.try_push(&frame(5000)).unwrap();
    assert_eq!(queue.try_push(&frame(1)), Err(Refused::Full));
    assert_eq!(outbound.next().await.unwrap().len(), 5000);
    queue.try_push(&frame(1)).unwrap();
}

#[tokio::test]
async fn the_queue_is_bounded_in_frames() {
    let (connection, _outbound, _ctx) = connection(limits(2, 1 << 20));
    let queue = &connection.shared.queue;
    queue.try_push(&frame(1)).unwrap();
    queue.try_push(&frame(1)).unwrap();
    assert_eq!(queue.try_push(&frame(1)), Err(Refused::Full));
}

#[tokio::test]
async fn a_reply_waits_for_room_and_is_queued_once_the_writer_takes_a_frame() {
    let (connection, mut outbound, _ctx) = connection(limits(4, 100));
    let queue = &connection.shared.queue;
    queue.try_push(&frame(80)).unwrap();
    let mut reply = Box::pin(queue.push(frame(50)));
    assert!((&mut reply).now_or_never().is_none(), "80 + 50 bytes exceed the bound: the reply waits");
    assert_eq!(outbound.next().await.unwrap().len(), 80);
    assert_eq!((&mut reply).now_or_never(), Some(Ok(())));
    assert_eq!(queue.usage(), (1, 50));
}

#[tokio::test]
async fn a_closed_connection_frees_what_it_queued_held_and_subscribed() {
    let (connection, mut outbound, ctx) = connection(limits(4, 1 << 20));
    let shared = connection.shared.clone();
    for _ in 0..4 {
        shared.queue.try_push(&frame(10)).unwrap();
    }
    let sink = ctx.event_sink("s");
    // Gated: held until the reply is queued.
    sink.offer(1, &frame(10)).unwrap();
    assert_eq!(sink.channel.held_len(), 1);
    let mut waiting_reply = Box::pin(shared.queue.push(frame(10)));
    assert!((&mut waiting_reply).now_or_never().is_none());
    assert_eq!(shared.subscriptions.lock().len(), 1);

    outbound.close();
    assert_eq!(shared.queue.usage(), (0, 0), "queued frames are dropped");
    assert!(shared.subscriptions.lock().is_empty(), "subscriptions are let go");
    assert!(sink.is_closed());
    assert_eq!(sink.channel.held_len(), 0, "held frames are freed");
    assert_eq!((&mut waiting_reply).now_or_never(), Some(Err(Refused::Closed)), "a waiting reply gives up");
    assert_eq!(outbound.next().await, None);
    assert_eq!(sink.offer(2, &frame(10)), Err(crate::server::SinkError::Closed));
}

#[tokio::test]
async fn a_batch_takes_frames_in_order_within_its_bounds_and_the_side_list_only_when_the_queue_is_empty() {
    let (connection, mut outbound, _ctx) = connection(limits(100, 1 << 20));
    let queue = &connection.shared.queue;
    for index in 0..5 {
        queue.try_push(&ByteString::from(format!("{index}{}", "x".repeat(99)))).unwrap();
    }
    queue.push_side(crate::server::outbound::SideKey::Notice(1), ByteString::from("side"));
    let mut batch = Vec::new();
    // At most 2 frames.
    assert!(next_batch(&mut outbound, &mut batch, 2, 1 << 20).await);
    let firsts: Vec<char> = batch.iter().map(|frame| frame.chars().next().unwrap()).collect();
    assert_eq!(firsts, ['0', '1']);
    assert_eq!(queue.usage(), (3, 300), "taken frames free their room");
    // Bytes: the batch stops once it holds 150 bytes (two frames of 100: the first alone is below).
    batch.clear();
    assert!(next_batch(&mut outbound, &mut batch, 10, 150).await);
    let firsts: Vec<char> = batch.iter().map(|frame| frame.chars().next().unwrap()).collect();
    assert_eq!(firsts, ['2', '3']);
    // The last queued frame comes before the side list, and without it.
    batch.clear();
    assert!(next_batch(&mut outbound, &mut batch, 10, 1 << 20).await);
    assert_eq!(batch.len(), 1);
    assert!(batch[0].starts_with('4'));
    // The side list comes after every queued frame, alone.
    batch.clear();
    assert!(next_batch(&mut outbound, &mut batch, 10, 1 << 20).await);
    assert_eq!(batch, [ByteString::from("side")]);
    batch.clear();
    assert!(next_batch(&mut outbound, &mut batch, 10, 1 << 20).now_or_never().is_none(), "nothing queued: it waits");
    outbound.close();
    assert!(!next_batch(&mut outbound, &mut batch, 10, 1 << 20).await, "closed: no more batches");
    assert!(batch.is_empty());
}

/// The writer's side of a batch, awaited.
async fn next_batch(
    outbound: &mut crate::server::OutboundStream,
    batch: &mut Vec<ByteString>,
    max_frames: usize,
    max_bytes: usize,
) -> bool {
    std::future::poll_fn(|cx| outbound.poll_next_batch(cx, batch, max_frames, max_bytes)).await
}
