//! Subscription bookkeeping (a part of the connection task). [`Subscriptions`] remembers every session the
//! consumer subscribed to with a *cursor*, the last `seq` handed to the consumer, and keeps the consumer's view
//! of each session gapless and free of duplicates:
//!
//! - a live event at or below the cursor is a duplicate and is dropped;
//! - a subscribe reply is delivered as a replay (`ReplayStart`, `ReplayEvent`*, `ReplayEnd`), and the live
//!   events read while it was in flight are held back and delivered after it, as far as they continue it
//!   without a hole;
//! - a paged reply (its `last_seq` below the session's end) is followed by the rest of the stored events as
//!   ordinary event notifications: they are above the cursor, so they are delivered as `Live`;
//! - a `gap` notice, or a reconnect, makes it subscribe again from the cursor by itself, retrying with
//!   backoff and finally giving the session up with `RecoveryFailed`;
//! - a live event that arrives while the delivery stream is congested (see `outbox`) is not queued: the session
//!   is marked *behind* at its cursor, its further events are dropped, and once the consumer has caught up it
//!   subscribes again from the cursor (a replay with reason `Gap`). The state is per session, whatever
//!   the number of events missed. Automatic re-subscribes wait for the consumer to catch up in the same way, so
//!   that at most one replay per session waits for it.
//!
//! Every issued subscribe bumps the session's *epoch*, so that a reply or a retry timer that belongs to a
//! superseded subscribe is recognized and ignored.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::calls::{Calls, Pending};
use super::command::SubscribeReply;
use super::delivery::{ClientDelivery, ReplayReason};
use super::error::{ClientError, EndReason};
use super::outbox::Outbox;
use super::secrets::OutgoingText;
use crate::error_code::ErrorCode;
use crate::methods::method;
use crate::types::events::{EventsSubscribeParams, StoredEvent};

/// How many times a failed automatic re-subscribe (after a gap or a reconnect) is retried before the session is
/// given up with [`ClientDelivery::RecoveryFailed`].
const RECOVERY_RETRIES: u32 = 6;

/// Delay before the first recovery retry; it doubles for each further one.
const RECOVERY_INITIAL_DELAY: Duration = Duration::from_millis(100);

/// Live events held back per session while its re-subscribe is in flight. Beyond this they are dropped: they
/// have `seq` above the cursor, so a further re-subscribe fetches them again if the pending replay does not
/// already contain them. (The daemon sends a new subscription's events only after its reply, so what is held
/// comes from the subscription being replaced, and is usually nothing.)
const MAX_HELD_LIVE_EVENTS: usize = 1024;

/// What the task knows of one subscribed session.
struct SessionState {
    /// The last `seq` handed to the consumer (0: none yet).
    cursor: u64,
    phase: SessionPhase,
    /// Bumped whenever a subscribe is issued or the link drops, so that stale replies and timers are ignored.
    epoch: u64,
    /// Live events read while a re-subscribe is in flight, delivered after its replay.
    held: VecDeque<StoredEvent>,
    /// The highest `seq` of a live event dropped because `held` was full.
    dropped_above: Option<u64>,
    /// A gap arrived while a subscribe was in flight. It may be the new subscription's own (a subscription can
    /// fall behind before its reply is written), so the task re-subscribes once more after the replay.
    gap_while_subscribing: bool,
    /// A subscribe succeeded at least once: the session survives a reconnect.
    established: bool,
    /// Failed automatic re-subscribes in a row.
    failures: u32,
}

enum SessionPhase {
    /// Subscribed; live events go straight to the consumer.
    Live,
    /// An `events.subscribe` is in flight.
    Subscribing { reason: ReplayReason },
    /// A re-subscribe failed; a timer retries it.
    RetryWait { reason: ReplayReason },
    /// Subscribe as soon as the connection is back (and handshaken).
    AwaitingLink { reason: ReplayReason, reply: Option<SubscribeReply> },
    /// The consumer fell behind: events are dropped, and the task subscribes again from the cursor once the
    /// delivery stream has caught up.
    Behind { reason: ReplayReason },
}

