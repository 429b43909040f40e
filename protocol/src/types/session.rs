//! Session lifecycle methods: create, list, get, resume, rename, children, tree, permission mode, compact,
//! revert, fork.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::types::common::{RunSelection, SessionMeta, SessionStatus};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionCreateParams {
    pub selection: RunSelection,
    /// The working directory the session's tools act in: an absolute path to an existing directory. Defaults to
    /// the daemon's own working directory.
    #[serde(default)]
    pub cwd: Option<String>,
}

/// `{session}`: the result of `session.create`, `session.get`, `session.resume` and `session.revert`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionResult {
    pub session: SessionMeta,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionListParams {
    /// Only sessions whose (canonical) cwd equals this path.
    #[serde(default)]
    pub cwd: Option<String>,
    /// troupe extension: also list archived root sessions (`session.archive`). Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub include_archived: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionListResult {
    /// Root sessions only, most recently active first.
    pub sessions: Vec<SessionMeta>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionChildSummary {
    pub session_id: String,
    pub agent: String,
    pub title: Option<String>,
    pub status: SessionStatus,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionChildrenResult {
    pub children: Vec<SessionChildSummary>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionTreeNode {
    pub session: SessionMeta,
    pub children: Vec<SessionTreeNode>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionTreeResult {
    pub tree: SessionTreeNode,
    /// troupe extension: the tree's permission mode now. It is runtime-only (`session.set_permission_mode`, the
    /// default after a daemon start) and no event records it, so this is how a client shows the tree's real mode
    /// rather than the one it last set. Absent from daemons that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<PermissionMode>,
}

/// How `session.rename` changes the title.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum TitleChange {
    /// Set a user title (1..=512 bytes, no control characters).
    Set { title: String },
    /// Remove the title and keep the session untitled.
    Clear,
    /// Drop the user's title and return to the automatic one: the last `auto` title, or none until the next run
    /// makes one.
    Reset,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionRenameParams {
    pub session_id: String,
    pub client_rename_id: String,
    pub change: TitleChange,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionRenameResult {
    pub client_rename_id: String,
    pub session: SessionMeta,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PermissionMode {
    /// The policy's classifier approves low-risk operations and escalates the rest to the user.
    #[default]
    AutoApprove,
    /// Escalations are rejected without asking.
    AutoApproveN,
    /// Escalations are approved once, with no tree grant.
    AutoApproveY,
    /// Every ask goes to the user.
    Ask,
    /// Asks are approved at once. Hard denies still hold.
    Yolo,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SetPermissionModeParams {
    /// Any session of the target tree.
    pub session_id: String,
    pub mode: PermissionMode,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("required" = ["session_id", "focus"]))]
pub struct SessionCompactParams {
    pub session_id: String,
    /// Required, may be null.
    #[serde(deserialize_with = "crate::types::common::required_nullable")]
    pub focus: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionCompactResult {
    pub compacted: bool,
    /// Why nothing was committed (nothing to compact, the model failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Set when the compaction was cancelled (`run.cancel` on its id, or the daemon stopping).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancellation_reason: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionRevertParams {
    pub session_id: String,
    /// A positive, existing physical sequence.
    pub through_seq: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionForkParams {
    pub session_id: String,
    pub through_seq: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionForkResult {
    pub session_id: String,
}

/// `session.archive` (troupe extension): archive (`archived: true`) or bring back a root session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionArchiveParams {
    pub session_id: String,
    pub archived: bool,
}

/// `session.delete` (troupe extension): the sessions deleted, the root first, then its descendants.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionDeleteResult {
    pub deleted_session_ids: Vec<String>,
}
