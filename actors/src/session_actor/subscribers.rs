//! The session's subscribers to its events: the live ones, offered every committed event, and the ones a replay
//! pump is still bringing up to date (`replay.rs`), by pump id. A subscriber whose connection is gone, or that fell
//! behind, is dropped; one that is still held when the actor stops is ended with a gap so its client resubscribes.
//!
//! The set works on any [`Sink`]: the connection's [`EventSink`] in the daemon, a fake in the tests below.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use bytestring::ByteString;
use troupe_protocol::server::{EventSink, SinkError};
use troupe_protocol::types::tool_output::OutputStream;

/// What the subscriber set needs of a subscription.
pub(crate) trait Sink {
    /// Offers the frame of the committed event `seq`; an error means the subscription is over.
    fn offer(&self, seq: u64, frame: &ByteString) -> Result<(), SinkError>;
    /// Offers the frames of several committed events in `seq` order, as `offer` of each in turn would.
    fn offer_all(&self, events: &[(u64, ByteString)]) -> Result<(), SinkError> {
        events.iter().try_for_each(|(seq, frame)| self.offer(*seq, frame))
    }
    /// Offers a frame that is not a stored event; `Ok(false)` when it was dropped for lack of room.
    fn offer_transient(&self, frame: &ByteString) -> Result<bool, SinkError>;
    /// Ends the subscription with its one `gap` notice.
    fn end_with_gap(&self);
    /// Whether the connection is gone or the subscription was replaced.
    fn is_closed(&self) -> bool;
}

impl Sink for EventSink {
    fn offer(&self, seq: u64, frame: &ByteString) -> Result<(), SinkError> {
        EventSink::offer(self, seq, frame)
    }

    fn offer_all(&self, events: &[(u64, ByteString)]) -> Result<(), SinkError> {
        EventSink::offer_all(self, events)
    }

    fn offer_transient(&self, frame: &ByteString) -> Result<bool, SinkError> {
        EventSink::offer_transient(self, frame)
    }

    fn end_with_gap(&self) {
        EventSink::end_with_gap(self)
    }

    fn is_closed(&self) -> bool {
        EventSink::is_closed(self)
    }
}

/// One live subscriber of the session, and the output streams on which it missed bytes (`tool_output`).
pub(crate) struct Subscriber<S = EventSink> {
    /// Shared with the replay pump that delivered its stored events, if any.
    pub(crate) sink: Arc<S>,
    pub(super) missed: HashSet<(String, OutputStream)>,
}

impl<S> Subscriber<S> {
    pub(crate) fn new(sink: Arc<S>) -> Self {
        Subscriber { sink, missed: HashSet::new() }
    }
}

/// The live subscribers and the replaying ones.
pub(crate) struct Subscribers<S = EventSink> {
    live: Vec<Subscriber<S>>,
    /// Subscribers whose stored events a replay pump is still delivering, by pump id.
    replays: HashMap<u64, Arc<S>>,
    next_replay_id: u64,
}

impl<S> Default for Subscribers<S> {
    fn default() -> Self {
        Subscribers { live: Vec::new(), replays: HashMap::new(), next_replay_id: 1 }
    }
}

impl<S: Sink> Subscribers<S> {
    /// Whether any subscriber is live (a committed event needs encoding only then).
    pub(crate) fn has_live(&self) -> bool {
        !self.live.is_empty()
    }

    /// No subscriber at all, live or replaying: one condition of hibernation.
    pub(crate) fn is_empty(&self) -> bool {
        self.live.is_empty() && self.replays.is_empty()
    }

    /// The live subscribers, for the live tool output (`tool_output`).
    pub(crate) fn live_mut(&mut self) -> &mut Vec<Subscriber<S>> {
        &mut self.live
    }

    /// Makes `sink` a live subscriber.
    pub(crate) fn go_live(&mut self, sink: Arc<S>) {
        self.live.push(Subscriber::new(sink));
    }

    /// Offers the committed events (`seq` and frame, in order) to every live subscriber, each subscriber's all at
    /// once; drops those that refuse one (gone or behind).
    pub(crate) fn offer_committed(&mut self, events: &[(u64, ByteString)]) {
        self.live.retain(|subscriber| subscriber.sink.offer_all(events).is_ok());
    }

    /// Offers a frame that is not a stored event to every live subscriber; drops those that are gone. One whose
    /// queue is full misses it and stays.
    pub(crate) fn offer_transient(&mut self, frame: &ByteString) {
        self.live.retain(|subscriber| subscriber.sink.offer_transient(frame).is_ok());
    }

    /// Drops the subscribers, live or replaying, whose connection is gone or whose subscription was replaced.
    pub(crate) fn prune_closed(&mut self) {
        self.live.retain(|subscriber| !subscriber.sink.is_closed());
        self.replays.retain(|_, sink| !sink.is_closed());
    }

    /// Ends every subscription, live or replaying, with its one `gap` notice, and forgets them all.
    pub(crate) fn end_all_with_gap(&mut self) {
        for subscriber in self.live.drain(..) {
            subscriber.sink.end_with_gap();
        }
        for (_, sink) in self.replays.drain() {
            sink.end_with_gap();
        }
    }

    /// Registers a subscriber a replay pump will bring up to date; returns the pump's id, never reused.
    pub(crate) fn start_replay(&mut self, sink: Arc<S>) -> u64 {
        let id = self.next_replay_id;
        self.next_replay_id += 1;
        self.replays.insert(id, sink);
        id
    }

