//! `session.goal.get`, `session.goal.set` and `session.goal.lifecycle`: what the engine checks before the session
//! actor (which validates against the goal's projection and appends) sees the request.
//!
//! A selection is validated against the runtime snapshot here, like `run.start` does, so a goal is never
//! persisted with a selection its automatic runs could not use.

use troupe_protocol::RpcError;
use troupe_protocol::error_code::ErrorCode;
use troupe_protocol::types::common::{RunSelection, SessionIdParams, SessionOrigin};
use troupe_protocol::types::goal::{GoalGetResult, GoalLifecycleParams, GoalResult, GoalSetParams};
use troupe_runtime::catalog::validate_selection;

use super::Engine;
use crate::error::EngineError;
use crate::runtime_actor::GetSnapshot;
use crate::session_actor::{ChangeGoalLifecycle, GetGoal, GoalErrorKind, SetGoal};
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

    /// A delegated session has no goal of its own: it works inside its root's tree, so reading its goal answers
    /// the root's (or null). Only changing a goal is root-only, as the reference says of goal mutations.
    pub(super) async fn goal_get(&self, params: SessionIdParams) -> Result<GoalGetResult, RpcError> {
        let meta = self.supervisor_ask(IndexedMeta { session_id: params.session_id.clone() }).await??;
        let root_session_id = meta.origin.root_session_id().unwrap_or(&meta.session_id).to_owned();
        let goal = self.ask_session(&root_session_id, || GetGoal).await?;
        Ok(GoalGetResult { goal })
    }

    pub(super) async fn goal_set(&self, params: GoalSetParams) -> Result<GoalResult, RpcError> {
        if params.objective.trim().is_empty() {
            return Err(RpcError::invalid_params_typed(
                ErrorCode::InvalidObjective,
                "the goal's objective is empty",
                &[],
            ));
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
        Ok(GoalResult { goal })
    }
}
