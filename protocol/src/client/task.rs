//! The connection task: the one place that owns the transport and all protocol state of a [`Client`]. Handles
//! talk to it only through [`Command`]s. This module holds its state, its event loop, the dispatch of events and
//! commands to the concept modules next to it, the writing of queued frames, the hand-over of queued deliveries
//! to the consumer, and what happens when the task stops.
//!
//! [`Client`]: super::Client

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::stream::{FuturesUnordered, StreamExt};
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot, watch};

use super::calls::{Pending, WaitingCall};
use super::error::EndReason;
use super::reconnect::{Link, Redial, link_event};
use super::secrets::OutgoingText;
use super::subscriptions::{RetryTimer, SessionPhase, SessionState};
use super::{ClientDelivery, ClientError};
use crate::transport::{MessageFrame, Transport, TransportError};

pub(super) enum Command {
    Call {
        id: u64,
        frame: OutgoingText,
        reply: oneshot::Sender<Result<String, ClientError>>,
    },
    /// The caller stopped waiting for this call.
    Forget {
        id: u64,
    },
    Subscribe {
        session_id: String,
        cursor: Option<u64>,
        reply: oneshot::Sender<Result<u64, ClientError>>,
    },
}

pub(super) enum Event<T> {
    Close,
    Command(Command),
    Frame(Option<MessageFrame>),
    BackoffElapsed,
    Dialed(Result<T, TransportError>),
    RetryDue { session_id: String, epoch: u64 },
}

/// The connection task: owns the transport and every piece of protocol state. Handlers are synchronous and
/// only queue work (`outgoing` frames, `outbox` deliveries); the loop does the awaiting, so state changes are
/// never interleaved with I/O.
pub(super) struct ConnectionTask<T: Transport> {
    pub(super) link: Link<T>,
    pub(super) redial: Option<Redial<T>>,
    commands: mpsc::UnboundedReceiver<Command>,
    close: watch::Receiver<bool>,
    pub(super) next_id: Arc<AtomicU64>,
    end: Arc<Mutex<Option<EndReason>>>,
    /// `None` once the consumer dropped [`Deliveries`](super::Deliveries).
    deliveries: Option<mpsc::Sender<ClientDelivery>>,
    pub(super) outbox: VecDeque<ClientDelivery>,
    /// Frames to write, each already registered in `pending`.
    pub(super) outgoing: VecDeque<OutgoingText>,
    pub(super) pending: HashMap<u64, Pending>,
    pub(super) waiting: VecDeque<WaitingCall>,
    pub(super) sessions: HashMap<String, SessionState>,
    pub(super) retries: FuturesUnordered<RetryTimer>,
    next_epoch: u64,
    /// Set when the task must stop.
    pub(super) stop: Option<EndReason>,
}

impl<T: Transport> ConnectionTask<T> {
    /// A task for a freshly opened `transport`, which the caller handshakes with its first call.
    pub(super) fn new(
        transport: T,
        redial: Option<Redial<T>>,
        commands: mpsc::UnboundedReceiver<Command>,
        close: watch::Receiver<bool>,
        next_id: Arc<AtomicU64>,
        end: Arc<Mutex<Option<EndReason>>>,
        deliveries: mpsc::Sender<ClientDelivery>,
    ) -> Self {
        ConnectionTask {
            link: Link::Up { transport, ready: true },
            redial,
            commands,
            close,
            next_id,
            end,
            deliveries: Some(deliveries),
            outbox: VecDeque::new(),
            outgoing: VecDeque::new(),
            pending: HashMap::new(),
            waiting: VecDeque::new(),
            sessions: HashMap::new(),
            retries: FuturesUnordered::new(),
            next_epoch: 1,
            stop: None,
        }
    }

    pub(super) async fn run(mut self) {
        loop {
            let event = self.next_event().await;
            self.handle_event(event);
            if self.stop != Some(EndReason::Closed) {
                self.flush_outgoing().await;
                self.flush_outbox().await;
            }
            if self.stop.is_some() {
                break;
            }
        }
        self.finish();
    }

