//! The retry path of a publish, which a test cannot provoke from outside (a lost acknowledgement): the same
//! message sent again is stored once.

use troupe_protocol::types::events::EventJson;
use troupe_test_support::NatsServer;

use super::*;
use crate::connection::ClusterSettings;
use crate::names;

fn event(seq: u64) -> LogEntry {
    LogEntry { seq, json: EventJson::from_json(format!(r#"{{"seq":{seq},"type":"note"}}"#)).unwrap() }
}

fn messages_on(cluster: &Cluster, subject: &str) -> u64 {
    cluster.block_on(async {
        let stream = cluster.jetstream().get_stream(names::EVENT_STREAM).await.unwrap();
        let info = stream.info_with_subjects(subject).await.unwrap();
        let counts: Vec<(String, usize)> = futures::TryStreamExt::try_collect(info).await.unwrap();
        counts.iter().map(|(_, count)| *count as u64).sum()
    })
}

#[test]
fn a_publish_repeated_after_a_lost_acknowledgement_is_stored_once() {
    let server = NatsServer::start();
    let cluster = Cluster::connect(ClusterSettings::plain(&server.url(), "a")).unwrap();
    let mut log = SessionLog::create(&cluster, "retry", &event(1)).unwrap();
    let expected = log.last_stream_seq;
    let message = format::pack("retry", 1, &[event(2), event(3)], 1 << 20, 1 << 20).unwrap().remove(0);
    let msg_id = format!("retry:2:{}", log.writer_id);
    let publish_once = || {
        cluster.block_on(async {
            let stream = log.reader.stream().await.unwrap();
            let out = publish::build(&message, &msg_id, expected);
            publish::fenced(&cluster, &stream, "retry", "troupe.events.retry", out, &msg_id).await
        })
    };
    let first = publish_once().unwrap();
    // The retry: the same message, id and fence, as if the first acknowledgement had been lost.
    let second = publish_once().unwrap();
    assert_eq!(first, second, "the repeat is acknowledged as the stored message");
    assert_eq!(messages_on(&cluster, "troupe.events.retry"), 2, "session_created and one copy of the batch");

    // Another writer's message with the same first event is not taken for this one's: it is fenced.
    let other_id = "retry:2:another-writer".to_owned();
    let other = cluster.block_on(async {
        let stream = log.reader.stream().await.unwrap();
        let out = publish::build(&message, &other_id, expected);
        publish::fenced(&cluster, &stream, "retry", "troupe.events.retry", out, &other_id).await
    });
    assert!(matches!(other, Err(ClusterError::Fenced { .. })), "{other:?}");

    // The writer's own append of that batch (its retry) is the stored message, and the log goes on after it.
    log.append_batch(&[event(2), event(3)]).unwrap();
    assert_eq!(messages_on(&cluster, "troupe.events.retry"), 2, "still one copy of the batch");
    log.append_batch(&[event(4)]).unwrap();
    let (_, events) = SessionLog::open(&cluster, "retry").unwrap();
    assert_eq!(events.iter().map(|entry| entry.seq).collect::<Vec<_>>(), [1, 2, 3, 4]);
}

#[test]
fn the_index_stays_sparse_and_reads_use_it() {
    let server = NatsServer::start();
    let cluster = Cluster::connect(ClusterSettings::plain(&server.url(), "a")).unwrap();
    let mut log = SessionLog::create(&cluster, "sparse", &event(1)).unwrap();
    for seq in 2..=200 {
        log.append_batch(&[event(seq)]).unwrap();
    }
    let entries = log.reader().index_entries();
    assert!((200 / INDEX_STRIDE_MESSAGES..=200 / INDEX_STRIDE_MESSAGES + 1).contains(&entries), "{entries} entries");
    // A reader on another connection builds its own index as it reads, and reads the same events.
    let other = Cluster::connect(ClusterSettings::plain(&server.url(), "b")).unwrap();
    let reader = LogReader::new(&other, "sparse");
    let all = reader.read_range(0, 200, usize::MAX).unwrap();
    assert_eq!(all.len(), 200);
    assert_eq!(reader.index_entries(), entries);
    let tail = reader.read_range(190, 195, usize::MAX).unwrap();
    assert_eq!(tail.iter().map(|entry| entry.seq).collect::<Vec<_>>(), [191, 192, 193, 194, 195]);
}

#[test]
fn the_writer_moves_between_threads_and_readers_are_shared() {
    fn send<T: Send>() {}
    fn shared<T: Clone + Send + Sync>() {}
    send::<SessionLog>();
    shared::<LogReader>();
}
