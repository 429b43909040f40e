//! `SessionActor`: one per live session, the **single writer** of that session's log.
//!
//! It owns the session's projection ([`SessionState`]), its committed events (shared, encoded once), the log
//! writer, and the list of subscribers. The engine sends it requests; the supervisor starts it (creating or
//! loading the log), is told about metadata changes, and is told when it stops.
//!
//! # Write path (group commit)
//!
//! An accepted operation gets its `seq`, is encoded once, applied to the projection and queued. At most one batch
//! is being written at a time: the writer moves to one of the engine's log writer threads (`log_writers`), which
//! writes every queued line with one `write` and one `fdatasync`, and comes back. Operations accepted meanwhile
//! form the next batch, so under load many appends share one fsync. Only when a batch is durable are its events
//! published to subscribers and its requests acknowledged. A failed write poisons the actor: it fails everything
//! pending and stops; the next request starts a fresh actor from the log.
//!
//! # Memory
//!
//! The actor keeps its projection and a bounded tail of recent events ([`SessionLimits::tail_bytes`]); older
//! events stay on disk and are read through the store's reader when a subscriber replays them (`replay`).
//!
//! # Hibernation
//!
//! With no subscribers, no pending write and no request for `hibernate_after`, the actor stops itself; its
//! metadata stays in the supervisor's index and the next request loads the log again.
//!
//! # Parts
//!
//! Beside the projection and the tail, the actor is a list of parts: the write lane (`write_lane`), the subscribers
//! and replays (`subscribers`), the jobs that keep it awake (`jobs`) and the snapshot books (`snapshot_books`), each
//! a type in a file of its own; live tool output (`tool_output`), approval waiters (`approvals`) and the producer
//! lane (`producers`) are types too, beside their handlers. The handlers are grouped by concern in the other files
//! of `session_actor/`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use troupe_protocol::server::EventSink;
use troupe_protocol::types::common::SessionMeta;
use troupe_protocol::types::events::{EventsSubscribeResult, StoredEvent};
use troupe_runtime::event_log::{EventReader, EventStore};
use troupe_runtime::session_state::SessionState;

use crate::error::EngineError;
use crate::ports::SupervisorPort;
use crate::ports::supervisor::GoalReport;
use crate::run_actor::RunActor;

mod admin;
mod approvals;
mod artifacts;
mod commit;
mod compaction;
mod durable;
mod goals;
mod history;
mod jobs;
mod lifecycle;
mod meta;
mod named_output;
mod plugin_events;
mod producers;
mod replay;
mod runs;
mod snapshot_books;
mod snapshots;
mod steering;
mod stored_outputs;
mod subscribers;
mod title;
mod tool_output;
mod turn_end;
mod undo;
mod usage;
mod write_lane;

pub use admin::{Retire, Seal, SetArchived, Unseal};
pub use approvals::{ApprovalErrorKind, CountPendingApprovals};
pub use artifacts::NamesArtifact;
pub use compaction::{ActiveCompaction, BeginCompaction, ManualStart, RecordCompaction};
pub use durable::{Durable, DurableWait};
pub use goals::{ChangeGoalLifecycle, GoalErrorKind, GoalRunTarget, SetGoal};
pub use history::{PrepareFork, Revert};
use jobs::Jobs;
pub use lifecycle::Drain;
#[cfg(feature = "test-hooks")]
pub use lifecycle::{InjectPanic, Stall};
pub use meta::{GetMeta, Rename};
pub use named_output::SubscribeToolOutput;
pub use plugin_events::EmitPluginEvent;
pub use producers::{DiscardOutcome, DiscardProducerMessage, ProducerLane, ProducerReceipt, SendProducerMessage};
use replay::EventTail;
pub use replay::SessionLimits;
pub use runs::{NextRunSelection, ToolStdin};
use snapshot_books::SnapshotBooks;
pub use steering::{RecallSteer, SteerRun};
pub use stored_outputs::StoredOutputLimits;
use subscribers::Subscribers;
use tool_output::ToolOutputStreams;
pub use undo::{BeginUndo, ChangesContext, ChangesOfSession, EndUndo, UndoRecord};
// The messages the actors below send a session (`ports/session.rs`), named here too for the engine.
pub use crate::ports::session::{
    AppendRunEvent, AppendTrackedRunEvent, ApprovalOutcome, CancelActiveRun, CancelPendingApprovals, CommitTreeGrant,
    CompactionSourceOfRun, EndToolFreeTurn, GetGoal, GetTreeGrants, GoalRunPlan, ListSessionApprovals, PrepareGoalRun,
    PromotePendingInputs, RequestApproval, RespondToApproval, RunHistory, RunOutput, StartDelegatedRun, StartGoalRun,
    StartRun, TrackedEvent, TurnEnd, Until, UpdateGoalChecklist,
};
pub use usage::GetUsage;
use write_lane::WriteLane;

/// How the actor gets its log when it starts.
pub enum Opening {
    /// Create a new log whose first event is `session_created`.
    Create { first: Box<StoredEvent> },
    /// Load the existing log.
    Load,
    /// Copy a prefix of another session into a new log (`session.fork`), then load it.
    Fork { source: Box<troupe_runtime::fork::ForkSource> },
}

/// Registers a subscriber and returns the first page of committed events after `cursor`; the rest follow on the
/// sink, replayed and then live, without a gap or an overlap (see `replay`).
#[derive(Message)]
#[rtype(result = "Result<EventsSubscribeResult, EngineError>")]
pub struct Subscribe {
    pub sink: EventSink,
    pub cursor: Option<u64>,
}

enum Phase {
    /// Creating or loading the log; the mailbox is paused until this ends.
    Starting,
    Ready,
    /// The log could not be opened, or a write failed. Every request gets this error until the actor stops (soon:
    /// the next request after that reloads the session).
    Failed(EngineError),
}

