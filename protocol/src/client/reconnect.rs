//! The link to the daemon and how it is re-established. The link is up (and `ready` once handshaken), waiting
//! out a backoff, or dialing. Only [`Client::connect_websocket`](super::Client::connect_websocket) can dial
//! again, so only it carries a [`Redial`]; without one a lost link ends the task. With one, a lost link fails
//! the calls written on it, parks every subscribed session until the link is back, and dials again with
//! doubling delays; once the new link is handshaken, the parked sessions re-subscribe from their cursors and
//! the calls made meanwhile go out.

use std::pin::Pin;
use std::time::Duration;

use super::calls::Pending;
use super::command::SubscribeReply;
use super::delivery::{ClientDelivery, ReplayReason};
use super::error::ClientError;
use super::error::EndReason;
use super::secrets::OutgoingText;
use super::subscriptions::SessionPhase;
use super::task::{ConnectionTask, Event};
use crate::jsonrpc::{Id, encode_request};
use crate::methods::method;
use crate::transport::{Transport, TransportError};
use crate::types::runtime::HandshakeParams;

/// How [`Client::connect_websocket`](super::Client::connect_websocket) dials again after the connection drops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconnectPolicy {
    /// Delay before the first attempt; it doubles after each failed one.
    pub initial_delay: Duration,
    /// Upper bound of the delay between attempts.
    pub max_delay: Duration,
    /// Give up (and end the delivery stream) after this many failed attempts in a row; `None` never gives up.
    pub max_attempts: Option<u32>,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        ReconnectPolicy {
            initial_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(5),
            max_attempts: None,
        }
    }
}

impl ReconnectPolicy {
    /// The delay before attempt `attempt` (0-based).
    fn delay(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(16)).unwrap_or(u32::MAX);
        self.initial_delay.saturating_mul(factor).min(self.max_delay)
    }
}

pub(super) type DialFuture<T> = Pin<Box<dyn Future<Output = Result<T, TransportError>> + Send>>;
pub(super) type Dialer<T> = Box<dyn Fn() -> DialFuture<T> + Send + Sync>;

/// How to open the transport again, and where the current series of attempts stands.
pub(super) struct Redial<T> {
    pub(super) dial: Dialer<T>,
    pub(super) policy: ReconnectPolicy,
    /// Failed attempts since the connection was last established.
    pub(super) attempt: u32,
    /// What each new link's handshake sends: the client's `client_info` included, unless the first connection
    /// found a daemon that does not know it.
    pub(super) handshake: std::sync::Arc<parking_lot::Mutex<HandshakeParams>>,
}

/// The connection to the daemon, or the way back to one.
pub(super) enum Link<T> {
    /// `ready` once handshaken: consumer calls wait until then.
    Up {
        transport: T,
        ready: bool,
    },
    /// Waiting before the next dial.
    Backoff(Pin<Box<tokio::time::Sleep>>),
    Dialing(DialFuture<T>),
}

/// What the link produces next: a frame (or its end), the end of a backoff, or the outcome of a dial.
pub(super) async fn link_event<T: Transport>(link: &mut Link<T>) -> Event<T> {
    match link {
        Link::Up { transport, .. } => Event::Frame(transport.recv().await),
        Link::Backoff(sleep) => {
            sleep.as_mut().await;
            Event::BackoffElapsed
        }
        Link::Dialing(dial) => Event::Dialed(dial.as_mut().await),
    }
}

impl<T: Transport> ConnectionTask<T> {
    pub(super) fn backoff_elapsed(&mut self) {
        if let Some(redial) = &self.redial {
            self.link = Link::Dialing((redial.dial)());
        }
    }

    /// A dial finished: on success the new link is handshaken before anything else is written on it.
    pub(super) fn dialed(&mut self, dialed: Result<T, TransportError>) {
        match dialed {
            Ok(transport) => {
                self.link = Link::Up { transport, ready: false };
                let id = self.next_request_id();
                let params = self.redial.as_ref().map(|redial| redial.handshake.lock().clone()).unwrap_or_default();
                match encode_request::<method::Handshake>(&Id::Number(id.into()), &params) {
                    Ok(frame) => {
                        self.pending.insert(id, Pending::Handshake);
                        self.outgoing.push_back(OutgoingText::Plain(frame));
                    }
                    Err(error) => {
                        tracing::error!(%error, "cannot encode the handshake");
                        self.stop = Some(EndReason::Disconnected);
                    }
                }
            }
            Err(error) => {
                // One attempt of many: the consumer got `Disconnected` and tells its user once, in its words.
                tracing::debug!(error = %error.0, "reconnecting to the daemon failed");
                self.schedule_redial();
            }
        }
    }

