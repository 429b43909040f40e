//! The `delegate` tool: a run hands a task to an agent, which works on it in a child session of the run's
//! session, and gets the child's final answer back as the tool result.
//!
//! Like the goal tools it lives in the actor layer, because it acts on sessions. A call is checked in this order,
//! each failure a tool error the model can read (the run goes on): the session's depth against `[delegation]
//! max_depth`, the arguments (`agent`, a non-empty `task` within `[limits] max_input_bytes`), the run's children
//! at work against `max_concurrency`, the agent against the runtime snapshot, then the ordinary permission check
//! (action `execute` on the resource `agent:<name>`, so rules, modes, grants and approvals apply as to any tool).
//! Then:
//!
//! 1. the supervisor creates the child session (`CreateChildSession`: origin `delegated`, the parent's cwd, the
//!    agent's first model when `config.toml` defines the agent, else the model of the calling run: the built-in
//!    `default` agent's `local/echo` is only the offline fallback, and would answer with the task), and the
//!    parent's log gets `delegate_started`; or it refuses, a tool error, when the tree already holds
//!    `max_sessions_per_tree` sessions besides its root (`ChildRefused::TreeFull`);
//! 2. an [`EndWatch`](crate::run_registry::EndWatch) is taken on the child before its run starts, so an end is
//!    never missed; the run is prepared as `run.start` would (`EngineRunContext::prepare`: the tree's approval
//!    actor, the agent's chain and policy) and started with the task as its input;
//! 3. the call waits for the child's run to end, or for its own run's cancellation, which it passes on to the
//!    child (`CancelActiveRun`) before waiting for the child's end;
//! 4. the parent's log gets `delegate_finished` with the bounded summary the tool result carries.

use std::sync::atomic::{AtomicU32, Ordering};

use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::common::{RunSelection, SessionOrigin};
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::origin::Origin;
use troupe_protocol::types::run::{PersistedToolResult, ToolResultStatus};
use troupe_runtime::config::DelegationConfig;
use troupe_runtime::model::{ToolCallRequest, ToolSpec};
use troupe_runtime::tools::PermissionRequest;

mod tool;

pub(super) use tool::is_delegate;
use tool::{DelegateArguments, finished, spec};

use super::{RunLoop, tool_result};
use crate::error::EngineError;
use crate::ports::session::{CancelActiveRun, StartDelegatedRun};
use crate::ports::supervisor::{ChildRefused, CreateChildSession, OpenSession, SessionGone};
use crate::ports::{SessionPort, SupervisorPort};
use crate::run_registry::RunEnd;
use crate::run_start::{EngineRunContext, RunRequest, StartRun};
use crate::runtime_actor::GetSnapshot;

/// What a run needs to delegate: given to every run whose session actor can start runs on its own.
pub struct DelegationContext {
    pub supervisor: SupervisorPort,
    pub run_context: EngineRunContext,
    /// The depth of the run's session (a root is 0).
    pub depth: u32,
    pub limits: DelegationConfig,
    /// Children of this run at work now (bounded by `limits.max_concurrency`).
    active: AtomicU32,
}

impl DelegationContext {
    pub fn new(origin: &SessionOrigin, supervisor: SupervisorPort, run_context: EngineRunContext) -> Self {
        let depth = match origin {
            SessionOrigin::Root => 0,
            SessionOrigin::Delegated { depth, .. } => *depth,
        };
        let limits = run_context.services.delegation;
        DelegationContext { supervisor, run_context, depth, limits, active: AtomicU32::new(0) }
    }

    /// Whether the run is offered the tool.
    pub fn offered(&self) -> bool {
        self.limits.allows_depth(self.depth)
    }

    /// Takes one of the run's child slots, or `None` when all are in use. Synchronous, so the calls of one turn,
    /// polled in order, take the slots in the model's call order.
    fn reserve(&self) -> Option<ChildSlot<'_>> {
        let limit = self.limits.max_concurrency;
        self.active
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |active| (active < limit).then_some(active + 1))
            .ok()
            .map(|_| ChildSlot { active: &self.active })
    }
}

/// One child slot of a run, given back when dropped.
struct ChildSlot<'a> {
    active: &'a AtomicU32,
}

