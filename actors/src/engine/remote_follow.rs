//! `events.subscribe` on a cluster node for a session another node hosts: served from the cluster's replica of the
//! log (JetStream, through the runtime's `LogReplica`), so a client follows any session from any node.
//!
//! The subscription keeps the local one's promises (`session_actor/replay.rs`, docs/runtime-semantics.md
//! "Ordering"): the reply carries the stored events after the cursor, at most `replay_page_bytes` of them, and
//! `last_seq`; a cursor past the replica's last event is `cursor_ahead`. Then a follower task offers the
//! connection exactly the events after `last_seq`, in order: first the stored ones, read a chunk at a time and
//! waiting for room in the connection's queue (a client too slow for
//! [`ServerLimits::replay_stall`](troupe_protocol::server::ServerLimits) gets its gap), then live ones from the
//! replica's follow, from the last event replayed, offered without waiting (one that does not fit ends the
//! subscription with its gap, as for a live subscriber of the session actor). The follower holds one chunk at a
//! time, never the history. It stops when the subscription closes (replaced, or the connection gone: checked every
//! [`CLOSED_POLL`] and at each event) or the follow ends; a follow that fails ends the subscription with a gap, so
//! the client subscribes again from its cursor (on this node or any other).
//!
//! In a cluster that shares live output, the follower also hears the hosting node's running tools from the start
//! (before it replays anything, so nothing published meanwhile is missed) and sends them on as a local subscriber
//! is sent them (`remote_output.rs`); both deliveries go through one lock, so output never overtakes its event.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use bytestring::ByteString;
use troupe_protocol::server::{EventSink, ServerContext, encode_event_notification};
use troupe_protocol::types::events::{EventsSubscribeParams, EventsSubscribeResult};
use troupe_runtime::event_log::{FollowControl, LogEntry, LogReplica, ReplicaError};
use troupe_runtime::live_output_share::{LiveOutputShare, OutputFollow, OutputFollowGuard};

use super::Engine;
use super::remote_output::{RemoteOutput, SinkGone};
use crate::error::EngineError;

/// Bytes of stored events the follower reads and offers at a time while it catches up.
const REPLAY_CHUNK_BYTES: usize = 256 * 1024;
/// How often a follower with nothing to deliver looks whether its subscription closed.
pub(super) const CLOSED_POLL: Duration = Duration::from_millis(500);
/// How long a remote subscription's reply (of events or of one call's output) waits for its live output's follow
/// to be in place.
pub(super) const OUTPUT_READY_WITHIN: Duration = Duration::from_secs(2);

impl Engine {
    /// Subscribes `ctx` to `params.session_id`, which another node hosts, from the cluster's replica of its log.
    /// `hosted_elsewhere` is the local refusal, answered as it is on a node without a replica.
    pub(super) async fn subscribe_remote(
        &self,
        ctx: &ServerContext,
        params: &EventsSubscribeParams,
        hosted_elsewhere: EngineError,
    ) -> Result<EventsSubscribeResult, EngineError> {
        let Some(replica) = self.services.log_replica.clone() else { return Err(hosted_elsewhere) };
        let session_id = params.session_id.clone();
        let after = params.cursor.unwrap_or(0);
        let page_bytes = self.replay_page_bytes;
        let (through, page) = {
            let (replica, session_id) = (replica.clone(), session_id.clone());
            blocking(&params.session_id, move || {
                let through = replica.last_seq(&session_id)?;
                let page =
                    if after < through { replica.read_range(&session_id, after, through, page_bytes)? } else { vec![] };
                Ok((through, page))
            })
            .await?
        };
        if after > through {
            return Err(EngineError::CursorAhead { session_id, cursor: after, last_seq: through });
        }
        let last_seq = page.last().map_or(through, |entry| entry.seq);
        let sink = Arc::new(ctx.event_sink(&session_id));
        sink.mark_replayed_through(last_seq);
        let output = Arc::new(Mutex::new(RemoteOutput::new(session_id.clone())));
        let follower = RemoteFollower { replica, sink, session_id, after: last_seq, output };
        let hearing = match self.services.live_output.as_ref().map(|share| follower.hear_output(share.as_ref())) {
            Some(OutputFollow { guard, ready }) => {
                // Output printed after the reply must reach this subscriber: its follow is in place first (a
                // follow that cannot be is not waited for; its holes are told as gaps).
                let _ = tokio::time::timeout(OUTPUT_READY_WITHIN, ready).await;
                Some(guard)
            }
            None => None,
        };
        // The events of the reply were sent before any output can be: they count for the rules of output.
        {
            let mut output = follower.output.lock();
            for entry in &page {
                output.note_replayed(entry);
            }
        }
        actix::spawn(follower.run(hearing));
        Ok(EventsSubscribeResult {
            events: page.into_iter().map(|entry| entry.json).collect(),
            last_seq,
            history_last_seq: Some(through),
        })
    }
}

/// Runs `read` on a blocking thread (the replica's calls block); its refusal in the engine's words.
pub(super) async fn blocking<T: Send + 'static>(
    session_id: &str,
    read: impl FnOnce() -> Result<T, ReplicaError> + Send + 'static,
) -> Result<T, EngineError> {
    match tokio::task::spawn_blocking(read).await {
        Ok(read) => read.map_err(|error| EngineError::replica(session_id, error)),
        Err(error) => Err(EngineError::Storage {
            session_id: session_id.to_owned(),
            detail: format!("the replica's reader thread failed: {error}"),
        }),
    }
}