pub struct SessionActor {
    session_id: String,
    session_dir: PathBuf,
    /// Distinguishes this actor from an earlier or later one of the same session in the supervisor's books.
    incarnation: u64,
    supervisor: SupervisorPort,
    opening: Option<Opening>,
    phase: Phase,
    /// The projection, including accepted events that are not durable yet. `None` until started.
    state: Option<SessionState>,
    /// The newest durable events, oldest first, with strictly increasing `seq`; older ones are read from the log.
    tail: EventTail,
    /// Reads durable events from the log, on any thread. `None` until started.
    reader: Option<Arc<dyn EventReader>>,
    /// The path of events to the log: sequences, batches, durability waiters, poisoning (`write_lane`).
    lane: WriteLane<Box<dyn EventStore>>,
    /// The timer that starts a batch for events nobody waits for within `limits.batch_linger` (`commit.rs`).
    linger: Option<SpawnHandle>,
    /// Live subscribers, offered every committed event, and replaying ones (`subscribers`).
    subscribers: Subscribers,
    /// The actor of the active run, if this actor started it.
    run_actor: Option<Addr<RunActor>>,
    /// Retained output of running tool calls, for snapshots and gap notices.
    tool_output: ToolOutputStreams,
    /// Whole outputs of loud running calls, stored for `output_ref` (`stored_outputs`).
    stored_outputs: stored_outputs::StoredOutputs,
    /// Runs waiting for answers to their approvals.
    approval_waiters: approvals::ApprovalWaiters,
    /// Producer messages: waking the session for them (`producers`).
    producers: ProducerLane,
    limits: SessionLimits,
    last_request: Instant,
    /// What the supervisor was last told about this session's goal (`goals`).
    goal_reported: Option<GoalReport>,
    /// Whether this session was created by `session.fork` (a run in flight in its log was copied, not lost).
    forked: bool,
    /// The manual compaction and the title job in flight, which keep the session awake (`jobs`).
    jobs: Jobs,
    /// What the newest projection snapshot covers, and whether one is being written (`snapshot_books`).
    snapshots: SnapshotBooks,
    /// Where the metadata is published for `session.get` (`published_meta`).
    published: crate::published_meta::PublishedMeta,
    /// Where the spent usage is left for the supervisor's usage index (`published_usage`, `usage`).
    published_usage: crate::published_usage::PublishedUsage,
    /// How many artifacts the supervisor was last told the session names (`artifacts`); `None` before the first
    /// report.
    artifacts_reported: Option<usize>,
    /// The metadata the supervisor was last told (`meta`); `None` before the first report.
    meta_reported: Option<SessionMeta>,
    /// The pending report of a batch that only moved the session's progress (`meta`).
    meta_report_due: Option<SpawnHandle>,
}

impl SessionActor {
    pub fn new(
        session_id: String,
        session_dir: PathBuf,
        incarnation: u64,
        supervisor: SupervisorPort,
        opening: Opening,
        limits: SessionLimits,
        producers: ProducerLane,
    ) -> Self {
        SessionActor {
            stored_outputs: stored_outputs::StoredOutputs::new(session_dir.clone(), limits.stored_output),
            session_id,
            session_dir,
            incarnation,
            supervisor,
            opening: Some(opening),
            phase: Phase::Starting,
            state: None,
            tail: EventTail::default(),
            reader: None,
            lane: WriteLane::unopened(),
            linger: None,
            subscribers: Subscribers::default(),
            run_actor: None,
            tool_output: ToolOutputStreams::default(),
            approval_waiters: Default::default(),
            producers,
            limits,
            last_request: Instant::now(),
            goal_reported: None,
            forked: false,
            jobs: Jobs::default(),
            snapshots: SnapshotBooks::default(),
            published: Default::default(),
            published_usage: Default::default(),
            artifacts_reported: None,
            meta_reported: None,
            meta_report_due: None,
        }
    }

    fn storage_error(&self, detail: impl std::fmt::Display) -> EngineError {
        EngineError::Storage { session_id: self.session_id.clone(), detail: detail.to_string() }
    }

    /// The state, if the actor is ready to serve requests.
    fn ready_state(&mut self) -> Result<&SessionState, EngineError> {
        self.last_request = Instant::now();
        match &self.phase {
            Phase::Ready => {}
            Phase::Failed(error) => return Err(error.clone()),
            Phase::Starting => {
                return Err(EngineError::Unavailable {
                    session_id: self.session_id.clone(),
                    detail: "the session is still starting".into(),
                });
            }
        }
        self.state.as_ref().ok_or_else(|| EngineError::Unavailable {
            session_id: self.session_id.clone(),
            detail: "the session has no state".into(),
        })
    }

    /// The daemon's metrics, which the log counts its commits into (`None` in tests that build actors by hand).
    fn metrics(&self) -> Option<troupe_runtime::metrics::Metrics> {
        self.producers.run_context.as_ref().map(|context| context.services.metrics.clone())
    }

    /// Where the log is replicated before an append is durable (a cluster node's JetStream); `None` on one node.
    fn log_replica(&self) -> Option<Arc<dyn troupe_runtime::event_log::LogReplica>> {
        self.producers.run_context.as_ref().and_then(|context| context.services.log_replica.clone())
    }

    /// Sends `output` to the other nodes whose clients follow this session (a cluster node); nothing on one node.
    fn share_output(&self, output: impl FnOnce() -> troupe_runtime::live_output_share::SharedOutput) {
        if let Some(share) =
            self.producers.run_context.as_ref().and_then(|context| context.services.live_output.as_ref())
        {
            share.publish(&self.session_id, output());
        }
    }
}
