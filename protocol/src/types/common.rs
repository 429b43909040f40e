//! Shapes shared by many methods: run selection and session metadata.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A model reference, `{model: "<provider>/<id>", variant}`. `variant` is required but may be null.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("required" = ["model", "variant"]))]
pub struct ModelSelection {
    /// `<provider_id>/<model id>`, e.g. `local/echo` or `openai/gpt-4o`.
    pub model: String,
    #[serde(deserialize_with = "required_nullable")]
    pub variant: Option<String>,
}

/// Deserializes a field that must be present but may be `null`. (serde lets an `Option` field be absent unless it
/// has a `deserialize_with`, so the field's presence is checked by this.)
pub(crate) fn required_nullable<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer)
}

/// Which agent, model and preset a run (or a session's default) uses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunSelection {
    pub agent: String,
    pub model: ModelSelection,
    #[serde(default)]
    pub preset: Option<String>,
}

/// Where a session came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum SessionOrigin {
    /// Created by a client: a top-level entry of `session.list`.
    Root,
    /// Created by a run's delegation tool call: reachable through its root's tree.
    Delegated {
        root_session_id: String,
        parent_session_id: String,
        parent_run_id: String,
        parent_tool_call_id: String,
        depth: u32,
    },
}

impl SessionOrigin {
    /// The root of the tree this session belongs to, or `None` when it is a root itself.
    pub fn root_session_id(&self) -> Option<&str> {
        match self {
            SessionOrigin::Root => None,
            SessionOrigin::Delegated { root_session_id, .. } => Some(root_session_id),
        }
    }

    pub fn parent_session_id(&self) -> Option<&str> {
        match self {
            SessionOrigin::Root => None,
            SessionOrigin::Delegated { parent_session_id, .. } => Some(parent_session_id),
        }
    }
}

/// The lifecycle status of a session, derived from its latest run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    Idle,
    Running,
    Completed,
    Failed,
    Cancelled,
    Interrupted,
}

/// One record of a session's log that could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SkippedEvent {
    /// The physical sequence, when it could be read from the damaged line.
    pub seq: Option<u64>,
    /// The 1-based line number in `events.jsonl`, when no sequence could be read.
    pub line: Option<u64>,
    /// Why the line was skipped. Never contains the line's content.
    pub reason: String,
}

/// Session metadata, as returned by `session.create/get/resume/list`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionMeta {
    pub session_id: String,
    pub origin: SessionOrigin,
    pub cwd: String,
    pub title: Option<String>,
    pub title_updated_seq: Option<u64>,
    pub creation_selection: RunSelection,
    pub status: SessionStatus,
    pub last_event_seq: u64,
    pub created_at: String,
    pub last_activity_at: String,
    /// Empty when the whole log loaded.
    pub skipped_events: Vec<SkippedEvent>,
    /// troupe extension (`session.archive`): the root session, with its tree, is hidden from `session.list`
    /// unless `include_archived` is set. Omitted when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub archived: bool,
    /// troupe extension (a cluster, `deploy/cluster.md`): the node that hosts the session, whose machine has its
    /// workspace. Omitted on a single node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// troupe extension (a cluster): `true` when this metadata of a session another node hosts comes from this
    /// node's copy of the cluster's directory while NATS cannot be reached, so it may be behind what the hosting
    /// node knows. Omitted when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub may_be_stale: bool,
}

/// `{}` in both directions: methods that take or return nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

/// Params of every method that names only a session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionIdParams {
    pub session_id: String,
}

/// Why a model request failed, as recorded in `attempt_abandoned`, `model_fallback` and `run_failed`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ModelErrorSummary {
    /// `transport`, `timeout`, `rate_limited`, `overload`, `auth`, `invalid_request`, `model_not_found`, ...
    pub kind: String,
    pub message: String,
    pub retryable: bool,
    /// Where the failure happened: `connect`, `request`, `stream`, ...
    pub stage: String,
    pub http_status: Option<u16>,
    pub vendor_code: Option<String>,
    pub request_id: Option<String>,
    pub retry_after_ms: Option<u64>,
    /// A `DiagnosticText`: format controls removed, at most 4,096 UTF-8 bytes including the truncation marker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_body: Option<String>,
}

#[cfg(test)]
mod required_nullable_tests {
    use super::*;
    use crate::types::session::SessionCompactParams;

    #[test]
    fn a_required_nullable_field_may_be_null_but_not_absent() {
        let with_null: ModelSelection = serde_json::from_str(r#"{"model": "local/echo", "variant": null}"#).unwrap();
        assert_eq!(with_null.variant, None);
        let with_value: ModelSelection = serde_json::from_str(r#"{"model": "a/b", "variant": "fast"}"#).unwrap();
        assert_eq!(with_value.variant.as_deref(), Some("fast"));
        let absent = serde_json::from_str::<ModelSelection>(r#"{"model": "local/echo"}"#).unwrap_err();
        assert!(absent.to_string().contains("missing field `variant`"), "{absent}");

        assert!(serde_json::from_str::<SessionCompactParams>(r#"{"session_id": "s", "focus": null}"#).is_ok());
        let absent = serde_json::from_str::<SessionCompactParams>(r#"{"session_id": "s"}"#).unwrap_err();
        assert!(absent.to_string().contains("missing field `focus`"), "{absent}");
    }
}
