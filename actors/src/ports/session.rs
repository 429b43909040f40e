//! The session's port: what the actors below a session actor send it. A run appends its events, asks for
//! approvals and its history, and reaches its goal; a parent run starts and cancels its delegated child's run; the
//! goal actor prepares and starts automatic runs; the approval actor reads and records answers and tree grants.
//! Handled in `session_actor/` (the file of each message's concern).

use std::sync::Arc;

use actix::prelude::*;
use bytes::Bytes;
use tokio::sync::oneshot;
use troupe_protocol::types::approval::{
    ApprovalConstraints, ApprovalDecision, ApprovalOperation, ApprovalRecord, TreeGrant,
};
use troupe_protocol::types::attachment::AttachedFile;
use troupe_protocol::types::common::{ModelSelection, RunSelection};
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::goal::{GoalItem, GoalState};
use troupe_protocol::types::origin::Origin;
use troupe_protocol::types::tool_output::OutputStream;
use troupe_runtime::policy::Policy;

use super::approval::ApprovalLease;
use super::recipients;
use crate::compaction::CompactionSource;
use crate::error::EngineError;
use crate::run_services::RunServices;

recipients! {
    /// One `Recipient` per message of this file.
    pub struct SessionRecipients {
        start_run: StartRun,
        start_delegated_run: StartDelegatedRun,
        cancel_active_run: CancelActiveRun,
        append_run_event: AppendRunEvent,
        append_tracked_run_event: AppendTrackedRunEvent,
        write_batch_now: WriteBatchNow,
        run_output: RunOutput,
        promote_pending_inputs: PromotePendingInputs,
        end_tool_free_turn: EndToolFreeTurn,
        request_approval: RequestApproval,
        cancel_pending_approvals: CancelPendingApprovals,
        respond_to_approval: RespondToApproval,
        list_session_approvals: ListSessionApprovals,
        get_tree_grants: GetTreeGrants,
        commit_tree_grant: CommitTreeGrant,
        compaction_source_of_run: CompactionSourceOfRun,
        run_history: RunHistory,
        get_goal: GetGoal,
        update_goal_checklist: UpdateGoalChecklist,
        prepare_goal_run: PrepareGoalRun,
        start_goal_run: StartGoalRun,
    }
}

/// A session actor, as the actors below it reach it.
pub type SessionPort = super::Port<SessionRecipients>;

/// Starts a run: what it is asked to do, prepared as every run is (`run_start.rs`). Replies with its id once
/// `run_started` is durable. Clone, so a start that met a closed mailbox (the actor hibernated between being opened
/// and being asked) can be sent again to its successor; the client run id makes a second delivery of the same start
/// the same run.
#[derive(Clone, Message)]
#[rtype(result = "Result<String, EngineError>")]
pub struct StartRun {
    pub request: RunRequest,
    pub prepared: PreparedRun,
}

/// What a run is asked to do.
#[derive(Clone, Debug)]
pub struct RunRequest {
    /// Makes a redelivered start the same run: `run.start`'s `client_run_id`, or `<kind>:<new id>` for a run the
    /// engine starts.
    pub client_run_id: String,
    pub input: String,
    /// The files the input attached, already stored as artifacts.
    pub attachments: Vec<AttachedFile>,
    /// `run.start`'s `reset_fallback`: the requested model even where this session stuck to a fallback.
    pub reset_fallback: bool,
    /// The skill the input invoked, when it names one.
    pub skill: Option<troupe_protocol::types::skills::SkillInvocation>,
}

impl RunRequest {
    /// A run the engine starts on its own (a goal's, a producer message's, a delegated task's): `input` under a
    /// `<kind>:<new id>` client run id, no reset, no skill.
    pub fn engine(kind: &str, input: String) -> Self {
        RunRequest {
            client_run_id: format!("{kind}:{}", troupe_runtime::clock::new_id()),
            input,
            attachments: Vec::new(),
            reset_fallback: false,
            skill: None,
        }
    }
}

/// A run ready to start, prepared the one way every run is (`PreparedRun::new`, `run_start.rs`): the selection
/// judged against the runtime snapshot, the agent's model chain and where the requested model sits in it, the
/// agent's policy, and the tree's approval actor, leased until the start is handled.
#[derive(Clone)]
pub struct PreparedRun {
    pub selection: RunSelection,
    /// The agent's fallback chain, and where the requested model sits in it (`None`: not in it).
    pub agent_chain: Vec<ModelSelection>,
    pub requested_index: Option<usize>,
    pub policy: Arc<Policy>,
    pub approvals: Arc<ApprovalLease>,
    pub services: Arc<RunServices>,
}