impl SessionState {
    fn new() -> Self {
        SessionState {
            cursor: 0,
            phase: SessionPhase::Live,
            epoch: 0,
            held: VecDeque::new(),
            dropped_above: None,
            gap_while_subscribing: false,
            established: false,
            failures: 0,
        }
    }
}

/// Fires `(session_id, epoch)` when a failed re-subscribe is due to be retried.
type RetryTimer = Pin<Box<dyn Future<Output = (String, u64)> + Send>>;

/// What a change of the subscriptions reaches besides the sessions: whether requests may be written now (the
/// link is up and handshaken), the requests its `events.subscribe` goes out through, and the consumer.
pub(super) struct Io<'a> {
    pub(super) ready: bool,
    pub(super) calls: &'a mut Calls,
    pub(super) outbox: &'a mut Outbox,
}

/// The sessions the consumer follows, and the timers of their failed re-subscribes.
pub(super) struct Subscriptions {
    sessions: HashMap<String, SessionState>,
    retries: FuturesUnordered<RetryTimer>,
    /// Some session is marked behind and waits for the consumer to catch up.
    behind: bool,
    /// The last epoch handed out.
    epoch: u64,
}

impl Subscriptions {
    pub(super) fn new() -> Self {
        Subscriptions { sessions: HashMap::new(), retries: FuturesUnordered::new(), behind: false, epoch: 1 }
    }

    fn bump_epoch(&mut self) -> u64 {
        self.epoch += 1;
        self.epoch
    }

    /// Whether a failed re-subscribe waits for its retry.
    pub(super) fn retrying(&self) -> bool {
        !self.retries.is_empty()
    }

    /// The next retry that is due, as `(session_id, epoch)`; `None` while none waits.
    pub(super) async fn next_retry(&mut self) -> Option<(String, u64)> {
        self.retries.next().await
    }

    /// The consumer called [`Client::subscribe`](super::Client::subscribe): `cursor` replaces whatever cursor
    /// was known for the session.
    pub(super) fn subscribe(
        &mut self,
        session_id: String,
        cursor: Option<u64>,
        reply: SubscribeReply,
        io: &mut Io<'_>,
    ) {
        let epoch = self.bump_epoch();
        let state = self.sessions.entry(session_id.clone()).or_insert_with(SessionState::new);
        state.cursor = cursor.unwrap_or(0);
        state.failures = 0;
        if io.ready {
            self.issue_subscribe(&session_id, ReplayReason::Subscribe, Some(reply), io);
        } else {
            state.epoch = epoch;
            let previous = std::mem::replace(
                &mut state.phase,
                SessionPhase::AwaitingLink { reason: ReplayReason::Subscribe, reply: Some(reply) },
            );
            // An earlier subscribe of the same session that was still waiting is superseded.
            if let SessionPhase::AwaitingLink { reply: Some(earlier), .. } = previous {
                let _ = earlier.send(Err(ClientError::Disconnected));
            }
        }
    }

    /// The retry timer of a failed re-subscribe fired; it is stale if the session moved on meanwhile.
    pub(super) fn retry_due(&mut self, session_id: &str, epoch: u64, io: &mut Io<'_>) {
        let Some(state) = self.sessions.get(session_id) else {
            return;
        };
        if state.epoch != epoch {
            return;
        }
        if let SessionPhase::RetryWait { reason } = state.phase {
            self.issue_subscribe(session_id, reason, None, io);
        }
    }

