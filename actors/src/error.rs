//! Engine errors, and their one conversion into JSON-RPC errors.
//!
//! Actors return [`EngineError`] values for every expected refusal; only `From<EngineError> for RpcError`
//! (`error/rpc.rs`) decides codes and `data`, so a refusal reads the same whichever method produced it. This file
//! holds the errors, their kinds and their texts.

use troupe_protocol::types::approval::ApprovalStatus;
use troupe_protocol::types::goal::{GoalLifecycleAction, GoalStatus};
use troupe_runtime::catalog::SelectionError;

mod changes;
mod idempotency;
mod rpc;
pub use changes::ChangesRefusal;
pub use idempotency::check_idempotency_key;

/// Why a plugin's `plugin/emit` was refused; nothing was written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EmitRefusal {
    #[error("the event name is empty or longer than {max_chars} characters")]
    Name { max_chars: usize },
    #[error("the payload is {bytes} bytes of JSON; at most {max_bytes} are allowed")]
    PayloadTooLarge { bytes: usize, max_bytes: usize },
    #[error("more than {per_second} events in a second for this session; retry later")]
    TooManyEvents { per_second: usize },
    #[error("more than {per_minute_bytes} bytes of payloads in a minute for this session; retry later")]
    TooManyBytes { per_minute_bytes: usize },
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum EngineError {
    #[error("no session `{session_id}`")]
    SessionNotFound { session_id: String },
    #[error("invalid selection: {0}")]
    InvalidSelection(SelectionError),
    #[error("invalid cwd `{cwd}`: {reason}")]
    InvalidCwd { cwd: String, reason: String },
    #[error("invalid title: {reason}")]
    InvalidTitle { session_id: String, client_rename_id: String, reason: String },
    #[error("`{field}` is not a valid client idempotency key: {reason}")]
    InvalidIdempotencyKey { field: &'static str, reason: String },
    #[error("run `{run_id}` is not the active run of its session")]
    RunNotActive { run_id: String },
    /// The session's recorded cwd was replaced by a symlink or is no longer a directory: no run starts there.
    #[error("{reason}")]
    SessionCwdUnusable { session_id: String, cwd: String, reason: String },
    /// The daemon knows no run of that id (never started, or started before the daemon's last start).
    #[error("there is no run `{run_id}` (runs started before the daemon's last start are not known)")]
    RunNotFound { run_id: String },
    /// `run.tool_stdin` data larger than `[limits] max_input_bytes`, refused before it reaches the tool.
    #[error(
        "the stdin data is {size} bytes; at most {limit} are accepted in one request (`[limits] max_input_bytes` in \
         the daemon's config.toml): send it in several requests"
    )]
    ToolStdinTooLarge { size: usize, limit: usize },
    /// The tool call has as much unread stdin waiting as it may (`troupe_runtime::tool_stdin`).
    #[error(
        "tool call `{tool_call_id}` has {queued_bytes} bytes of stdin it has not read yet; at most {max_bytes} may \
         wait: retry once it reads them, or end its input"
    )]
    ToolStdinBacklogFull { run_id: String, tool_call_id: String, queued_bytes: usize, max_bytes: usize },
    #[error("session `{session_id}` already has an active run, `{active_run_id}`; steer or cancel it first")]
    SessionBusy { session_id: String, active_run_id: String },
    #[error("`{client_run_id}` was already used to start a different run in this session")]
    RunIdempotencyConflict { session_id: String, client_run_id: String },
    #[error("`{client_rename_id}` was already used for a different rename of this session")]
    RenameIdempotencyConflict { session_id: String, client_rename_id: String },
    /// The session's log could not be read or written. The session restarts from its log on next use.
    #[error("storage failure for session `{session_id}`: {detail}")]
    Storage { session_id: String, detail: String },
    /// Another cluster node hosts the session (it holds the session's lease), or took it from this node; `node` is
    /// `None` when this node only learnt that it lost the session.
    #[error("{}", hosted_elsewhere(session_id, node.as_deref()))]
    SessionHostedElsewhere { session_id: String, node: Option<String> },
    /// The cluster's NATS cannot be reached: nothing was stored.
    #[error("session `{session_id}` cannot be written now: {detail}; nothing was stored, retry once NATS is back")]
    ClusterUnavailable { session_id: String, detail: String },
    /// A session actor stopped while answering (for example it crashed); the request was not completed.
    #[error("session `{session_id}` is unavailable: {detail}")]
    Unavailable { session_id: String, detail: String },
    /// The session's log lost its `session_created`: it can be listed and read, not run.
    #[error(
        "session `{session_id}` cannot be changed or run: its log lost the session_created event, so its cwd and selection are unknown (see skipped_events); it can still be read"
    )]
    SessionDamaged { session_id: String },
    /// `events.subscribe` with a cursor past the session's last event.
    #[error(
        "cursor {cursor} is past the last event of session `{session_id}` ({last_seq}); resubscribe with a cursor you received from this session, or none"
    )]
    CursorAhead { session_id: String, cursor: u64, last_seq: u64 },
    #[error("the engine is shutting down")]
    ShuttingDown,
    /// `session.revert`/`session.fork` with a `through_seq` that is not an event of the session.
    #[error(
        "through_seq {through_seq} is not an event of session `{session_id}`: its events are 1 to {last_seq}; events.subscribe shows their seqs"
    )]
    SeqOutOfRange { session_id: String, through_seq: u64, last_seq: u64 },
    /// `session.fork` of a prefix without a user message.
    #[error(
        "session `{session_id}` has no user message through seq {through_seq}: fork from a seq at or after the first run_started"
    )]
    NoUserMessageInPrefix { session_id: String, through_seq: u64 },
    #[error("there is no provider `{provider_id}`; the providers are local, openai and anthropic")]
    ProviderNotFound { provider_id: String },
    #[error("invalid settings for provider `{provider_id}`: {detail}")]
    InvalidProviderSetup { provider_id: String, detail: String },
    #[error("provider `{provider_id}` could not be reached with these settings: {detail}")]
    ProviderUnreachable { provider_id: String, kind: troupe_runtime::model::ModelErrorKind, detail: String },
    #[error("the revision moved on: expected {expected}, found {found}; fetch the runtime snapshot and retry")]
    RevisionConflict { expected: u64, found: u64 },
    #[error("`{key}` was already used for a different request about provider `{provider_id}`")]
    ProviderIdempotencyConflict { provider_id: String, key: String },
    /// The cluster's provider connections cannot be read or written now (NATS unreachable): nothing was stored.
    #[error(
        "provider `{provider_id}` cannot be changed now: the cluster's shared provider connections cannot be reached \
         ({detail}); nothing was stored, retry once NATS is back"
    )]
    ProviderShareUnavailable { provider_id: String, detail: String },
    #[error("internal error: {detail}")]
    Internal { detail: String },
    /// `session.undo`'s and `session.diff`'s refusals (`error/changes.rs`); nothing was changed.
    #[error("{0}")]
    Changes(ChangesRefusal),
    /// A request's text (a run's input, a steer, a goal's objective, a compaction's focus) is larger than
    /// `[limits] max_input_bytes`.
    #[error(
        "{what} is {size} bytes; at most {limit} are accepted (`[limits] max_input_bytes` in the daemon's \
         config.toml): put large material in a file in the session's directory and refer to it"
    )]
    InputTooLarge { what: &'static str, size: usize, limit: usize },
    /// A run's or a steer's attachments that are too many, too large, or not what they say they are.
    #[error("{0}")]
    InvalidAttachment(troupe_runtime::input_files::AttachmentError),
    #[error("{0}")]
    ReadAttachment(troupe_runtime::input_files::ReadAttachmentError),
    #[error("{reason}")]
    CwdPathUnusable { session_id: String, path: String, reason: String },
    /// A run's input or a steering input that is empty or only whitespace.
    #[error("{what} is empty")]
    EmptyInput { what: &'static str },
    #[error("the goal's objective is empty")]
    EmptyObjective,
    #[error("a sign-in link can only be made with the daemon's token (`troupe open`), not from a signed-in browser")]
    ConsoleLoginCodeNeedsToken,
    #[error("the web console is off on this daemon ([console] enabled = false in config.toml)")]
    ConsoleDisabled,
    /// A cluster node could not record a sign-in code in the cluster (NATS cannot be reached): no code was made.
    #[error("no sign-in link was made: the cluster cannot record it now ({detail}); retry once NATS is back")]
    ConsoleCodeNotRecorded { detail: String },
    /// A plugin's request of a method the daemon does not serve.
    #[error("the daemon serves no plugin request `{method}`")]
    UnknownPluginMethod { method: String },
    /// A plugin's request before the daemon answered its `plugin/initialize`.
    #[error("the plugin sent a request before plugin/initialize was answered")]
    PluginNotInitialized,
    /// A plugin's request whose params do not match its method.
    #[error("{method}: {detail}")]
    InvalidPluginParams { method: String, detail: String },
    /// A plugin's `plugin/emit` over one of its bounds (`plugin_host/limits.rs`).
    #[error(transparent)]
    EmitRefused(EmitRefusal),
    #[error("there is no skill `{name}` for this session")]
    SkillNotFound { name: String },
    /// A run's input `/<name>` names no skill; `detail` lists what exists.
    #[error("{detail}")]
    UnknownSkillInput { name: String, detail: String },
    #[error(
        "the skill `{name}` is not available to this session (the permission policy denies it, or it is not user-invocable)"
    )]
    SkillNotAllowed { name: String },
    #[error("`{session_id}` is not a root session; approvals are listed for a whole tree, by its root")]
    NotRootSession { session_id: String },
    /// `session.delete`/`session.archive` name a delegated session: they act on whole trees, by their root.
    #[error(
        "`{session_id}` is a delegated session of the tree of `{root_session_id}`; {action} applies to a whole \
         tree: name its root, `{root_session_id}`"
    )]
    ChildSession { session_id: String, root_session_id: String, action: &'static str },
    /// `session.delete` while a session of the tree is at work.
    #[error("{}", tree_busy_detail(session_id, busy_session_id, reason))]
    TreeBusy { session_id: String, busy_session_id: String, reason: TreeBusyReason },
    // --- producers (issue 10) ---
    /// The producer id is not registered for this session (never, or unregistered, or the daemon or plugin
    /// restarted since: registrations are runtime only).
    #[error("there is no producer `{producer_id}` registered for session `{session_id}`; register again")]
    ProducerNotFound { session_id: String, producer_id: String },
    #[error("this owner already holds {limit} producer registrations; unregister some first")]
    TooManyProducers { limit: usize },
    // --- presence (issue 14) ---
    /// `session.presence` on one session more than a connection may watch at once.
    #[error(
        "this connection already watches the presence of {limit} sessions; call `session.presence_unsubscribe` for \
         one first"
    )]
    TooManyPresenceWatches { limit: usize },
    // --- named tool-output subscriptions (protocol 18) ---
    #[error(
        "session `{session_id}` has no running or recently ended tool call `{tool_call_id}`: an older call's output \
         is in its tool_call_progress events and, when its result was cut, in its output_ref"
    )]
    ToolCallNotFound { session_id: String, tool_call_id: String },
    #[error("`subscription_id` must be 1 to 128 ASCII letters, digits, `.`, `_`, `:` or `-`")]
    InvalidSubscriptionId { subscription_id: String },
    #[error(
        "this connection already has {limit} tool-output subscriptions that have not ended; call \
         `tool_output.unsubscribe` for one first"
    )]
    TooManyToolOutputSubscriptions { limit: usize },
    // --- stored tool output (protocol 18) ---
    /// `tool_output.read` with an `output_ref` of the wrong form.
    #[error("`output_ref` must be 32 lowercase hexadecimal digits, as a tool result's `output_ref` is")]
    InvalidOutputRef { output_ref: String },
    /// `tool_output.read` with an `output_ref` this session does not have.
    #[error(
        "session `{session_id}` has no stored output `{output_ref}`: only results whose output was cut have an \
         output_ref, and it is read through the session that recorded it"
    )]
    OutputRefNotFound { session_id: String, output_ref: String },
    #[error("`{idempotency_key}` was already used by this producer for a different message in this session")]
    ProducerIdempotencyConflict { session_id: String, idempotency_key: String, message_id: String },
    /// No message of that id from this owner (never accepted, another owner's, or finished long ago).
    #[error("there is no producer message `{message_id}` of this owner in session `{session_id}`")]
    ProducerMessageNotFound { session_id: String, message_id: String },
    #[error("invalid producer message: {reason}")]
    InvalidProducerMessage { reason: String },
    /// The session already holds as many undelivered producer messages (or bytes of them) as it may.
    #[error(
        "session `{session_id}` already holds {messages} undelivered producer messages ({bytes} bytes); at most \
         {max_messages} messages and {max_bytes} bytes are held: retry once some are delivered or discarded"
    )]
    ProducerBacklogFull { session_id: String, messages: usize, bytes: usize, max_messages: usize, max_bytes: usize },
    // --- end producers ---
    // --- goals (issue 10) ---
    #[error("{}", goal_detail(session_id, kind))]
    Goal { session_id: String, kind: GoalErrorKind },
    // --- end goals ---
    #[error("{}", approval_detail(approval_id, kind))]
    Approval { session_id: String, approval_id: String, client_response_id: String, kind: ApprovalErrorKind },
}

