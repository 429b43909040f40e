//! The connection task (the layer below the [`Client`] handle): the one place that owns the transport and all
//! protocol state of a client. Handles talk to it only through [`Command`]s. It is made of parts that each own
//! their state and know nothing of the task: the [`Link`] (`reconnect`), the requests awaiting answers
//! ([`Calls`]), the followed sessions ([`Subscriptions`]) and the way to the consumer ([`Outbox`]); frames are
//! read by `incoming`. This module holds the loop, routes each event, command and message to the parts, and
//! decides what crosses between them: what a lost, regained or refused link means for calls and subscriptions,
//! what an answer means, and what happens when the task stops. The loop never waits for the consumer:
//! deliveries go through the outbox, which hands them over as room allows, and the loop keeps reading the
//! socket meanwhile.
//!
//! [`Client`]: super::Client

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};

use super::calls::{Calls, Pending};
use super::command::Command;
use super::delivery::ClientDelivery;
use super::error::{ClientError, EndReason};
use super::handshake::check_handshake_result;
use super::incoming::{Incoming, decode_subscribe_result, read_frame};
use super::outbox::Outbox;
use super::reconnect::{Link, LinkEvent, NotUp, Redial};
use super::secrets::OutgoingText;
use super::subscriptions::{Io, Subscriptions};
use crate::error::RpcError;
use crate::methods::method;
use crate::transport::{Transport, TransportError};
use crate::types::runtime::HandshakeResult;

/// What the loop wakes up for.
enum Event<T> {
    Close,
    Command(Command),
    Link(LinkEvent<T>),
    RetryDue {
        session_id: String,
        epoch: u64,
    },
    /// The consumer made room in the delivery stream.
    Room,
}

/// The connection task: owns the transport and every piece of protocol state. Handlers are synchronous and
/// only queue work (frames in `calls`, deliveries in `outbox`); the loop does the awaiting, so state changes are
/// never interleaved with I/O. The only thing it awaits besides its inputs is writing a frame.
pub(super) struct ConnectionTask<T: Transport> {
    link: Link<T>,
    commands: mpsc::UnboundedReceiver<Command>,
    close: watch::Receiver<bool>,
    end: Arc<Mutex<Option<EndReason>>>,
    calls: Calls,
    subscriptions: Subscriptions,
    /// The way to the consumer.
    outbox: Outbox,
    /// Set when the task must stop.
    stop: Option<EndReason>,
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
            link: Link::new(transport, redial),
            commands,
            close,
            end,
            calls: Calls::new(next_id),
            subscriptions: Subscriptions::new(),
            outbox: Outbox::new(deliveries),
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
                    if !self.calls.has_unwritten() || self.stop.is_some() {
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
        let subscriptions = &mut self.subscriptions;
        let outbox = &self.outbox;
        // While the consumer is behind, the socket is read only when an answer is awaited: the daemon's own
        // bounded queue then holds what follows (a replay waits for room there; live events past its bound become
        // a `gap`), instead of this task dropping events and re-subscribing over and over. An awaited answer is
        // always read, so a call never waits for the consumer.
        let read = !outbox.congested() || self.calls.awaiting_answers() || !link.is_up();
        let retrying = subscriptions.retrying();
        // Not biased: a busy notification stream must not starve commands, nor the reverse.
        tokio::select! {
            // An error means every `Client` handle is gone: nobody can call or close any more.
            _ = close.wait_for(|closed| *closed) => Event::Close,
            command = commands.recv() => match command {
                Some(command) => Event::Command(command),
                None => Event::Close,
            },
            event = link.next_event(), if read => Event::Link(event),
            Some((session_id, epoch)) = subscriptions.next_retry(), if retrying => {
                Event::RetryDue { session_id, epoch }
            }
            () = outbox.room() => Event::Room,
        }
    }

    fn handle_event(&mut self, event: Event<T>) {
        match event {
            Event::Close => self.stop = Some(EndReason::Closed),
            Event::Command(command) => self.handle_command(command),
            Event::Link(LinkEvent::Frame(Some(frame))) => {
                let text = frame.into_text();
                read_frame(&text, |message| self.handle_message(message));
            }
            Event::Link(LinkEvent::Frame(None)) => self.link_lost("the daemon closed the connection".to_owned()),
            Event::Link(LinkEvent::BackoffElapsed) => self.link.backoff_elapsed(),
            Event::Link(LinkEvent::Dialed(dialed)) => self.dialed(dialed),
            Event::RetryDue { session_id, epoch } => {
                let (subscriptions, mut io) = self.subscriptions_io();
                subscriptions.retry_due(&session_id, epoch, &mut io);
            }
            // `flush_outbox` after every event does the work.
            Event::Room => {}
        }
    }

    fn handle_command(&mut self, command: Command) {
        match command {
            Command::Call { id, frame, reply } => self.calls.call(id, frame, reply, self.link.ready()),
            Command::Forget { id } => self.calls.forget(id),
            Command::Subscribe { session_id, cursor, reply } => {
                let (subscriptions, mut io) = self.subscriptions_io();
                subscriptions.subscribe(session_id, cursor, reply, &mut io);
            }
        }
    }

