//! The permission check of one tool call: its description (action and resource), the policy's verdict, the tree's
//! grants and mode, the classifier, and when needed a user's answer, which the run waits for. Describing a file
//! tool's call and classifying it resolve paths (`canonicalize`, an `lstat` per component): both run on blocking
//! threads, never on the run's arbiter.
//!
//! It fails closed: a tree whose mode cannot be learned is treated as `ask`, a classifier that fails says "not low
//! risk", and a session that stops before answering cancels the call.

use troupe_protocol::types::approval::{ApprovalConstraints, ApprovalOperation};
use troupe_protocol::types::changes::FileDiff;
use troupe_protocol::types::run::{PersistedToolResult, ToolResultStatus};
use troupe_protocol::types::session::PermissionMode;
use troupe_runtime::model::ToolCallRequest;
use troupe_runtime::policy::{ClassifierContext, Decision, Effect, decide, is_low_risk, operation_fingerprint};
use troupe_runtime::tools::PermissionRequest;

use super::{RunLoop, tool_result};
use crate::plugin_tools::ToolRef;
use crate::ports::approval::CheckTreePermission;
use crate::ports::session::{ApprovalOutcome, RequestApproval};

impl RunLoop {
    /// What the call would do (action, resource, inside the cwd or not), resolved on a blocking thread. A call that
    /// cannot be described gets the result to record instead.
    pub(super) async fn describe_call(&self, call: &ToolCallRequest) -> Result<PermissionRequest, PersistedToolResult> {
        let services = self.setup.services.clone();
        let (tool, arguments, cwd) = (call.tool.clone(), call.arguments.clone(), self.setup.cwd.clone());
        let described = tokio::task::spawn_blocking(move || {
            services.tool(&tool).map(|tool| tool.permission(&arguments, &cwd).map_err(|error| error.to_string()))
        })
        .await;
        match described {
            Ok(Some(Ok(request))) => Ok(request),
            Ok(Some(Err(error))) => Err(tool_result(ToolResultStatus::Error, format!("invalid arguments: {error}"))),
            Ok(None) => Err(tool_result(ToolResultStatus::Error, format!("there is no tool `{}`", call.tool))),
            Err(error) => Err(tool_result(ToolResultStatus::Error, format!("the tool failed internally: {error}"))),
        }
    }

    /// What a file tool's call would change, as a diff against the file now, for its approval; read on a blocking
    /// thread. `None` for other tools, or when the file cannot be read.
    async fn preview_change(&self, call: &ToolCallRequest) -> Option<FileDiff> {
        let services = self.setup.services.clone();
        let (tool, arguments, cwd) = (call.tool.clone(), call.arguments.clone(), self.setup.cwd.clone());
        let previewed = tokio::task::spawn_blocking(move || match services.tool(&tool) {
            Some(ToolRef::Builtin(tool)) => tool.preview(&arguments, &cwd, services.sandbox.protected()),
            _ => None,
        });
        previewed.await.ok().flatten()
    }

    /// Decides whether the call may run: the policy's verdict, the tree's grants and mode, and when needed a
    /// user's answer (the run waits for it, or for cancellation). `None` means go ahead; otherwise the result to
    /// record instead of running the tool.
    pub(super) async fn check_permission(
        &self,
        call: &ToolCallRequest,
        request: &PermissionRequest,
    ) -> Option<PersistedToolResult> {
        let evaluation = self.setup.policy.evaluate(&call.tool, request);
        let check = CheckTreePermission { action: request.action, resource: request.resource.clone() };
        // Fails closed: without the tree's answer the mode is unknown, so the call is treated as in `ask`.
        let (mode, granted) = match self.setup.approvals.send(check).await {
            Ok(answer) => answer,
            Err(error) => {
                tracing::warn!(run_id = %self.setup.run_id, %error, "the tree's permission mode is unknown; asking");
                (PermissionMode::Ask, false)
            }
        };
        // The classifier only matters for an `ask` not covered by a grant in the `auto_approve` modes. It resolves
        // every path it is given (blocking `stat` calls), so it runs on a blocking thread; a failure is "not low risk".
        let classifier_matters = evaluation.effect == Effect::Ask
            && !granted
            && matches!(
                mode,
                PermissionMode::AutoApprove | PermissionMode::AutoApproveN | PermissionMode::AutoApproveY
            );
        let low_risk = match &self.workspace {
            Some(workspace) if classifier_matters => {
                let cwd = workspace.cwd.clone();
                let denied = self.setup.services.sandbox.denied().to_vec();
                let (tool, request, arguments) = (call.tool.clone(), request.clone(), call.arguments.clone());
                tokio::task::spawn_blocking(move || {
                    let resolve = |path: &std::path::Path| {
                        let requested = path.to_str()?;
                        troupe_runtime::tools::paths::resolve_path(&cwd, requested).ok().map(|resolved| resolved.path)
                    };
                    let context = ClassifierContext { cwd: &cwd, denied: &denied, resolve: &resolve };
                    is_low_risk(&tool, &request, &arguments, &context)
                })
                .await
                .unwrap_or(false)
            }
            _ => false,
        };
        let reason = match decide(mode, &evaluation, request, granted, low_risk) {
            Decision::Allow { .. } | Decision::AllowOnceByMode => return None,
            Decision::Deny { reason } => return Some(tool_result(ToolResultStatus::Denied, reason)),
            Decision::AskUser { reason } => reason,
        };
        tracing::debug!(run_id = %self.setup.run_id, tool = %call.tool, %reason, "asking for approval");
        let diff = self.preview_change(call).await;
        let asked = self
            .setup
            .session
            .send(RequestApproval {
                run_id: self.setup.run_id.clone(),
                tool_call_id: call.tool_call_id.clone(),
                operation: ApprovalOperation {
                    tool: call.tool.clone(),
                    action: request.action,
                    resource: request.resource.clone(),
                    summary: request.summary.clone(),
                    diff,
                },
                operation_fingerprint: operation_fingerprint(&call.tool, request, &call.arguments),
                constraints: ApprovalConstraints {
                    allow_once: true,
                    allow_tree_grant: true,
                    cancellable: true,
                    expires_at: None,
                },
            })
            .await;
        let answer = match asked {
            Ok(Ok((_, answer))) => answer,
            _ => {
                return Some(tool_result(
                    ToolResultStatus::Cancelled,
                    "the session stopped before the approval".into(),
                ));
            }
        };
        let outcome = tokio::select! {
            outcome = answer => outcome.unwrap_or(ApprovalOutcome::Cancelled { reason: "the session stopped".into() }),
            _ = self.control.cancel.cancelled() => {
                return Some(tool_result(ToolResultStatus::Cancelled, "the run was cancelled while waiting for approval".into()));
            }
        };
        match outcome {
            ApprovalOutcome::Approved { .. } => None,
            ApprovalOutcome::Rejected { feedback } => {
                let mut output = format!("The user rejected this call ({}).", request.summary);
                if let Some(feedback) = feedback {
                    output.push_str(" Their feedback: ");
                    output.push_str(&feedback);
                }
                Some(tool_result(ToolResultStatus::Denied, output))
            }
            ApprovalOutcome::Cancelled { reason } => {
                Some(tool_result(ToolResultStatus::Cancelled, format!("the approval was cancelled: {reason}")))
            }
        }
    }
}