    /// Sends `events.subscribe {session_id, cursor}` from the session's cursor, or parks the session until the
    /// connection is ready.
    fn issue_subscribe(
        &mut self,
        session_id: &str,
        reason: ReplayReason,
        reply: Option<SubscribeReply>,
        io: &mut Io<'_>,
    ) {
        let epoch = self.bump_epoch();
        let Some(state) = self.sessions.get_mut(session_id) else {
            return;
        };
        state.epoch = epoch;
        if !io.ready {
            state.phase = SessionPhase::AwaitingLink { reason, reply };
            return;
        }
        if reply.is_none() && io.outbox.congested() {
            // Its replay would only wait behind what the consumer has not read yet.
            state.phase = SessionPhase::Behind { reason };
            self.behind = true;
            return;
        }
        let params = EventsSubscribeParams {
            session_id: session_id.to_owned(),
            // Sequences start at 1, so "after 0" and "from the beginning" are the same request.
            cursor: (state.cursor > 0).then_some(state.cursor),
        };
        let id = io.calls.next_id();
        match OutgoingText::encode::<method::EventsSubscribe>(id, &params) {
            Ok(frame) => {
                state.phase = SessionPhase::Subscribing { reason };
                io.calls.send(id, frame, Pending::Subscribe { session_id: session_id.to_owned(), epoch, reply });
            }
            // Cannot happen for a struct of a string and a number; fail the subscribe rather than panic.
            Err(error) => self.subscribe_failed(session_id.to_owned(), reason, reply, error, io),
        }
    }

    pub(super) fn answered(
        &mut self,
        session_id: String,
        epoch: u64,
        reply: Option<SubscribeReply>,
        decoded: Result<(Vec<StoredEvent>, u64), ClientError>,
        io: &mut Io<'_>,
    ) {
        let current = self.sessions.get(&session_id).and_then(|state| match state.phase {
            SessionPhase::Subscribing { reason } if state.epoch == epoch => Some(reason),
            _ => None,
        });
        let Some(reason) = current else {
            // Superseded by a later subscribe of the same session (or the session was forgotten): that one's
            // replay is the one that counts.
            if let Some(reply) = reply {
                let _ = reply.send(decoded.map(|(_, last_seq)| last_seq));
            }
            return;
        };
        let (events, last_seq) = match decoded {
            Ok(decoded) => decoded,
            Err(error) => return self.subscribe_failed(session_id, reason, reply, error, io),
        };
        // Answer first: a consumer that reads deliveries on the same task as it subscribes must not find the
        // task waiting for it to drain the replay while it is still waiting for this answer.
        if let Some(reply) = reply {
            let _ = reply.send(Ok(last_seq));
        }
        let Some(state) = self.sessions.get_mut(&session_id) else {
            return;
        };
        // A replay is queued whole, congested or not: the daemon bounds a reply in bytes, and only one replay
        // per session is ever in flight.
        io.outbox.push(ClientDelivery::ReplayStart { session_id: session_id.clone(), after_seq: state.cursor, reason });
        for event in events {
            if event.seq > state.cursor {
                state.cursor = event.seq;
                io.outbox.push(ClientDelivery::ReplayEvent(event));
            }
        }
        // Event notifications carry exactly the events after `last_seq`: the live ones, and after a paged reply
        // the rest of the stored ones first.
        state.cursor = state.cursor.max(last_seq);
        io.outbox.push(ClientDelivery::ReplayEnd { session_id: session_id.clone(), last_seq });
        state.established = true;
        state.failures = 0;
        let lost_held_events = state.dropped_above.is_some_and(|seq| seq > state.cursor);
        let resubscribe = lost_held_events || state.gap_while_subscribing;
        state.dropped_above = None;
        state.gap_while_subscribing = false;
        if resubscribe {
            // Whatever is held will come back in the next replay.
            state.held.clear();
            self.issue_subscribe(&session_id, ReplayReason::Gap, None, io);
            return;
        }
        state.phase = SessionPhase::Live;
        let held = std::mem::take(&mut state.held);
        let mut expected = state.cursor + 1;
        for event in held {
            if event.seq < expected {
                continue;
            }
            if event.seq > expected {
                // After a paged reply, held events of the replaced subscription can lie beyond the page: the new
                // subscription sends everything after `last_seq` in order, so they come again.
                break;
            }
            expected += 1;
            self.live_event(&session_id, event, io);
        }
    }

