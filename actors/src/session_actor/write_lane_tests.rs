//! The write lane's rules, without actix: a store in memory stands in for the log file.

use std::sync::Arc;

use troupe_protocol::types::events::EventJson;
use troupe_runtime::error::RuntimeError;
use troupe_runtime::event_log::{EventReader, EventStore, LogEntry};

use super::*;

/// A store in memory: the `seq`s it holds, and whether it still has a torn tail (cut by its first append).
#[derive(Default)]
struct MemoryStore {
    seqs: Vec<u64>,
    torn: bool,
}

impl EventStore for MemoryStore {
    fn append_batch(&mut self, batch: &[LogEntry]) -> Result<(), RuntimeError> {
        self.seqs.extend(batch.iter().map(|entry| entry.seq));
        self.torn = false;
        Ok(())
    }

    fn last_seq(&self) -> u64 {
        self.seqs.last().copied().unwrap_or(0)
    }

    fn len_bytes(&self) -> u64 {
        self.seqs.len() as u64
    }

    fn reader(&self) -> Arc<dyn EventReader> {
        unimplemented!("the lane never reads")
    }

    fn has_torn_tail(&self) -> bool {
        self.torn
    }
}

fn store_through(last: u64) -> MemoryStore {
    MemoryStore { seqs: (1..=last).collect(), torn: false }
}

fn entry(seq: u64) -> LogEntry {
    LogEntry { seq, json: EventJson::from_json(format!("{{\"seq\":{seq}}}")).unwrap() }
}

/// Accepts the next event, as the session does.
fn accept(lane: &mut WriteLane<MemoryStore>) -> u64 {
    let seq = lane.next_seq();
    lane.enqueue(entry(seq), Start::Now).unwrap();
    seq
}

/// Writes a taken batch into its store, as a log writer thread does, and brings it back.
fn write(lane: &mut WriteLane<MemoryStore>, (mut store, batch): (MemoryStore, Vec<LogEntry>)) -> Durable {
    store.append_batch(&batch).unwrap();
    lane.complete(store, batch)
}

fn seqs(entries: &[LogEntry]) -> Vec<u64> {
    entries.iter().map(|entry| entry.seq).collect()
}

fn storage_error() -> EngineError {
    EngineError::Storage { session_id: "s".into(), detail: "disk full".into() }
}

#[test]
fn sequences_follow_the_store_and_are_queued_in_order() {
    let mut lane = WriteLane::new(store_through(4));
    assert_eq!((lane.committed_seq(), lane.next_seq()), (4, 5));
    assert_eq!([accept(&mut lane), accept(&mut lane), accept(&mut lane)], [5, 6, 7]);
    let (store, batch) = lane.take_batch().expect("a batch");
    assert_eq!(seqs(&batch), [5, 6, 7]);
    let durable = write(&mut lane, (store, batch));
    assert_eq!(seqs(&durable.entries), [5, 6, 7]);
    assert_eq!(lane.committed_seq(), 7);
    assert_eq!(lane.store().map(|store| store.seqs.clone()), Some((1..=7).collect()));
}

#[test]
fn events_accepted_while_a_batch_is_written_form_the_next_batch() {
    let mut lane = WriteLane::new(store_through(1));
    accept(&mut lane);
    let first = lane.take_batch().expect("the first batch");
    assert!(lane.store().is_none(), "the store travels with its batch");
    accept(&mut lane);
    accept(&mut lane);
    assert!(lane.take_batch().is_none(), "one batch at a time");
    assert!(!lane.is_settled());
    write(&mut lane, first);
    let second = lane.take_batch().expect("the next batch");
    assert_eq!(seqs(&second.1), [3, 4], "group commit: both in one batch");
    write(&mut lane, second);
    assert!(lane.is_settled());
    assert!(lane.take_batch().is_none(), "nothing queued");
}

#[test]
fn a_held_lane_starts_no_batch_until_released() {
    let mut lane = WriteLane::new(store_through(1));
    let before = lane.hold(true);
    assert!(!before);
    accept(&mut lane);
    assert!(lane.take_batch().is_none(), "held");
    let nested = lane.hold(true);
    accept(&mut lane);
    lane.hold(nested);
    assert!(lane.take_batch().is_none(), "the outer hold stands");
    lane.hold(before);
    let (_, batch) = lane.take_batch().expect("released");
    assert_eq!(seqs(&batch), [2, 3], "held events stay together");
}