/// Starts the run of a task delegated to this (child) session; its `run_started` names the engine as its origin.
#[derive(Message)]
#[rtype(result = "Result<String, EngineError>")]
pub struct StartDelegatedRun(pub StartRun);

/// Cancels the active run. Replies whether it was running.
#[derive(Message)]
#[rtype(result = "Result<bool, EngineError>")]
pub struct CancelActiveRun {
    pub run_id: String,
}

/// When the reply to [`AppendRunEvent`] comes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Until {
    /// Once the event is queued for the next group commit. The run awaits this for events it need not wait on
    /// (deltas, progress, results), so a fast producer is held back by the session's bounded mailbox instead of
    /// growing it.
    Accepted,
    /// Once the event is durable.
    Durable,
}

/// Sent by the run: appends one of its events. Replies with the event's `seq`, as `until` says.
#[derive(Message)]
#[rtype(result = "Result<u64, EngineError>")]
pub struct AppendRunEvent {
    pub run_id: String,
    pub origin: Option<Origin>,
    pub payload: EventPayload,
    pub until: Until,
}

/// Sent by the run before it waits on a [`TrackedEvent`]'s receiver (a tool call's start, before the call's first
/// chunk of output): the batch holding the event starts now instead of waiting for company
/// (`session_actor/commit.rs`).
#[derive(Message)]
#[rtype(result = "()")]
pub struct WriteBatchNow;

/// Sent by the run: appends one of its events and replies as soon as it is accepted, with a receiver that resolves
/// once it is durable. Awaiting the reply fixes the event's place in the log before anything the run sends later;
/// the receiver may be awaited later, or dropped, without losing the event. (A dropped `send` future of a message
/// still waiting for room in a full mailbox drops the message: durable events are never left to such a future.)
#[derive(Message)]
#[rtype(result = "Result<TrackedEvent, EngineError>")]
pub struct AppendTrackedRunEvent {
    pub run_id: String,
    pub payload: EventPayload,
}

/// The reply to [`AppendTrackedRunEvent`].
pub struct TrackedEvent {
    pub seq: u64,
    /// Resolves once the event is durable (or with the error that stopped the session).
    pub durable: oneshot::Receiver<Result<(), EngineError>>,
}

/// Sent by the run: a chunk of a running tool's output, for live subscribers and the stored whole output.
#[derive(Message)]
#[rtype(result = "()")]
pub struct RunOutput {
    pub run_id: String,
    pub tool_call_id: String,
    pub stream: OutputStream,
    pub offset: u64,
    pub data: Bytes,
}

/// An input submitted at a boundary: its text and the files it attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromotedInput {
    pub text: String,
    pub attachments: Vec<AttachedFile>,
}

impl PromotedInput {
    /// An input of text alone (a producer message's body).
    pub fn text(text: String) -> Self {
        PromotedInput { text, attachments: Vec::new() }
    }
}

/// Sent by the run at a boundary: every pending input becomes `user_input_submitted`, oldest first. Replies
/// with them once durable.
#[derive(Message)]
#[rtype(result = "Result<Vec<PromotedInput>, EngineError>")]
pub struct PromotePendingInputs {
    pub run_id: String,
}

/// Sent by the run after a model turn with no tool calls. `events` are the turn's own (its
/// `model_turn_committed`, then its `model_usage_recorded` if the provider reported usage). Replies once
/// everything appended is durable.
#[derive(Message)]
#[rtype(result = "Result<TurnEnd, EngineError>")]
pub struct EndToolFreeTurn {
    pub run_id: String,
    pub events: Vec<EventPayload>,
    /// The run's answer, recorded in `run_completed` if the run ends here.
    pub final_text: String,
}

/// What became of the run at the end of a tool-free turn.
#[derive(Debug, PartialEq, Eq)]
pub enum TurnEnd {
    /// Nothing was pending: `run_completed` is durable, after the pending approvals were cancelled.
    Completed,
    /// Steering inputs (or producer messages in `steer` mode) were pending: they are now submitted, in this
    /// order, and the run goes on with them.
    Continue(Vec<PromotedInput>),
}