    fn handle_message(&mut self, message: Incoming<'_>) {
        match message {
            Incoming::Response { id, outcome } => self.handle_response(id, outcome),
            Incoming::Subscription(params) => {
                let (subscriptions, mut io) = self.subscriptions_io();
                subscriptions.notice(params, &mut io);
            }
            Incoming::RuntimeChanged(changed) => self.outbox.runtime_changed(changed),
            Incoming::ToolOutput(output) => self.outbox.tool_output(output),
            Incoming::ToolOutputEnd(params) => self.outbox.tool_output_end(params),
            Incoming::PluginEvent(params) => self.outbox.plugin_event(params),
        }
    }

    fn handle_response(&mut self, id: u64, outcome: Result<&str, RpcError>) {
        let Some(pending) = self.calls.answered(id) else {
            tracing::debug!(id, "ignoring a response to an unknown request id");
            return;
        };
        match pending {
            Pending::Call(reply) => {
                let _ = reply.send(outcome.map(str::to_owned).map_err(ClientError::Rpc));
            }
            Pending::Subscribe { session_id, epoch, reply } => {
                let decoded = outcome.map_err(ClientError::Rpc).and_then(decode_subscribe_result);
                let (subscriptions, mut io) = self.subscriptions_io();
                subscriptions.answered(session_id, epoch, reply, decoded, &mut io);
            }
            Pending::Handshake => {
                let checked = outcome
                    .map_err(ClientError::Rpc)
                    .and_then(|raw| {
                        serde_json::from_str::<HandshakeResult>(raw)
                            .map_err(|error| ClientError::Decode(error.to_string()))
                    })
                    .and_then(|result| check_handshake_result(&result));
                self.reconnect_handshaken(checked);
            }
        }
    }

    /// The subscriptions, and what they reach of the rest of the task.
    fn subscriptions_io(&mut self) -> (&mut Subscriptions, Io<'_>) {
        let io = Io { ready: self.link.ready(), calls: &mut self.calls, outbox: &mut self.outbox };
        (&mut self.subscriptions, io)
    }

    /// The transport failed or was closed by the daemon. Without a way to dial again the task ends; with one,
    /// the calls written on the lost link fail, every subscribed session is parked until the link is back, and
    /// the link dials again with doubling delays.
    fn link_lost(&mut self, detail: String) {
        let was_ready = self.link.ready();
        let redialing = self.link.redials();
        // Requests written on the lost connection will never be answered on a new one.
        let failed_subscribes = self.calls.link_lost();
        self.subscriptions.link_lost(&failed_subscribes, redialing);
        if !redialing {
            tracing::debug!(%detail, "the connection ended");
            self.stop = Some(EndReason::Disconnected);
            return;
        }
        if was_ready {
            tracing::debug!(%detail, "lost the connection to the daemon; reconnecting");
            self.outbox.push(ClientDelivery::Disconnected { detail });
        }
        self.dial_again(was_ready);
    }

    fn dial_again(&mut self, afresh: bool) {
        if self.link.dial_again(afresh).is_err() {
            self.stop = Some(EndReason::Disconnected);
        }
    }

    /// A dial finished: on success the new link is handshaken before anything else is written on it.
    fn dialed(&mut self, dialed: Result<T, TransportError>) {
        match dialed {
            Ok(transport) => {
                let params = self.link.dialed(transport);
                let id = self.calls.next_id();
                match OutgoingText::encode::<method::Handshake>(id, &params) {
                    Ok(frame) => self.calls.send(id, frame, Pending::Handshake),
                    Err(error) => {
                        tracing::error!(%error, "cannot encode the handshake");
                        self.stop = Some(EndReason::Disconnected);
                    }
                }
            }
            Err(error) => {
                // One attempt of many: the consumer got `Disconnected` and tells its user once, in its words.
                tracing::debug!(error = %error.0, "reconnecting to the daemon failed");
                self.dial_again(false);
            }
        }
    }

    /// The handshake on a re-established connection was answered: the parked sessions re-subscribe from their
    /// cursors, then the calls made meanwhile go out.
    fn reconnect_handshaken(&mut self, checked: Result<(), ClientError>) {
        if let Err(error) = checked {
            tracing::warn!(%error, "the daemon refused the handshake after reconnecting");
            self.calls.drop_unwritten();
            self.dial_again(false);
            return;
        }
        self.link.handshaken();
        self.outbox.push(ClientDelivery::Reconnected);
        let (subscriptions, mut io) = self.subscriptions_io();
        subscriptions.link_ready(&mut io);
        self.calls.release_waiting();
    }

    async fn flush_outgoing(&mut self) {
        while let Some(frame) = self.calls.next_frame() {
            match self.link.send(frame).await {
                Ok(()) => {}
                Err(NotUp::Down) => {
                    self.calls.drop_unwritten();
                    return;
                }
                Err(NotUp::Failed(detail)) => {
                    self.link_lost(detail);
                    return;
                }
            }
        }
    }

    /// Hands waiting deliveries to the consumer as far as the stream has room. Once nothing waits, the sessions
    /// that fell behind meanwhile are re-subscribed from their cursors.
    fn flush_outbox(&mut self) {
        if self.outbox.flush() {
            let (subscriptions, mut io) = self.subscriptions_io();
            subscriptions.caught_up(&mut io);
        }
    }

    async fn finish(mut self) {
        let reason = self.stop.unwrap_or(EndReason::Disconnected);
        // Published before the replies are failed, so that a caller that finds its reply dropped reads it.
        *self.end.lock() = Some(reason);
        self.calls.end(reason);
        self.subscriptions.end(reason);
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
