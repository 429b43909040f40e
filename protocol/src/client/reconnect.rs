//! The link to the daemon and how it is re-established (a part of the connection task). The link is up (and
//! `ready` once handshaken), waiting out a backoff, or dialing. Only
//! [`Client::connect_websocket`](super::Client::connect_websocket) can dial again, so only it carries a
//! [`Redial`]; without one a lost link ends the task. With one, the link dials again with doubling delays, and
//! the task handshakes each new one before anything else is written on it. What a lost or regained link means
//! for calls and subscriptions is the task's to decide; this module only knows the link.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::secrets::OutgoingText;
use crate::transport::{MessageFrame, Transport, TransportError};
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
    dial: Dialer<T>,
    policy: ReconnectPolicy,
    /// Failed attempts since the connection was last established.
    attempt: u32,
    /// What each new link's handshake sends: the client's `client_info` included, unless the first connection
    /// found a daemon that does not know it.
    handshake: Arc<Mutex<HandshakeParams>>,
}

impl<T> Redial<T> {
    pub(super) fn new(dial: Dialer<T>, policy: ReconnectPolicy, handshake: Arc<Mutex<HandshakeParams>>) -> Self {
        Redial { dial, policy, attempt: 0, handshake }
    }
}

/// The connection to the daemon, or the way back to one.
pub(super) struct Link<T> {
    state: LinkState<T>,
    redial: Option<Redial<T>>,
}

enum LinkState<T> {
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
pub(super) enum LinkEvent<T> {
    Frame(Option<MessageFrame>),
    BackoffElapsed,
    Dialed(Result<T, TransportError>),
}

/// The link cannot be re-established: there is no way to dial, or the policy's attempts are used up.
pub(super) struct GaveUp;

impl<T: Transport> Link<T> {
    /// A freshly opened `transport`, which the caller handshakes with its first call.
    pub(super) fn new(transport: T, redial: Option<Redial<T>>) -> Self {
        Link { state: LinkState::Up { transport, ready: true }, redial }
    }

    /// Up and handshaken: requests may be written.
    pub(super) fn ready(&self) -> bool {
        matches!(self.state, LinkState::Up { ready: true, .. })
    }

    pub(super) fn is_up(&self) -> bool {
        matches!(self.state, LinkState::Up { .. })
    }

    /// Whether a lost link is dialed again (rather than ending the task).
    pub(super) fn redials(&self) -> bool {
        self.redial.is_some()
    }

    /// Writes `frame` (see [`OutgoingText::send_to`]); a link that is not up has nothing to write to.
    pub(super) async fn send(&mut self, frame: OutgoingText) -> Result<(), NotUp> {
        match &mut self.state {
            LinkState::Up { transport, .. } => frame.send_to(transport).await.map_err(|error| NotUp::Failed(error.0)),
            LinkState::Backoff(_) | LinkState::Dialing(_) => Err(NotUp::Down),
        }
    }

    /// The next thing the link produces.
    pub(super) async fn next_event(&mut self) -> LinkEvent<T> {
        match &mut self.state {
            LinkState::Up { transport, .. } => LinkEvent::Frame(transport.recv().await),
            LinkState::Backoff(sleep) => {
                sleep.as_mut().await;
                LinkEvent::BackoffElapsed
            }
            LinkState::Dialing(dial) => LinkEvent::Dialed(dial.as_mut().await),
        }
    }

    pub(super) fn backoff_elapsed(&mut self) {
        if let Some(redial) = &self.redial {
            self.state = LinkState::Dialing((redial.dial)());
        }
    }

    /// A dial succeeded: the link is up but not ready until the returned handshake is answered.
    pub(super) fn dialed(&mut self, transport: T) -> HandshakeParams {
        self.state = LinkState::Up { transport, ready: false };
        self.redial.as_ref().map(|redial| redial.handshake.lock().clone()).unwrap_or_default()
    }

    /// The handshake on the new link was answered: it is ready, and the next loss starts a new series of attempts.
    pub(super) fn handshaken(&mut self) {
        if let LinkState::Up { ready, .. } = &mut self.state {
            *ready = true;
        }
        if let Some(redial) = &mut self.redial {
            redial.attempt = 0;
        }
    }

    /// Waits out the next backoff, then dials; `afresh` starts a new series of attempts (the link was ready).
    pub(super) fn dial_again(&mut self, afresh: bool) -> Result<(), GaveUp> {
        let Some(redial) = &mut self.redial else {
            return Err(GaveUp);
        };
        if afresh {
            redial.attempt = 0;
        }
        if redial.policy.max_attempts.is_some_and(|max| redial.attempt >= max) {
            tracing::warn!(attempts = redial.attempt, "giving up reconnecting to the daemon");
            return Err(GaveUp);
        }
        let delay = redial.policy.delay(redial.attempt);
        redial.attempt += 1;
        self.state = LinkState::Backoff(Box::pin(tokio::time::sleep(delay)));
        Ok(())
    }
}

/// Why a frame was not written.
pub(super) enum NotUp {
    /// The link is down (waiting or dialing).
    Down,
    /// The transport failed: the link is lost.
    Failed(String),
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
