//! A session's log when NATS fails: an append to a dead server gives up within a bound and acknowledges nothing,
//! a restarted server still has every acknowledged event, and on a three-server cluster with three replicas the
//! log goes on when a server dies (the stream's leader, the hardest case) and loses no acknowledged event.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

mod log_common;

use std::time::{Duration, Instant};

use log_common::{connect, event, event_sized, seqs, texts};
use troupe_cluster::log::{APPEND_DEADLINE, LogReader, SessionLog};
use troupe_cluster::{Cluster, ClusterError, ClusterSettings, names};
use troupe_test_support::{NatsCluster, NatsServer};

#[test]
fn an_append_to_a_dead_server_fails_in_bounded_time_and_a_restart_keeps_every_acknowledged_event() {
    let mut server = NatsServer::start();
    let cluster = connect(&server.url(), "a");
    let mut log = SessionLog::create(&cluster, "restart", &event(1)).unwrap();
    log.append_batch(&[event(2), event_sized(3, 500)]).unwrap();

    server.kill();
    let started = Instant::now();
    let failed = log.append_batch(&[event(4)]).unwrap_err();
    let took = started.elapsed();
    assert!(matches!(failed, ClusterError::Unreachable { .. }), "{failed}");
    assert!(took <= APPEND_DEADLINE + Duration::from_secs(5), "gave up after {took:?}");
    assert!(log.append_batch(&[event(4)]).is_err(), "a writer that failed refuses every later append");

    server.restart();
    let after = connect(&server.url(), "b");
    let (mut reopened, events) = SessionLog::open(&after, "restart").unwrap();
    // The unacknowledged event may have landed (the client resends what it buffered once it reconnects); every
    // acknowledged one did.
    assert_eq!(texts(&events[..3]), texts(&[event(1), event(2), event_sized(3, 500)]));
    assert!(events.len() == 3 || texts(&events[3..]) == texts(&[event(4)]), "{:?}", seqs(&events));
    let next = reopened.last_seq() + 1;
    reopened.append_batch(&[event(next)]).unwrap();
    assert_eq!(LogReader::new(&after, "restart").last().unwrap().unwrap().seq, next);
}

#[test]
fn with_three_replicas_the_log_survives_its_leader() {
    let mut servers = NatsCluster::start(3);
    let settings = ClusterSettings { replicas: 3, ..ClusterSettings::plain(&servers.urls(), "a") };
    let cluster = Cluster::connect(settings).unwrap();
    let mut log = SessionLog::create(&cluster, "replicated", &event(1)).unwrap();
    for seq in 2..=10 {
        log.append_batch(&[event(seq)]).unwrap();
    }

    let leader = stream_leader(&cluster);
    servers.kill(leader);
    for seq in 11..=20 {
        log.append_batch(&[event_sized(seq, 200)]).unwrap();
    }
    let reader_node = Cluster::connect(ClusterSettings {
        replicas: 3,
        ..ClusterSettings::plain(&surviving_urls(&servers, leader), "b")
    })
    .unwrap();
    let (_, events) = SessionLog::open(&reader_node, "replicated").unwrap();
    assert_eq!(seqs(&events), (1..=20).collect::<Vec<_>>());
    let expected: Vec<_> = (1..=10).map(event).chain((11..=20).map(|seq| event_sized(seq, 200))).collect();
    assert_eq!(texts(&events), texts(&expected));
    assert_eq!(seqs(&LogReader::new(&reader_node, "replicated").read_range(15, 17, usize::MAX).unwrap()), [16, 17]);
    // The fences hold on a replicated stream too: creation of a session that exists, and a second writer.
    let refused = SessionLog::create(&reader_node, "replicated", &event(1)).unwrap_err();
    assert!(refused.to_string().contains("already exists"), "{refused}");
    let (mut second, _) = SessionLog::open(&reader_node, "replicated").unwrap();
    second.append_batch(&[event(21)]).unwrap();
    assert!(matches!(log.append_batch(&[event(21)]), Err(ClusterError::Fenced { .. })));
}

/// The index in `NatsCluster` of the event stream's leader (servers are named `n1`, `n2`, …).
fn stream_leader(cluster: &Cluster) -> usize {
    let leader = cluster.block_on(async {
        let mut stream = cluster.jetstream().get_stream(names::EVENT_STREAM).await.unwrap();
        let info = stream.info().await.unwrap();
        info.cluster.as_ref().and_then(|cluster| cluster.leader.clone()).expect("a replicated stream has a leader")
    });
    leader.trim_start_matches('n').parse::<usize>().unwrap() - 1
}

fn surviving_urls(servers: &NatsCluster, dead: usize) -> String {
    let urls: Vec<String> = servers.urls().split(',').map(str::to_owned).collect();
    urls.iter()
        .enumerate()
        .filter(|(index, _)| *index != dead)
        .map(|(_, url)| url.clone())
        .collect::<Vec<_>>()
        .join(",")
}
