//! The one conversion of an [`EngineError`] into a JSON-RPC error: its code (`ErrorCode`), its `data.detail` (the
//! error's text) and the ids it names, so a refusal reads the same whichever method produced it.

use serde_json::Value;
use troupe_protocol::RpcError;
use troupe_protocol::error_code::ErrorCode;
use troupe_runtime::catalog::SelectionError;

use super::{ApprovalErrorKind, EmitRefusal, EngineError, GoalErrorKind, TreeBusyReason};

impl From<EngineError> for RpcError {
    fn from(error: EngineError) -> Self {
        let detail = error.to_string();
        let session = |session_id: &str| ("session_id", Value::String(session_id.to_owned()));
        let provider = |provider_id: &str| ("provider_id", Value::String(provider_id.to_owned()));
        match &error {
            EngineError::SessionNotFound { session_id } => {
                RpcError::engine(ErrorCode::SessionNotFound, &detail, &[session(session_id)])
            }
            EngineError::InvalidSelection(selection_error) => {
                let code = match selection_error {
                    SelectionError::UnknownAgent(_) => ErrorCode::AgentNotFound,
                    SelectionError::UnknownModel(_) | SelectionError::UnknownProvider { .. } => {
                        ErrorCode::ModelNotFound
                    }
                    SelectionError::MalformedModel(_) => ErrorCode::InvalidSelection,
                };
                RpcError::invalid_params_typed(code, &detail, &[])
            }
            EngineError::InvalidCwd { cwd, .. } => {
                RpcError::invalid_params_typed(ErrorCode::InvalidCwd, &detail, &[("cwd", Value::String(cwd.clone()))])
            }
            EngineError::InvalidTitle { session_id, client_rename_id, .. } => RpcError::invalid_params_typed(
                ErrorCode::InvalidTitle,
                &detail,
                &[session(session_id), ("client_rename_id", Value::String(client_rename_id.clone()))],
            ),
            EngineError::InvalidIdempotencyKey { .. } => {
                RpcError::invalid_params_typed(ErrorCode::InvalidIdempotencyKey, &detail, &[])
            }
            EngineError::RenameIdempotencyConflict { session_id, client_rename_id } => RpcError::invalid_params_typed(
                ErrorCode::IdempotencyConflict,
                &detail,
                &[session(session_id), ("client_rename_id", Value::String(client_rename_id.clone()))],
            ),
            EngineError::SessionCwdUnusable { session_id, cwd, .. } => RpcError::engine(
                ErrorCode::SessionCwdUnusable,
                &detail,
                &[session(session_id), ("cwd", Value::String(cwd.clone()))],
            ),
            EngineError::RunNotActive { run_id } => {
                RpcError::engine(ErrorCode::RunNotActive, &detail, &[("run_id", Value::String(run_id.clone()))])
            }
            EngineError::ToolCallNotFound { session_id, tool_call_id } => RpcError::engine(
                ErrorCode::ToolCallNotFound,
                &detail,
                &[session(session_id), ("tool_call_id", Value::String(tool_call_id.clone()))],
            ),
            EngineError::InvalidSubscriptionId { subscription_id } => RpcError::invalid_params_typed(
                ErrorCode::InvalidSubscriptionId,
                &detail,
                &[("subscription_id", Value::String(subscription_id.clone()))],
            ),
            EngineError::TooManyToolOutputSubscriptions { limit } => {
                RpcError::engine(ErrorCode::TooManySubscriptions, &detail, &[("limit", Value::from(*limit))])
            }
            EngineError::InvalidOutputRef { output_ref } => RpcError::invalid_params_typed(
                ErrorCode::InvalidOutputRef,
                &detail,
                &[("output_ref", Value::String(output_ref.clone()))],
            ),
            EngineError::OutputRefNotFound { session_id, output_ref } => RpcError::engine(
                ErrorCode::OutputRefNotFound,
                &detail,
                &[session(session_id), ("output_ref", Value::String(output_ref.clone()))],
            ),
            EngineError::RunNotFound { run_id } => {
                RpcError::engine(ErrorCode::RunNotFound, &detail, &[("run_id", Value::String(run_id.clone()))])
            }
            EngineError::ToolStdinTooLarge { size, limit } => RpcError::invalid_params_typed(
                ErrorCode::InputTooLarge,
                &detail,
                &[("size", Value::from(*size)), ("limit", Value::from(*limit))],
            ),
            EngineError::ToolStdinBacklogFull { run_id, tool_call_id, queued_bytes, max_bytes } => RpcError::engine(
                ErrorCode::ToolStdinBacklogFull,
                &detail,
                &[
                    ("run_id", Value::String(run_id.clone())),
                    ("tool_call_id", Value::String(tool_call_id.clone())),
                    ("queued_bytes", Value::from(*queued_bytes)),
                    ("max_bytes", Value::from(*max_bytes)),
                ],
            ),
            EngineError::SessionBusy { session_id, active_run_id } => RpcError::engine(
                ErrorCode::SessionBusy,
                &detail,
                &[session(session_id), ("active_run_id", Value::String(active_run_id.clone()))],
            ),
            EngineError::RunIdempotencyConflict { session_id, client_run_id } => RpcError::invalid_params_typed(
                ErrorCode::IdempotencyConflict,
                &detail,
                &[session(session_id), ("client_run_id", Value::String(client_run_id.clone()))],
            ),
            EngineError::Storage { .. } => RpcError::internal(&detail),
            EngineError::SessionHostedElsewhere { session_id, node } => {
                let mut data = vec![session(session_id)];
                if let Some(node) = node {
                    data.push(("node", Value::String(node.clone())));
                }
                RpcError::engine(ErrorCode::SessionHostedElsewhere, &detail, &data)
            }
            EngineError::ClusterUnavailable { session_id, .. } => {
                RpcError::engine(ErrorCode::ClusterUnavailable, &detail, &[session(session_id)])
            }
            EngineError::Unavailable { .. } => RpcError::internal(&detail),
            EngineError::SessionDamaged { session_id } => {
                RpcError::engine(ErrorCode::SessionDamaged, &detail, &[session(session_id)])
            }
            EngineError::CursorAhead { session_id, last_seq, .. } => RpcError::invalid_params_typed(
                ErrorCode::CursorAhead,
                &detail,
                &[session(session_id), ("last_seq", Value::from(*last_seq))],
            ),
            EngineError::ShuttingDown => RpcError::engine(ErrorCode::ShuttingDown, &detail, &[]),
            EngineError::SeqOutOfRange { session_id, through_seq, last_seq } => RpcError::invalid_params_typed(
                ErrorCode::SeqOutOfRange,
                &detail,
                &[
                    session(session_id),
                    ("through_seq", Value::from(*through_seq)),
                    ("last_seq", Value::from(*last_seq)),
                ],
            ),
            EngineError::NoUserMessageInPrefix { session_id, through_seq } => RpcError::invalid_params_typed(
                ErrorCode::NoUserMessageInPrefix,
                &detail,
                &[session(session_id), ("through_seq", Value::from(*through_seq))],
            ),
            EngineError::ProviderNotFound { provider_id } => {
                RpcError::engine(ErrorCode::ProviderNotFound, &detail, &[provider(provider_id)])
            }
            EngineError::InvalidProviderSetup { provider_id, .. } => {
                RpcError::invalid_params_typed(ErrorCode::InvalidProviderSetup, &detail, &[provider(provider_id)])
            }
            EngineError::ProviderUnreachable { provider_id, kind, .. } => RpcError::engine(
                ErrorCode::ProviderUnreachable,
                &detail,
                &[provider(provider_id), ("model_error_kind", Value::String(kind.as_str().to_owned()))],
            ),
            EngineError::RevisionConflict { expected, found } => RpcError::engine(
                ErrorCode::RevisionConflict,
                &detail,
                &[("expected_revision", Value::from(*expected)), ("found_revision", Value::from(*found))],
            ),
            EngineError::ProviderIdempotencyConflict { provider_id, .. } => {
                RpcError::invalid_params_typed(ErrorCode::IdempotencyConflict, &detail, &[provider(provider_id)])
            }
            EngineError::ProviderShareUnavailable { provider_id, .. } => {
                RpcError::engine(ErrorCode::ClusterUnavailable, &detail, &[provider(provider_id)])
            }
            EngineError::Internal { .. } => RpcError::internal(&detail),
            EngineError::Changes(refusal) => {
                let mut fields = vec![session(&refusal.session_id)];
                if let Some(run_id) = &refusal.run_id {
                    fields.push(("run_id", Value::String(run_id.clone())));
                }
                if !refusal.files.is_empty() {
                    fields.push(("files", serde_json::to_value(&refusal.files).unwrap_or(Value::Null)));
                }
                RpcError::engine(refusal.code, &detail, &fields)
            }
            EngineError::InputTooLarge { size, limit, .. } => RpcError::invalid_params_typed(
                ErrorCode::InputTooLarge,
                &detail,
                &[("size", Value::from(*size)), ("limit", Value::from(*limit))],
            ),
            EngineError::InvalidAttachment(error) => {
                let mut fields = Vec::new();
                if let Some(index) = error.index() {
                    fields.push(("index", Value::from(index)));
                }
                if let Some(limit) = error.limit() {
                    fields.push(("limit", Value::from(limit)));
                }
                RpcError::invalid_params_typed(ErrorCode::InvalidAttachment, &detail, &fields)
            }
            EngineError::ReadAttachment(error) => {
                use troupe_runtime::input_files::ReadAttachmentError;
                match error {
                    ReadAttachmentError::BadPath { path, .. } => RpcError::invalid_params_typed(
                        ErrorCode::InvalidAttachment,
                        &detail,
                        &[("path", Value::String(path.clone()))],
                    ),
                    ReadAttachmentError::NotFound { path, .. } => RpcError::engine(
                        ErrorCode::AttachmentNotFound,
                        &detail,
                        &[("path", Value::String(path.clone()))],
                    ),
                }
            }
            EngineError::CwdPathUnusable { session_id, path, .. } => RpcError::engine(
                ErrorCode::CwdPathUnusable,
                &detail,
                &[session(session_id), ("path", Value::String(path.clone()))],
            ),
            EngineError::EmptyInput { .. } => RpcError::invalid_params_typed(ErrorCode::InvalidInput, &detail, &[]),
            EngineError::EmptyObjective => RpcError::invalid_params_typed(ErrorCode::InvalidObjective, &detail, &[]),
            EngineError::ConsoleLoginCodeNeedsToken => {
                RpcError::engine(ErrorCode::ConsoleLoginCodeNeedsToken, &detail, &[])
            }
            EngineError::ConsoleDisabled => RpcError::engine(ErrorCode::ConsoleDisabled, &detail, &[]),
            EngineError::ConsoleCodeNotRecorded { .. } => RpcError::engine(ErrorCode::ClusterUnavailable, &detail, &[]),
            EngineError::InvalidPluginParams { .. } => RpcError::invalid_params(&detail),
            EngineError::UnknownPluginMethod { method } => RpcError::method_not_found(method),
            EngineError::PluginNotInitialized => RpcError::invalid_request(&detail),
            EngineError::EmitRefused(refusal) => {
                let code = match refusal {
                    EmitRefusal::Name { .. } => ErrorCode::InvalidName,
                    EmitRefusal::PayloadTooLarge { .. } => ErrorCode::PayloadTooLarge,
                    EmitRefusal::TooManyEvents { .. } | EmitRefusal::TooManyBytes { .. } => ErrorCode::RateLimited,
                };
                RpcError::invalid_params_typed(code, &detail, &[])
            }
            EngineError::SkillNotFound { name } => {
                RpcError::engine(ErrorCode::SkillNotFound, &detail, &[("name", Value::String(name.clone()))])
            }
            EngineError::UnknownSkillInput { name, .. } => RpcError::invalid_params_typed(
                ErrorCode::SkillNotFound,
                &detail,
                &[("name", Value::String(name.clone()))],
            ),
            EngineError::SkillNotAllowed { name } => {
                RpcError::engine(ErrorCode::SkillNotAllowed, &detail, &[("name", Value::String(name.clone()))])
            }
            EngineError::NotRootSession { session_id } => {
                RpcError::engine(ErrorCode::NotRootSession, &detail, &[session(session_id)])
            }
            EngineError::ChildSession { session_id, root_session_id, .. } => RpcError::engine(
                ErrorCode::NotRootSession,
                &detail,
                &[session(session_id), ("root_session_id", Value::String(root_session_id.clone()))],
            ),
            EngineError::TreeBusy { session_id, busy_session_id, reason } => {
                let mut fields = vec![session(session_id), ("busy_session_id", Value::String(busy_session_id.clone()))];
                match reason {
                    TreeBusyReason::Run { run_id } => fields.push(("active_run_id", Value::String(run_id.clone()))),
                    TreeBusyReason::Compaction { compaction_id } => {
                        fields.push(("active_run_id", Value::String(compaction_id.clone())))
                    }
                    TreeBusyReason::Goal { goal_id } => fields.push(("goal_id", Value::String(goal_id.clone()))),
                }
                RpcError::engine(ErrorCode::SessionBusy, &detail, &fields)
            }
            EngineError::ProducerNotFound { session_id, producer_id } => RpcError::engine(
                ErrorCode::ProducerNotFound,
                &detail,
                &[session(session_id), ("producer_id", Value::String(producer_id.clone()))],
            ),
            EngineError::TooManyProducers { limit } => {
                RpcError::engine(ErrorCode::TooManyProducers, &detail, &[("limit", Value::from(*limit))])
            }
            EngineError::TooManyPresenceWatches { limit } => {
                RpcError::engine(ErrorCode::TooManyPresenceWatches, &detail, &[("limit", Value::from(*limit))])
            }
            EngineError::ProducerIdempotencyConflict { session_id, idempotency_key, message_id } => {
                RpcError::invalid_params_typed(
                    ErrorCode::IdempotencyConflict,
                    &detail,
                    &[
                        session(session_id),
                        ("idempotency_key", Value::String(idempotency_key.clone())),
                        ("message_id", Value::String(message_id.clone())),
                    ],
                )
            }
            EngineError::ProducerMessageNotFound { session_id, message_id } => RpcError::engine(
                ErrorCode::ProducerMessageNotFound,
                &detail,
                &[session(session_id), ("message_id", Value::String(message_id.clone()))],
            ),
            EngineError::ProducerBacklogFull { session_id, messages, bytes, max_messages, max_bytes } => {
                RpcError::engine(
                    ErrorCode::ProducerBacklogFull,
                    &detail,
                    &[
                        session(session_id),
                        ("messages", Value::from(*messages)),
                        ("bytes", Value::from(*bytes)),
                        ("max_messages", Value::from(*max_messages)),
                        ("max_bytes", Value::from(*max_bytes)),
                    ],
                )
            }
            EngineError::InvalidProducerMessage { .. } => {
                RpcError::invalid_params_typed(ErrorCode::InvalidProducerMessage, &detail, &[])
            }
            EngineError::Goal { session_id, kind } => {
                use GoalErrorKind as Kind;
                let mut ids = vec![session(session_id)];
                let code = match kind {
                    Kind::NotRootSession => ErrorCode::NotRootSession,
                    Kind::GoalOpen { goal_id, .. } => {
                        ids.push(("goal_id", Value::String(goal_id.clone())));
                        ErrorCode::GoalAlreadyActive
                    }
                    Kind::NoGoal => ErrorCode::GoalNotFound,
                    Kind::StaleGoal { current_goal_id } => {
                        ids.push(("current_goal_id", Value::String(current_goal_id.clone())));
                        ErrorCode::GoalIdMismatch
                    }
                    Kind::RevisionConflict { found } => {
                        ids.push(("found_revision", Value::from(*found)));
                        ErrorCode::GoalRevisionConflict
                    }
                    Kind::Terminal { .. } => ErrorCode::GoalTerminal,
                    Kind::WrongStatus { .. } => ErrorCode::GoalInvalidTransition,
                    Kind::SelectionNotAllowed { .. } => ErrorCode::GoalSelectionNotAllowed,
                    Kind::ChecklistTooLarge { .. } => ErrorCode::GoalChecklistTooLarge,
                };
                match kind {
                    // The request itself is malformed for its action.
                    Kind::SelectionNotAllowed { .. } | Kind::ChecklistTooLarge { .. } => {
                        RpcError::invalid_params_typed(code, &detail, &ids)
                    }
                    _ => RpcError::engine(code, &detail, &ids),
                }
            }
            EngineError::Approval { session_id, approval_id, client_response_id, kind } => {
                use ApprovalErrorKind as Kind;
                let mut ids = vec![
                    session(session_id),
                    ("approval_id", Value::String(approval_id.clone())),
                    ("client_response_id", Value::String(client_response_id.clone())),
                ];
                let code = match kind {
                    Kind::NotFound => ErrorCode::ApprovalNotFound,
                    Kind::NotPending { .. } => ErrorCode::ApprovalNotPending,
                    Kind::RevisionConflict { found } => {
                        ids.push(("found_revision", Value::from(*found)));
                        ErrorCode::ApprovalRevisionConflict
                    }
                    Kind::FingerprintMismatch => ErrorCode::OperationFingerprintMismatch,
                    Kind::DecisionNotAllowed => ErrorCode::DecisionNotAllowed,
                    Kind::IdempotencyConflict => ErrorCode::IdempotencyConflict,
                };
                match kind {
                    // The approval's state moved on: an engine refusal.
                    Kind::NotFound | Kind::NotPending { .. } => RpcError::engine(code, &detail, &ids),
                    // The answer itself does not fit the approval: a typed params rejection.
                    _ => RpcError::invalid_params_typed(code, &detail, &ids),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_is_an_engine_error_naming_the_session() {
        let error = RpcError::from(EngineError::SessionNotFound { session_id: "abc".into() });
        assert_eq!(error.code, -32000);
        assert_eq!(error.typed_code(), Some("session_not_found"));
        assert_eq!(error.data.unwrap()["session_id"], "abc");
    }
}
