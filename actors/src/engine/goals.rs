//! `session.goal.get`, `session.goal.set` and `session.goal.lifecycle`: what the engine checks before the session
//! actor (which validates against the goal's projection and appends) sees the request.
//!
//! A selection is validated against the runtime snapshot here, like `run.start` does, so a goal is never
//! persisted with a selection its automatic runs could not use. Every reply's active goal carries `blocked` when no
//! model of the selection its automatic runs use can run now (worked out from the runtime snapshot, as the goal
//! actor does before each automatic run).

use troupe_protocol::RpcError;
use troupe_protocol::types::common::{RunSelection, SessionIdParams, SessionOrigin};
use troupe_protocol::types::goal::{
    GoalGetResult, GoalLifecycleParams, GoalResult, GoalSetParams, GoalState, GoalStatus,
};
use troupe_runtime::catalog::validate_selection;
use troupe_runtime::runnable::selection_blocked;

use super::Engine;
use crate::error::EngineError;
use crate::runtime_actor::GetSnapshot;
use crate::session_actor::{ChangeGoalLifecycle, GetGoal, GoalErrorKind, GoalRunTarget, SetGoal};
use crate::session_supervisor::IndexedMeta;

impl Engine {
    /// Refuses a session that is not a root session before it is loaded.
    async fn require_root(&self, session_id: &str) -> Result<(), EngineError> {
        let meta = self.supervisor_ask(IndexedMeta { session_id: session_id.to_owned() }).await??;
        if meta.origin != SessionOrigin::Root {
            return Err(EngineError::Goal { session_id: session_id.to_owned(), kind: GoalErrorKind::NotRootSession });
        }
        Ok(())
    }

    async fn validate_goal_selection(&self, selection: Option<&RunSelection>) -> Result<(), EngineError> {
        if let Some(selection) = selection {
            let snapshot = self.runtime.send(GetSnapshot).await.map_err(|_| EngineError::ShuttingDown)?;
            validate_selection(&snapshot, selection).map_err(EngineError::InvalidSelection)?;
        }
        Ok(())
    }

    /// `goal` with `blocked` set when it is active and its automatic runs could not reach a model now: the check the
    /// goal actor makes before each run, on what the next one would ask for (`GoalRunTarget`).
    async fn with_blocked(&self, session_id: &str, mut goal: GoalState) -> Result<GoalState, EngineError> {
        if goal.status != GoalStatus::Active {
            return Ok(goal);
        }
        let Some(plan) = self.ask_session(session_id, || GoalRunTarget).await? else {
            return Ok(goal);
        };
        let snapshot = self.runtime.send(GetSnapshot).await.map_err(|_| EngineError::ShuttingDown)?;
        goal.blocked = selection_blocked(&snapshot, &plan.selection, plan.sticky.as_ref());
        Ok(goal)
    }

    /// A delegated session has no goal of its own: it works inside its root's tree, so reading its goal answers
    /// the root's (or null). Only changing a goal is root-only, as the reference says of goal mutations.
    pub(super) async fn goal_get(&self, params: SessionIdParams) -> Result<GoalGetResult, RpcError> {
        let meta = self.supervisor_ask(IndexedMeta { session_id: params.session_id.clone() }).await??;
        let root_session_id = meta.origin.root_session_id().unwrap_or(&meta.session_id).to_owned();
        let goal = match self.ask_session(&root_session_id, || GetGoal).await? {
            Some(goal) => Some(self.with_blocked(&root_session_id, goal).await?),
            None => None,
        };
        Ok(GoalGetResult { goal })
    }

    pub(super) async fn goal_set(&self, params: GoalSetParams) -> Result<GoalResult, RpcError> {
        if params.objective.trim().is_empty() {
            return Err(EngineError::EmptyObjective.into());
        }
        self.check_input_size("the goal's objective", &params.objective)?;
        self.require_root(&params.session_id).await?;
        self.validate_goal_selection(params.selection.as_ref()).await?;
        let goal = self
            .ask_session(&params.session_id, || SetGoal {
                objective: params.objective.clone(),
                selection: params.selection.clone(),
            })
            .await?;
        let goal = self.with_blocked(&params.session_id, goal).await?;
        Ok(GoalResult { goal })
    }

    pub(super) async fn goal_lifecycle(&self, params: GoalLifecycleParams) -> Result<GoalResult, RpcError> {
        self.require_root(&params.session_id).await?;
        self.validate_goal_selection(params.selection.as_ref()).await?;
        let goal = self
            .ask_session(&params.session_id, || ChangeGoalLifecycle {
                goal_id: params.goal_id.clone(),
                expected_revision: params.expected_revision,
                action: params.action,
                selection: params.selection.clone(),
            })
            .await?;
        let goal = self.with_blocked(&params.session_id, goal).await?;
        Ok(GoalResult { goal })
    }
}
