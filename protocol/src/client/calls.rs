//! Request correlation (a part of the connection task). [`Calls`] hands out request ids and holds every request
//! the task writes, registered under its id in `pending` before it goes out, whether a consumer's call, an
//! `events.subscribe` or the handshake on a re-established connection; an answer is matched by that id alone, so
//! replies may come in any order. A consumer's call made while the connection is down waits in `waiting` until
//! the new connection is handshaken. What an answer means beyond a consumer's call is the task's to decide.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::command::{CallReply, SubscribeReply};
use super::error::{ClientError, EndReason};
use super::secrets::OutgoingText;

/// A request that was written and awaits its answer.
pub(super) enum Pending {
    /// A consumer's call: the raw text of its result goes back to the caller, which decodes it.
    Call(CallReply),
    /// An `events.subscribe` sent by the task; `reply` is set when a consumer asked for it.
    Subscribe { session_id: String, epoch: u64, reply: Option<SubscribeReply> },
    /// The handshake on a re-established connection.
    Handshake,
}

/// A consumer's call made while the connection is down; written once it is back.
struct WaitingCall {
    id: u64,
    frame: OutgoingText,
    reply: CallReply,
}

/// The requests of one connection task: ids, frames to write, and what each written one awaits.
pub(super) struct Calls {
    /// Shared with every [`Client`](super::Client) handle, which takes its calls' ids from it too.
    next_id: Arc<AtomicU64>,
    /// Frames to write, each already registered in `pending`.
    outgoing: VecDeque<OutgoingText>,
    pending: HashMap<u64, Pending>,
    waiting: VecDeque<WaitingCall>,
}

impl Calls {
    pub(super) fn new(next_id: Arc<AtomicU64>) -> Self {
        Calls { next_id, outgoing: VecDeque::new(), pending: HashMap::new(), waiting: VecDeque::new() }
    }

    /// A fresh request id, from the counter the handles share.
    pub(super) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Queues `frame`, encoded under `id` (from [`Calls::next_id`]), to be written; its answer goes to `pending`.
    pub(super) fn send(&mut self, id: u64, frame: OutgoingText, pending: Pending) {
        self.pending.insert(id, pending);
        self.outgoing.push_back(frame);
    }

    /// A consumer's call: written now if the connection is `ready`, else parked until [`Calls::release_waiting`].
    pub(super) fn call(&mut self, id: u64, frame: OutgoingText, reply: CallReply, ready: bool) {
        if ready {
            self.send(id, frame, Pending::Call(reply));
        } else {
            self.waiting.push_back(WaitingCall { id, frame, reply });
        }
    }

    /// The caller stopped waiting for call `id`.
    pub(super) fn forget(&mut self, id: u64) {
        if matches!(self.pending.get(&id), Some(Pending::Call(_))) {
            self.pending.remove(&id);
        }
        self.waiting.retain(|call| call.id != id);
    }

    /// The request `id` was answered: what awaited it, if it is known.
    pub(super) fn answered(&mut self, id: u64) -> Option<Pending> {
        self.pending.remove(&id)
    }

    /// Whether some written request awaits its answer.
    pub(super) fn awaiting_answers(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Whether frames wait to be written.
    pub(super) fn has_unwritten(&self) -> bool {
        !self.outgoing.is_empty()
    }

    /// The next frame to write.
    pub(super) fn next_frame(&mut self) -> Option<OutgoingText> {
        self.outgoing.pop_front()
    }

    /// Drops the frames not yet written: the link they were meant for is gone.
    pub(super) fn drop_unwritten(&mut self) {
        self.outgoing.clear();
    }

    /// The connection is handshaken again: the calls made while it was down go out, after whatever is queued.
    pub(super) fn release_waiting(&mut self) {
        while let Some(call) = self.waiting.pop_front() {
            self.send(call.id, call.frame, Pending::Call(call.reply));
        }
    }

    /// The link dropped: requests written on it will never be answered on a new one. Consumers' calls and
    /// subscribes fail with `Disconnected`; returns the sessions of the failed subscribes.
    pub(super) fn link_lost(&mut self) -> Vec<String> {
        self.outgoing.clear();
        let mut failed_subscribes = Vec::new();
        for (_, pending) in self.pending.drain() {
            match pending {
                Pending::Call(reply) => {
                    let _ = reply.send(Err(ClientError::Disconnected));
                }
                Pending::Subscribe { session_id, reply: Some(reply), .. } => {
                    let _ = reply.send(Err(ClientError::Disconnected));
                    failed_subscribes.push(session_id);
                }
                Pending::Subscribe { reply: None, .. } | Pending::Handshake => {}
            }
        }
        failed_subscribes
    }

    /// The task stopped: every consumer's call and subscribe still outstanding fails with `reason`'s error.
    pub(super) fn end(&mut self, reason: EndReason) {
        for (_, pending) in self.pending.drain() {
            match pending {
                Pending::Call(reply) => {
                    let _ = reply.send(Err(reason.error()));
                }
                Pending::Subscribe { reply: Some(reply), .. } => {
                    let _ = reply.send(Err(reason.error()));
                }
                Pending::Subscribe { reply: None, .. } | Pending::Handshake => {}
            }
        }
        for call in self.waiting.drain(..) {
            let _ = call.reply.send(Err(reason.error()));
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::oneshot;

    use super::*;
    use crate::methods::method;
    use crate::types::common::SessionIdParams;

    fn frame(calls: &Calls) -> (u64, OutgoingText) {
        let id = calls.next_id();
        let params = SessionIdParams { session_id: "s".to_owned() };
        (id, OutgoingText::encode::<method::SessionGet>(id, &params).unwrap())
    }

    #[test]
    fn calls_made_while_the_link_is_down_go_out_once_released_and_fail_if_it_is_lost() {
        let mut calls = Calls::new(Arc::new(AtomicU64::new(1)));
        let (id, text) = frame(&calls);
        let (reply, mut answer) = oneshot::channel();
        calls.call(id, text, reply, false);
        assert!(!calls.has_unwritten() && !calls.awaiting_answers(), "a parked call is not written");

        calls.release_waiting();
        assert!(calls.next_frame().is_some());
        assert!(calls.awaiting_answers());

        let (forgotten_id, forgotten) = frame(&calls);
        let (forgotten_reply, _) = oneshot::channel();
        calls.call(forgotten_id, forgotten, forgotten_reply, true);
        calls.forget(forgotten_id);
        assert!(calls.answered(forgotten_id).is_none(), "a forgotten call awaits nothing");

        let (subscribe_reply, mut subscribe_answer) = oneshot::channel();
        let (subscribe_id, subscribe) = frame(&calls);
        calls.send(
            subscribe_id,
            subscribe,
            Pending::Subscribe { session_id: "s".to_owned(), epoch: 1, reply: Some(subscribe_reply) },
        );
        assert_eq!(calls.link_lost(), vec!["s".to_owned()]);
        assert!(!calls.has_unwritten() && !calls.awaiting_answers());
        assert!(matches!(answer.try_recv(), Ok(Err(ClientError::Disconnected))));
        assert!(matches!(subscribe_answer.try_recv(), Ok(Err(ClientError::Disconnected))));
    }
}
