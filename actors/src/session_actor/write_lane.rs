//! The session's write lane: the one path by which events reach the session's log, as a plain type.
//!
//! It owns the store, the sequence numbers, the events accepted and not yet written (the queue), and the requests
//! waiting for their event to be durable. The session actor drives it; the lane itself knows nothing of actors, so
//! its rules are tested here without a daemon:
//!
//! - **Sequences.** Each accepted event gets the next `seq`; `seq`s are queued in order, never reused, never skipped.
//! - **One batch in flight.** [`WriteLane::take_batch`] hands out the store with every queued event; until the batch
//!   comes back ([`WriteLane::complete`]) no other batch starts, and events accepted meanwhile form the next one (group
//!   commit). While the lane is held ([`WriteLane::hold`]), no batch starts either: events that must become durable
//!   together stay together.
//! - **Durability in order.** A waiter for `seq` is answered only after a batch holding `seq` came back written, and
//!   only when the caller says the batch was published ([`WriteLane::release_waiters`]): subscribers see an event
//!   before the request that made it is answered.
//! - **When a batch is wanted.** An event is queued with when its batch should start ([`Start`]): `Now` makes the
//!   lane *urgent* (its next batch starts as soon as none is being written), `Soon` leaves it to the caller's
//!   linger timer (`commit.rs`); a caller about to wait for a queued event makes it urgent ([`WriteLane::want_now`]).
//!   Taking a batch ends the urgency.
//! - **Poisoning.** After a failed write nothing more is written by this lane: waiters fail, the queue is dropped,
//!   and the session restarts from what is on disk.
//! - **Torn tail.** A store loaded with a torn last line (never acknowledged) cuts it at its first append; the lane
//!   says when that happened, so the session stops reporting the line as skipped.
//!
//! The fence between incarnations (a crashed session's batch still being written while its successor opens the
//! log) is the store's: a file store holds an exclusive lock on its log for as long as it lives, the store travels
//! with its batch, and a successor's open waits for the lock (`event_log::load`).

use std::collections::VecDeque;

use tokio::sync::oneshot;
use troupe_runtime::event_log::{EventStore, LogEntry};

use crate::error::EngineError;

/// At most how many events' room a new queue starts with (a few KiB; a longer batch grows it).
const NEXT_BATCH_ROOM: usize = 256;

/// When an accepted event's batch starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// As soon as no batch is being written.
    Now,
    /// Within the session's linger, or sooner with an event that starts one now.
    Soon,
}

/// A request's wait for its event: `Ok` once durable, the lane's error if it was poisoned first.
pub(crate) type Durability = oneshot::Receiver<Result<(), EngineError>>;

/// A batch that came back written.
pub(crate) struct Durable {
    /// The batch's events, oldest first, to publish.
    pub entries: Vec<LogEntry>,
    /// Whether this write cut off a torn last line the log was loaded with.
    pub torn_tail_cut: bool,
}

pub(crate) struct WriteLane<S> {
    /// `None` while a batch is being written (the store travels with it).
    store: Option<S>,
    /// Whether the store was loaded with a torn tail that no write has cut off yet.
    torn_tail: bool,
    /// The highest durable `seq`.
    committed_seq: u64,
    /// The `seq` the next accepted event gets.
    next_seq: u64,
    /// Accepted events waiting for the next batch, in `seq` order.
    queued: Vec<LogEntry>,
    /// Set while events that must become durable together are accepted: no batch starts.
    holding: bool,
    /// Whether a queued event wants its batch now (see [`Start`]).
    urgent: bool,
    /// Requests waiting for their event's durability, in `seq` order.
    waiters: VecDeque<(u64, oneshot::Sender<Result<(), EngineError>>)>,
    /// Set by a failed write: nothing more is accepted or written.
    poisoned: Option<EngineError>,
}

impl<S: EventStore> WriteLane<S> {
    /// A lane whose store is not open yet: events may be queued and waited for, and are written once it opens.
    pub(crate) fn unopened() -> Self {
        WriteLane {
            store: None,
            torn_tail: false,
            committed_seq: 0,
            next_seq: 1,
            queued: Vec::new(),
            holding: false,
            urgent: false,
            waiters: VecDeque::new(),
            poisoned: None,
        }
    }

    /// A lane writing after the store's last event.
    #[cfg(test)]
    pub(crate) fn new(store: S) -> Self {
        let mut lane = Self::unopened();
        lane.open(store);
        lane
    }

    /// Opens the lane on `store`: the next event follows the store's last one.
    pub(crate) fn open(&mut self, store: S) {
        debug_assert!(self.queued.is_empty(), "nothing is accepted before the log is open");
        self.committed_seq = store.last_seq();
        self.next_seq = self.committed_seq + 1;
        self.torn_tail = store.has_torn_tail();
        self.store = Some(store);
    }

