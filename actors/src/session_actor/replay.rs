//! Subscriptions: the reply's first page, the replay of the rest, and the hand-over to live events.
//!
//! The actor keeps a bounded tail of recent events in memory ([`EventTail`]); older events are read from the
//! store on a blocking thread. An `events.subscribe` reply carries at most one page of events
//! ([`SessionLimits::replay_page_bytes`]); its `last_seq` is the last event in it. Whatever is committed after that
//! point reaches the subscriber as ordinary `events.subscription` notifications, pushed by a *replay pump*: a task
//! that asks the actor for the next chunk (from the tail, or a store reader), offers each event to the sink, waiting
//! for room in the connection's queue (a subscriber that stays too slow gets the usual `gap`), and asks again.
//! When the pump has delivered everything committed, the actor turns the subscriber live *in the same turn*, so no
//! event is missed or repeated between replay and live delivery.

use std::collections::VecDeque;
use std::sync::Arc;

use actix::prelude::*;
use troupe_protocol::server::{EventSink, encode_event_notification};
use troupe_protocol::types::events::EventsSubscribeResult;
use troupe_runtime::event_log::{EventReader, LogEntry};

use super::{SessionActor, Subscribe};
use crate::error::EngineError;

/// Bytes of events a replay pump reads and offers at a time.
const REPLAY_CHUNK_BYTES: usize = 256 * 1024;

/// Memory bounds of one session actor (from `[limits]` in `config.toml`, whose defaults are 1 MiB each).
#[derive(Clone, Copy, Debug)]
pub struct SessionLimits {
    /// An idle session with no subscribers stops after this long.
    pub hibernate_after: std::time::Duration,
    /// Bytes of events in one `events.subscribe` reply (at least one event).
    pub replay_page_bytes: usize,
    /// Bytes of recent events kept in memory; older ones are read from the log.
    pub tail_bytes: usize,
    /// When and how much of a loud tool call's whole output is stored for its result's `output_ref`.
    pub stored_output: super::StoredOutputLimits,
    /// How long a run's events that nothing waits for may wait for company before their batch starts
    /// (`[limits] batch_linger_ms`; `commit.rs`).
    pub batch_linger: std::time::Duration,
}

/// The newest committed events, bounded by their bytes (always at least the last one).
#[derive(Default)]
pub(super) struct EventTail {
    entries: VecDeque<LogEntry>,
    bytes: usize,
    limit: usize,
}

impl EventTail {
    pub(super) fn new(entries: VecDeque<LogEntry>, limit: usize) -> Self {
        let bytes = entries.iter().map(LogEntry::len).sum();
        let mut tail = EventTail { entries, bytes, limit };
        tail.trim();
        tail
    }

    pub(super) fn push(&mut self, entry: LogEntry) {
        self.bytes += entry.len();
        self.entries.push_back(entry);
        self.trim();
    }

    fn trim(&mut self) {
        while self.bytes > self.limit && self.entries.len() > 1 {
            if let Some(oldest) = self.entries.pop_front() {
                self.bytes -= oldest.len();
            }
        }
    }

    /// Whether every committed event after `after` is in memory.
    fn covers(&self, after: u64) -> bool {
        self.entries.front().is_some_and(|oldest| oldest.seq <= after + 1)
    }

    /// The events with `after < seq <= through`, at most `max_bytes` of them (at least one when there is one).
    fn page(&self, after: u64, through: u64, max_bytes: usize) -> Vec<LogEntry> {
        let start = self.entries.partition_point(|entry| entry.seq <= after);
        let mut bytes = 0;
        let mut page = Vec::new();
        for entry in self.entries.range(start..) {
            if entry.seq > through || (!page.is_empty() && bytes + entry.len() > max_bytes) {
                break;
            }
            bytes += entry.len();
            page.push(entry.clone());
        }
        page
    }
}

/// Where the events after a point come from.
enum Source {
    Memory(Vec<LogEntry>),
    Store(Arc<dyn EventReader>),
}

impl SessionActor {
    fn source(&self, after: u64, through: u64, max_bytes: usize) -> Result<Source, EngineError> {
        if self.tail.covers(after) {
            return Ok(Source::Memory(self.tail.page(after, through, max_bytes)));
        }
        match &self.reader {
            Some(reader) => Ok(Source::Store(reader.clone())),
            None => Err(self.storage_error("the log has no reader")),
        }
    }

