//! Session goals: `session.goal.get`, `session.goal.set`, `session.goal.lifecycle`, and the I/O of the model's
//! `goal_update` tool.
//!
//! A goal belongs to a root session. Users activate, pause, resume and cancel it through the methods here, which
//! check `goal_id` and `expected_revision`; the model only replaces the checklist through `goal_update`, which has
//! no identity or revision check (the last accepted update wins). A non-empty checklist with every item finished
//! completes the goal.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::types::common::RunSelection;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GoalStatus {
    /// Runs are scheduled toward the objective.
    Active,
    /// Kept, but no automatic runs until it is resumed.
    Paused,
    /// Every item of a non-empty checklist was finished. Terminal.
    Completed,
    /// Cancelled by the user. Terminal.
    Cancelled,
}

/// One checklist entry. Items have no ID: the model replaces the whole ordered list at once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GoalItem {
    pub description: String,
    pub finished: bool,
}

/// The current state of a session's goal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct GoalState {
    pub goal_id: String,
    pub objective: String,
    pub status: GoalStatus,
    /// The ordered checklist, as last replaced by `goal_update`.
    pub items: Vec<GoalItem>,
    /// Increases with every change of this goal; `session.goal.lifecycle` must name the current one.
    pub revision: u64,
    /// The selection automatic runs use; null to use the session's latest run selection (else its creation
    /// selection).
    pub selection: Option<RunSelection>,
    /// troupe extension, in `session.goal.get`, `session.goal.set` and `session.goal.lifecycle` replies: present
    /// while the goal is active and no model its automatic runs would use can run now (a provider disconnected, an
    /// agent removed). The goal keeps its status; automatic runs wait, and start again by themselves once the
    /// runtime or the selection lets them. Never stored: it is worked out from the runtime each time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked: Option<GoalBlocked>,
}

/// Why an active goal's automatic runs are waiting.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct GoalBlocked {
    pub reason: GoalBlockedReason,
    /// Which model cannot run, why, and what to do (connect its provider, or pause the goal and resume it with
    /// another selection).
    pub detail: String,
}

/// What keeps a goal's selection from running.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GoalBlockedReason {
    /// The selection names an agent the runtime no longer has.
    AgentNotFound,
    /// The selection names a model the runtime does not offer (an unknown provider or local model).
    ModelNotFound,
    /// The providers of every model the run could use are not connected.
    ProviderNotConnected,
    /// `local/scripted`, with no script connected.
    NoScript,
}

/// `session.goal.get` result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct GoalGetResult {
    /// Always present; null when the session has no goal.
    pub goal: Option<GoalState>,
}

/// `session.goal.set` params: activate a goal on a root session that has no active or paused goal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GoalSetParams {
    pub session_id: String,
    pub objective: String,
    /// The selection automatic runs toward this goal use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<RunSelection>,
}

/// `{goal}`: the result of `session.goal.set` and `session.goal.lifecycle`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct GoalResult {
    pub goal: GoalState,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GoalLifecycleAction {
    /// Active → paused.
    Pause,
    /// Paused → active, optionally with a new selection.
    Resume,
    /// Active or paused → cancelled.
    Cancel,
}

/// `session.goal.lifecycle` params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GoalLifecycleParams {
    pub session_id: String,
    /// Must be the current goal; a stale ID is rejected.
    pub goal_id: String,
    /// Must be the goal's current revision (`goal_revision_conflict` otherwise).
    pub expected_revision: u64,
    pub action: GoalLifecycleAction,
    /// Only with `resume`: replaces the goal's selection. Rejected with `pause` and `cancel`; a resume without it
    /// keeps the previous selection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<RunSelection>,
}

/// Input of the model's `goal_update` tool: replaces the whole checklist of the current goal. Not a method.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GoalUpdateParams {
    pub items: Vec<GoalItem>,
}

/// Output of the model's `goal_update` tool: the goal after the update (completed when every item is finished).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct GoalUpdateResult {
    pub goal: GoalState,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_missing_goal_is_serialized_as_null() {
        assert_eq!(serde_json::to_value(GoalGetResult { goal: None }).unwrap(), json!({"goal": null}));
    }

    #[test]
    fn lifecycle_params_reject_unknown_fields_and_default_the_selection() {
        let params: GoalLifecycleParams = serde_json::from_value(json!({
            "session_id": "s", "goal_id": "g", "expected_revision": 4, "action": "pause"
        }))
        .unwrap();
        assert_eq!(params.action, GoalLifecycleAction::Pause);
        assert_eq!(params.selection, None);
        // An absent selection is not sent, so `pause` and `cancel` never carry one.
        assert!(serde_json::to_value(&params).unwrap().get("selection").is_none());
        assert!(
            serde_json::from_value::<GoalLifecycleParams>(json!({
                "session_id": "s", "goal_id": "g", "expected_revision": 4, "action": "pause", "force": true
            }))
            .is_err()
        );
    }
}