/// What keeps a tree from being deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreeBusyReason {
    Run { run_id: String },
    Compaction { compaction_id: String },
    Goal { goal_id: String },
}

fn hosted_elsewhere(session_id: &str, node: Option<&str>) -> String {
    match node {
        Some(node) => format!(
            "session `{session_id}` is hosted by cluster node `{node}`; it is written there, and only while that node is up"
        ),
        None => format!("session `{session_id}` was taken over by another cluster node; retry to reach it there"),
    }
}

impl EngineError {
    /// The engine's words for a refusal of the cluster's replica of `session_id`'s log.
    pub fn replica(session_id: &str, error: troupe_runtime::event_log::ReplicaError) -> EngineError {
        use troupe_runtime::event_log::ReplicaFailure;
        let session_id = session_id.to_owned();
        match error.failure {
            ReplicaFailure::HostedElsewhere { node } => {
                EngineError::SessionHostedElsewhere { session_id, node: Some(node) }
            }
            ReplicaFailure::Fenced => EngineError::SessionHostedElsewhere { session_id, node: None },
            ReplicaFailure::Unreachable => EngineError::ClusterUnavailable { session_id, detail: error.detail },
            ReplicaFailure::Failed => EngineError::Storage { session_id, detail: error.detail },
        }
    }
}