impl Drop for ChildSlot<'_> {
    fn drop(&mut self) {
        self.active.fetch_sub(1, Ordering::AcqRel);
    }
}

fn tool_error(output: String) -> PersistedToolResult {
    tool_result(ToolResultStatus::Error, output)
}

impl RunLoop {
    /// The tool's spec when the run is offered it (its session is shallower than `[delegation] max_depth`).
    pub(super) async fn delegate_spec(&self) -> Option<ToolSpec> {
        let delegation = self.setup.delegation.as_ref().filter(|delegation| delegation.offered())?;
        // Without the snapshot (the daemon is stopping) the tool is offered with no agents listed.
        let snapshot = delegation.run_context.runtime.send(GetSnapshot).await.ok();
        Some(spec(snapshot.as_ref().map(|snapshot| snapshot.agents.as_slice()).unwrap_or_default()))
    }

    /// Runs `call` when it is a `delegate` call; `None` for any other tool.
    pub(super) async fn delegate_call(&self, call: &ToolCallRequest) -> Option<PersistedToolResult> {
        is_delegate(call).then_some(())?;
        Some(self.delegate(call).await)
    }

    async fn delegate(&self, call: &ToolCallRequest) -> PersistedToolResult {
        let Some(delegation) = self.setup.delegation.as_ref() else {
            return tool_error("delegation is not available to this run".into());
        };
        if !delegation.offered() {
            return tool_error(format!(
                "delegation is not available here: this session is at depth {} and `[delegation] max_depth` is {}",
                delegation.depth, delegation.limits.max_depth
            ));
        }
        let arguments = match serde_json::from_value::<DelegateArguments>(call.arguments.clone()) {
            Ok(arguments) => arguments,
            Err(error) => return tool_error(format!("invalid arguments: {error}")),
        };
        if arguments.task.trim().is_empty() {
            return tool_error("invalid arguments: the task is empty".into());
        }
        let max_input_bytes = delegation.run_context.max_input_bytes;
        if arguments.task.len() > max_input_bytes {
            return tool_error(format!(
                "invalid arguments: the task is {} bytes; a run's input holds at most {max_input_bytes} \
                 (`[limits] max_input_bytes`)",
                arguments.task.len()
            ));
        }
        let snapshot = match delegation.run_context.runtime.send(GetSnapshot).await {
            Ok(snapshot) => snapshot,
            Err(_) => return tool_error("the daemon is shutting down".into()),
        };
        let Some(agent) = snapshot.agents.iter().find(|agent| agent.agent == arguments.agent) else {
            let known: Vec<&str> = snapshot.agents.iter().map(|agent| agent.agent.as_str()).collect();
            return tool_error(format!(
                "there is no agent `{}`; the agents are: {}",
                arguments.agent,
                known.join(", ")
            ));
        };
        let model = if self.setup.services.configured_agents.contains(&agent.agent) {
            let Some(model) = agent.models.first().cloned() else {
                return tool_error(format!("the agent `{}` has no model", arguments.agent));
            };
            model
        } else {
            self.setup.selection.model.clone()
        };
        // Only a call that can go ahead takes a slot: a refused one must not hold a sibling's place while it waits.
        // (The snapshot replies come back in the order the calls asked, so slots still go in call order.)
        let Some(_slot) = delegation.reserve() else {
            return tool_error(format!(
                "this run already has {} children at work (`[delegation] max_concurrency`); wait for their \
                 answers before delegating more",
                delegation.limits.max_concurrency
            ));
        };
        let request = PermissionRequest {
            action: PermissionAction::Execute,
            resource: format!("agent:{}", arguments.agent),
            summary: format!("delegate a task to the agent `{}`", arguments.agent),
            inside_cwd: true,
        };
        if let Some(refusal) = self.check_permission(call, &request).await {
            return refusal;
        }
        self.emit(EventPayload::ToolCallStarted {
            tool_call_id: call.tool_call_id.clone(),
            tool: call.tool.clone(),
            arguments: call.arguments.clone(),
            action: request.action,
            resource: request.resource.clone(),
        })
        .await;
        let selection = RunSelection { agent: arguments.agent.clone(), model, preset: None };
        let create = CreateChildSession {
            parent_session_id: self.setup.session_id.clone(),
            parent_run_id: self.setup.run_id.clone(),
            parent_tool_call_id: call.tool_call_id.clone(),
            selection: selection.clone(),
            max_sessions_per_tree: delegation.limits.max_sessions_per_tree,
        };
        let child = match delegation.supervisor.send(create).await {
            Ok(Ok(child)) => child,
            Ok(Err(refused @ ChildRefused::TreeFull { .. })) => return tool_error(refused.to_string()),
            Ok(Err(error)) => return tool_error(format!("the child session could not be created: {error}")),
            Err(_) => return tool_error("the daemon is shutting down".into()),
        };
        let child_session_id = child.session_id;
        let started = EventPayload::DelegateStarted {
            tool_call_id: call.tool_call_id.clone(),
            child_session_id: child_session_id.clone(),
            agent: arguments.agent.clone(),
            task: arguments.task.clone(),
        };
        self.emit_as(started, Some(Origin::DELEGATE)).await;
        let end = self.run_child(delegation, &child_session_id, selection, arguments.task).await;
        let (status, result_status, summary) = finished(end, &child_session_id);
        let finished = EventPayload::DelegateFinished {
            tool_call_id: call.tool_call_id.clone(),
            child_session_id,
            status,
            summary: summary.clone(),
        };
        self.emit_as(finished, Some(Origin::DELEGATE)).await;
        tool_result(result_status, summary)
    }

