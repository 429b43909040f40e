//! The notification channel behind every sink: it holds frames back until the reply that created it is queued
//! (the gate), then queues them without ever waiting (live events, transient output, connection-wide notices) or
//! waiting a bounded time (replayed events). A subscription that cannot keep up ends with one `gap`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytestring::ByteString;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::budget::{Holder, Reservation, Reserved};
use super::connection::ConnectionShared;
use super::observer::DroppedNotification;
use super::outbound::{Refused, SideKey};
use super::sink::SinkError;
use crate::jsonrpc::encode_notification;
use crate::types::events::EventsSubscriptionParams;

static NEXT_CHANNEL_ID: AtomicU64 = AtomicU64::new(1);

/// A notification channel that holds its frames until the reply that created it is queued.
pub(super) struct GatedChannel {
    id: u64,
    pub(super) shared: Arc<ConnectionShared>,
    /// Set for event subscriptions: where the gap notice points. `None` for a connection-wide notifier and for a
    /// named tool-output subscription.
    session_id: Option<Arc<str>>,
    /// A connection-wide notifier: each frame supersedes the ones before it, so only the newest is held.
    supersedes: bool,
    /// A named tool-output subscription whose end notice was offered: it no longer counts against the
    /// connection's bound, though its last frames may still be on their way.
    finished: AtomicBool,
    open: AtomicBool,
    /// Frames offered before the gate opened; `None` once it has (they were queued then).
    held: Mutex<Option<HeldFrames>>,
    closed: AtomicBool,
    last_delivered_seq: AtomicU64,
    /// Woken (every waiter) when the gate opens or the channel closes.
    changed: Notify,
    /// The replay of this subscription as one holder of the reply budget.
    replay_holder: Arc<Holder>,
}

/// Frames held while gated, bounded like the queue itself: frames and bytes (one frame always fits).
#[derive(Default)]
struct HeldFrames {
    frames: VecDeque<(Held, ByteString)>,
    bytes: usize,
}

/// What a held frame is: an event of a subscription (with its `seq`; 0 for connection-wide notices), or a
/// transient notification that may be dropped without closing the subscription.
#[derive(Clone, Copy, Debug)]
enum Held {
    Event(u64),
    Transient,
}

impl GatedChannel {
    pub(super) fn new(shared: Arc<ConnectionShared>, session_id: Option<Arc<str>>) -> Arc<Self> {
        let supersedes = session_id.is_none();
        Self::build(shared, session_id, supersedes)
    }

    /// A channel for one named tool-output subscription: transient frames, then one end notice that is never lost
    /// (it waits on the side list when the queue is full).
    pub(super) fn new_output(shared: Arc<ConnectionShared>) -> Arc<Self> {
        Self::build(shared, None, false)
    }

