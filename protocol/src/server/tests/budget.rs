//! The reply budget: requests reserving more than it get it a few at a time, first come first served; a batch
//! never waits for itself; replays share it and give up on a closed connection.

use futures::FutureExt;
use futures::future::BoxFuture;

use super::{connection, context};
use crate::server::{ServerContext, ServerLimits, SinkError};

fn budget_limits(reply_budget_bytes: usize) -> ServerLimits {
    ServerLimits { reply_budget_bytes, ..super::limits(16, 1 << 20) }
}

#[tokio::test]
async fn requests_reserving_more_than_the_budget_hold_at_most_the_budget_at_once() {
    let (connection, _outbound, _ctx) = connection(budget_limits(100));
    let budget = connection.shared.budget.clone();
    let requests: Vec<ServerContext> = (0..12).map(|_| context(&connection)).collect();
    let mut waiting: Vec<(usize, BoxFuture<'static, Result<(), crate::error::RpcError>>)> =
        requests.iter().enumerate().map(|(index, ctx)| (index, ctx.reserve_reply_bytes(30).boxed())).collect();
    let mut finished_order = Vec::new();
    let mut most_held = 0;
    while !waiting.is_empty() {
        // Poll every waiting request once; those that got their bytes "build their reply".
        let mut granted = Vec::new();
        waiting.retain_mut(|(index, reserve)| {
            let done = reserve.now_or_never().is_some();
            if done {
                granted.push(*index);
            }
            !done
        });
        most_held = most_held.max(budget.in_use());
        assert!(budget.in_use() <= 100, "{} bytes held", budget.in_use());
        assert!(!granted.is_empty(), "someone always makes progress");
        assert!(granted.len() <= 3, "at most three replies of 30 bytes in a budget of 100");
        // Their replies are queued: the bytes go back.
        for index in granted {
            requests[index].group.reply_queued();
            finished_order.push(index);
        }
    }
    assert_eq!(most_held, 90);
    assert_eq!(finished_order, (0..12).collect::<Vec<_>>(), "first come, first served");
    assert_eq!(budget.in_use(), 0);
}

#[tokio::test]
async fn a_large_reservation_takes_at_most_the_whole_budget_and_is_not_overtaken() {
    let (connection, _outbound, first) = connection(budget_limits(100));
    let budget = connection.shared.budget.clone();
    first.reserve_reply_bytes(10).await.unwrap();
    let large = context(&connection);
    let mut large_reserve = large.reserve_reply_bytes(1_000_000).boxed();
    assert!((&mut large_reserve).now_or_never().is_none(), "waits for the whole budget");
    let small = context(&connection);
    let mut small_reserve = small.reserve_reply_bytes(1).boxed();
    assert!((&mut small_reserve).now_or_never().is_none(), "a later small one does not overtake it");
    first.group.reply_queued();
    assert!((&mut large_reserve).now_or_never().is_some());
    assert_eq!(budget.in_use(), 100);
    large.group.reply_queued();
    assert!((&mut small_reserve).now_or_never().is_some());
    assert_eq!(budget.in_use(), 1);
}

#[tokio::test]
async fn members_of_one_batch_do_not_wait_for_each_other_and_never_hold_more_than_the_budget() {
    let (connection, _outbound, batch) = connection(budget_limits(100));
    let budget = connection.shared.budget.clone();
    batch.reserve_reply_bytes(60).await.unwrap();
    // A second member of the same frame: waiting would wait for its own reply. It takes its bytes at once.
    assert_eq!(batch.reserve_reply_bytes(40).now_or_never().map(|outcome| outcome.is_ok()), Some(true));
    assert_eq!(budget.in_use(), 100);
    // A third would take the frame past the budget: refused at once, with -32003 and what to do instead.
    let refused = batch.reserve_reply_bytes(1).now_or_never().expect("no wait").unwrap_err();
    assert_eq!(refused.code, crate::error::codes::OVERLOADED);
    assert!(
        refused
            .data
            .as_ref()
            .is_some_and(|data| data["detail"].as_str().unwrap_or_default().contains("smaller batches"))
    );
    assert_eq!(budget.in_use(), 100);
    // Another frame waits.
    let other = context(&connection);
    let mut other_reserve = other.reserve_reply_bytes(30).boxed();
    assert!((&mut other_reserve).now_or_never().is_none());
    batch.group.reply_queued();
    assert!((&mut other_reserve).now_or_never().is_some());
}

#[tokio::test]
async fn replays_share_the_budget_and_give_up_when_the_connection_closes() {
    let (connection, outbound, ctx) = connection(budget_limits(100));
    let budget = connection.shared.budget.clone();
    let sink = ctx.event_sink("s");
    let reply = context(&connection);
    reply.reserve_reply_bytes(70).await.unwrap();
    let mut chunk = sink.reserve_replay(50).boxed();
    assert!((&mut chunk).now_or_never().is_none(), "70 + 50 exceed the budget");
    reply.group.reply_queued();
    let permit = (&mut chunk).now_or_never().expect("granted").unwrap();
    assert_eq!(permit.bytes(), 50);
    assert_eq!(budget.in_use(), 50);
    drop(permit);
    assert_eq!(budget.in_use(), 0);

    reply.reserve_reply_bytes(100).await.unwrap();
    let mut waiting = sink.reserve_replay(10).boxed();
    assert!((&mut waiting).now_or_never().is_none());
    drop(outbound);
    assert_eq!((&mut waiting).now_or_never().map(|result| result.err()), Some(Some(SinkError::Closed)));
}

#[tokio::test]
async fn a_replay_waiting_for_budget_gives_up_when_its_subscription_is_replaced() {
    let (connection, _outbound, ctx) = connection(budget_limits(100));
    let sink = ctx.event_sink("s");
    let reply = context(&connection);
    reply.reserve_reply_bytes(100).await.unwrap();
    let mut waiting = sink.reserve_replay(10).boxed();
    assert!((&mut waiting).now_or_never().is_none());
    let resubscribe = context(&connection);
    let _replacement = resubscribe.event_sink("s");
    assert_eq!((&mut waiting).now_or_never().map(|result| result.err()), Some(Some(SinkError::Closed)));
    // A cancelled waiter leaves the line: the next one is not stuck behind it.
    reply.group.reply_queued();
    assert_eq!(connection.shared.budget.in_use(), 0);
}

#[tokio::test]
async fn a_reply_waiting_for_budget_learns_that_its_connection_closed() {
    let (connection, outbound, first) = connection(budget_limits(100));
    assert!(first.reserve_reply_bytes(100).await.is_ok(), "an open connection reserves");
    let waiting_ctx = context(&connection);
    let mut waiting = waiting_ctx.reserve_reply_bytes(10).boxed();
    assert!((&mut waiting).now_or_never().is_none());
    drop(outbound);
    let outcome = (&mut waiting).now_or_never().expect("no longer waiting");
    assert!(outcome.is_err(), "no reply is built for a closed connection");
}
