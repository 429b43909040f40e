//! The model's goal tools, `goal_get` and `goal_update`, offered only to runs of a root session that had a goal
//! when the run was admitted (`RunSetup::goal_tools`, frozen for the run's life).
//!
//! They are not in the shared tool registry because they act on the session, not on files or processes: the call
//! goes through the ordinary permission check (action `read` or `write` on the resource `goal:current`, so rules
//! and modes apply as to any tool), is recorded with `tool_call_started`, and is answered by the session actor,
//! which owns the goal. `goal_update` replaces the whole checklist; the last accepted update wins.

use serde_json::json;
use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::goal::{GoalGetResult, GoalUpdateParams, GoalUpdateResult};
use troupe_protocol::types::run::{PersistedToolResult, ToolResultStatus};
use troupe_runtime::model::{ToolCallRequest, ToolSpec};
use troupe_runtime::tools::PermissionRequest;

use super::{RunLoop, tool_result};
use crate::ports::session::{GetGoal, UpdateGoalChecklist};

/// The resource both goal tools name in permission rules.
pub const GOAL_RESOURCE: &str = "goal:current";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GoalTool {
    Get,
    Update,
}

impl GoalTool {
    fn named(name: &str) -> Option<GoalTool> {
        match name {
            "goal_get" => Some(GoalTool::Get),
            "goal_update" => Some(GoalTool::Update),
            _ => None,
        }
    }
}

/// What the model is told about the goal tools.
pub(super) fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "goal_get".into(),
            description: "Read the session's goal: its objective, status and ordered checklist.".into(),
            parameters: json!({"type": "object", "properties": {}, "additionalProperties": false}),
        },
        ToolSpec {
            name: "goal_update".into(),
            description: "Replace the goal's whole ordered checklist. Mark items finished as you finish them; when \
                          every item of a non-empty list is finished the goal is completed."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {"items": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"description": {"type": "string"}, "finished": {"type": "boolean"}},
                    "required": ["description", "finished"],
                    "additionalProperties": false
                }}},
                "required": ["items"],
                "additionalProperties": false
            }),
        },
    ]
}

impl RunLoop {
    /// Runs `call` when it is a goal tool offered to this run; `None` for any other tool.
    pub(super) async fn goal_tool_call(&self, call: &ToolCallRequest) -> Option<PersistedToolResult> {
        if !self.setup.goal_tools {
            return None;
        }
        let tool = GoalTool::named(&call.tool)?;
        let update = match tool {
            GoalTool::Get => None,
            GoalTool::Update => match serde_json::from_value::<GoalUpdateParams>(call.arguments.clone()) {
                Ok(update) => Some(update),
                Err(error) => {
                    return Some(tool_result(ToolResultStatus::Error, format!("invalid arguments: {error}")));
                }
            },
        };
        let request = PermissionRequest {
            action: if update.is_some() { PermissionAction::Write } else { PermissionAction::Read },
            resource: GOAL_RESOURCE.to_owned(),
            summary: if update.is_some() { "update the goal's checklist" } else { "read the goal" }.to_owned(),
            inside_cwd: true,
        };
        if let Some(refusal) = self.check_permission(call, &request).await {
            return Some(refusal);
        }
        self.emit(EventPayload::ToolCallStarted {
            tool_call_id: call.tool_call_id.clone(),
            tool: call.tool.clone(),
            arguments: call.arguments.clone(),
            action: request.action,
            resource: request.resource.clone(),
        })
        .await;
        let session = &self.setup.session;
        let output = match update {
            None => session.send(GetGoal).await.map(|reply| {
                reply.and_then(|goal| {
                    serde_json::to_string(&GoalGetResult { goal })
                        .map_err(|error| crate::error::EngineError::Internal { detail: error.to_string() })
                })
            }),
            Some(update) => {
                let message = UpdateGoalChecklist { run_id: self.setup.run_id.clone(), items: update.items };
                session.send(message).await.map(|reply| {
                    reply.and_then(|goal| {
                        serde_json::to_string(&GoalUpdateResult { goal })
                            .map_err(|error| crate::error::EngineError::Internal { detail: error.to_string() })
                    })
                })
            }
        };
        Some(match output {
            Ok(Ok(json)) => tool_result(ToolResultStatus::Ok, json),
            Ok(Err(error)) => tool_result(ToolResultStatus::Error, error.to_string()),
            Err(_) => tool_result(ToolResultStatus::Error, "the session stopped before answering".into()),
        })
    }
}
