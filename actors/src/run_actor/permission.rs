//! The permission check of one tool call: its description (action and resource), the policy's verdict, the tree's
//! grants and mode, the classifier, and when needed a user's answer, which the run waits for.
//!
//! Describing a file tool's call and classifying it resolve paths (`canonicalize`, an `lstat` per component), so
//! the call is judged on a blocking thread, never on the run's arbiter, from the tree's mode and grants as its
//! approval actor answered them just before (`TreePermissions`). A tool whose whole work is blocking work (the file
//! tools, `skill`) and that is allowed outright runs on that same thread, after its `tool_call_started` is queued
//! in the session's mailbox: one hand-off to the pool per call. Every other call returns to the run, which asks
//! the user when needed and executes it (`tool_call.rs`).
//!
//! It fails closed: a tree whose mode cannot be learned is treated as `ask` with no grants, a classifier that
//! fails says "not low risk", and a session that stops before answering cancels the call.

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;
use troupe_protocol::types::approval::{ApprovalConstraints, ApprovalOperation};
use troupe_protocol::types::changes::FileDiff;
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::run::{PersistedToolResult, ToolResultStatus};
use troupe_protocol::types::session::PermissionMode;
use troupe_runtime::model::ToolCallRequest;
use troupe_runtime::policy::{
    ClassifierContext, Decision, Effect, Evaluation, Policy, decide, is_low_risk, operation_fingerprint,
};
use troupe_runtime::tools::{InPlaceTool, PermissionRequest, ToolContext};

use super::{RunLoop, tool_result};
use crate::plugin_tools::ToolRef;
use crate::ports::SessionPort;
use crate::ports::approval::{PermissionView, TreePermissions};
use crate::ports::session::{AppendRunEvent, ApprovalOutcome, RequestApproval, Until};
use crate::run_services::RunServices;

/// How a call was judged on its blocking thread.
pub(super) enum Judged {
    /// Not to run: its arguments do not describe a call, there is no such tool, or it is denied.
    Refused(PersistedToolResult),
    /// Allowed outright and already run where it was judged (a tool that runs in place); its start was queued
    /// before it ran.
    Ran(PersistedToolResult),
    /// Allowed outright; the run executes it.
    Allowed(PermissionRequest),
    /// A user must answer first (`reason` says why).
    Ask { request: PermissionRequest, reason: String },
}

/// What running an allowed call in place needs: its context (completed with the approved request there), and how
/// to announce its start to the session before it runs.
pub(super) struct InPlace {
    pub(super) context: ToolContext,
    pub(super) session: SessionPort,
    pub(super) run_id: String,
    pub(super) tool_call_id: String,
    /// Set by the run, under its lock, when it stops waiting for this call (`abandoned`): a start sent after that
    /// would follow the call's recorded result, so the start is sent under the same lock, or never.
    pub(super) abandoned: Arc<Mutex<bool>>,
}

impl InPlace {
    /// Runs an allowed call on the judging thread: its start queued in the session's mailbox first, ahead of
    /// anything the run sends after this thread returns (one queue, first in first out), unless the run has
    /// abandoned the call. A session that is gone refuses the start; the run's next durable point notices that.
    fn run(
        self,
        runner: &dyn InPlaceTool,
        tool: &str,
        arguments: serde_json::Value,
        request: PermissionRequest,
    ) -> Judged {
        let InPlace { mut context, session, run_id, tool_call_id, abandoned } = self;
        let started = EventPayload::ToolCallStarted {
            tool_call_id,
            tool: tool.to_owned(),
            arguments: arguments.clone(),
            action: request.action,
            resource: request.resource.clone(),
        };
        {
            let abandoned = abandoned.lock();
            if *abandoned {
                return Judged::Refused(tool_result(
                    ToolResultStatus::Cancelled,
                    "cancelled; the run stopped waiting for the call before it started".into(),
                ));
            }
            session.do_send(AppendRunEvent { run_id, origin: None, payload: started, until: Until::Accepted });
        }
        // Allowed as described, including a resource outside the cwd when the mode allows it.
        context.approved_request = Some(request);
        Judged::Ran(runner.execute_in_place(arguments, context))
    }
}

/// Everything the judging thread reads; owned, as it leaves the run's task.
struct Judge {
    services: Arc<RunServices>,
    policy: Arc<Policy>,
    view: PermissionView,
    cwd: PathBuf,
    /// The run's workspace cwd, for the classifier; `None` before the run prepared one (no classifier then).
    classifier_cwd: Option<PathBuf>,
}

impl RunLoop {
    /// The tree's mode and grants now, with what judging a call on another thread reads.
    async fn judge(&self) -> Judge {
        let view = match self.setup.approvals.send(TreePermissions).await {
            Ok(view) => view,
            Err(error) => {
                tracing::warn!(run_id = %self.setup.run_id, %error, "the tree's permission mode is unknown; asking");
                PermissionView::without_grants(PermissionMode::Ask)
            }
        };
        Judge {
            services: self.setup.services.clone(),
            policy: self.setup.policy.clone(),
            view,
            cwd: self.setup.cwd.clone(),
            classifier_cwd: self.workspace.as_ref().map(|workspace| workspace.cwd.clone()),
        }
    }