fn tree_busy_detail(session_id: &str, busy_session_id: &str, reason: &TreeBusyReason) -> String {
    let which = if busy_session_id == session_id {
        format!("session `{session_id}`")
    } else {
        format!("session `{busy_session_id}` of the tree of `{session_id}`")
    };
    match reason {
        TreeBusyReason::Run { run_id } => {
            format!("{which} has an active run, `{run_id}`; cancel it (run.cancel) or let it end, then delete again")
        }
        TreeBusyReason::Compaction { compaction_id } => format!(
            "{which} is compacting (`{compaction_id}`); cancel it (run.cancel) or let it end, then delete again"
        ),
        TreeBusyReason::Goal { goal_id } => format!(
            "{which} has an active goal, `{goal_id}`; pause or cancel it (session.goal.lifecycle), then delete again"
        ),
    }
}

fn goal_detail(session_id: &str, kind: &GoalErrorKind) -> String {
    use GoalErrorKind as Kind;
    let name = |status: &troupe_protocol::types::goal::GoalStatus| {
        serde_json::to_string(status).unwrap_or_default().trim_matches('"').to_owned()
    };
    match kind {
        Kind::NotRootSession => format!("`{session_id}` is not a root session; goals belong to root sessions"),
        Kind::GoalOpen { goal_id, status } => format!(
            "session `{session_id}` already has a goal `{goal_id}` ({}); cancel it (or let it complete) first",
            name(status)
        ),
        Kind::NoGoal => format!("session `{session_id}` has no goal; set one with session.goal.set"),
        Kind::StaleGoal { current_goal_id } => {
            format!("that is not the current goal of session `{session_id}` (it is `{current_goal_id}`); read it again")
        }
        Kind::RevisionConflict { found } => {
            format!("the goal is at revision {found}; read it again (session.goal.get) and retry with that revision")
        }
        Kind::Terminal { status } => format!("the goal is {} and cannot change any more", name(status)),
        Kind::WrongStatus { status, action } => format!(
            "cannot {} a goal that is {}",
            serde_json::to_string(action).unwrap_or_default().trim_matches('"'),
            name(status)
        ),
        Kind::SelectionNotAllowed { action } => format!(
            "a selection is accepted only with `resume`, not with `{}`",
            serde_json::to_string(action).unwrap_or_default().trim_matches('"')
        ),
        Kind::ChecklistTooLarge { reason } => format!("{reason}; the goal is unchanged"),
    }
}