    /// Starts the task's run in the child and waits for its end; the parent run's cancellation cancels it.
    async fn run_child(
        &self,
        delegation: &DelegationContext,
        child_session_id: &str,
        selection: RunSelection,
        task: String,
    ) -> RunEnd {
        if self.control.cancel.is_cancelled() {
            // Cancelled while the child was being created: its run never starts.
            return RunEnd::Cancelled;
        }
        let runs = &self.setup.services.runs;
        let mut watch = runs.watch_next_end(child_session_id);
        let started = start_child_run(delegation, child_session_id, selection, task).await;
        let (child, run_id) = match started {
            Ok(started) => started,
            Err(error) => return RunEnd::Failed { error: format!("the run could not start: {error}") },
        };
        runs.note_started(&run_id, child_session_id);
        tokio::select! {
            (_, end) = watch.ended() => return end,
            _ = self.control.cancel.cancelled() => {}
        }
        // The parent run was cancelled: so is the child's, and its end is awaited so the parent records it.
        if let Err(error) = child.send(CancelActiveRun { run_id: run_id.clone() }).await {
            tracing::warn!(%run_id, %error, "could not cancel a delegated run");
        }
        watch.ended().await.1
    }
}

/// Prepares and starts the child's run; its session's port and the run's id.
async fn start_child_run(
    delegation: &DelegationContext,
    child_session_id: &str,
    selection: RunSelection,
    input: String,
) -> Result<(SessionPort, String), EngineError> {
    let supervisor = &delegation.supervisor;
    let prepared = delegation.run_context.prepare(supervisor, child_session_id, selection).await?;
    let start = StartRun { request: RunRequest::engine("delegate", input), prepared };
    // A new child has no subscriber and no run yet: with a short `hibernate_after` its actor may stop between being
    // opened and being asked. A closed mailbox means the start was not processed, so it goes to a fresh actor.
    for _ in 0..START_ATTEMPTS {
        let child = supervisor
            .send(OpenSession { session_id: child_session_id.to_owned() })
            .await
            .map_err(|_| EngineError::ShuttingDown)??;
        match child.send(StartDelegatedRun(start.clone())).await {
            Ok(started) => return started.map(|run_id| (child, run_id)),
            Err(_) => supervisor.do_send(SessionGone { session_id: child_session_id.to_owned(), port: child }),
        }
    }
    Err(EngineError::Unavailable {
        session_id: child_session_id.to_owned(),
        detail: "the child session stopped before its run started, each time it was opened".into(),
    })
}

/// How often a child's run is started on a freshly opened actor before the delegation fails.
const START_ATTEMPTS: usize = 3;