#[test]
fn waiters_are_answered_in_order_once_their_batch_is_written_and_published() {
    let mut lane = WriteLane::new(store_through(1));
    let mut already = lane.when_durable(1);
    assert!(matches!(already.try_recv(), Ok(Ok(()))), "durable already");
    let second = accept(&mut lane);
    let mut for_second = lane.when_durable(second);
    let batch = lane.take_batch().unwrap();
    let third = accept(&mut lane);
    let mut for_third = lane.when_durable(third);
    write(&mut lane, batch);
    assert!(for_second.try_recv().is_err(), "not before the caller published the batch");
    lane.release_waiters();
    assert!(matches!(for_second.try_recv(), Ok(Ok(()))));
    assert!(for_third.try_recv().is_err(), "its batch is not written yet");
    let batch = lane.take_batch().unwrap();
    write(&mut lane, batch);
    lane.release_waiters();
    assert!(matches!(for_third.try_recv(), Ok(Ok(()))));
}

#[test]
fn a_failed_write_fails_every_waiter_and_stops_the_lane() {
    let mut lane = WriteLane::new(store_through(1));
    let seq = accept(&mut lane);
    let mut in_flight = lane.when_durable(seq);
    let (_lost_store, _) = lane.take_batch().unwrap();
    let queued = accept(&mut lane);
    let mut queued_waiter = lane.when_durable(queued);
    lane.poison(storage_error());
    for waiter in [&mut in_flight, &mut queued_waiter] {
        assert!(matches!(waiter.try_recv(), Ok(Err(EngineError::Storage { .. }))));
    }
    assert!(matches!(lane.enqueue(entry(4), Start::Now), Err(EngineError::Storage { .. })), "nothing more is accepted");
    assert!(!lane.has_queued(), "the queued events were dropped: none was acknowledged");
    assert!(matches!(lane.when_durable(queued).try_recv(), Ok(Err(EngineError::Storage { .. }))));
    assert!(lane.take_batch().is_none());
}

#[test]
fn a_poisoned_lane_keeps_its_store_out_of_reach() {
    let mut lane = WriteLane::new(store_through(1));
    lane.poison(storage_error());
    assert!(lane.store().is_none(), "no metadata is written from a store in an unknown state");
}

#[test]
fn the_first_write_after_a_torn_load_says_the_torn_line_is_gone() {
    let mut lane = WriteLane::new(MemoryStore { seqs: vec![1, 2], torn: true });
    accept(&mut lane);
    let batch = lane.take_batch().unwrap();
    assert!(write(&mut lane, batch).torn_tail_cut);
    accept(&mut lane);
    let batch = lane.take_batch().unwrap();
    assert!(!write(&mut lane, batch).torn_tail_cut, "said once");
}

#[test]
fn a_batch_is_wanted_now_only_for_an_event_somebody_waits_for_until_it_is_taken() {
    let mut lane = WriteLane::new(store_through(1));
    lane.enqueue(entry(2), Start::Soon).unwrap();
    assert!(!lane.is_urgent(), "an event nobody waits for may wait for company");
    lane.enqueue(entry(3), Start::Now).unwrap();
    assert!(lane.is_urgent(), "one that is waited for wants the batch now");
    let batch = lane.take_batch().unwrap();
    assert_eq!(seqs(&batch.1), [2, 3], "the waiting event takes the lingering one along");
    assert!(!lane.is_urgent(), "taking the batch ends the urgency");
    lane.enqueue(entry(4), Start::Soon).unwrap();
    assert!(!lane.is_urgent());
    lane.want_now();
    assert!(lane.is_urgent(), "a caller about to wait for it wants it now");
    write(&mut lane, batch);
    assert_eq!(seqs(&lane.take_batch().unwrap().1), [4]);
    lane.want_now();
    assert!(!lane.is_urgent(), "nothing queued: nothing to want");
}