    /// Attaches a subscriber whose reply carried the events through `after`: live at once when nothing was
    /// committed since, else through a replay pump.
    fn attach(&mut self, ctx: &mut Context<Self>, sink: Arc<EventSink>, after: u64) {
        if after >= self.lane.committed_seq() {
            self.go_live(sink);
            return;
        }
        let id = self.subscribers.start_replay(sink.clone());
        let pump = ReplayPump { actor: ctx.address(), id, sink, session_id: self.session_id.clone(), after };
        actix::spawn(pump.run());
    }

    /// Makes `sink` a live subscriber. A late subscriber gets the retained output of tools still running.
    fn go_live(&mut self, sink: Arc<EventSink>) {
        for snapshot in self.tool_output.snapshots(&self.session_id) {
            let _ = sink.offer_transient(&snapshot);
        }
        self.subscribers.go_live(sink);
    }
}

impl Handler<Subscribe> for SessionActor {
    type Result = ResponseActFuture<Self, Result<EventsSubscribeResult, EngineError>>;

    fn handle(&mut self, message: Subscribe, ctx: &mut Context<Self>) -> Self::Result {
        if let Err(error) = self.ready_state() {
            return Box::pin(fut::ready(Err(error)));
        }
        self.subscribers.prune_closed();
        let sink = Arc::new(message.sink);
        let through = self.lane.committed_seq();
        let after = message.cursor.unwrap_or(0);
        if after > through {
            // Events reach clients only once durable, so no client can have seen one past the last: the cursor is
            // from another session or made up, and live events at or below it would be delivered as if new.
            return Box::pin(fut::ready(Err(EngineError::CursorAhead {
                session_id: self.session_id.clone(),
                cursor: after,
                last_seq: through,
            })));
        }
        if after == through {
            sink.mark_replayed_through(through);
            self.go_live(sink);
            return Box::pin(fut::ready(Ok(EventsSubscribeResult {
                events: Vec::new(),
                last_seq: through,
                history_last_seq: Some(through),
            })));
        }
        let page_bytes = self.limits.replay_page_bytes;
        let source = match self.source(after, through, page_bytes) {
            Ok(source) => source,
            Err(error) => return Box::pin(fut::ready(Err(error))),
        };
        let _ = ctx;
        let read = async move {
            match source {
                Source::Memory(page) => Ok(page),
                Source::Store(reader) => {
                    tokio::task::spawn_blocking(move || reader.read_range(after, through, page_bytes))
                        .await
                        .map_err(|error| format!("the reader thread failed: {error}"))?
                        .map_err(|error| error.to_string())
                }
            }
        };
        Box::pin(read.into_actor(self).map(move |page, actor, ctx| {
            let page = page.map_err(|detail| actor.storage_error(detail))?;
            let last_seq = page.last().map_or(through, |entry| entry.seq);
            sink.mark_replayed_through(last_seq);
            actor.attach(ctx, sink, last_seq);
            Ok(EventsSubscribeResult {
                events: page.into_iter().map(|entry| entry.json).collect(),
                last_seq,
                history_last_seq: Some(through),
            })
        }))
    }
}

/// A replay pump asks for the events after `after`.
#[derive(Message)]
#[rtype(result = "ReplayStep")]
struct NextReplay {
    id: u64,
    after: u64,
}

/// What a replay pump does next.
enum ReplayStep {
    /// Everything committed was delivered; the subscriber is live now.
    CaughtUp,
    /// The subscription is gone (closed, replaced, or the session stopped following it).
    Gone,
    /// These events (after the point asked for, through `through`) are next.
    Memory { entries: Vec<LogEntry>, through: u64 },
    /// Read the events after the point asked for, through `through`, from the store.
    Store { reader: Arc<dyn EventReader>, through: u64 },
    /// The replay cannot go on (the session has no reader): end the subscription with a gap.
    Failed,
}

/// Why a replay pump stopped before its subscriber went live.
enum Stopped {
    /// The sink closed or fell behind (it has its gap already).
    SinkGone,
    /// The log could not be read: the subscriber is sent a gap, so it resubscribes instead of waiting forever.
    ReadFailed,
}