/// How a pending approval ended, as the waiting run learns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApprovalOutcome {
    Approved { for_tree: bool },
    Rejected { feedback: Option<String> },
    Cancelled { reason: String },
}

/// Sent by a run: records `approval_requested` and replies with the approval id and where its answer arrives.
#[derive(Message)]
#[rtype(result = "Result<(String, oneshot::Receiver<ApprovalOutcome>), EngineError>")]
pub struct RequestApproval {
    pub run_id: String,
    pub tool_call_id: String,
    pub operation: ApprovalOperation,
    pub operation_fingerprint: String,
    pub constraints: ApprovalConstraints,
}

/// Cancels the pending approvals of a run that is ending.
#[derive(Message)]
#[rtype(result = "Result<(), EngineError>")]
pub struct CancelPendingApprovals {
    pub run_id: String,
    pub reason: String,
}

/// An answer to one of this session's approvals. Replies with the updated record, and the tree grant to commit
/// when the decision was `approve_tree`.
#[derive(Message)]
#[rtype(result = "Result<(ApprovalRecord, Option<TreeGrant>), EngineError>")]
pub struct RespondToApproval {
    pub approval_id: String,
    pub request_revision: u64,
    pub operation_fingerprint: String,
    pub client_response_id: String,
    pub decision: ApprovalDecision,
    pub feedback: Option<String>,
    pub answered_by: String,
}

/// This session's approval records, oldest first.
#[derive(Message)]
#[rtype(result = "Result<Vec<ApprovalRecord>, EngineError>")]
pub struct ListSessionApprovals;

/// The tree grants recorded in this (root) session's log.
#[derive(Message)]
#[rtype(result = "Result<Vec<TreeGrant>, EngineError>")]
pub struct GetTreeGrants;

/// Records a tree grant in this (root) session's log; replies once durable.
#[derive(Message)]
#[rtype(result = "Result<(), EngineError>")]
pub struct CommitTreeGrant {
    pub grant: TreeGrant,
}

/// What the active run `run_id` would compact; `None` when nothing happened since the last checkpoint.
#[derive(Message)]
#[rtype(result = "Result<Option<CompactionSource>, EngineError>")]
pub struct CompactionSourceOfRun {
    pub run_id: String,
}

/// The session's model history now (after a run's checkpoint: the summary and what followed it).
#[derive(Message)]
#[rtype(result = "Result<Vec<troupe_runtime::model::ChatMessage>, EngineError>")]
pub struct RunHistory {
    pub run_id: String,
}

/// `session.goal.get`.
#[derive(Message)]
#[rtype(result = "Result<Option<GoalState>, EngineError>")]
pub struct GetGoal;

/// The model's `goal_update`: replaces the checklist of the current goal (last accepted wins). Replies with the
/// goal once every appended event is durable.
#[derive(Message)]
#[rtype(result = "Result<GoalState, EngineError>")]
pub struct UpdateGoalChecklist {
    pub run_id: String,
    pub items: Vec<GoalItem>,
}

/// Asked by the goal actor: the goal and the selection of the next automatic run, when the goal is active and
/// the session idle (else `None`).
#[derive(Message)]
#[rtype(result = "Result<Option<GoalRunPlan>, EngineError>")]
pub struct PrepareGoalRun;

pub struct GoalRunPlan {
    pub goal_id: String,
    /// The goal's selection, else the latest persisted run selection, else the creation selection.
    pub selection: RunSelection,
    /// The sticky fallback of the selection's agent and preset in this session, where its run would start when the
    /// selection asks for an earlier model of the agent's chain (`RunLedger::plan`).
    pub sticky: Option<ModelSelection>,
}

/// Sent by the goal actor: starts the next automatic run of `goal_id` when it is still active and the session
/// idle, or pauses the goal when the opt-in `max_idle_runs` runs in a row made no progress. Replies with the run's id (once
/// `run_started` is durable), or `None` when nothing was started.
#[derive(Message)]
#[rtype(result = "Result<Option<String>, EngineError>")]
pub struct StartGoalRun {
    pub goal_id: String,
    /// The session makes the request: the goal's reminder as the input.
    pub prepared: PreparedRun,
    pub max_idle_runs: Option<u32>,
}