    /// The sink of the replay `id`, while it runs.
    pub(crate) fn replaying(&self, id: u64) -> Option<Arc<S>> {
        self.replays.get(&id).cloned()
    }

    /// Forgets the replay `id` (it ended, failed, or its subscriber went live).
    pub(crate) fn end_replay(&mut self, id: u64) {
        self.replays.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use parking_lot::Mutex;

    use super::*;

    /// A sink that records what it was offered; `room` events fit, then it refuses (as one that fell behind).
    #[derive(Default)]
    struct FakeSink {
        closed: AtomicBool,
        room: AtomicUsize,
        offered: Mutex<Vec<u64>>,
        transient: AtomicUsize,
        gaps: AtomicUsize,
    }

    impl FakeSink {
        fn with_room(room: usize) -> Arc<FakeSink> {
            Arc::new(FakeSink { room: AtomicUsize::new(room), ..FakeSink::default() })
        }
    }

    impl Sink for FakeSink {
        fn offer(&self, seq: u64, _: &ByteString) -> Result<(), SinkError> {
            if self.is_closed() {
                return Err(SinkError::Closed);
            }
            if self.room.load(Ordering::Relaxed) == 0 {
                return Err(SinkError::Lagging);
            }
            self.room.fetch_sub(1, Ordering::Relaxed);
            self.offered.lock().push(seq);
            Ok(())
        }

        fn offer_transient(&self, _: &ByteString) -> Result<bool, SinkError> {
            if self.is_closed() {
                return Err(SinkError::Closed);
            }
            let fits = self.room.load(Ordering::Relaxed) > 0;
            if fits {
                self.transient.fetch_add(1, Ordering::Relaxed);
            }
            Ok(fits)
        }

        fn end_with_gap(&self) {
            self.gaps.fetch_add(1, Ordering::Relaxed);
        }

        fn is_closed(&self) -> bool {
            self.closed.load(Ordering::Relaxed)
        }
    }

    fn frame() -> ByteString {
        ByteString::from_static("{}")
    }

    #[test]
    fn committed_events_reach_every_live_subscriber_and_one_that_refuses_is_dropped() {
        let mut subscribers = Subscribers::default();
        let roomy = FakeSink::with_room(10);
        let small = FakeSink::with_room(1);
        subscribers.go_live(roomy.clone());
        subscribers.go_live(small.clone());
        subscribers.offer_committed(&[(1, frame()), (2, frame())]);
        subscribers.offer_committed(&[(3, frame())]);
        assert_eq!(*roomy.offered.lock(), [1, 2, 3]);
        assert_eq!(*small.offered.lock(), [1], "dropped at the event it had no room for, then offered nothing");
        assert_eq!(subscribers.live_mut().len(), 1);
    }

    #[test]
    fn a_transient_frame_that_does_not_fit_keeps_the_subscriber_but_a_closed_one_is_dropped() {
        let mut subscribers = Subscribers::default();
        let full = FakeSink::with_room(0);
        let closed = FakeSink::with_room(5);
        closed.closed.store(true, Ordering::Relaxed);
        subscribers.go_live(full.clone());
        subscribers.go_live(closed);
        subscribers.offer_transient(&frame());
        assert_eq!(subscribers.live_mut().len(), 1);
        assert_eq!(full.transient.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn pruning_drops_closed_subscribers_live_and_replaying() {
        let mut subscribers = Subscribers::default();
        let open = FakeSink::with_room(1);
        let gone = FakeSink::with_room(1);
        let gone_replaying = FakeSink::with_room(1);
        subscribers.go_live(open.clone());
        subscribers.go_live(gone.clone());
        let replay = subscribers.start_replay(gone_replaying.clone());
        assert!(subscribers.has_live() && !subscribers.is_empty());
        gone.closed.store(true, Ordering::Relaxed);
        gone_replaying.closed.store(true, Ordering::Relaxed);
        subscribers.prune_closed();
        assert_eq!(subscribers.live_mut().len(), 1);
        assert!(subscribers.replaying(replay).is_none());
        open.closed.store(true, Ordering::Relaxed);
        subscribers.prune_closed();
        assert!(subscribers.is_empty() && !subscribers.has_live());
    }

    #[test]
    fn replay_ids_are_never_reused_and_a_replay_ends_once() {
        let mut subscribers = Subscribers::default();
        let first = subscribers.start_replay(FakeSink::with_room(1));
        let second = subscribers.start_replay(FakeSink::with_room(1));
        subscribers.end_replay(first);
        let third = subscribers.start_replay(FakeSink::with_room(1));
        assert_eq!((first, second, third), (1, 2, 3));
        assert!(subscribers.replaying(first).is_none());
        assert!(subscribers.replaying(second).is_some() && subscribers.replaying(third).is_some());
        subscribers.end_replay(second);
        subscribers.end_replay(third);
        assert!(subscribers.is_empty());
    }

    #[test]
    fn ending_all_sends_each_subscription_one_gap_and_forgets_it() {
        let mut subscribers = Subscribers::default();
        let live = FakeSink::with_room(1);
        let replaying = FakeSink::with_room(1);
        subscribers.go_live(live.clone());
        subscribers.start_replay(replaying.clone());
        subscribers.end_all_with_gap();
        subscribers.end_all_with_gap();
        assert_eq!((live.gaps.load(Ordering::Relaxed), replaying.gaps.load(Ordering::Relaxed)), (1, 1));
        assert!(subscribers.is_empty());
    }
}
