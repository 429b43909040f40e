//! Reading a call's record from a replica held in memory.

use std::sync::atomic::{AtomicU64, Ordering};

use troupe_protocol::types::events::EventJson;
use troupe_runtime::event_log::{FollowDeliver, FollowGuard, ReplicaFailure, ReplicaWriter};

use super::*;

/// A session's log in memory; counts the events read.
#[derive(Debug, Default)]
struct MemoryReplica {
    entries: Vec<LogEntry>,
    read: AtomicU64,
}

impl MemoryReplica {
    fn push(&mut self, run_id: &str, payload: &str) {
        let seq = self.entries.len() as u64 + 1;
        let json =
            format!(r#"{{"session_id":"s","run_id":"{run_id}","seq":{seq},"timestamp":"t","payload":{payload}}}"#);
        self.entries.push(LogEntry { seq, json: EventJson::from_json(json).expect("json") });
    }

    fn filler(&mut self, count: usize) {
        for _ in 0..count {
            self.push("r0", r#"{"type":"assistant_text_delta","text":"filler"}"#);
        }
    }
}

fn refused() -> ReplicaError {
    ReplicaError { failure: ReplicaFailure::Failed, detail: "not in this test".into() }
}

impl LogReplica for MemoryReplica {
    fn create(&self, _: &str, _: &LogEntry) -> Result<Box<dyn ReplicaWriter>, ReplicaError> {
        Err(refused())
    }

    fn open(&self, _: &std::path::Path) -> Result<Box<dyn ReplicaWriter>, ReplicaError> {
        Err(refused())
    }

    fn remove(&self, _: &str) -> Result<(), ReplicaError> {
        Err(refused())
    }

    fn read_range(&self, _: &str, after: u64, through: u64, max_bytes: usize) -> Result<Vec<LogEntry>, ReplicaError> {
        let mut bytes = 0;
        let mut page = Vec::new();
        for entry in self.entries.iter().filter(|entry| entry.seq > after && entry.seq <= through) {
            bytes += entry.json.as_str().len();
            if !page.is_empty() && bytes > max_bytes {
                break;
            }
            page.push(entry.clone());
        }
        self.read.fetch_add(page.len() as u64, Ordering::Relaxed);
        Ok(page)
    }

    fn last_seq(&self, _: &str) -> Result<u64, ReplicaError> {
        Ok(self.entries.len() as u64)
    }

    fn follow(&self, _: &str, _: u64, _: FollowDeliver) -> Result<FollowGuard, ReplicaError> {
        Err(refused())
    }
}

fn started(call: &str) -> String {
    format!(
        r#"{{"type":"tool_call_started","tool_call_id":"{call}","tool":"shell","arguments":{{}},"action":"execute","resource":"x"}}"#
    )
}

fn progress(call: &str, offset: u64, text: &str) -> String {
    format!(
        r#"{{"type":"tool_call_progress","tool_call_id":"{call}","stream":"stdout","offset":{offset},"text":"{text}"}}"#
    )
}

fn terminated(call: &str) -> String {
    format!(r#"{{"type":"tool_call_terminated","tool_call_id":"{call}","result":{{"status":"success","output":""}}}}"#)
}

#[test]
fn a_running_calls_record_holds_its_run_and_durable_chunks_and_only_its_own() {
    let mut replica = MemoryReplica::default();
    replica.filler(3);
    replica.push("r1", &started("c1"));
    replica.push("r1", &started("c2"));
    replica.push("r1", &progress("c1", 0, "abc"));
    replica.push("r1", &progress("c2", 0, "other"));
    replica.push("r1", &progress("c1", 3, "d\u{fffd}e"));
    replica.push("r1", r#"{"type":"tool_output_elided","tool_call_id":"c1","stream":"stdout","elided_bytes":9}"#);
    let record = read_call_record(&replica, "s", "c1").expect("read").expect("found");
    assert_eq!(record.run_id, "r1");
    assert_eq!(record.through, 9);
    assert_eq!(
        record.events,
        [
            CallEvent::Progress { stream: OutputStream::Stdout, offset: 0, bytes: Some(b"abc".to_vec()) },
            CallEvent::Progress { stream: OutputStream::Stdout, offset: 3, bytes: None },
            CallEvent::Elided { stream: OutputStream::Stdout, elided_bytes: 9 },
        ]
    );
    assert!(!record.ended());
}

#[test]
fn a_call_ends_with_its_result_or_with_its_runs_end() {
    let mut replica = MemoryReplica::default();
    replica.push("r1", &started("c1"));
    replica.push("r1", &terminated("c1"));
    replica.push("r2", &started("c2"));
    replica.push("r3", r#"{"type":"run_interrupted"}"#);
    replica.push("r2", r#"{"type":"run_interrupted"}"#);
    let ended = read_call_record(&replica, "s", "c1").expect("read").expect("found");
    assert!(ended.ended());
    let interrupted = read_call_record(&replica, "s", "c2").expect("read").expect("found");
    assert_eq!(interrupted.events, [CallEvent::Ended], "only its own run's end counts");
}

#[test]
fn an_unknown_call_has_no_record() {
    let mut replica = MemoryReplica::default();
    replica.filler(5);
    replica.push("r1", &terminated("c1"));
    assert_eq!(read_call_record(&replica, "s", "c1").expect("read"), None, "a result without a start");
    assert_eq!(read_call_record(&replica, "s", "c9").expect("read"), None);
}

#[test]
fn a_recent_call_is_found_without_reading_the_whole_history() {
    let mut replica = MemoryReplica::default();
    replica.filler(5000);
    replica.push("r1", &started("c1"));
    replica.filler(10);
    let record = read_call_record(&replica, "s", "c1").expect("read").expect("found");
    assert_eq!(record.through, 5011);
    assert!(replica.read.load(Ordering::Relaxed) <= SCAN_WINDOW_SEQS * 2, "read {:?}", replica.read);
}

#[test]
fn a_call_that_started_windows_ago_keeps_every_later_event_in_order() {
    let mut replica = MemoryReplica::default();
    replica.push("r1", &started("c1"));
    replica.push("r1", &progress("c1", 0, "a"));
    replica.filler(SCAN_WINDOW_SEQS as usize * 2);
    replica.push("r1", &progress("c1", 1, "b"));
    replica.filler(3);
    let mut record = read_call_record(&replica, "s", "c1").expect("read").expect("found");
    let offsets: Vec<u64> = record
        .events
        .iter()
        .filter_map(|event| match event {
            CallEvent::Progress { offset, .. } => Some(*offset),
            _ => None,
        })
        .collect();
    assert_eq!(offsets, [0, 1]);
    replica.push("r1", &terminated("c1"));
    read_record_on(&replica, "s", "c1", &mut record).expect("read on");
    assert!(record.ended());
    assert_eq!(record.through, replica.entries.len() as u64);
}