/// Delivers a remote subscription's events after its reply until it closes.
struct RemoteFollower {
    replica: Arc<dyn LogReplica>,
    sink: Arc<EventSink>,
    session_id: String,
    /// The last event delivered.
    after: u64,
    /// What the subscriber is owed of the session's running tools, shared with the output deliveries.
    output: Arc<Mutex<RemoteOutput>>,
}

impl RemoteFollower {
    /// Starts hearing the session's live output; it is sent on once the subscriber follows live events.
    fn hear_output(&self, share: &dyn LiveOutputShare) -> OutputFollow {
        let (output, sink) = (self.output.clone(), self.sink.clone());
        share.follow(
            &self.session_id,
            Box::new(move |chunk| {
                let _ = output.lock().on_output(chunk, &mut transient(&sink));
            }),
        )
    }

    /// `_hearing` keeps the session's live output coming until the follower ends.
    async fn run(mut self, _hearing: Option<OutputFollowGuard>) {
        match self.catch_up().await {
            Ok(()) => self.follow().await,
            Err(Stopped::SinkGone) => {}
            Err(Stopped::ReadFailed(error)) => {
                tracing::warn!(session_id = %self.session_id, %error, "a remote subscription could not read the log");
                self.sink.end_with_gap();
            }
        }
    }

    /// Offers the stored events after `after`, a chunk at a time, waiting for room, until a read finds none.
    async fn catch_up(&mut self) -> Result<(), Stopped> {
        loop {
            if self.sink.is_closed() {
                return Err(Stopped::SinkGone);
            }
            // What is read counts against the connection's budget until it is queued.
            let _permit = self.sink.reserve_replay(REPLAY_CHUNK_BYTES).await.map_err(|_| Stopped::SinkGone)?;
            let (replica, session_id, after) = (self.replica.clone(), self.session_id.clone(), self.after);
            let chunk = blocking(&self.session_id, move || {
                replica.read_range(&session_id, after, u64::MAX, REPLAY_CHUNK_BYTES)
            })
            .await
            .map_err(Stopped::ReadFailed)?;
            if chunk.is_empty() {
                return Ok(());
            }
            for entry in chunk {
                let frame = encode_event_notification(&self.session_id, &entry.json);
                self.sink.offer_replay(entry.seq, &frame).await.map_err(|_| Stopped::SinkGone)?;
                self.output.lock().note_replayed(&entry);
                self.after = entry.seq;
            }
        }
    }

    /// Offers every later event as the replica stores it, until the subscription closes or the follow ends.
    async fn follow(self) {
        let (ended, mut follow_ended) = tokio::sync::oneshot::channel::<()>();
        let (sink, session_id, output) = (self.sink.clone(), self.session_id.clone(), self.output.clone());
        if output.lock().go_live(&mut transient(&sink)).is_err() {
            return;
        }
        let deliver = Box::new(move |batch: Result<Vec<LogEntry>, ReplicaError>| {
            // `ended` is dropped with the follow, which wakes the loop below; once that loop is gone, so is the reader.
            if ended.is_closed() {
                return FollowControl::Stop;
            }
            match batch {
                Ok(entries) => offer_live(&sink, &session_id, &entries, &mut output.lock()),
                Err(error) => {
                    tracing::warn!(%session_id, %error, "a remote subscription's follow ended");
                    sink.end_with_gap();
                    FollowControl::Stop
                }
            }
        });
        let _guard = match self.replica.follow(&self.session_id, self.after, deliver) {
            Ok(guard) => guard,
            Err(error) => {
                tracing::warn!(session_id = %self.session_id, %error, "a remote subscription could not follow");
                self.sink.end_with_gap();
                return;
            }
        };
        loop {
            match tokio::time::timeout(CLOSED_POLL, &mut follow_ended).await {
                Ok(_) => return,
                Err(_) if self.sink.is_closed() => return,
                Err(_) => {}
            }
        }
    }
}

/// Offers live events; `Stop` once the subscription refuses one (closed, or it fell behind and has its gap).
/// Each event's output rules are applied right after it, under the output's lock (held by the caller).
fn offer_live(sink: &EventSink, session_id: &str, entries: &[LogEntry], output: &mut RemoteOutput) -> FollowControl {
    for entry in entries {
        let frame = encode_event_notification(session_id, &entry.json);
        if sink.offer(entry.seq, &frame).is_err() || output.after_event(entry, &mut transient(sink)).is_err() {
            return FollowControl::Stop;
        }
    }
    if sink.is_closed() { FollowControl::Stop } else { FollowControl::Continue }
}

/// Offers a frame of live output to the subscription, without waiting for room.
fn transient(sink: &EventSink) -> impl FnMut(&ByteString) -> Result<bool, SinkGone> + '_ {
    |frame| sink.offer_transient(frame).map_err(|_| SinkGone)
}

/// Why a follower stopped before following live.
enum Stopped {
    /// The subscription closed or fell behind (it has its gap already).
    SinkGone,
    /// The replica could not be read.
    ReadFailed(EngineError),
}