    /// Describes the call, judges it against the policy and the tree's mode and grants, and, for a tool that runs
    /// in place (`in_place` given) allowed outright, runs it: all on one blocking thread.
    pub(super) async fn judge_call(&self, call: &ToolCallRequest, in_place: Option<InPlace>) -> Judged {
        let judge = self.judge().await;
        let (tool, arguments) = (call.tool.clone(), call.arguments.clone());
        match tokio::task::spawn_blocking(move || judge.judge_then_run(&tool, arguments, in_place)).await {
            Ok(judged) => judged,
            Err(error) => {
                Judged::Refused(tool_result(ToolResultStatus::Error, format!("the tool failed internally: {error}")))
            }
        }
    }

    /// Decides whether a call the run described itself (the goal tools, `delegate`) may run, on a blocking thread
    /// when the classifier may be consulted, and asks a user when needed. `None` means go ahead; otherwise the
    /// result to record instead of running the tool.
    pub(super) async fn check_permission(
        &self,
        call: &ToolCallRequest,
        request: &PermissionRequest,
    ) -> Option<PersistedToolResult> {
        let judge = self.judge().await;
        // Only the classifier blocks (it resolves paths), and only an `auto_approve` mode consults it.
        let decision = if judge.may_classify() {
            let (tool, described, arguments) = (call.tool.clone(), request.clone(), call.arguments.clone());
            let decided = tokio::task::spawn_blocking(move || judge.decision(&tool, &described, &arguments)).await;
            decided.unwrap_or_else(|error| Decision::Deny {
                reason: format!("the permission check failed internally: {error}"),
            })
        } else {
            judge.decision(&call.tool, request, &call.arguments)
        };
        match decision {
            Decision::Allow { .. } | Decision::AllowOnceByMode => None,
            Decision::Deny { reason } => Some(tool_result(ToolResultStatus::Denied, reason)),
            Decision::AskUser { reason } => self.ask_user(call, request, reason).await,
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

    /// Asks a user whether the call may run, and waits for the answer or for cancellation. `None` means go ahead;
    /// otherwise the result to record instead of running the tool.
    pub(super) async fn ask_user(
        &self,
        call: &ToolCallRequest,
        request: &PermissionRequest,
        reason: String,
    ) -> Option<PersistedToolResult> {
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

impl Judge {
    /// Runs on a blocking thread: the description, the verdict, and the call itself when it may run in place.
    fn judge_then_run(self, tool_name: &str, arguments: serde_json::Value, in_place: Option<InPlace>) -> Judged {
        let Some(tool) = self.services.tool(tool_name) else {
            return Judged::Refused(tool_result(ToolResultStatus::Error, format!("there is no tool `{tool_name}`")));
        };
        let request = match tool.permission(&arguments, &self.cwd) {
            Ok(request) => request,
            Err(error) => {
                return Judged::Refused(tool_result(ToolResultStatus::Error, format!("invalid arguments: {error}")));
            }
        };
        match self.decision(tool_name, &request, &arguments) {
            Decision::Allow { .. } | Decision::AllowOnceByMode => {}
            Decision::Deny { reason } => return Judged::Refused(tool_result(ToolResultStatus::Denied, reason)),
            Decision::AskUser { reason } => return Judged::Ask { request, reason },
        }
        let runner = match (&tool, in_place) {
            (ToolRef::Builtin(tool), Some(in_place)) => tool.in_place().map(|runner| (runner, in_place)),
            _ => None,
        };
        match runner {
            Some((runner, in_place)) => in_place.run(runner, tool_name, arguments, request),
            None => Judged::Allowed(request),
        }
    }

    /// The verdict on a described call: the policy's, the tree's grants and mode, and the classifier when it
    /// matters.
    fn decision(&self, tool: &str, request: &PermissionRequest, arguments: &serde_json::Value) -> Decision {
        let evaluation = self.policy.evaluate(tool, request);
        let granted = self.view.granted(request.action, &request.resource);
        let low_risk = self.classifier_matters(&evaluation, granted) && self.low_risk(tool, request, arguments);
        decide(self.view.mode, &evaluation, request, granted, low_risk)
    }

    /// Whether the classifier can change a verdict at all: in an `auto_approve` mode, once the run has a workspace.
    fn may_classify(&self) -> bool {
        self.classifier_cwd.is_some()
            && matches!(
                self.view.mode,
                PermissionMode::AutoApprove | PermissionMode::AutoApproveN | PermissionMode::AutoApproveY
            )
    }

    /// Whether the classifier changes this verdict: an `ask` not covered by a grant, when it may classify.
    fn classifier_matters(&self, evaluation: &Evaluation, granted: bool) -> bool {
        evaluation.effect == Effect::Ask && !granted && self.may_classify()
    }

    /// The classifier: whether the call is low risk. It resolves every path it is given (blocking `stat` calls);
    /// without the run's workspace it says no.
    fn low_risk(&self, tool: &str, request: &PermissionRequest, arguments: &serde_json::Value) -> bool {
        let Some(cwd) = &self.classifier_cwd else {
            return false;
        };
        let resolve = |path: &std::path::Path| {
            let requested = path.to_str()?;
            troupe_runtime::tools::paths::resolve_path(cwd, requested).ok().map(|resolved| resolved.path)
        };
        let context = ClassifierContext { cwd, denied: self.services.sandbox.denied(), resolve: &resolve };
        is_low_risk(tool, request, arguments, &context)
    }
}
