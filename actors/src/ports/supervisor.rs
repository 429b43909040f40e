//! The supervisor's port: what the actors below the supervisor send it. Session actors report their metadata,
//! usage, goal state and stop; runs create and open delegated child sessions; goal and approval actors open
//! sessions, and every run's preparation leases its tree's approval actor. Handled in `session_supervisor/`.

use actix::prelude::*;
use troupe_protocol::types::common::{RunSelection, SessionMeta};
use troupe_protocol::types::session::{PermissionMode, SessionTreeNode};
use troupe_runtime::usage_book::UsageSummary;

use super::approval::ApprovalLease;
use super::recipients;
use super::session::SessionPort;
use crate::error::EngineError;

recipients! {
    /// One `Recipient` per message of this file.
    pub struct SupervisorRecipients {
        open_session: OpenSession,
        session_gone: SessionGone,
        session_meta_changed: SessionMetaChanged,
        session_stopped: SessionStopped,
        session_usage_changed: SessionUsageChanged,
        session_artifacts_changed: SessionArtifactsChanged,
        goal_report: GoalReport,
        get_tree: GetTree,
        approvals_for: ApprovalsFor,
        create_child_session: CreateChildSession,
    }
}

/// The session supervisor, as the actors below it reach it.
pub type SupervisorPort = super::Port<SupervisorRecipients>;

/// The port of a session's actor, started (loading its log) when it is not live.
#[derive(Message)]
#[rtype(result = "Result<SessionPort, EngineError>")]
pub struct OpenSession {
    pub session_id: String,
}

/// Sent by whoever met the closed mailbox of the session actor behind `port`: the supervisor forgets that actor
/// (unless a successor already replaced it), so the next request starts a fresh one.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SessionGone {
    pub session_id: String,
    pub port: SessionPort,
}

/// Sent by a session actor when its metadata changed: at once when anything but its progress (`last_event_seq`,
/// `last_activity_at`) did, else within 100 ms and when it stops (`session_actor/meta.rs`).
#[derive(Message)]
#[rtype(result = "()")]
pub struct SessionMetaChanged {
    pub meta: SessionMeta,
}

/// Sent by a session actor when it stops.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SessionStopped {
    pub session_id: String,
    pub incarnation: u64,
}
/// Sent by a session actor when it stops: its whole spent usage, when it left some in its `PublishedUsage` that the
/// supervisor did not take (`published_usage.rs`).
#[derive(Message)]
#[rtype(result = "()")]
pub struct SessionUsageChanged {
    pub session_id: String,
    pub summary: UsageSummary,
}

/// Sent by a session actor when it started and whenever its log came to name another artifact: every artifact the
/// log names now (`troupe_runtime::artifact_names`), for collecting the ones no session names.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SessionArtifactsChanged {
    pub session_id: String,
    pub artifacts: std::sync::Arc<troupe_runtime::artifact_names::NamedArtifacts>,
}

/// Sent by a session actor to the supervisor when its goal's state or its idleness changed.
#[derive(Message, Clone, Debug, PartialEq, Eq)]
#[rtype(result = "()")]
pub struct GoalReport {
    pub session_id: String,
    pub goal_id: String,
    /// The goal is active (not paused, completed or cancelled).
    pub active: bool,
    /// The session has no active run.
    pub idle: bool,
}

/// The session with its descendants, and the permission mode of the tree that contains it, from the supervisor's
/// index and book (no session is loaded).
#[derive(Message)]
#[rtype(result = "Result<(SessionTreeNode, PermissionMode), EngineError>")]
pub struct GetTree {
    pub session_id: String,
}

/// A lease of the approval actor of the tree that contains the session (started when the tree has none). The tree
/// counts as in use while the lease is held.
#[derive(Message)]
#[rtype(result = "Result<ApprovalLease, EngineError>")]
pub struct ApprovalsFor {
    pub session_id: String,
}

/// Creates a child session of `parent_session_id` for the tool call `parent_tool_call_id` of `parent_run_id`, and
/// replies with its metadata once its log is durable.
#[derive(Message)]
#[rtype(result = "Result<SessionMeta, ChildRefused>")]
pub struct CreateChildSession {
    pub parent_session_id: String,
    pub parent_run_id: String,
    pub parent_tool_call_id: String,
    pub selection: RunSelection,
    /// `[delegation] max_sessions_per_tree`.
    pub max_sessions_per_tree: u32,
}

/// Why no child was created.
#[derive(Debug, thiserror::Error)]
pub enum ChildRefused {
    /// The tree already holds (or is creating) as many sessions as it may.
    #[error(
        "this session tree already has {sessions} sessions besides its root, the most it may have \
         (`[delegation] max_sessions_per_tree` is {limit}); do the remaining work in this session"
    )]
    TreeFull { root_session_id: String, sessions: usize, limit: u32 },
    #[error(transparent)]
    Engine(#[from] EngineError),
}
