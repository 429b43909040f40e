//! A session's log in JetStream on a real nats-server: what is appended reads back byte for byte, in ranges and
//! within byte limits, on any connection; two writers cannot both append; creation is refused on a session that
//! exists; a batch larger than a NATS message is split and reads back whole.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

mod log_common;

use log_common::{connect, event, event_sized, seqs, texts};
use troupe_cluster::ClusterError;
use troupe_cluster::log::{self, LogReader, SessionLog};
use troupe_test_support::NatsServer;

#[test]
fn appended_events_read_back_byte_for_byte_on_another_connection() {
    let server = NatsServer::start();
    let writer_node = connect(&server.url(), "a");
    let mut log = SessionLog::create(&writer_node, "round-trip", &event(1)).unwrap();
    let batches = [vec![event(2), event_sized(3, 300), event(4)], vec![event(5)], vec![event_sized(6, 10_000)]];
    for batch in &batches {
        log.append_batch(batch).unwrap();
    }
    assert_eq!(log.last_seq(), 6);
    let mut written = vec![event(1)];
    written.extend(batches.iter().flatten().cloned());

    let other_node = connect(&server.url(), "b");
    let (reopened, events) = SessionLog::open(&other_node, "round-trip").unwrap();
    assert_eq!(texts(&events), texts(&written));
    assert_eq!(reopened.last_seq(), 6);
    let last = LogReader::new(&other_node, "round-trip").last().unwrap().unwrap();
    assert_eq!(last.json.as_str(), written[5].json.as_str());

    let unknown = LogReader::new(&other_node, "no-such-session");
    assert!(unknown.last().unwrap().is_none());
    assert!(unknown.read_range(0, 10, usize::MAX).unwrap().is_empty());
    let (empty, none) = SessionLog::open(&other_node, "no-such-session").unwrap();
    assert_eq!((empty.last_seq(), none.len()), (0, 0));
}

#[test]
fn ranges_and_byte_limits_read_what_was_asked() {
    let server = NatsServer::start();
    let cluster = connect(&server.url(), "a");
    let mut log = SessionLog::create(&cluster, "ranges", &event(1)).unwrap();
    for first in (2..=50).step_by(7) {
        let batch: Vec<_> = (first..(first + 7).min(51)).map(|seq| event_sized(seq, seq as usize * 10)).collect();
        log.append_batch(&batch).unwrap();
    }
    for reader in [log.reader(), LogReader::new(&connect(&server.url(), "b"), "ranges")] {
        assert_eq!(seqs(&reader.read_range(10, 20, usize::MAX).unwrap()), (11..=20).collect::<Vec<_>>());
        assert_eq!(seqs(&reader.read_range(0, 50, usize::MAX).unwrap()), (1..=50).collect::<Vec<_>>());
        assert_eq!(seqs(&reader.read_range(45, 100, usize::MAX).unwrap()), (46..=50).collect::<Vec<_>>());
        assert!(reader.read_range(50, 60, usize::MAX).unwrap().is_empty());
        assert!(reader.read_range(20, 20, usize::MAX).unwrap().is_empty());
        // At least one event, however small the limit.
        assert_eq!(seqs(&reader.read_range(10, 20, 1).unwrap()), [11]);
        let two = event_sized(11, 110).len() + event_sized(12, 120).len();
        assert_eq!(seqs(&reader.read_range(10, 20, two).unwrap()), [11, 12]);
        assert_eq!(seqs(&reader.read_range(10, 20, two + 1).unwrap()), [11, 12]);
        let range = reader.read_range(30, 40, usize::MAX).unwrap();
        assert_eq!(texts(&range), texts(&(31..=40).map(|seq| event_sized(seq, seq as usize * 10)).collect::<Vec<_>>()));
    }
}

#[test]
fn a_batch_that_does_not_continue_the_log_is_refused_before_anything_is_sent() {
    let server = NatsServer::start();
    let cluster = connect(&server.url(), "a");
    let late = SessionLog::create(&cluster, "gaps", &event(2)).unwrap_err();
    assert!(late.to_string().contains("continues at seq 1"), "{late}");
    let mut log = SessionLog::create(&cluster, "gaps", &event(1)).unwrap();
    let gap = log.append_batch(&[event(2), event(4)]).unwrap_err();
    assert!(gap.to_string().contains("continues at seq 3"), "{gap}");
    // Refused, and every later append too (the runtime's store contract); nothing of it was stored.
    assert!(log.append_batch(&[event(2)]).is_err());
    assert_eq!(seqs(&log.reader().read_range(0, 10, usize::MAX).unwrap()), [1]);
}