    /// The `seq` the next accepted event gets.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The highest durable `seq`.
    pub(crate) fn committed_seq(&self) -> u64 {
        self.committed_seq
    }

    /// The store, while no batch is being written and the lane is not poisoned.
    pub(crate) fn store(&self) -> Option<&S> {
        self.store.as_ref().filter(|_| self.poisoned.is_none())
    }

    /// Whether every accepted event is durable and nobody waits.
    pub(crate) fn is_settled(&self) -> bool {
        self.queued.is_empty() && self.store.is_some() && self.waiters.is_empty()
    }

    /// Whether accepted events wait for a batch.
    pub(crate) fn has_queued(&self) -> bool {
        !self.queued.is_empty()
    }

    /// Queues `entry`, which must carry [`next_seq`](Self::next_seq), for a batch that starts as `start` says.
    /// Refused after a failed write.
    pub(crate) fn enqueue(&mut self, entry: LogEntry, start: Start) -> Result<(), EngineError> {
        if let Some(error) = &self.poisoned {
            return Err(error.clone());
        }
        debug_assert_eq!(entry.seq, self.next_seq, "events are queued in sequence order");
        self.next_seq = entry.seq + 1;
        self.queued.push(entry);
        self.urgent |= start == Start::Now;
        Ok(())
    }

    /// The queued events are wanted now: somebody is about to wait for one of them.
    pub(crate) fn want_now(&mut self) {
        self.urgent = !self.queued.is_empty();
    }

    /// Whether the next batch should start as soon as none is being written.
    pub(crate) fn is_urgent(&self) -> bool {
        self.urgent
    }

    /// Holds back batches (`true`) or lets them start again (`false`); returns the previous setting, so that holds
    /// nest.
    pub(crate) fn hold(&mut self, holding: bool) -> bool {
        std::mem::replace(&mut self.holding, holding)
    }

    /// The store and every queued event, to be written together, unless a batch is already being written, the lane
    /// is held or poisoned, or nothing is queued.
    pub(crate) fn take_batch(&mut self) -> Option<(S, Vec<LogEntry>)> {
        if self.queued.is_empty() || self.holding || self.poisoned.is_some() {
            return None;
        }
        let store = self.store.take()?;
        self.urgent = false;
        // The next batch is likely as long as this one: its queue starts with that room (bounded), rather than
        // growing from nothing by reallocations, which past a few dozen events leave the allocator's fast path.
        let room = self.queued.len().min(NEXT_BATCH_ROOM);
        Some((store, std::mem::replace(&mut self.queued, Vec::with_capacity(room))))
    }

    /// A batch came back written: the store returns and the batch's events are durable. Publish them, then
    /// [`release_waiters`](Self::release_waiters).
    pub(crate) fn complete(&mut self, store: S, batch: Vec<LogEntry>) -> Durable {
        let torn_tail_cut = self.torn_tail && !store.has_torn_tail();
        self.torn_tail = store.has_torn_tail();
        if let Some(last) = batch.last() {
            debug_assert_eq!(batch.first().map(|entry| entry.seq), Some(self.committed_seq + 1), "batches follow on");
            self.committed_seq = last.seq;
        }
        self.store = Some(store);
        Durable { entries: batch, torn_tail_cut }
    }

    /// Answers every request whose event is durable now.
    pub(crate) fn release_waiters(&mut self) {
        while let Some((seq, _)) = self.waiters.front() {
            if *seq > self.committed_seq {
                break;
            }
            if let Some((_, waiter)) = self.waiters.pop_front() {
                let _ = waiter.send(Ok(()));
            }
        }
    }

    /// A wait that ends when `seq` is durable: at once if it already is, with the lane's error if it is poisoned.
    pub(crate) fn when_durable(&mut self, seq: u64) -> Durability {
        let (sender, receiver) = oneshot::channel();
        if seq <= self.committed_seq {
            let _ = sender.send(Ok(()));
        } else if let Some(error) = &self.poisoned {
            let _ = sender.send(Err(error.clone()));
        } else {
            self.waiters.push_back((seq, sender));
        }
        receiver
    }

    /// A write failed (or its writer was lost with the store): every waiter fails with `error`, the queued events
    /// are dropped (none of them was acknowledged), and nothing more is accepted.
    pub(crate) fn poison(&mut self, error: EngineError) {
        for (_, waiter) in self.waiters.drain(..) {
            let _ = waiter.send(Err(error.clone()));
        }
        self.queued.clear();
        self.poisoned = Some(error);
    }
}

#[cfg(test)]
#[path = "write_lane_tests.rs"]
mod tests;
