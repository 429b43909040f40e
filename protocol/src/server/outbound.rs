//! The outbound queue of one connection, and the [`OutboundStream`] its writer drains.
//!
//! The queue is bounded in frames and in bytes: the bytes are those of frames queued and not yet taken by the
//! writer, so a client that stops reading pins at most `outbound_queue_bytes` (or one frame, however large, since a
//! frame always fits an empty queue). Beside it, a side list holds the frames that must not be lost when the queue
//! is full: a subscription's `gap` notice (at most one per session: a newer gap replaces an older one that has not
//! been written, both saying "resubscribe from your cursor") and the newest notice of each connection-wide
//! notifier. The side list is written when the queue is empty, so a gap follows every event it accounts for.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytestring::ByteString;
use futures::task::AtomicWaker;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::sync::futures::Notified;

use super::connection::ConnectionShared;

/// Why a frame was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// No room now (frames or bytes).
    Full,
    /// The connection is gone.
    Closed,
}

/// What a side-list frame stands for; a newer frame replaces an older one with the same key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum SideKey {
    /// The gap of the connection's subscription to this session.
    Gap(Arc<str>),
    /// The newest notice of the connection-wide notifier with this channel id.
    Notice(u64),
}

pub(super) struct OutboundQueue {
    max_frames: usize,
    max_bytes: usize,
    state: Mutex<QueueState>,
    /// `state.closed`, readable without the lock: every offer to a sink asks first (set under the lock).
    closed: AtomicBool,
    /// The writer, woken when a frame is queued or the queue closes. Only the writer waits on it.
    readable: AtomicWaker,
    /// Woken (every waiter) when the writer takes a frame or the queue closes.
    room: Notify,
}

#[derive(Default)]
struct QueueState {
    frames: VecDeque<ByteString>,
    bytes: usize,
    side: VecDeque<(SideKey, ByteString)>,
    closed: bool,
}

impl OutboundQueue {
    pub(super) fn new(max_frames: usize, max_bytes: usize) -> Self {
        OutboundQueue {
            max_frames: max_frames.max(1),
            max_bytes: max_bytes.max(1),
            state: Mutex::new(QueueState::default()),
            closed: AtomicBool::new(false),
            readable: AtomicWaker::new(),
            room: Notify::new(),
        }
    }

    pub(super) fn max_frames(&self) -> usize {
        self.max_frames
    }

    pub(super) fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Frames and bytes queued now (not counting the side list).
    #[cfg(test)]
    pub(super) fn usage(&self) -> (usize, usize) {
        let state = self.state.lock();
        (state.frames.len(), state.bytes)
    }

    #[cfg(test)]
    pub(super) fn side_len(&self) -> usize {
        self.state.lock().side.len()
    }

    /// Queues `frame` if it fits now: the queue is empty, or it has a free slot and room for the frame's bytes.
    pub(super) fn try_push(&self, frame: &ByteString) -> Result<(), Refused> {
        let mut state = self.state.lock();
        if state.closed {
            return Err(Refused::Closed);
        }
        let fits = state.frames.is_empty()
            || (state.frames.len() < self.max_frames && state.bytes.saturating_add(frame.len()) <= self.max_bytes);
        if !fits {
            return Err(Refused::Full);
        }
        state.bytes += frame.len();
        state.frames.push_back(frame.clone());
        drop(state);
        self.readable.wake();
        Ok(())
    }

    /// Queues the frames of `events` in order under one lock, as long as each fits as [`try_push`](Self::try_push)
    /// would take it, with one wake-up of the writer: how many were queued, and why the rest were not.
    pub(super) fn try_push_all(&self, events: &[(u64, ByteString)]) -> (usize, Result<(), Refused>) {
        let mut state = self.state.lock();
        if state.closed {
            return (0, Err(Refused::Closed));
        }
        let mut outcome = Ok(());
        let mut queued = 0;
        for (_, frame) in events {
            let fits = state.frames.is_empty()
                || (state.frames.len() < self.max_frames && state.bytes.saturating_add(frame.len()) <= self.max_bytes);
            if !fits {
                outcome = Err(Refused::Full);
                break;
            }
            state.bytes += frame.len();
            state.frames.push_back(frame.clone());
            queued += 1;
        }
        drop(state);
        if queued > 0 {
            self.readable.wake();
        }
        (queued, outcome)
    }

    /// Queues `frame`, waiting for room as long as it takes. Cancel-safe: a dropped call queued nothing.
    pub(super) async fn push(&self, frame: ByteString) -> Result<(), Refused> {
        // Most pushes find room: try before registering for a wake-up (registering locks the `Notify`'s list).
        match self.try_push(&frame) {
            Err(Refused::Full) => {}
            done => return done,
        }
        loop {
            let room = self.room_changed();
            tokio::pin!(room);
            room.as_mut().enable();
            match self.try_push(&frame) {
                Err(Refused::Full) => room.await,
                done => return done,
            }
        }
    }