    /// The transport failed or was closed by the daemon.
    pub(super) fn link_lost(&mut self, detail: String) {
        let was_ready = self.link_ready();
        // Requests written on the lost connection will never be answered on a new one.
        self.outgoing.clear();
        let reconnecting = self.redial.is_some();
        let epoch = self.bump_epoch();
        for (_, pending) in std::mem::take(&mut self.pending) {
            match pending {
                Pending::Call(reply) => {
                    let _ = reply.send(Err(ClientError::Disconnected));
                }
                Pending::Subscribe { session_id, reply: Some(reply), .. } => {
                    let _ = reply.send(Err(ClientError::Disconnected));
                    if self.sessions.get(&session_id).is_some_and(|state| !state.established) {
                        self.sessions.remove(&session_id);
                    }
                }
                Pending::Subscribe { reply: None, .. } | Pending::Handshake => {}
            }
        }
        if !reconnecting {
            tracing::debug!(%detail, "the connection ended");
            self.stop = Some(EndReason::Disconnected);
            return;
        }
        for state in self.sessions.values_mut() {
            state.epoch = epoch;
            // The replay from the cursor on the new connection covers everything held back.
            state.held.clear();
            state.dropped_above = None;
            state.gap_while_subscribing = false;
            if !matches!(state.phase, SessionPhase::AwaitingLink { .. }) {
                state.phase = SessionPhase::AwaitingLink { reason: ReplayReason::Reconnect, reply: None };
            }
        }
        if was_ready {
            tracing::debug!(%detail, "lost the connection to the daemon; reconnecting");
            self.outbox.push(ClientDelivery::Disconnected { detail });
            if let Some(redial) = &mut self.redial {
                redial.attempt = 0;
            }
        }
        self.schedule_redial();
    }

    fn schedule_redial(&mut self) {
        let Some(redial) = &mut self.redial else {
            self.stop = Some(EndReason::Disconnected);
            return;
        };
        if redial.policy.max_attempts.is_some_and(|max| redial.attempt >= max) {
            tracing::warn!(attempts = redial.attempt, "giving up reconnecting to the daemon");
            self.stop = Some(EndReason::Disconnected);
            return;
        }
        let delay = redial.policy.delay(redial.attempt);
        redial.attempt += 1;
        self.link = Link::Backoff(Box::pin(tokio::time::sleep(delay)));
    }

    /// The handshake on a re-established connection was answered.
    pub(super) fn reconnect_handshaken(&mut self, checked: Result<(), ClientError>) {
        if let Err(error) = checked {
            tracing::warn!(%error, "the daemon refused the handshake after reconnecting");
            self.outgoing.clear();
            self.schedule_redial();
            return;
        }
        if let Link::Up { ready, .. } = &mut self.link {
            *ready = true;
        }
        if let Some(redial) = &mut self.redial {
            redial.attempt = 0;
        }
        self.outbox.push(ClientDelivery::Reconnected);
        let mut parked: Vec<(String, ReplayReason, Option<SubscribeReply>)> = Vec::new();
        for (session_id, state) in &mut self.sessions {
            if let SessionPhase::AwaitingLink { reason, reply } = &mut state.phase {
                parked.push((session_id.clone(), *reason, reply.take()));
            }
        }
        for (session_id, reason, reply) in parked {
            self.issue_subscribe(&session_id, reason, reply);
        }
        // Calls made while disconnected go out after the re-subscribes.
        while let Some(call) = self.waiting.pop_front() {
            self.pending.insert(call.id, Pending::Call(call.reply));
            self.outgoing.push_back(call.frame);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnect_delays_double_up_to_the_maximum() {
        let policy = ReconnectPolicy::default();
        assert_eq!(policy.delay(0), Duration::from_millis(200));
        assert_eq!(policy.delay(1), Duration::from_millis(400));
        assert_eq!(policy.delay(5), Duration::from_secs(5));
        assert_eq!(policy.delay(400), Duration::from_secs(5));
    }
}
