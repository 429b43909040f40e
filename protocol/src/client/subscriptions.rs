//! Subscription bookkeeping. The connection task remembers every session the consumer subscribed to with a
//! *cursor*, the last `seq` handed to the consumer, and keeps the consumer's view of each session gapless and
//! free of duplicates:
//!
//! - a live event at or below the cursor is a duplicate and is dropped;
//! - a subscribe reply is delivered as a replay (`ReplayStart`, `ReplayEvent`*, `ReplayEnd`), and the live
//!   events read while it was in flight are held back and delivered after it, as far as they continue it
//!   without a hole;
//! - a paged reply (its `last_seq` below the session's end) is followed by the rest of the stored events as
//!   ordinary event notifications: they are above the cursor, so they are delivered as `Live`;
//! - a `gap` notice, or a reconnect, makes the task subscribe again from the cursor by itself, retrying with
//!   backoff and finally giving the session up with `RecoveryFailed`;
//! - a live event that arrives while the delivery stream is congested (see `outbox`) is not queued: the session
//!   is marked *behind* at its cursor, its further events are dropped, and once the consumer has caught up the
//!   task subscribes again from the cursor (a replay with reason `Gap`). The state is per session, whatever
//!   the number of events missed. Automatic re-subscribes wait for the consumer to catch up in the same way, so
//!   that at most one replay per session waits for it.
//!
//! Every issued subscribe bumps the session's *epoch*, so that a reply or a retry timer that belongs to a
//! superseded subscribe is recognized and ignored.

use crate::error_code::ErrorCode;
use std::borrow::Cow;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::calls::Pending;
use super::command::SubscribeReply;
use super::delivery::{ClientDelivery, ReplayReason};
use super::error::ClientError;
use super::secrets::OutgoingText;
use super::task::ConnectionTask;
use crate::jsonrpc::{Id, encode_request};
use crate::methods::method;
use crate::transport::Transport;
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
pub(super) struct SessionState {
    /// The last `seq` handed to the consumer (0: none yet).
    cursor: u64,
    pub(super) phase: SessionPhase,
    /// Bumped whenever a subscribe is issued or the link drops, so that stale replies and timers are ignored.
    pub(super) epoch: u64,
    /// Live events read while a re-subscribe is in flight, delivered after its replay.
    pub(super) held: VecDeque<StoredEvent>,
    /// The highest `seq` of a live event dropped because `held` was full.
    pub(super) dropped_above: Option<u64>,
    /// A gap arrived while a subscribe was in flight. It may be the new subscription's own (a subscription can
    /// fall behind before its reply is written), so the task re-subscribes once more after the replay.
    pub(super) gap_while_subscribing: bool,
    /// A subscribe succeeded at least once: the session survives a reconnect.
    pub(super) established: bool,
    /// Failed automatic re-subscribes in a row.
    failures: u32,
}

