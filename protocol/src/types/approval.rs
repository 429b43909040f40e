//! Approvals: `approval.list` and `approval.respond`.
//!
//! When the permission policy asks about a tool call, the engine records an approval (`approval_requested`) and
//! the call waits. A client answers with `approval.respond`, naming the approval's current `revision` and
//! `operation_fingerprint` so that it never approves an operation that changed under it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Waiting for an answer.
    Pending,
    Approved,
    Rejected,
    /// Withdrawn: the run or call ended, or the user cancelled it.
    Cancelled,
    /// Not answered before `constraints.expires_at`.
    Expired,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PermissionAction {
    Read,
    Write,
    Execute,
    /// A request the daemon itself sends to another machine for a tool (`web_fetch`); the resource is the host.
    Network,
}

/// What the tool call wants to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalOperation {
    /// The tool's name.
    pub tool: String,
    pub action: PermissionAction,
    /// What the action applies to: a path, a command, or a pseudo-resource such as `goal:current`.
    pub resource: String,
    /// One line for a human.
    pub summary: String,
    /// troupe extension: for `write_file` and `edit_file`, what the call would change, against the file's content
    /// when the approval was asked. Omitted for other tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<crate::types::changes::FileDiff>,
}

/// Which answers this approval accepts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalConstraints {
    /// `approve_once` is allowed.
    pub allow_once: bool,
    /// `approve_tree` (a grant for the whole session tree) is allowed.
    pub allow_tree_grant: bool,
    /// `cancel` is allowed.
    pub cancellable: bool,
    /// RFC 3339 UTC; null when the approval never expires.
    pub expires_at: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// Allow this call only.
    ApproveOnce,
    /// Allow this call and grant the same action on the same resource to the whole session tree.
    ApproveTree,
    /// Refuse the call; the model sees a denied result (with the feedback, if any).
    Reject,
    /// Withdraw the request without an answer.
    Cancel,
}

/// One approval, as `approval.list` and `approval.respond` return it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalRecord {
    /// The session whose run asked (may be a delegated child of the listed root).
    pub session_id: String,
    pub run_id: String,
    pub tool_call_id: String,
    pub approval_id: String,
    /// Increases with every change; `approval.respond` must name the current one.
    pub revision: u64,
    pub status: ApprovalStatus,
    pub operation: ApprovalOperation,
    /// A digest of `operation`; `approval.respond` must name it.
    pub operation_fingerprint: String,
    pub constraints: ApprovalConstraints,
    /// Null until answered.
    pub decision: Option<ApprovalDecision>,
    /// The rejection feedback, if any.
    pub feedback: Option<String>,
    /// Who answered: `user`, or the engine component that decided (e.g. a permission mode).
    pub answered_by: Option<String>,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// RFC 3339 UTC; null while pending.
    pub decided_at: Option<String>,
}

/// A standing approval for a whole session tree, from an `approve_tree` answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TreeGrant {
    pub action: PermissionAction,
    pub resource: String,
    /// RFC 3339 UTC.
    pub granted_at: String,
    /// Who granted it, as in `ApprovalRecord.answered_by`.
    pub granted_by: String,
}

/// `approval.list` params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalListParams {
    /// The root of the session tree; approvals of every session in the tree are listed.
    pub root_session_id: String,
    /// Only approvals with this status; all when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ApprovalStatus>,
}

/// `approval.list` result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalListResult {
    /// Oldest first.
    pub approvals: Vec<ApprovalRecord>,
    pub tree_grants: Vec<TreeGrant>,
}

/// Feedback the model receives with a rejection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalFeedback {
    pub message: String,
}

/// `approval.respond` params. Idempotent by `client_response_id`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRespondParams {
    /// The session the approval belongs to.
    pub session_id: String,
    pub approval_id: String,
    /// The approval's current `revision` (`approval_revision_conflict` otherwise).
    pub request_revision: u64,
    /// The approval's `operation_fingerprint` (`operation_fingerprint_mismatch` otherwise).
    pub operation_fingerprint: String,
    /// Idempotency key: 1..=256 bytes, no control characters.
    pub client_response_id: String,
    pub decision: ApprovalDecision,
    /// Only with `reject`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<ApprovalFeedback>,
}

/// `approval.respond` result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalRespondResult {
    pub client_response_id: String,
    /// The approval after the answer.
    pub approval: ApprovalRecord,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn respond_params() -> serde_json::Value {
        json!({
            "session_id": "s", "approval_id": "a", "request_revision": 1, "operation_fingerprint": "sha256:00",
            "client_response_id": "c-1", "decision": "reject", "feedback": {"message": "not that file"}
        })
    }

    #[test]
    fn respond_params_decode_with_feedback() {
        let params: ApprovalRespondParams = serde_json::from_value(respond_params()).unwrap();
        assert_eq!(params.decision, ApprovalDecision::Reject);
        assert_eq!(params.feedback.unwrap().message, "not that file");
    }

    #[test]
    fn unknown_fields_are_rejected_in_params_and_nested_feedback() {
        let mut top = respond_params();
        top["note"] = json!("x");
        assert!(serde_json::from_value::<ApprovalRespondParams>(top).is_err());
        let mut nested = respond_params();
        nested["feedback"]["severity"] = json!("high");
        assert!(serde_json::from_value::<ApprovalRespondParams>(nested).is_err());
    }

    #[test]
    fn pending_records_serialize_nulls() {
        let record = ApprovalRecord {
            session_id: "s".into(),
            run_id: "r".into(),
            tool_call_id: "t".into(),
            approval_id: "a".into(),
            revision: 1,
            status: ApprovalStatus::Pending,
            operation: ApprovalOperation {
                tool: "bash".into(),
                action: PermissionAction::Execute,
                resource: "cargo test".into(),
                summary: "Run cargo test".into(),
                diff: None,
            },
            operation_fingerprint: "sha256:00".into(),
            constraints: ApprovalConstraints {
                allow_once: true,
                allow_tree_grant: true,
                cancellable: true,
                expires_at: None,
            },
            decision: None,
            feedback: None,
            answered_by: None,
            created_at: "2026-01-01T00:00:00Z".into(),
            decided_at: None,
        };
        let value = serde_json::to_value(&record).unwrap();
        assert_eq!(value["decision"], json!(null));
        assert_eq!(value["constraints"]["expires_at"], json!(null));
        assert_eq!(value["operation"]["action"], json!("execute"));
    }
}