fn approval_detail(approval_id: &str, kind: &ApprovalErrorKind) -> String {
    use ApprovalErrorKind as Kind;
    match kind {
        Kind::NotFound => format!("no approval `{approval_id}` in this session"),
        Kind::NotPending { status } => {
            format!(
                "approval `{approval_id}` is no longer pending (it is {})",
                serde_json::to_string(status).unwrap_or_default().trim_matches('"')
            )
        }
        Kind::RevisionConflict { found } => {
            format!("approval `{approval_id}` is at revision {found}; the answer was for another revision")
        }
        Kind::FingerprintMismatch => {
            format!(
                "the operation fingerprint does not match approval `{approval_id}`: the answer was for another operation"
            )
        }
        Kind::DecisionNotAllowed => format!(
            "this decision is not allowed for approval `{approval_id}` (see its constraints; feedback goes with reject only)"
        ),
        Kind::IdempotencyConflict => "this client_response_id was already used for a different answer".to_owned(),
    }
}

/// Why a goal request was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GoalErrorKind {
    /// Goals belong to root sessions.
    NotRootSession,
    /// `session.goal.set` while a goal is active or paused.
    GoalOpen { goal_id: String, status: GoalStatus },
    /// The session has no goal (or, for the model, none it may update).
    NoGoal,
    /// `goal_id` is not the session's current goal.
    StaleGoal { current_goal_id: String },
    /// `expected_revision` is not the goal's revision.
    RevisionConflict { found: u64 },
    /// The goal is completed or cancelled.
    Terminal { status: GoalStatus },
    /// The action does not apply to the goal's status (pause a paused goal, resume an active one).
    WrongStatus { status: GoalStatus, action: GoalLifecycleAction },
    /// A selection came with pause or cancel.
    SelectionNotAllowed { action: GoalLifecycleAction },
    /// A `goal_update` checklist exceeds a bound (`troupe_runtime::goal_state::check_checklist`).
    ChecklistTooLarge { reason: String },
}

/// Why an answer was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApprovalErrorKind {
    NotFound,
    NotPending { status: ApprovalStatus },
    RevisionConflict { found: u64 },
    FingerprintMismatch,
    DecisionNotAllowed,
    IdempotencyConflict,
}