/// A replay pump stopped early (its subscriber closed or fell behind).
#[derive(Message)]
#[rtype(result = "()")]
struct ReplayEnded {
    id: u64,
}

impl Handler<NextReplay> for SessionActor {
    type Result = MessageResult<NextReplay>;

    fn handle(&mut self, message: NextReplay, _: &mut Context<Self>) -> Self::Result {
        let Some(sink) = self.subscribers.replaying(message.id) else {
            return MessageResult(ReplayStep::Gone);
        };
        if sink.is_closed() {
            self.subscribers.end_replay(message.id);
            return MessageResult(ReplayStep::Gone);
        }
        let through = self.lane.committed_seq();
        if message.after >= through {
            self.subscribers.end_replay(message.id);
            self.go_live(sink);
            return MessageResult(ReplayStep::CaughtUp);
        }
        MessageResult(match self.source(message.after, through, REPLAY_CHUNK_BYTES) {
            Ok(Source::Memory(entries)) => ReplayStep::Memory { entries, through },
            Ok(Source::Store(reader)) => ReplayStep::Store { reader, through },
            Err(error) => {
                tracing::error!(session_id = %self.session_id, %error, "a replay cannot continue");
                self.subscribers.end_replay(message.id);
                ReplayStep::Failed
            }
        })
    }
}

impl Handler<ReplayEnded> for SessionActor {
    type Result = ();

    fn handle(&mut self, message: ReplayEnded, _: &mut Context<Self>) {
        self.subscribers.end_replay(message.id);
    }
}

/// Delivers a subscriber's stored events after its reply, chunk by chunk, until it is live.
struct ReplayPump {
    actor: Addr<SessionActor>,
    id: u64,
    sink: Arc<EventSink>,
    session_id: String,
    /// The last event delivered.
    after: u64,
}

impl ReplayPump {
    async fn run(mut self) {
        match self.pump().await {
            Ok(()) => {}
            Err(Stopped::SinkGone) => self.actor.do_send(ReplayEnded { id: self.id }),
            Err(Stopped::ReadFailed) => {
                self.sink.end_with_gap();
                self.actor.do_send(ReplayEnded { id: self.id });
            }
        }
    }

    /// `Ok` when the subscriber is live or gone; `Err` when this pump stopped it.
    async fn pump(&mut self) -> Result<(), Stopped> {
        loop {
            let Ok(step) = self.actor.send(NextReplay { id: self.id, after: self.after }).await else {
                // The session actor stopped, and ended this subscription with its gap as it went (its `Drop`).
                return Ok(());
            };
            let (entries, through, _permit) = match step {
                ReplayStep::CaughtUp | ReplayStep::Gone => return Ok(()),
                ReplayStep::Failed => {
                    self.sink.end_with_gap();
                    return Ok(());
                }
                ReplayStep::Memory { entries, through } => (entries, through, None),
                ReplayStep::Store { reader, through } => {
                    // What is read from disk counts against the connection's budget until it is queued.
                    let permit = self.sink.reserve_replay(REPLAY_CHUNK_BYTES).await.map_err(|_| Stopped::SinkGone)?;
                    let after = self.after;
                    let read =
                        tokio::task::spawn_blocking(move || reader.read_range(after, through, REPLAY_CHUNK_BYTES))
                            .await;
                    match read {
                        Ok(Ok(entries)) => (entries, through, Some(permit)),
                        Ok(Err(error)) => {
                            tracing::error!(session_id = %self.session_id, %error, "a replay could not read the log");
                            return Err(Stopped::ReadFailed);
                        }
                        Err(error) => {
                            tracing::error!(session_id = %self.session_id, %error, "a replay reader thread failed");
                            return Err(Stopped::ReadFailed);
                        }
                    }
                }
            };
            if entries.is_empty() {
                // The events in between were not loadable (skipped lines): nothing to deliver up to `through`.
                self.after = through;
                continue;
            }
            for entry in entries {
                let frame = encode_event_notification(&self.session_id, &entry.json);
                self.sink.offer_replay(entry.seq, &frame).await.map_err(|_| Stopped::SinkGone)?;
                self.after = entry.seq;
            }
        }
    }
}
