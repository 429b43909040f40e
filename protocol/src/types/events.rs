//! Stored events: the records of a session's append-only log, which are also what `events.subscribe` and
//! `events.subscription` carry.
//!
//! The reference defines a `StoredEvent` as "one JSON line in the session's log", so the durable record and the
//! wire record have one shape, declared here. The runtime crate owns how lines are written and made durable.
//! Evolution is additive: new kinds may be added and existing kinds only gain optional fields, so a reader meets
//! unknown kinds as [`EventPayload::Unknown`] instead of failing.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::types::approval::{ApprovalDecision, ApprovalRecord, ApprovalStatus, PermissionAction, TreeGrant};
use crate::types::attachment::AttachedFile;
use crate::types::common::{ModelErrorSummary, ModelSelection, RunSelection, SessionOrigin};
use crate::types::goal::{GoalItem, GoalStatus};
use crate::types::producers::{ProducerMessageMode, ProducerOwner};
use crate::types::run::PersistedToolResult;
use crate::types::session::TitleChange;
use crate::types::skills::SkillInvocation;
use crate::types::tool_output::OutputStream;

mod json;
mod subscribe;
mod tag_first;

pub use json::EventJson;
pub use subscribe::{EventsSubscribeParams, EventsSubscribeResult, EventsSubscriptionParams};
use tag_first::tagged_payload;

/// One record of a session's log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StoredEvent {
    pub session_id: String,
    pub run_id: Option<String>,
    /// The physical sequence: 1 for `session_created`, then strictly increasing.
    pub seq: u64,
    /// RFC 3339 UTC.
    pub timestamp: String,
    /// Who produced it: `user`, `engine:<what>` such as `engine:tool-result`, or `plugin:<name>`
    /// ([`Origin`](super::origin::Origin) reads it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    pub payload: EventPayload,
}

impl StoredEvent {
    /// Who produced the event, read from its `origin` word (`None` when it has none).
    pub fn origin_of(&self) -> Option<super::origin::Origin> {
        self.origin.as_deref().map(super::origin::Origin::parse)
    }
}

/// How a title change came about, recorded in `session_title_committed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TitleChangeKind {
    Set,
    Clear,
    Reset,
    /// troupe extension: the engine's automatic title (the session's model's, or the first line of its first
    /// input). Never a client's change: a client's `set` or `clear` wins over it, and `reset` returns to it.
    Auto,
}

impl From<&TitleChange> for TitleChangeKind {
    fn from(change: &TitleChange) -> Self {
        match change {
            TitleChange::Set { .. } => TitleChangeKind::Set,
            TitleChange::Clear => TitleChangeKind::Clear,
            TitleChange::Reset => TitleChangeKind::Reset,
        }
    }
}