    /// The delivery stream has nothing waiting any more: every session marked behind meanwhile subscribes again
    /// from its cursor.
    pub(super) fn caught_up(&mut self, io: &mut Io<'_>) {
        if !std::mem::take(&mut self.behind) {
            return;
        }
        let behind: Vec<(String, ReplayReason)> = self
            .sessions
            .iter()
            .filter_map(|(session_id, state)| match state.phase {
                SessionPhase::Behind { reason } => Some((session_id.clone(), reason)),
                _ => None,
            })
            .collect();
        for (session_id, reason) in behind {
            self.issue_subscribe(&session_id, reason, None, io);
        }
    }

    /// A subscribe failed. A consumer's subscribe reports the error and forgets the session; an automatic one
    /// is retried with backoff, then given up with `RecoveryFailed`.
    fn subscribe_failed(
        &mut self,
        session_id: String,
        reason: ReplayReason,
        reply: Option<SubscribeReply>,
        error: ClientError,
        io: &mut Io<'_>,
    ) {
        if let Some(reply) = reply {
            self.sessions.remove(&session_id);
            let _ = reply.send(Err(error));
            return;
        }
        let Some(state) = self.sessions.get_mut(&session_id) else {
            return;
        };
        state.failures += 1;
        // A session that is not found was deleted (`session.delete`): it will not come back, so there is nothing to
        // wait for.
        let gone = matches!(&error, ClientError::Rpc(rpc) if rpc.error_code() == Some(ErrorCode::SessionNotFound));
        if gone || state.failures > RECOVERY_RETRIES {
            tracing::warn!(%session_id, %error, "giving up re-subscribing to a session");
            self.sessions.remove(&session_id);
            io.outbox.push(ClientDelivery::RecoveryFailed { session_id, detail: error.to_string() });
            return;
        }
        tracing::debug!(%session_id, %error, attempt = state.failures, "re-subscribing failed; retrying");
        let delay = RECOVERY_INITIAL_DELAY.saturating_mul(1 << (state.failures - 1));
        state.phase = SessionPhase::RetryWait { reason };
        let epoch = state.epoch;
        self.retries.push(Box::pin(async move {
            tokio::time::sleep(delay).await;
            (session_id, epoch)
        }));
    }