pub(super) enum SessionPhase {
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
pub(super) type RetryTimer = Pin<Box<dyn Future<Output = (String, u64)> + Send>>;

impl<T: Transport> ConnectionTask<T> {
    /// The consumer called [`Client::subscribe`](super::Client::subscribe): `cursor` replaces whatever cursor
    /// the task had for the session.
    pub(super) fn subscribe_command(&mut self, session_id: String, cursor: Option<u64>, reply: SubscribeReply) {
        let ready = self.link_ready();
        let epoch = self.bump_epoch();
        let state = self.sessions.entry(session_id.clone()).or_insert_with(SessionState::new);
        state.cursor = cursor.unwrap_or(0);
        state.failures = 0;
        if ready {
            self.issue_subscribe(&session_id, ReplayReason::Subscribe, Some(reply));
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
    pub(super) fn retry_due(&mut self, session_id: &str, epoch: u64) {
        let Some(state) = self.sessions.get(session_id) else {
            return;
        };
        if state.epoch != epoch {
            return;
        }
        if let SessionPhase::RetryWait { reason } = state.phase {
            self.issue_subscribe(session_id, reason, None);
        }
    }

    /// Sends `events.subscribe {session_id, cursor}` from the session's cursor, or parks the session until the
    /// connection is ready.
    pub(super) fn issue_subscribe(&mut self, session_id: &str, reason: ReplayReason, reply: Option<SubscribeReply>) {
        let ready = self.link_ready();
        let epoch = self.bump_epoch();
        let Some(state) = self.sessions.get_mut(session_id) else {
            return;
        };
        state.epoch = epoch;
        if !ready {
            state.phase = SessionPhase::AwaitingLink { reason, reply };
            return;
        }
        if reply.is_none() && self.outbox.congested() {
            // Its replay would only wait behind what the consumer has not read yet.
            state.phase = SessionPhase::Behind { reason };
            self.sessions_behind = true;
            return;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let params = EventsSubscribeParams {
            session_id: session_id.to_owned(),
            // Sequences start at 1, so "after 0" and "from the beginning" are the same request.
            cursor: (state.cursor > 0).then_some(state.cursor),
        };
        match encode_request::<method::EventsSubscribe>(&Id::Number(id.into()), &params) {
            Ok(frame) => {
                state.phase = SessionPhase::Subscribing { reason };
                self.pending.insert(id, Pending::Subscribe { session_id: session_id.to_owned(), epoch, reply });
                self.outgoing.push_back(OutgoingText::Plain(frame));
            }
            Err(error) => {
                // Cannot happen for a struct of a string and a number; fail the subscribe rather than panic.
                let error = ClientError::Encode(error.to_string());
                self.subscribe_failed(session_id.to_owned(), reason, reply, error);
            }
        }
    }

    pub(super) fn subscribe_answered(
        &mut self,
        session_id: String,
        epoch: u64,
        reply: Option<SubscribeReply>,
        decoded: Result<(Vec<StoredEvent>, u64), ClientError>,
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
            Err(error) => return self.subscribe_failed(session_id, reason, reply, error),
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
        self.outbox.push(ClientDelivery::ReplayStart {
            session_id: session_id.clone(),
            after_seq: state.cursor,
            reason,
        });
        for event in events {
            if event.seq > state.cursor {
                state.cursor = event.seq;
                self.outbox.push(ClientDelivery::ReplayEvent(event));
            }
        }
        // Event notifications carry exactly the events after `last_seq`: the live ones, and after a paged reply
        // the rest of the stored ones first.
        state.cursor = state.cursor.max(last_seq);
        self.outbox.push(ClientDelivery::ReplayEnd { session_id: session_id.clone(), last_seq });
        state.established = true;
        state.failures = 0;
        let lost_held_events = state.dropped_above.is_some_and(|seq| seq > state.cursor);
        let resubscribe = lost_held_events || state.gap_while_subscribing;
        state.dropped_above = None;
        state.gap_while_subscribing = false;
        if resubscribe {
            // Whatever is held will come back in the next replay.
            state.held.clear();
            self.issue_subscribe(&session_id, ReplayReason::Gap, None);
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
            self.live_event(&session_id, event);
        }
    }

    /// The consumer caught up: every session marked behind subscribes again from its cursor.
    pub(super) fn resume_behind(&mut self) {
        let behind: Vec<(String, ReplayReason)> = self
            .sessions
            .iter()
            .filter_map(|(session_id, state)| match state.phase {
                SessionPhase::Behind { reason } => Some((session_id.clone(), reason)),
                _ => None,
            })
            .collect();
        for (session_id, reason) in behind {
            self.issue_subscribe(&session_id, reason, None);
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
            self.outbox.push(ClientDelivery::RecoveryFailed { session_id, detail: error.to_string() });
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

    pub(super) fn subscription_notice(&mut self, params: &str) {
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
                Ok(event) => self.live_event(session_id, event),
                Err(error) => tracing::warn!(%session_id, %error, "skipping an undecodable event"),
            },
            ("gap", _) => self.gap(session_id, notice.last_delivered_seq),
            (kind, _) => tracing::debug!(%kind, "ignoring an unknown events.subscription type"),
        }
    }

    fn live_event(&mut self, session_id: &str, event: StoredEvent) {
        let Some(state) = self.sessions.get_mut(session_id) else {
            return;
        };
        if event.seq <= state.cursor {
            tracing::debug!(%session_id, seq = event.seq, "dropping a duplicate event");
            return;
        }
        match state.phase {
            SessionPhase::Live if self.outbox.congested() => {
                tracing::debug!(%session_id, cursor = state.cursor, "the consumer fell behind; dropping events");
                state.phase = SessionPhase::Behind { reason: ReplayReason::Gap };
                self.sessions_behind = true;
            }
            SessionPhase::Live => {
                state.cursor = event.seq;
                self.outbox.push(ClientDelivery::Live(event));
            }
            // A subscribe from the cursor is due once the consumer catches up; it brings this event again.
            SessionPhase::Behind { .. } => {}
            _ if state.held.len() < MAX_HELD_LIVE_EVENTS => state.held.push_back(event),
            _ => state.dropped_above = Some(state.dropped_above.unwrap_or(0).max(event.seq)),
        }
    }

    fn gap(&mut self, session_id: &str, last_delivered_seq: Option<u64>) {
        let Some(state) = self.sessions.get_mut(session_id) else {
            return;
        };
        tracing::debug!(%session_id, ?last_delivered_seq, cursor = state.cursor, "subscription gap");
        match state.phase {
            SessionPhase::Live => self.issue_subscribe(session_id, ReplayReason::Gap, None),
            SessionPhase::Subscribing { .. } => state.gap_while_subscribing = true,
            // A subscribe from the cursor is already scheduled.
            SessionPhase::RetryWait { .. } | SessionPhase::AwaitingLink { .. } | SessionPhase::Behind { .. } => {}
        }
    }
}

/// Decodes an `events.subscribe` result straight from its raw text: each event is parsed once, into a
/// [`StoredEvent`], without the intermediate `Value` that decoding through `EventJson` would build.
pub(super) fn decode_subscribe_result(raw: &str) -> Result<(Vec<StoredEvent>, u64), ClientError> {
    #[derive(Deserialize)]
    struct Reply<'a> {
        #[serde(borrow)]
        events: Vec<&'a RawValue>,
        last_seq: u64,
    }
    let reply: Reply<'_> = serde_json::from_str(raw)
        .map_err(|error| ClientError::Decode(format!("the result of `events.subscribe`: {error}")))?;
    let mut events = Vec::with_capacity(reply.events.len());
    for event in reply.events {
        match serde_json::from_str::<StoredEvent>(event.get()) {
            Ok(event) => events.push(event),
            // One unreadable record must not cost the whole session; live events are treated the same way.
            Err(error) => tracing::warn!(%error, "skipping an undecodable event in a replay"),
        }
    }
    Ok((events, reply.last_seq))
}