    fn build(shared: Arc<ConnectionShared>, session_id: Option<Arc<str>>, supersedes: bool) -> Arc<Self> {
        Arc::new(GatedChannel {
            id: NEXT_CHANNEL_ID.fetch_add(1, Ordering::Relaxed),
            shared,
            session_id,
            supersedes,
            finished: AtomicBool::new(false),
            open: AtomicBool::new(false),
            held: Mutex::new(Some(HeldFrames::default())),
            closed: AtomicBool::new(false),
            last_delivered_seq: AtomicU64::new(0),
            changed: Notify::new(),
            replay_holder: Arc::new(Holder::default()),
        })
    }

    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.shared.is_closed()
    }

    pub(super) fn mark_finished(&self) {
        self.finished.store(true, Ordering::Release);
    }

    /// Whether the channel still takes frames and has not offered its end: what counts against a bound.
    pub(super) fn is_live(&self) -> bool {
        !self.finished.load(Ordering::Acquire) && !self.is_closed()
    }

    /// Frames held back while gated.
    #[cfg(test)]
    pub(super) fn held_len(&self) -> usize {
        self.held.lock().as_ref().map_or(0, |held| held.frames.len())
    }

    pub(super) fn mark_delivered(&self, seq: u64) {
        self.last_delivered_seq.store(seq, Ordering::Release);
    }

    /// Closes the channel without a gap (replaced, or its connection or reply is gone), frees what it held back
    /// and wakes whoever waits on it. Not to be called with `held` locked.
    pub(super) fn close(&self) {
        self.mark_closed();
        self.free_held();
    }

    /// Closes the channel and wakes whoever waits on it (on the gate, for room, or for reply budget).
    fn mark_closed(&self) {
        self.closed.store(true, Ordering::Release);
        self.changed.notify_waiters();
        self.shared.budget.wake();
    }

    /// Drops the frames held back while gated. Not to be called with `held` locked.
    fn free_held(&self) {
        if let Some(held) = self.held.lock().as_mut() {
            *held = HeldFrames::default();
        }
    }

    /// Offers a live event (or, for a notifier, a notice). Never waits.
    pub(super) fn offer(&self, seq: u64, frame: &ByteString) -> Result<(), SinkError> {
        if self.is_closed() {
            return Err(SinkError::Closed);
        }
        match self.hold_while_gated(Held::Event(seq), frame) {
            Some(true) => Ok(()),
            Some(false) => {
                let error = self.fall_behind();
                self.free_held();
                Err(error)
            }
            None => self.enqueue(seq, frame),
        }
    }

    /// Offers live events in `seq` order, as [`offer`](Self::offer) of each in turn would, but queued under one lock
    /// of the connection's queue with one wake-up of its writer (a durable batch's events reach each subscriber
    /// together). Never waits.
    pub(super) fn offer_all(&self, events: &[(u64, ByteString)]) -> Result<(), SinkError> {
        if self.is_closed() {
            return Err(SinkError::Closed);
        }
        if !self.open.load(Ordering::Acquire) {
            // Still gated (its subscribe reply is not queued yet): held one by one, and the gate may open midway.
            return events.iter().try_for_each(|(seq, frame)| self.offer(*seq, frame));
        }
        let (queued, outcome) = self.shared.queue.try_push_all(events);
        if let Some((seq, _)) = queued.checked_sub(1).and_then(|last| events.get(last))
            && *seq > 0
        {
            self.mark_delivered(*seq);
        }
        match outcome {
            Ok(()) => Ok(()),
            Err(Refused::Full) if self.session_id.is_some() => Err(self.fall_behind()),
            // Not a subscription: the connection-wide path, one notice at a time, as `offer` would.
            Err(Refused::Full) => events[queued..].iter().try_for_each(|(seq, frame)| self.enqueue(*seq, frame)),
            Err(Refused::Closed) => {
                self.mark_closed();
                Err(SinkError::Closed)
            }
        }
    }

    /// Holds `frame` while the channel waits for its reply. `None` when the channel is open (the caller sends
    /// the frame itself); otherwise whether there was room to hold it.
    fn hold_while_gated(&self, kind: Held, frame: &ByteString) -> Option<bool> {
        if self.open.load(Ordering::Acquire) {
            return None;
        }
        let mut guard = self.held.lock();
        // `open` flips while this lock is held, after the held frames were queued; `None` here means it just did.
        let held = guard.as_mut()?;
        if self.supersedes {
            // A connection-wide notice supersedes the ones before it: only the newest is held.
            *held = HeldFrames::default();
        }
        let fits = held.frames.is_empty()
            || (held.frames.len() < self.shared.queue.max_frames()
                && held.bytes.saturating_add(frame.len()) <= self.shared.queue.max_bytes());
        if !fits {
            return Some(false);
        }
        held.bytes += frame.len();
        held.frames.push_back((kind, frame.clone()));
        Some(true)
    }

    fn enqueue(&self, seq: u64, frame: &ByteString) -> Result<(), SinkError> {
        match self.shared.queue.try_push(frame) {
            Ok(()) => {
                if seq > 0 {
                    self.mark_delivered(seq);
                }
                Ok(())
            }
            Err(Refused::Full) => {
                if self.session_id.is_none() {
                    // Connection-wide notices must not be lost: the newest waits on the side list, replacing an
                    // older one of this notifier (each carries the complete state).
                    self.shared.queue.push_side(SideKey::Notice(self.id), frame.clone());
                    return Ok(());
                }
                Err(self.fall_behind())
            }
            Err(Refused::Closed) => {
                // Possibly called from `open`, with `held` locked: only mark it.
                self.mark_closed();
                Err(SinkError::Closed)
            }
        }
    }

    pub(super) fn offer_transient(&self, frame: &ByteString) -> Result<bool, SinkError> {
        if self.is_closed() {
            return Err(SinkError::Closed);
        }
        match self.hold_while_gated(Held::Transient, frame) {
            Some(true) => Ok(true),
            Some(false) => Ok(self.drop_transient()),
            None => self.send_transient(frame),
        }
    }

    /// Queues a frame that may be dropped when there is no room, without closing the subscription.
    fn send_transient(&self, frame: &ByteString) -> Result<bool, SinkError> {
        match self.shared.queue.try_push(frame) {
            Ok(()) => Ok(true),
            Err(Refused::Full) => Ok(self.drop_transient()),
            Err(Refused::Closed) => {
                self.mark_closed();
                Err(SinkError::Closed)
            }
        }
    }

    /// A transient frame found no room, in the queue or among the frames held while gated: it is lost (`false`).
    fn drop_transient(&self) -> bool {
        self.shared.observer.notification_dropped(DroppedNotification::Transient);
        false
    }

    /// Closes the subscription and schedules its one gap notice. May be called with `held` locked (from `open`).
    pub(super) fn fall_behind(&self) -> SinkError {
        if self.closed.swap(true, Ordering::AcqRel) {
            return SinkError::Closed;
        }
        if let Some(session_id) = &self.session_id {
            // Every way of falling behind (a live event without room, a gated one that cannot be held, a replay
            // that stalled) drops the event at hand.
            self.shared.observer.notification_dropped(DroppedNotification::Event);
            let gap = EventsSubscriptionParams::Gap {
                session_id: session_id.to_string(),
                last_delivered_seq: self.last_delivered_seq.load(Ordering::Acquire),
            };
            match encode_notification::<crate::methods::notification::EventsSubscription>(&gap) {
                Ok(frame) => self.shared.queue.push_side(SideKey::Gap(session_id.clone()), frame),
                Err(error) => tracing::error!(%error, "failed to encode a gap notice"),
            }
            let mut subscriptions = self.shared.subscriptions.lock();
            if subscriptions.get(session_id).is_some_and(|current| std::ptr::eq(Arc::as_ptr(current), self)) {
                subscriptions.remove(session_id);
            }
        }
        self.mark_closed();
        SinkError::Lagging
    }

    /// Queues the held frames and lets later ones through directly.
    pub(super) fn open(&self) {
        let mut held = self.held.lock();
        if let Some(held) = held.take() {
            for (kind, frame) in held.frames {
                if self.closed.load(Ordering::Acquire) {
                    break;
                }
                let sent = match kind {
                    Held::Event(seq) => self.enqueue(seq, &frame).is_ok(),
                    // A transient frame that finds no room is only lost; the subscription stays open.
                    Held::Transient => self.send_transient(&frame).is_ok(),
                };
                if !sent {
                    break;
                }
            }
        }
        self.open.store(true, Ordering::Release);
        drop(held);
        self.changed.notify_waiters();
    }

    /// Waits until the gate is open. `Err(Closed)` if the channel or its connection closes first.
    async fn wait_for_gate(&self) -> Result<(), SinkError> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            // The queue wakes its waiters when the connection closes.
            let connection = self.shared.queue.room_changed();
            tokio::pin!(connection);
            connection.as_mut().enable();
            if self.is_closed() {
                return Err(SinkError::Closed);
            }
            if self.open.load(Ordering::Acquire) {
                return Ok(());
            }
            tokio::select! {
                _ = changed => {}
                _ = connection => {}
            }
        }
    }

    /// Queues a replayed event once the gate is open and the queue has room, giving up (with the gap) after
    /// `replay_stall` without room. Cancel-safe: a dropped call queued and recorded nothing.
    pub(super) async fn offer_replay(&self, seq: u64, frame: &ByteString) -> Result<(), SinkError> {
        self.wait_for_gate().await?;
        let deadline = Instant::now() + self.shared.limits.replay_stall;
        loop {
            let room = self.shared.queue.room_changed();
            tokio::pin!(room);
            room.as_mut().enable();
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.is_closed() {
                return Err(SinkError::Closed);
            }
            match self.shared.queue.try_push(frame) {
                Ok(()) => {
                    self.mark_delivered(seq);
                    return Ok(());
                }
                Err(Refused::Closed) => {
                    self.close();
                    return Err(SinkError::Closed);
                }
                Err(Refused::Full) => {}
            }
            if Instant::now() >= deadline {
                return Err(self.fall_behind());
            }
            tokio::select! {
                _ = room => {}
                _ = changed => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Reserves reply budget for reading a chunk of this subscription's replay. `Err(Closed)` if the
    /// subscription or its connection closes while waiting.
    pub(super) async fn reserve_replay(self: &Arc<Self>, bytes: usize) -> Result<Reservation, SinkError> {
        if self.is_closed() {
            return Err(SinkError::Closed);
        }
        let budget = self.shared.budget.clone();
        match budget.reserve(bytes, &self.replay_holder, || self.is_closed()).await {
            Reserved::Granted(reservation) => Ok(reservation),
            // A replay that holds a chunk and asks for another past the budget: treat it as done with (the pump
            // drops each chunk's permit before the next, so this does not happen).
            Reserved::Closed | Reserved::OverBudget => Err(SinkError::Closed),
        }
    }
}