    /// An `events.subscription` notification (`params` as raw JSON): an event, or a gap.
    pub(super) fn notice(&mut self, params: &str, io: &mut Io<'_>) {
        #[derive(Deserialize)]
        struct Notice<'a> {
            #[serde(rename = "type", borrow)]
            kind: Cow<'a, str>,
            #[serde(borrow)]
            session_id: Cow<'a, str>,
            #[serde(default, borrow)]
            event: Option<&'a RawValue>,
            #[serde(default)]
            last_delivered_seq: Option<u64>,
        }
        let notice: Notice<'_> = match serde_json::from_str(params) {
            Ok(notice) => notice,
            Err(error) => {
                tracing::warn!(%error, "ignoring an undecodable events.subscription");
                return;
            }
        };
        let session_id: &str = &notice.session_id;
        if !self.sessions.contains_key(session_id) {
            tracing::debug!(%session_id, "ignoring a notification for a session this client does not follow");
            return;
        }
        match (&*notice.kind, notice.event) {
            ("event", Some(event)) => match serde_json::from_str::<StoredEvent>(event.get()) {
                Ok(event) => self.live_event(session_id, event, io),
                Err(error) => tracing::warn!(%session_id, %error, "skipping an undecodable event"),
            },
            ("gap", _) => self.gap(session_id, notice.last_delivered_seq, io),
            (kind, _) => tracing::debug!(%kind, "ignoring an unknown events.subscription type"),
        }
    }

    fn live_event(&mut self, session_id: &str, event: StoredEvent, io: &mut Io<'_>) {
        let Some(state) = self.sessions.get_mut(session_id) else {
            return;
        };
        if event.seq <= state.cursor {
            tracing::debug!(%session_id, seq = event.seq, "dropping a duplicate event");
            return;
        }
        match state.phase {
            SessionPhase::Live if io.outbox.congested() => {
                tracing::debug!(%session_id, cursor = state.cursor, "the consumer fell behind; dropping events");
                state.phase = SessionPhase::Behind { reason: ReplayReason::Gap };
                self.behind = true;
            }
            SessionPhase::Live => {
                state.cursor = event.seq;
                io.outbox.push(ClientDelivery::Live(event));
            }
            // A subscribe from the cursor is due once the consumer catches up; it brings this event again.
            SessionPhase::Behind { .. } => {}
            _ if state.held.len() < MAX_HELD_LIVE_EVENTS => state.held.push_back(event),
            _ => state.dropped_above = Some(state.dropped_above.unwrap_or(0).max(event.seq)),
        }
    }

    fn gap(&mut self, session_id: &str, last_delivered_seq: Option<u64>, io: &mut Io<'_>) {
        let Some(state) = self.sessions.get_mut(session_id) else {
            return;
        };
        tracing::debug!(%session_id, ?last_delivered_seq, cursor = state.cursor, "subscription gap");
        match state.phase {
            SessionPhase::Live => self.issue_subscribe(session_id, ReplayReason::Gap, None, io),
            SessionPhase::Subscribing { .. } => state.gap_while_subscribing = true,
            // A subscribe from the cursor is already scheduled.
            SessionPhase::RetryWait { .. } | SessionPhase::AwaitingLink { .. } | SessionPhase::Behind { .. } => {}
        }
    }

    /// The link dropped. The consumer's subscribes of `failed` were answered `Disconnected`: a session among them
    /// that was never established is forgotten. With `redialing`, every other session is parked until the link is
    /// back, to subscribe again from its cursor; the replay from there covers everything held back.
    pub(super) fn link_lost(&mut self, failed: &[String], redialing: bool) {
        let epoch = self.bump_epoch();
        for session_id in failed {
            if self.sessions.get(session_id).is_some_and(|state| !state.established) {
                self.sessions.remove(session_id);
            }
        }
        if !redialing {
            return;
        }
        for state in self.sessions.values_mut() {
            state.epoch = epoch;
            state.held.clear();
            state.dropped_above = None;
            state.gap_while_subscribing = false;
            if !matches!(state.phase, SessionPhase::AwaitingLink { .. }) {
                state.phase = SessionPhase::AwaitingLink { reason: ReplayReason::Reconnect, reply: None };
            }
        }
    }

    /// The link is back and handshaken: every parked session subscribes again from its cursor.
    pub(super) fn link_ready(&mut self, io: &mut Io<'_>) {
        let mut parked: Vec<(String, ReplayReason, Option<SubscribeReply>)> = Vec::new();
        for (session_id, state) in &mut self.sessions {
            if let SessionPhase::AwaitingLink { reason, reply } = &mut state.phase {
                parked.push((session_id.clone(), *reason, reply.take()));
            }
        }
        for (session_id, reason, reply) in parked {
            self.issue_subscribe(&session_id, reason, reply, io);
        }
    }

    /// The task stopped: a consumer's subscribe still waiting for the link fails with `reason`'s error.
    pub(super) fn end(&mut self, reason: EndReason) {
        for state in self.sessions.values_mut() {
            if let SessionPhase::AwaitingLink { reply: Some(reply), .. } =
                std::mem::replace(&mut state.phase, SessionPhase::Live)
            {
                let _ = reply.send(Err(reason.error()));
            }
        }
    }
}

#[cfg(test)]
mod tests;
