//! A session's replicated store on a real nats-server and a real local log (`ReplicatedStore` over a JetStream
//! writer and the file store): the local copy is written while JetStream is asked, and a batch JetStream fences is
//! cut off the local log again, so that the local log stays a prefix of JetStream's; and a local log left longer
//! than JetStream's (a node stopped between the two) has the extra events cut off when the session is opened.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

mod log_common;

use log_common::{connect, seqs};
use troupe_cluster::log::SessionLog;
use troupe_protocol::types::events::{EventJson, EventPayload, StoredEvent};
use troupe_runtime::error::RuntimeError;
use troupe_runtime::event_log::{
    self, EventStore, LogEntry, LogWriter, ReplicaAppend, ReplicaError, ReplicaFailure, ReplicaWriter, ReplicatedStore,
};
use troupe_test_support::NatsServer;

const SESSION_ID: &str = "0190f5c2-0000-7000-8000-0000000000aa";

/// The JetStream writer as a node's replica writer is, without the lease (the fence is what is tested here).
struct Writer(SessionLog);

impl ReplicaWriter for Writer {
    fn append_batch(&mut self, batch: &[LogEntry]) -> Result<(), ReplicaError> {
        self.start_batch(batch).wait()
    }

    fn start_batch(&mut self, batch: &[LogEntry]) -> Box<dyn ReplicaAppend + '_> {
        Box::new(self.0.start_append(batch))
    }
}

fn entry(seq: u64, payload: EventPayload) -> LogEntry {
    let event = StoredEvent {
        session_id: SESSION_ID.to_owned(),
        run_id: None,
        seq,
        timestamp: "2026-12-07T00:00:00.000Z".to_owned(),
        origin: None,
        payload,
    };
    LogEntry { seq, json: EventJson::encode(&event).unwrap() }
}

fn created() -> LogEntry {
    LogEntry { seq: 1, json: log_common::session_created(SESSION_ID) }
}

fn input(seq: u64, text: &str) -> LogEntry {
    entry(
        seq,
        EventPayload::UserInputAdmitted {
            input_id: format!("input-{seq}"),
            input: text.to_owned(),
            attachments: Vec::new(),
        },
    )
}

#[test]
fn a_batch_jetstream_fences_is_cut_off_the_local_log_it_was_written_to_meanwhile() {
    let server = NatsServer::start();
    let (node_a, node_b) = (connect(&server.url(), "a"), connect(&server.url(), "b"));
    let temp = tempfile::tempdir().unwrap();
    std::fs::create_dir(temp.path().join("sessions")).unwrap();
    let session_dir = temp.path().join("sessions").join(SESSION_ID);
    drop(LogWriter::create(&session_dir, &created().json).unwrap());
    let replica = SessionLog::create(&node_a, SESSION_ID, &created()).unwrap();
    let local = event_log::load(&session_dir).unwrap().store;
    let mut store = ReplicatedStore::new(Box::new(Writer(replica)), Box::new(local));

    store.append_batch(&[input(2, "a"), input(3, "b")]).unwrap();
    assert_eq!(
        seqs(&event_log::load(&session_dir).unwrap().store.reader().read_range(0, 10, usize::MAX).unwrap()),
        [1, 2, 3]
    );
    let log_len = std::fs::metadata(event_log::log_path(&session_dir)).unwrap().len();

    // Another node takes the session over in JetStream and appends: this node's next batch is fenced there, after
    // its local copy was written.
    let (mut other, _) = SessionLog::open(&node_b, SESSION_ID).unwrap();
    other.append_batch(&[input(4, "from b")]).unwrap();
    let fenced = store.append_batch(&[input(4, "from a"), input(5, "from a")]).unwrap_err();
    assert!(
        matches!(&fenced, RuntimeError::Replica(ReplicaError { failure: ReplicaFailure::Fenced, .. })),
        "{fenced:?}"
    );
    assert_eq!(
        std::fs::metadata(event_log::log_path(&session_dir)).unwrap().len(),
        log_len,
        "the fenced batch is cut off the local log"
    );
    let reloaded = event_log::load(&session_dir).unwrap();
    assert!(reloaded.skipped.is_empty(), "{:?}", reloaded.skipped);
    assert_eq!(reloaded.last_seq, 3);
    drop(reloaded);

    // The local log is a prefix of JetStream's: opening the session again adds b's event, nothing is moved aside.
    assert!(store.append_batch(&[input(4, "again")]).is_err(), "a fenced store refuses everything after");
    let stored = other.reader().read_range(0, 10, usize::MAX).unwrap();
    assert_eq!(seqs(&stored), [1, 2, 3, 4]);
    assert_eq!(stored[3].json.as_str(), input(4, "from b").json.as_str());
}

#[test]
fn opening_cuts_off_local_events_jetstream_never_took_and_keeps_the_sessions_other_files() {
    let server = NatsServer::start();
    let node = connect(&server.url(), "a");
    let temp = tempfile::tempdir().unwrap();
    std::fs::create_dir(temp.path().join("sessions")).unwrap();
    let session_dir = temp.path().join("sessions").join(SESSION_ID);
    // The local log went two events further than JetStream: a node stopped while its last batch was being asked.
    // A blank line among the events it shares with JetStream (the loader skips it) must not move the cut.
    let mut local = LogWriter::create(&session_dir, &created().json).unwrap();
    local.append_batch(&[input(2, "x").json]).unwrap();
    drop(local);
    let mut file = std::fs::OpenOptions::new().append(true).open(event_log::log_path(&session_dir)).unwrap();
    std::io::Write::write_all(&mut file, b"\n").unwrap();
    drop(file);
    let mut local = event_log::load(&session_dir).unwrap().store;
    local.append_batch(&[input(3, "x"), input(4, "x"), input(5, "x")]).unwrap();
    drop(local);
    std::fs::write(session_dir.join("kept.txt"), "the session's other files stay").unwrap();
    let mut replicated = SessionLog::create(&node, SESSION_ID, &created()).unwrap();
    replicated.append_batch(&[input(2, "x"), input(3, "x")]).unwrap();
    drop(replicated);

    let replica = troupe_cluster::replica::JetStreamReplica::new(node);
    let writer = event_log::LogReplica::open(&replica, &session_dir).unwrap();
    let reloaded = event_log::load(&session_dir).unwrap();
    assert!(reloaded.skipped.is_empty(), "{:?}", reloaded.skipped);
    assert_eq!(reloaded.last_seq, 3, "the events JetStream never took are cut off");
    assert!(session_dir.join("kept.txt").exists(), "the session stays where it is");
    let kept: Vec<_> = std::fs::read_dir(temp.path().join("cluster").join("diverged")).unwrap().collect();
    assert_eq!(kept.len(), 1, "the lines cut off are kept, and nothing else is moved aside");
    let kept = std::fs::read_to_string(kept[0].as_ref().unwrap().path()).unwrap();
    let expected: String = (4..=5).map(|seq| format!("{}\n", input(seq, "x").json.as_str())).collect();
    assert_eq!(kept, expected);

    // And the session goes on from there, in both.
    let mut store = ReplicatedStore::new(writer, Box::new(reloaded.store));
    store.append_batch(&[input(4, "y")]).unwrap();
    assert_eq!(event_log::load(&session_dir).unwrap().last_seq, 4);
}
