//! The connection task: the one place that owns the transport and all protocol state of a [`Client`]. Handles
//! talk to it only through [`Command`]s. This module holds its state, its event loop, the dispatch of events and
//! commands to the concept modules next to it, the writing of queued frames, and what happens when the task
//! stops. The loop never waits for the consumer: deliveries go through the `outbox`, which hands them over as
//! room allows, and the loop keeps reading the socket meanwhile.
//!
//! [`Client`]: super::Client

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::stream::{FuturesUnordered, StreamExt};
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};

use super::calls::{Pending, WaitingCall};
use super::command::Command;
use super::delivery::ClientDelivery;
use super::error::EndReason;
use super::outbox::Outbox;
use super::reconnect::{Link, Redial, link_event};
use super::secrets::OutgoingText;
use super::subscriptions::{RetryTimer, SessionPhase, SessionState};
use crate::transport::{MessageFrame, Transport, TransportError};

pub(super) enum Event<T> {
    Close,
    Command(Command),
    Frame(Option<MessageFrame>),
    BackoffElapsed,
    Dialed(Result<T, TransportError>),
    RetryDue {
        session_id: String,
        epoch: u64,
    },
    /// The consumer made room in the delivery stream.
    Room,
}

/// The connection task: owns the transport and every piece of protocol state. Handlers are synchronous and
/// only queue work (`outgoing` frames, `outbox` deliveries); the loop does the awaiting, so state changes are
/// never interleaved with I/O. The only thing it awaits besides its inputs is writing a frame.
pub(super) struct ConnectionTask<T: Transport> {
    pub(super) link: Link<T>,
    pub(super) redial: Option<Redial<T>>,
    commands: mpsc::UnboundedReceiver<Command>,
    close: watch::Receiver<bool>,
    pub(super) next_id: Arc<AtomicU64>,
    end: Arc<Mutex<Option<EndReason>>>,
    /// The way to the consumer; see `outbox`.
    pub(super) outbox: Outbox,
    /// Some session is marked behind (see `subscriptions`) and waits for the consumer to catch up.
    pub(super) sessions_behind: bool,
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
            outbox: Outbox::new(deliveries),
            sessions_behind: false,
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
                // Room in the stream may issue re-subscribes, and a failed write may queue a notice: both are
                // flushed until neither has work left.
                loop {
                    self.flush_outbox();
                    if self.outgoing.is_empty() || self.stop.is_some() {
                        break;
                    }
                    self.flush_outgoing().await;
                }
            }
            if self.stop.is_some() {
                break;
            }
        }
        self.finish().await;
    }

    async fn next_event(&mut self) -> Event<T> {
        if *self.close.borrow() {
            return Event::Close;
        }
        let close = &mut self.close;
        let commands = &mut self.commands;
        let link = &mut self.link;
        let retries = &mut self.retries;
        let outbox = &self.outbox;
        // While the consumer is behind, the socket is read only when an answer is awaited: the daemon's own
        // bounded queue then holds what follows (a replay waits for room there; live events past its bound become
        // a `gap`), instead of this task dropping events and re-subscribing over and over. An awaited answer is
        // always read, so a call never waits for the consumer.
        let read = !outbox.congested() || !self.pending.is_empty() || !matches!(link, Link::Up { .. });
        // Not biased: a busy notification stream must not starve commands, nor the reverse.
        tokio::select! {
            // An error means every `Client` handle is gone: nobody can call or close any more.
            _ = close.wait_for(|closed| *closed) => Event::Close,
            command = commands.recv() => match command {
                Some(command) => Event::Command(command),
                None => Event::Close,
            },
            event = link_event(link), if read => event,
            Some((session_id, epoch)) = retries.next(), if !retries.is_empty() => {
                Event::RetryDue { session_id, epoch }
            }
            () = outbox.room() => Event::Room,
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
            // `flush_outbox` after every event does the work.
            Event::Room => {}
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

    /// Hands waiting deliveries to the consumer as far as the stream has room. Once nothing waits, the sessions
    /// that fell behind meanwhile are re-subscribed from their cursors.
    fn flush_outbox(&mut self) {
        if self.outbox.flush() && self.sessions_behind {
            self.sessions_behind = false;
            self.resume_behind();
        }
    }

    async fn finish(mut self) {
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
        // What the consumer has not read yet is still handed over when the daemon went away (not after a
        // `close`): the stream then ends after the last event that arrived.
        let (sender, remaining) = self.outbox.take_remaining();
        // No call can be served any more: calls made from now on fail at once with the end reason.
        self.commands.close();
        if reason == EndReason::Disconnected
            && let Some(sender) = sender
        {
            for delivery in remaining {
                tokio::select! {
                    sent = sender.send(delivery) => if sent.is_err() { break },
                    _ = self.close.wait_for(|closed| *closed) => break,
                }
            }
        }
        // Dropping the task drops the command receiver, which is what `Client::close` waits for, and the
        // delivery sender, which ends the consumer's stream.
    }
}