#[test]
fn of_two_writers_only_the_one_that_read_last_appends() {
    let server = NatsServer::start();
    let (node_a, node_b) = (connect(&server.url(), "a"), connect(&server.url(), "b"));
    let mut first = SessionLog::create(&node_a, "fenced", &event(1)).unwrap();
    first.append_batch(&[event(2), event(3)]).unwrap();

    let (mut second, events) = SessionLog::open(&node_b, "fenced").unwrap();
    assert_eq!(seqs(&events), [1, 2, 3]);
    second.append_batch(&[event_sized(4, 44)]).unwrap();
    let fenced = first.append_batch(&[event_sized(4, 1)]).unwrap_err();
    assert!(matches!(fenced, ClusterError::Fenced { ref session_id } if session_id == "fenced"), "{fenced}");
    assert!(matches!(first.append_batch(&[event(5)]), Err(ClusterError::Fenced { .. })), "stays fenced");
    let stored = LogReader::new(&node_a, "fenced").read_range(0, 10, usize::MAX).unwrap();
    assert_eq!(texts(&stored[3..]), texts(&[event_sized(4, 44)]), "the fenced writer stored nothing");

    // And the other way round once the first writer reads the log again.
    let (mut first, events) = SessionLog::open(&node_a, "fenced").unwrap();
    assert_eq!(seqs(&events), [1, 2, 3, 4]);
    first.append_batch(&[event(5)]).unwrap();
    assert!(matches!(second.append_batch(&[event(5)]), Err(ClusterError::Fenced { .. })));
    assert_eq!(seqs(&first.reader().read_range(0, 10, usize::MAX).unwrap()), [1, 2, 3, 4, 5]);
}

#[test]
fn creating_a_session_that_exists_is_refused_and_purging_removes_it() {
    let server = NatsServer::start();
    let cluster = connect(&server.url(), "a");
    let mut log = SessionLog::create(&cluster, "exists", &event(1)).unwrap();
    log.append_batch(&[event(2)]).unwrap();
    let refused = SessionLog::create(&connect(&server.url(), "b"), "exists", &event_sized(1, 5)).unwrap_err();
    assert!(refused.to_string().contains("already exists"), "{refused}");
    assert_eq!(seqs(&log.reader().read_range(0, 10, usize::MAX).unwrap()), [1, 2]);

    log::purge(&cluster, "exists").unwrap();
    assert!(log.reader().read_range(0, 10, usize::MAX).unwrap().is_empty());
    assert!(LogReader::new(&cluster, "exists").last().unwrap().is_none());
    let mut again = SessionLog::create(&cluster, "exists", &event_sized(1, 10)).unwrap();
    again.append_batch(&(2..=80).map(event).collect::<Vec<_>>()).unwrap();
    // A reader whose index describes purged events reads the new ones (a session deleted and made again).
    let (mut before_purge, _) = SessionLog::open(&cluster, "exists").unwrap();
    for seq in 81..=120 {
        before_purge.append_batch(&[event(seq)]).unwrap();
    }
    let stale = before_purge.reader();
    assert!(stale.index_entries() >= 2, "an entry past event 100");
    log::purge(&cluster, "exists").unwrap();
    let mut third = SessionLog::create(&cluster, "exists", &event(1)).unwrap();
    third.append_batch(&(2..=5).map(event).collect::<Vec<_>>()).unwrap();
    assert_eq!(seqs(&stale.read_range(112, 120, usize::MAX).unwrap()), Vec::<u64>::new());
    assert_eq!(seqs(&stale.read_range(2, 4, usize::MAX).unwrap()), [3, 4]);
}

#[test]
fn a_batch_larger_than_a_nats_message_is_split_and_reads_back_whole() {
    let server = NatsServer::start();
    let cluster = connect(&server.url(), "a");
    let mut log = SessionLog::create(&cluster, "large", &event(1)).unwrap();
    // 30 events of 100 KB: about 3 MB, three times the default max_payload.
    let batch: Vec<_> = (2..=31).map(|seq| event_sized(seq, 100_000)).collect();
    log.append_batch(&batch).unwrap();
    log.append_batch(&[event(32)]).unwrap();
    assert!(log_common::messages_on(&cluster, "troupe.events.large") >= 5, "session_created, 3+ parts, the last");
    let (_, events) = SessionLog::open(&connect(&server.url(), "b"), "large").unwrap();
    assert_eq!(texts(&events[1..31]), texts(&batch));
    assert_eq!(seqs(&events[31..]), [32]);

    let too_big = log.append_batch(&[event_sized(33, 2 * 1024 * 1024)]).unwrap_err();
    let message = too_big.to_string();
    assert!(message.contains("max_payload is 1048576") && message.contains("bytes"), "{message}");
    assert_eq!(LogReader::new(&cluster, "large").last().unwrap().unwrap().seq, 32);
}

#[test]
fn appends_work_from_the_blocking_threads_of_another_runtime() {
    let server = NatsServer::start();
    let cluster = connect(&server.url(), "a");
    let other = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let appended = other.block_on(async move {
        let task = tokio::task::spawn_blocking(move || {
            let mut log = SessionLog::create(&cluster, "blocking", &event(1))?;
            log.append_batch(&[event(2)])?;
            log.reader().read_range(0, 2, usize::MAX)
        });
        tokio::time::timeout(std::time::Duration::from_secs(30), task).await
    });
    assert_eq!(seqs(&appended.unwrap().unwrap().unwrap()), [1, 2]);
}
