//! Following a session's log from a node that does not write it (`LogReplica::follow`, `read_range`, `last_seq`) on
//! a real nats-server: a follower gets every event after its starting point once, in order, across batches split
//! into several messages and appended after it started; it stops when told to or when its guard is dropped.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

mod log_common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use log_common::{connect, event, event_sized, seqs, texts};
use troupe_cluster::JetStreamReplica;
use troupe_cluster::log::SessionLog;
use troupe_runtime::event_log::{FollowControl, FollowGuard, LogEntry, LogReplica, ReplicaError};
use troupe_test_support::NatsServer;

const WAIT: Duration = Duration::from_secs(20);

type Delivered = mpsc::Receiver<Result<Vec<LogEntry>, ReplicaError>>;

/// Follows `session_id` after `after`, every delivery sent to the returned channel; `stop_after` batches (if any)
/// are answered `Continue`, the next `Stop`.
fn follow(
    replica: &JetStreamReplica,
    session_id: &str,
    after: u64,
    stop_after: Option<usize>,
) -> (FollowGuard, Delivered) {
    let (sender, receiver) = mpsc::channel();
    let mut batches = 0;
    let guard = replica
        .follow(
            session_id,
            after,
            Box::new(move |batch| {
                let _ = sender.send(batch);
                batches += 1;
                match stop_after {
                    Some(limit) if batches > limit => FollowControl::Stop,
                    _ => FollowControl::Continue,
                }
            }),
        )
        .unwrap();
    (guard, receiver)
}

/// Events delivered until one with seq `through` arrived (failing after [`WAIT`] or on an error).
fn until(delivered: &Delivered, through: u64) -> Vec<LogEntry> {
    let deadline = Instant::now() + WAIT;
    let mut events: Vec<LogEntry> = Vec::new();
    while events.last().map(|entry| entry.seq) < Some(through) {
        let left = deadline.saturating_duration_since(Instant::now());
        let batch = delivered.recv_timeout(left).unwrap_or_else(|error| panic!("waiting for seq {through}: {error}"));
        events.extend(batch.expect("a delivery, not an error"));
    }
    events
}

/// Waits until the follow ended (its `deliver`, and so the sender, was dropped); what came meanwhile is returned.
fn ended(delivered: &Delivered) -> Vec<Result<Vec<LogEntry>, ReplicaError>> {
    let deadline = Instant::now() + WAIT;
    let mut rest = Vec::new();
    loop {
        match delivered.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(batch) => rest.push(batch),
            Err(mpsc::RecvTimeoutError::Disconnected) => return rest,
            Err(mpsc::RecvTimeoutError::Timeout) => panic!("the follow did not end"),
        }
    }
}

#[test]
fn a_follower_on_another_node_gets_every_later_event_once_in_order() {
    let server = NatsServer::start();
    let writer = connect(&server.url(), "a");
    let mut log = SessionLog::create(&writer, "followed", &event(1)).unwrap();
    log.append_batch(&(2..=6).map(event).collect::<Vec<_>>()).unwrap();
    // Larger than one NATS message: stored as several.
    log.append_batch(&(7..=9).map(|seq| event_sized(seq, 400_000)).collect::<Vec<_>>()).unwrap();
    log.append_batch(&[event(10)]).unwrap();

    let replica = JetStreamReplica::new(connect(&server.url(), "b"));
    assert_eq!(replica.last_seq("followed").unwrap(), 10);
    assert_eq!(replica.last_seq("never-made").unwrap(), 0);
    assert_eq!(seqs(&replica.read_range("followed", 3, 10, usize::MAX).unwrap()), (4..=10).collect::<Vec<_>>());
    assert_eq!(seqs(&replica.read_range("followed", 3, 10, 1).unwrap()), [4]);

    let (_from_start, from_start) = follow(&replica, "followed", 0, None);
    let (_from_middle, from_middle) = follow(&replica, "followed", 5, None);
    let (_inside_a_message, inside_a_message) = follow(&replica, "followed", 3, None);
    let (_from_end, from_end) = follow(&replica, "followed", 10, None);
    for batch in [vec![event(11)], (12..=20).map(event).collect(), vec![event_sized(21, 900_000)]] {
        log.append_batch(&batch).unwrap();
    }
    let mut written = replica.read_range("followed", 0, 21, usize::MAX).unwrap();
    assert_eq!(seqs(&written), (1..=21).collect::<Vec<_>>());

    assert_eq!(texts(&until(&from_start, 21)), texts(&written));
    assert_eq!(texts(&until(&from_end, 21)), texts(&written[10..]));
    assert_eq!(texts(&until(&inside_a_message, 21)), texts(&written[3..]));
    assert_eq!(texts(&until(&from_middle, 21)), texts(&written[5..]));

    // And later appends still come, once each.
    log.append_batch(&[event(22)]).unwrap();
    written.push(event(22));
    for delivered in [&from_start, &from_middle, &inside_a_message, &from_end] {
        assert_eq!(texts(&until(delivered, 22)), texts(&written[21..]));
        assert!(delivered.try_recv().is_err(), "nothing more than was appended");
    }
}

#[test]
fn a_follow_ends_when_its_deliver_says_stop_or_its_guard_is_dropped() {
    let server = NatsServer::start();
    let writer = connect(&server.url(), "a");
    let mut log = SessionLog::create(&writer, "stopped", &event(1)).unwrap();
    let replica = JetStreamReplica::new(connect(&server.url(), "b"));

    let (_stopping, stopping) = follow(&replica, "stopped", 0, Some(0));
    let (dropped_guard, dropped) = follow(&replica, "stopped", 0, None);
    assert_eq!(seqs(&until(&dropped, 1)), [1]);
    let after_stop = ended(&stopping);
    assert_eq!(after_stop.len(), 1, "one batch, then the follow stopped: {after_stop:?}");
    assert_eq!(seqs(after_stop[0].as_ref().unwrap()), [1]);

    drop(dropped_guard);
    assert!(ended(&dropped).is_empty(), "nothing delivered after the guard was dropped");
    log.append_batch(&[event(2)]).unwrap();
    assert!(replica.follow("not a session id", 0, Box::new(|_| FollowControl::Continue)).is_err());
}