// Declared through `tagged_payload!` (`events/tag_first.rs`), which reads a payload straight from its JSON once
// its `type` is known, instead of buffering it as serde's derive does.
tagged_payload! {
/// The typed content of a stored event, tagged by `type`.
///
/// Kinds whose payload is owned by a later part of the engine (model streaming, tools, approvals, goals,
/// producers, delegation) are read as [`EventPayload::Unknown`] until that part declares them; their raw JSON is
/// always kept and served unchanged, so nothing is lost on the wire.
// `#[serde(tag = "type", rename_all = "snake_case")]` is written by the macro.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub enum EventPayload {
    /// Always seq 1, with no run.
    SessionCreated {
        origin: SessionOrigin,
        cwd: String,
        selection: RunSelection,
    },
    SessionTitleCommitted {
        /// The title after the change; null for `clear` and `reset` (a `reset` returns the session to its last
        /// `auto` title, if any).
        title: Option<String>,
        change: TitleChangeKind,
        client_rename_id: String,
    },
    SessionReverted {
        through_seq: u64,
    },
    /// troupe extension (`session.archive`): the root session was archived or brought back. Follows the whole
    /// log (a revert does not undo it); a fork copies it with its prefix, and its `session_forked` lists it.
    SessionArchived {
        archived: bool,
    },
    /// The first event of a fork's own, right after the copied prefix `1..=through_seq`. Readers of the log take
    /// it to end what the copy says of the source's place: the fork is a listed root session, the copied tree
    /// grants do not apply to its tree, and the copied usage was spent by the source.
    SessionForked {
        source_session_id: String,
        through_seq: u64,
    },
    UserInputAdmitted {
        input_id: String,
        input: String,
        /// troupe extension: the files the input attached; omitted when none.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        attachments: Vec<AttachedFile>,
    },
    UserInputSubmitted {
        input_id: String,
        input: String,
        /// troupe extension: the files the input attached; omitted when none.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        attachments: Vec<AttachedFile>,
    },
    UserInputRecalled {
        input_id: String,
        input: String,
        /// troupe extension: the files the input attached; omitted when none.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        attachments: Vec<AttachedFile>,
    },
    RunStarted {
        client_run_id: String,
        /// The accepted, effective selection.
        selection: RunSelection,
        input: String,
        /// Where in the agent's fallback chain this run starts (after fallback stickiness).
        fallback_index: u32,
        /// The models this run may use, in order: the chain suffix starting at `fallback_index`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        model_chain: Vec<ModelSelection>,
        /// Whether the client asked to ignore a sticky fallback.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        reset_fallback: bool,
        /// The skill the input invoked (`/name arguments`); the model receives its rendered text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        skill: Option<SkillInvocation>,
        /// The model the client asked for (before stickiness), so a redelivered `run.start` is recognized without
        /// replanning it against the session's state (absent in logs written before it was recorded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        requested_model: Option<ModelSelection>,
        /// troupe extension: the files the input attached; omitted when none.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        attachments: Vec<AttachedFile>,
    },
    RunCompleted {
        #[serde(default)]
        final_text: Option<String>,
    },
    RunFailed {
        error: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model_error: Option<ModelErrorSummary>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resolved_model: Option<String>,
    },
    RunCancelled {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    RunInterrupted {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// One request to a model begins.
    ModelAttemptStarted {
        attempt_id: String,
        /// `<provider>/<model id>`.
        model: String,
        /// Position in the run's chain (`model_chain`).
        fallback_index: u32,
        /// 0 for the first try on this model, then 1, 2, ...
        retry_ordinal: u32,
    },
    TextDelta {
        attempt_id: String,
        text: String,
    },
    ReasoningDelta {
        attempt_id: String,
        text: String,
    },
    /// An attempt failed; `will_retry` says whether the same model is tried again.
    AttemptAbandoned {
        attempt_id: String,
        model: String,
        error: ModelErrorSummary,
        will_retry: bool,
    },
    /// The run moves on to the next model of its chain.
    ModelFallback {
        from: String,
        to: String,
        from_fallback_index: u32,
        to_fallback_index: u32,
        attempts_on_from: u32,
        error: ModelErrorSummary,
    },
    /// A model turn is complete: its text and the tool calls it asked for. It enters the model history.
    ModelTurnCommitted {
        attempt_id: String,
        model: String,
        fallback_index: u32,
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCallRecord>,
    },
    ModelUsageRecorded {
        attempt_id: String,
        model: String,
        agent: String,
        input_tokens: u64,
        output_tokens: u64,
        #[serde(default)]
        reasoning_tokens: u64,
        #[serde(default)]
        cache_read_tokens: u64,
        #[serde(default)]
        cache_write_tokens: u64,
        /// Stamped when recorded, from the model's pricing then; null when the model had none. Never recomputed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        estimated_cost_usd: Option<f64>,
        /// What the request was for: a turn of the run (absent) or a compaction's summary.
        #[serde(default, skip_serializing_if = "UsagePurpose::is_turn")]
        purpose: UsagePurpose,
    },
    /// A tool call passed its permission check and starts executing.
    ToolCallStarted {
        tool_call_id: String,
        tool: String,
        arguments: serde_json::Value,
        action: PermissionAction,
        resource: String,
    },
    /// A bounded, durable chunk of a running tool's output (the live stream is `events.tool_output_delta`).
    ToolCallProgress {
        tool_call_id: String,
        stream: OutputStream,
        /// Byte offset of `text` within the stream.
        offset: u64,
        /// The chunk, decoded as UTF-8 with replacement characters.
        text: String,
    },
    /// Input was written to a running tool's stdin.
    ToolStdinSubmitted {
        tool_call_id: String,
        bytes: u64,
        eof: bool,
    },
    /// The final result of a tool call. Origin `engine:tool-result`. A second one for the same call replaces the
    /// first in model history.
    ToolCallTerminated {
        tool_call_id: String,
        result: PersistedToolResult,
    },
    /// Output past the durable cap was not recorded in `tool_call_progress` events.
    ToolOutputElided {
        tool_call_id: String,
        stream: OutputStream,
        elided_bytes: u64,
    },
    /// A tool call needs a user's answer; the run waits. The record is at revision 1, pending.
    ApprovalRequested {
        // Boxed: the record is the largest of all payloads, and every event would be as large as it otherwise
        // (each event is moved a few times on its way through the engine and through a log's load).
        approval: Box<ApprovalRecord>,
    },
    /// A client answered a pending approval (the answer that won).
    ApprovalUserDecisionRecorded {
        approval_id: String,
        /// The record's revision after this answer.
        revision: u64,
        decision: ApprovalDecision,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        feedback: Option<String>,
        answered_by: String,
        client_response_id: String,
    },
    /// The approval reached its final status.
    ApprovalFinalized {
        approval_id: String,
        revision: u64,
        status: ApprovalStatus,
    },
    /// The approval was cancelled without an answer (its run ended or the daemon restarted).
    ApprovalCancelled {
        approval_id: String,
        revision: u64,
        reason: String,
    },
    /// A user approved an operation for the whole session tree. Recorded in the root session's log.
    TreeApprovalGrantCommitted {
        grant: TreeGrant,
    },
    // --- plugins (issue 10) ---
    /// A plugin emitted a session-scoped event (`plugin/emit`); also sent live as `events.plugin`.
    PluginEventAdded {
        /// The plugin's configured name.
        plugin: String,
        name: String,
        payload: serde_json::Value,
    },
    // --- end plugins ---
    // --- producers (issue 10; projected by `troupe_runtime::producer_book`) ---
    /// A producer's message is durable; the producer's send is acknowledged only after this. Pending until a
    /// run claims it (or it is discarded).
    ProducerMessageAccepted {
        message_id: String,
        producer_owner: ProducerOwner,
        mode: ProducerMessageMode,
        /// Unique per (session, owner): a retry with the same key and content gets this message's receipt.
        idempotency_key: String,
        body: String,
    },
    /// The event's run took these pending messages: as its input (a wake-up) or at a steering boundary.
    ProducerMessagesClaimed {
        message_ids: Vec<String>,
    },
    /// Claimed messages whose run ended without consuming them (it was interrupted) are pending again.
    ProducerMessagesReleased {
        message_ids: Vec<String>,
        reason: String,
    },
    /// The claiming run's model saw the message (a turn committed after it), or the run ended: it is delivered.
    ProducerMessageConsumed {
        message_id: String,
    },
    /// The owner withdrew a message before any run claimed it.
    ProducerMessageDiscarded {
        message_id: String,
    },
    // --- end producers ---
    // --- goals (issue 10; projected by `troupe_runtime::goal_state`). Each carries the goal's revision after it,
    // so a goal's revisions strictly increase in the log. ---
    /// A goal was activated (revision 1). Origin `user`.
    GoalActivated {
        goal_id: String,
        objective: String,
        revision: u64,
        /// The selection automatic runs use; null: the session's latest run selection, else its creation one.
        #[serde(default)]
        selection: Option<RunSelection>,
    },
    /// The model replaced the whole checklist through `goal_update`.
    GoalChecklistRevised {
        goal_id: String,
        revision: u64,
        items: Vec<GoalItem>,
    },
    /// The goal was paused, resumed (`active`), cancelled or completed.
    GoalLifecycleChanged {
        goal_id: String,
        revision: u64,
        status: GoalStatus,
        /// Why, when the engine did it (completion, too many runs without progress).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// A resume's new selection; absent keeps the goal's selection.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        selection: Option<RunSelection>,
    },
    // --- end goals ---
    // --- history (issue 11) ---
    /// A compaction began: the session's model is asked for a summary of the history so far.
    CompactionStarted {
        compaction_id: String,
        trigger: CompactionTrigger,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        focus: Option<String>,
        /// `<provider>/<model id>` asked for the summary.
        model: String,
    },
    /// Model requests from now on start from `summary` instead of the history through `through_seq`. Attachments
    /// in the compacted history are not recoverable from the checkpoint.
    ContextCheckpointCommitted {
        compaction_id: String,
        summary: String,
        /// The last event the summary covers.
        through_seq: u64,
        trigger: CompactionTrigger,
        /// History messages the summary replaced.
        compacted_messages: u64,
        /// Tool results (each with its emitted messages, as one unit) whose content the summary replaced.
        elided_tool_results: u64,
    },
    /// A compaction ended; `committed` when its checkpoint is the preceding `context_checkpoint_committed`.
    CompactionEnded {
        compaction_id: String,
        outcome: CompactionOutcome,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A model request of an internal agent failed: a compaction's summary request or an automatic title's (a
    /// run's own requests record `attempt_abandoned` instead). One per failed request, in order; `error` is the
    /// same bounded, terminal-safe summary, with the vendor's body as a `DiagnosticText`.
    InternalAgentFailed {
        agent: InternalAgent,
        /// `<provider>/<model id>` asked.
        model: String,
        /// The compaction the request was for (`context_compaction` only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        compaction_id: Option<String>,
        error: ModelErrorSummary,
    },
    /// A `delegate` tool call created a child session and started the task there (in the parent's log).
    DelegateStarted {
        tool_call_id: String,
        child_session_id: String,
        agent: String,
        task: String,
    },
    /// The child's run ended; `summary` (bounded) is what the parent's tool result carries.
    DelegateFinished {
        tool_call_id: String,
        child_session_id: String,
        status: DelegateStatus,
        summary: String,
    },
    /// troupe extension (`session.undo`): the files run `undone_run_id` changed were put back as they were before
    /// it (origin `user`). Follows the whole log: a revert does not make an undone run undoable again.
    RunChangesUndone {
        undone_run_id: String,
        /// In path order.
        files: Vec<crate::types::changes::UndoneFile>,
        /// Files changed since the run were restored too (`force`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        forced: bool,
    },
    // --- end history ---
    // `Unknown`, a kind this build does not model (yet), is appended by the macro.
}
}

impl EventPayload {
    /// For `run_started`: the selection the client asked for, with the requested model rather than the sticky
    /// fallback the run started on (the effective `selection` itself when the log did not record the request).
    /// What a client keeps asking for, so that a fallback never becomes the session's model unannounced.
    pub fn requested_selection(&self) -> Option<RunSelection> {
        let EventPayload::RunStarted { selection, requested_model, .. } = self else {
            return None;
        };
        Some(RunSelection {
            model: requested_model.clone().unwrap_or_else(|| selection.model.clone()),
            ..selection.clone()
        })
    }

    /// The wire name of this kind, or `None` for [`EventPayload::Unknown`].
    pub fn kind(&self) -> Option<&'static str> {
        Some(match self {
            EventPayload::SessionCreated { .. } => "session_created",
            EventPayload::SessionTitleCommitted { .. } => "session_title_committed",
            EventPayload::SessionReverted { .. } => "session_reverted",
            EventPayload::SessionArchived { .. } => "session_archived",
            EventPayload::SessionForked { .. } => "session_forked",
            EventPayload::UserInputAdmitted { .. } => "user_input_admitted",
            EventPayload::UserInputSubmitted { .. } => "user_input_submitted",
            EventPayload::UserInputRecalled { .. } => "user_input_recalled",
            EventPayload::RunStarted { .. } => "run_started",
            EventPayload::RunCompleted { .. } => "run_completed",
            EventPayload::RunFailed { .. } => "run_failed",
            EventPayload::RunCancelled { .. } => "run_cancelled",
            EventPayload::RunInterrupted { .. } => "run_interrupted",
            EventPayload::ModelAttemptStarted { .. } => "model_attempt_started",
            EventPayload::TextDelta { .. } => "text_delta",
            EventPayload::ReasoningDelta { .. } => "reasoning_delta",
            EventPayload::AttemptAbandoned { .. } => "attempt_abandoned",
            EventPayload::ModelFallback { .. } => "model_fallback",
            EventPayload::ModelTurnCommitted { .. } => "model_turn_committed",
            EventPayload::ModelUsageRecorded { .. } => "model_usage_recorded",
            EventPayload::ToolCallStarted { .. } => "tool_call_started",
            EventPayload::ToolCallProgress { .. } => "tool_call_progress",
            EventPayload::ToolStdinSubmitted { .. } => "tool_stdin_submitted",
            EventPayload::ToolCallTerminated { .. } => "tool_call_terminated",
            EventPayload::ToolOutputElided { .. } => "tool_output_elided",
            EventPayload::ApprovalRequested { .. } => "approval_requested",
            EventPayload::ApprovalUserDecisionRecorded { .. } => "approval_user_decision_recorded",
            EventPayload::ApprovalFinalized { .. } => "approval_finalized",
            EventPayload::ApprovalCancelled { .. } => "approval_cancelled",
            EventPayload::TreeApprovalGrantCommitted { .. } => "tree_approval_grant_committed",
            EventPayload::ProducerMessageAccepted { .. } => "producer_message_accepted",
            EventPayload::ProducerMessagesClaimed { .. } => "producer_messages_claimed",
            EventPayload::ProducerMessagesReleased { .. } => "producer_messages_released",
            EventPayload::ProducerMessageConsumed { .. } => "producer_message_consumed",
            EventPayload::ProducerMessageDiscarded { .. } => "producer_message_discarded",
            EventPayload::GoalActivated { .. } => "goal_activated",
            EventPayload::GoalChecklistRevised { .. } => "goal_checklist_revised",
            EventPayload::GoalLifecycleChanged { .. } => "goal_lifecycle_changed",
            EventPayload::PluginEventAdded { .. } => "plugin_event_added",
            EventPayload::CompactionStarted { .. } => "compaction_started",
            EventPayload::ContextCheckpointCommitted { .. } => "context_checkpoint_committed",
            EventPayload::CompactionEnded { .. } => "compaction_ended",
            EventPayload::InternalAgentFailed { .. } => "internal_agent_failed",
            EventPayload::DelegateStarted { .. } => "delegate_started",
            EventPayload::DelegateFinished { .. } => "delegate_finished",
            EventPayload::RunChangesUndone { .. } => "run_changes_undone",
            EventPayload::Unknown => return None,
        })
    }
}

/// What a model request recorded in `model_usage_recorded` was for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum UsagePurpose {
    /// A turn of the run.
    #[default]
    Turn,
    /// A compaction's summary.
    Compaction,
    /// troupe extension: an automatic session title.
    Title,
}

impl UsagePurpose {
    pub fn is_turn(&self) -> bool {
        *self == UsagePurpose::Turn
    }
}

/// The engine's internal agents: model requests made for the engine's own purposes, outside any run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InternalAgent {
    /// A compaction's summary.
    ContextCompaction,
    /// An automatic session title.
    SessionTitle,
}

/// Why a compaction ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CompactionTrigger {
    /// `session.compact`.
    Manual,
    /// The next request would not fit the model's context window.
    Auto,
    /// The provider answered that the request exceeded the context window; the request is retried after it.
    Overflow,
}

/// How a compaction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CompactionOutcome {
    Committed,
    /// Nothing to compact (no history since the last checkpoint).
    Skipped,
    Failed,
    Cancelled,
}

/// How a delegated task ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DelegateStatus {
    Completed,
    Failed,
    Cancelled,
    Interrupted,
}

/// A tool call as the model asked for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolCallRecord {
    pub tool_call_id: String,
    pub tool: String,
    pub arguments: serde_json::Value,
}
