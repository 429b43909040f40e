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

use serde::Deserialize;
use serde_json::json;
use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::common::{RunSelection, SessionOrigin};
use troupe_protocol::types::events::{DelegateStatus, EventPayload};
use troupe_protocol::types::run::{PersistedToolResult, ToolResultStatus};
use troupe_protocol::types::runtime::AgentInfo;
use troupe_runtime::config::DelegationConfig;
use troupe_runtime::model::{ToolCallRequest, ToolSpec};
use troupe_runtime::tools::PermissionRequest;

use super::{RunLoop, tool_result};
use crate::error::EngineError;
use crate::ports::session::{CancelActiveRun, StartDelegatedRun};
use crate::ports::supervisor::{ChildRefused, CreateChildSession, DELEGATE_ORIGIN, OpenSession, SessionGone};
use crate::ports::{SessionPort, SupervisorPort};
use crate::run_registry::RunEnd;
use crate::run_start::EngineRunContext;
use crate::runtime_actor::GetSnapshot;

/// The tool's name.
pub const DELEGATE_TOOL: &str = "delegate";

/// The most of a child's final text a parent's tool result carries; beyond it the text is cut (at a character
/// boundary) and a note says where the whole answer is.
pub const SUMMARY_MAX_BYTES: usize = 16 * 1024;

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DelegateArguments {
    agent: String,
    task: String,
}

/// Agents named in the tool's description, and the characters of each agent's description shown there.
const LISTED_AGENTS: usize = 32;
const LISTED_DESCRIPTION_CHARS: usize = 200;

/// What the model is told about the tool, with the agents it may name (from the runtime snapshot).
fn spec(agents: &[AgentInfo]) -> ToolSpec {
    let mut description = "Hand a self-contained task to an agent, which works on it in a child session with its \
                           own history and tools and answers with its final text, returned here. The agent does not \
                           see this conversation: say everything it needs in `task`. Several delegate calls in one \
                           turn run at the same time. The agents:"
        .to_owned();
    for agent in agents.iter().take(LISTED_AGENTS) {
        let about: String = agent.description.chars().take(LISTED_DESCRIPTION_CHARS).collect();
        match about.trim() {
            "" => description.push_str(&format!(" `{}`;", agent.agent)),
            about => description.push_str(&format!(" `{}` ({about});", agent.agent)),
        }
    }
    if agents.len() > LISTED_AGENTS {
        description.push_str(&format!(" and {} more.", agents.len() - LISTED_AGENTS));
    }
    ToolSpec {
        name: DELEGATE_TOOL.into(),
        description,
        parameters: json!({
            "type": "object",
            "properties": {
                "agent": {"type": "string", "description": "The agent's name."},
                "task": {"type": "string", "description": "What the agent should do, with all the context it needs."}
            },
            "required": ["agent", "task"],
            "additionalProperties": false
        }),
    }
}

/// Whether a call is a `delegate` call (the calls of one turn that may run concurrently).
pub(super) fn is_delegate(call: &ToolCallRequest) -> bool {
    call.tool == DELEGATE_TOOL
}

/// How the child's run ended, for the parent's log and tool result.
fn finished(end: RunEnd, child_session_id: &str) -> (DelegateStatus, ToolResultStatus, String) {
    match end {
        RunEnd::Completed { final_text } => {
            (DelegateStatus::Completed, ToolResultStatus::Ok, bounded(final_text, child_session_id))
        }
        RunEnd::Failed { error } => (
            DelegateStatus::Failed,
            ToolResultStatus::Error,
            bounded(format!("the agent's run failed: {error}"), child_session_id),
        ),
        RunEnd::Cancelled => {
            (DelegateStatus::Cancelled, ToolResultStatus::Cancelled, "the agent's run was cancelled".to_owned())
        }
        RunEnd::Interrupted => (
            DelegateStatus::Interrupted,
            ToolResultStatus::Error,
            "the agent's run was interrupted (its session or the daemon stopped)".to_owned(),
        ),
    }
}

/// `text` cut to [`SUMMARY_MAX_BYTES`] at a character boundary, with a note when it was cut.
fn bounded(mut text: String, child_session_id: &str) -> String {
    if text.len() <= SUMMARY_MAX_BYTES {
        return text;
    }
    let total = text.len();
    let mut end = SUMMARY_MAX_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(&format!(
        "\n\n[truncated: the first {end} of {total} bytes; the whole answer is in session {child_session_id}]"
    ));
    text
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
        self.emit_as(started, Some(DELEGATE_ORIGIN)).await;
        let end = self.run_child(delegation, &child_session_id, selection, arguments.task).await;
        let (status, result_status, summary) = finished(end, &child_session_id);
        let finished = EventPayload::DelegateFinished {
            tool_call_id: call.tool_call_id.clone(),
            child_session_id,
            status,
            summary: summary.clone(),
        };
        self.emit_as(finished, Some(DELEGATE_ORIGIN)).await;
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
    let start = prepared.into_start("delegate", input);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_answer_is_cut_at_a_character_boundary_with_a_note() {
        assert_eq!(bounded("short".into(), "c"), "short");
        let long = "é".repeat(SUMMARY_MAX_BYTES); // two bytes each
        let cut = bounded(long, "child-1");
        let (kept, note) = cut.split_once("\n\n[truncated").expect("a note");
        assert!(kept.len() <= SUMMARY_MAX_BYTES && kept.chars().all(|c| c == 'é'));
        assert!(note.contains(&format!("of {} bytes", 2 * SUMMARY_MAX_BYTES)) && note.contains("child-1"), "{note}");
    }

    #[test]
    fn consecutive_delegate_calls_form_one_batch_and_other_calls_run_alone() {
        let call = |tool: &str| ToolCallRequest { tool_call_id: tool.into(), tool: tool.into(), arguments: json!({}) };
        let calls = [call("delegate"), call("delegate"), call("shell"), call("read_file"), call("delegate")];
        let sizes: Vec<usize> = super::super::call_batches(&calls).iter().map(|batch| batch.len()).collect();
        assert_eq!(sizes, [2, 1, 1, 1]);
        assert!(super::super::call_batches(&[]).is_empty());
    }

    #[test]
    fn the_description_lists_the_agents_within_bounds() {
        let agent = |name: String, description: &str| AgentInfo {
            agent: name,
            description: description.into(),
            mode: troupe_protocol::types::runtime::AgentMode::Primary,
            models: Vec::new(),
        };
        let listed = spec(&[agent("default".into(), ""), agent("helper".into(), "reads code")]).description;
        assert!(listed.ends_with("The agents: `default`; `helper` (reads code);"), "{listed}");
        let many: Vec<AgentInfo> = (0..40).map(|index| agent(format!("a{index}"), &"d".repeat(500))).collect();
        let listed = spec(&many).description;
        assert!(listed.ends_with("and 8 more.") && !listed.contains(&"d".repeat(201)), "{listed}");
    }

    #[test]
    fn each_end_maps_to_a_delegate_status_and_a_tool_status() {
        let completed = finished(RunEnd::Completed { final_text: "42".into() }, "c");
        assert_eq!(completed, (DelegateStatus::Completed, ToolResultStatus::Ok, "42".to_owned()));
        let failed = finished(RunEnd::Failed { error: "boom".into() }, "c");
        assert_eq!((failed.0, failed.1), (DelegateStatus::Failed, ToolResultStatus::Error));
        assert!(failed.2.contains("boom"));
        assert_eq!(finished(RunEnd::Cancelled, "c").0, DelegateStatus::Cancelled);
        assert_eq!(finished(RunEnd::Interrupted, "c").0, DelegateStatus::Interrupted);
    }
}