    /// A future that completes the next time room may have appeared (or the queue closed). Enable it before
    /// checking, so that a change between the check and the wait is not missed.
    pub(super) fn room_changed(&self) -> Notified<'_> {
        self.room.notified()
    }

    /// Puts a frame that must not be lost on the side list, replacing a waiting one with the same key.
    pub(super) fn push_side(&self, key: SideKey, frame: ByteString) {
        let mut state = self.state.lock();
        if state.closed {
            return;
        }
        let replaced = state.side.iter().position(|(waiting, _)| *waiting == key).map(|at| state.side.remove(at));
        state.side.push_back((key, frame));
        drop(state);
        drop(replaced);
        self.readable.wake();
    }

    /// Drops a waiting side-list frame with this key (a gap of a subscription that was just replaced: the new
    /// subscription's reply supersedes it).
    pub(super) fn remove_side(&self, key: &SideKey) {
        let mut state = self.state.lock();
        let removed = state.side.iter().position(|(waiting, _)| waiting == key).map(|at| state.side.remove(at));
        drop(state);
        drop(removed);
    }

    /// The next frame to write: the queue first, then the side list (with the frame's key). `None` once closed.
    pub(super) async fn next_with_key(&self) -> Option<(ByteString, Option<SideKey>)> {
        let mut batch = Vec::with_capacity(1);
        let key = std::future::poll_fn(|cx| self.poll_next_batch(cx, &mut batch, 1, 1)).await?;
        batch.pop().map(|frame| (frame, key))
    }

    /// Up to `max_frames` queued frames (stopping once they hold `max_bytes`; at least one), in order, appended to
    /// `batch`; when the queue is empty, the first side-list frame instead (with its key). Pending until there is
    /// something (the task is woken then); `None` once closed. One lock and one wake-up of the pushers per batch
    /// instead of per frame.
    pub(super) fn poll_next_batch(
        &self,
        cx: &mut Context<'_>,
        batch: &mut Vec<ByteString>,
        max_frames: usize,
        max_bytes: usize,
    ) -> Poll<Option<Option<SideKey>>> {
        // Registered before looking, so that a frame queued after the look wakes this task.
        self.readable.register(cx.waker());
        let mut state = self.state.lock();
        if state.closed {
            return Poll::Ready(None);
        }
        if !state.frames.is_empty() {
            let mut taken_bytes = 0usize;
            while batch.len() < max_frames.max(1) && taken_bytes < max_bytes.max(1) {
                let Some(frame) = state.frames.pop_front() else { break };
                state.bytes -= frame.len();
                taken_bytes += frame.len();
                batch.push(frame);
            }
            drop(state);
            self.room.notify_waiters();
            return Poll::Ready(Some(None));
        }
        if let Some((key, frame)) = state.side.pop_front() {
            batch.push(frame);
            return Poll::Ready(Some(Some(key)));
        }
        Poll::Pending
    }

    /// Closes the queue and drops every frame it still holds. Every waiter wakes up and finds it closed.
    pub(super) fn close(&self) {
        let mut state = self.state.lock();
        state.closed = true;
        self.closed.store(true, Ordering::Release);
        let frames = std::mem::take(&mut state.frames);
        let side = std::mem::take(&mut state.side);
        state.bytes = 0;
        drop(state);
        drop((frames, side));
        self.readable.wake();
        self.room.notify_waiters();
    }
}

/// The frames a connection wants to send, in order. Dropping it closes the connection: its sinks report closed
/// and whatever it still queued, held or reserved is dropped.
pub struct OutboundStream {
    pub(super) shared: Arc<ConnectionShared>,
}

impl OutboundStream {
    /// The next frame to write, or `None` once the connection is closed. Taking a frame frees its room in the
    /// queue.
    pub async fn next(&mut self) -> Option<ByteString> {
        let (frame, key) = self.shared.queue.next_with_key().await?;
        if matches!(key, Some(SideKey::Gap(_))) {
            self.shared.observer.gap_sent();
        }
        Some(frame)
    }

    /// The next frames to write, in order, appended to `batch`: up to `max_frames` of them, stopping once they
    /// hold `max_bytes` (at least one frame is taken), for a writer that is itself polled (a response body) and
    /// hands its socket several frames per wake-up; what it holds outside the queue is bounded by the two limits.
    /// `Ready(true)` with frames appended, `Ready(false)` once the connection is closed, `Pending` until there is
    /// something, when the task is woken.
    pub fn poll_next_batch(
        &mut self,
        cx: &mut Context<'_>,
        batch: &mut Vec<ByteString>,
        max_frames: usize,
        max_bytes: usize,
    ) -> Poll<bool> {
        self.shared.queue.poll_next_batch(cx, batch, max_frames, max_bytes).map(|taken| match taken {
            None => false,
            Some(key) => {
                if matches!(key, Some(SideKey::Gap(_))) {
                    self.shared.observer.gap_sent();
                }
                true
            }
        })
    }

    /// A handle that closes the connection as [`close`](Self::close) does, for whoever ends the connection while
    /// the stream itself is held by its writer.
    pub fn closer(&self) -> OutboundCloser {
        OutboundCloser { shared: self.shared.clone() }
    }

    /// Marks the connection closed: sinks report closed, waiting replies and replays give up, and `next` returns
    /// `None`.
    pub fn close(&self) {
        self.shared.close();
    }
}

impl Drop for OutboundStream {
    fn drop(&mut self) {
        self.close();
    }
}

/// Closes a connection whose [`OutboundStream`] its writer holds (see [`OutboundStream::closer`]).
#[derive(Clone)]
pub struct OutboundCloser {
    shared: Arc<ConnectionShared>,
}

impl OutboundCloser {
    /// Marks the connection closed, as [`OutboundStream::close`] does.
    pub fn close(&self) {
        self.shared.close();
    }
}