    async fn next_event(&mut self) -> Event<T> {
        if *self.close.borrow() {
            return Event::Close;
        }
        let close = &mut self.close;
        let commands = &mut self.commands;
        let link = &mut self.link;
        let retries = &mut self.retries;
        // Not biased: a busy notification stream must not starve commands, nor the reverse.
        tokio::select! {
            // An error means every `Client` handle is gone: nobody can call or close any more.
            _ = close.wait_for(|closed| *closed) => Event::Close,
            command = commands.recv() => match command {
                Some(command) => Event::Command(command),
                None => Event::Close,
            },
            event = link_event(link) => event,
            Some((session_id, epoch)) = retries.next(), if !retries.is_empty() => {
                Event::RetryDue { session_id, epoch }
            }
        }
    }

    fn handle_event(&mut self, event: Event<T>) {
        match event {
            Event::Close => self.stop = Some(EndReason::Closed),
            Event::Command(command) => self.handle_command(command),
            Event::Frame(Some(frame)) => self.handle_frame(frame),
            Event::Frame(None) => self.link_lost("the daemon closed the connection".to_owned()),
            Event::BackoffElapsed => self.backoff_elapsed(),
            Event::Dialed(dialed) => self.dialed(dialed),
            Event::RetryDue { session_id, epoch } => self.retry_due(&session_id, epoch),
        }
    }

    pub(super) fn link_ready(&self) -> bool {
        matches!(self.link, Link::Up { ready: true, .. })
    }

    pub(super) fn next_request_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub(super) fn bump_epoch(&mut self) -> u64 {
        self.next_epoch += 1;
        self.next_epoch
    }

    fn handle_command(&mut self, command: Command) {
        match command {
            Command::Call { id, frame, reply } => self.queue_call(id, frame, reply),
            Command::Forget { id } => self.forget_call(id),
            Command::Subscribe { session_id, cursor, reply } => self.subscribe_command(session_id, cursor, reply),
        }
    }

    async fn flush_outgoing(&mut self) {
        while let Some(frame) = self.outgoing.pop_front() {
            let Link::Up { transport, .. } = &mut self.link else {
                self.outgoing.clear();
                return;
            };
            if let Err(error) = frame.send_to(transport).await {
                self.link_lost(error.0);
                return;
            }
        }
    }

    /// Hands queued deliveries to the consumer, waiting for room (see the module docs of `client` on
    /// back-pressure) but never past a `close`.
    async fn flush_outbox(&mut self) {
        while let Some(delivery) = self.outbox.pop_front() {
            let Some(sender) = &self.deliveries else {
                self.outbox.clear();
                return;
            };
            let delivery = match sender.try_send(delivery) {
                Ok(()) => continue,
                Err(mpsc::error::TrySendError::Full(delivery)) => delivery,
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    self.consumer_gone();
                    return;
                }
            };
            let consumer_present = tokio::select! {
                sent = sender.send(delivery) => sent.is_ok(),
                _ = self.close.wait_for(|closed| *closed) => {
                    self.stop = Some(EndReason::Closed);
                    return;
                }
            };
            if !consumer_present {
                self.consumer_gone();
                return;
            }
        }
    }

    /// The consumer dropped [`Deliveries`](super::Deliveries): calls keep working, deliveries are discarded.
    fn consumer_gone(&mut self) {
        self.deliveries = None;
        self.outbox.clear();
    }

    fn finish(mut self) {
        let reason = self.stop.unwrap_or(EndReason::Disconnected);
        // Published before the replies are failed, so that a caller that finds its reply dropped reads it.
        *self.end.lock() = Some(reason);
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
        for state in self.sessions.values_mut() {
            if let SessionPhase::AwaitingLink { reply: Some(reply), .. } =
                std::mem::replace(&mut state.phase, SessionPhase::Live)
            {
                let _ = reply.send(Err(reason.error()));
            }
        }
        // Dropping the task drops the command receiver, which is what `Client::close` waits for, and the
        // delivery sender, which ends the consumer's stream.
    }
}
