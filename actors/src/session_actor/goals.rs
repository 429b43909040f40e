//! The session actor's side of goals: activation, lifecycle and the model's checklist updates (each validated
//! against the projection and appended here, the log's only writer), the start of automatic runs on behalf of the
//! session's `GoalActor`, and the report that tells the supervisor whether the goal wants a wake-up.
//!
//! Goals live only in root sessions. Every refusal is a [`GoalErrorKind`], turned into a typed `data.code` in
//! `error.rs`.

use actix::prelude::*;
use troupe_protocol::types::common::{RunSelection, SessionOrigin};
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::goal::{GoalLifecycleAction, GoalState, GoalStatus};
use troupe_protocol::types::origin::Origin;
use troupe_runtime::clock::new_id;
use troupe_runtime::goal_state::{GoalBook, LifecycleRefusal, check_checklist, reminder};
use troupe_runtime::run_ledger::FallbackScope;

use super::SessionActor;
use crate::error::EngineError;
use crate::goal_actor::GoalReport;
use crate::ports::session::{
    GetGoal, GoalRunPlan, PrepareGoalRun, RunRequest, StartGoalRun, StartRun, UpdateGoalChecklist,
};

pub use crate::error::GoalErrorKind;

/// `session.goal.set`: replies with the new goal once `goal_activated` is durable.
#[derive(Message)]
#[rtype(result = "Result<GoalState, EngineError>")]
pub struct SetGoal {
    pub objective: String,
    /// Already validated against the runtime snapshot.
    pub selection: Option<RunSelection>,
}

/// `session.goal.lifecycle`: replies with the goal once the change is durable.
#[derive(Message)]
#[rtype(result = "Result<GoalState, EngineError>")]
pub struct ChangeGoalLifecycle {
    pub goal_id: String,
    pub expected_revision: u64,
    pub action: GoalLifecycleAction,
    pub selection: Option<RunSelection>,
}

/// Asked by `session.goal.get` and the other goal methods: what the active goal's next automatic run would ask
/// for, whether or not the session is idle (`None` without an active goal).
#[derive(Message)]
#[rtype(result = "Result<Option<GoalRunPlan>, EngineError>")]
pub struct GoalRunTarget;

impl SessionActor {
    fn goal_error(&self, kind: GoalErrorKind) -> EngineError {
        EngineError::Goal { session_id: self.session_id.clone(), kind }
    }

    /// The projection of a ready root session.
    fn root_goals(&mut self) -> Result<&GoalBook, EngineError> {
        let state = self.ready_state()?;
        if state.origin != SessionOrigin::Root {
            return Err(self.goal_error(GoalErrorKind::NotRootSession));
        }
        Ok(&self.state.as_ref().ok_or(EngineError::ShuttingDown)?.goals)
    }

    fn current_goal(&self) -> Option<GoalState> {
        self.state.as_ref().and_then(|state| state.goals.current().cloned())
    }

    /// Appends goal events in order; returns the last `seq`.
    fn append_goal_events(
        &mut self,
        ctx: &mut Context<Self>,
        run_id: Option<String>,
        origin: Origin,
        events: Vec<EventPayload>,
    ) -> Result<u64, EngineError> {
        let mut last = 0;
        for payload in events {
            last = self.append(ctx, run_id.clone(), Some(origin.to_owned()), payload)?;
        }
        Ok(last)
    }

    fn set_goal(&mut self, ctx: &mut Context<Self>, message: SetGoal) -> Result<(u64, GoalState), EngineError> {
        if let Some(open) = self.root_goals()?.open() {
            let kind = GoalErrorKind::GoalOpen { goal_id: open.goal_id.clone(), status: open.status };
            return Err(self.goal_error(kind));
        }
        if self.state.as_ref().is_some_and(|state| state.creation_lost) {
            return Err(EngineError::SessionDamaged { session_id: self.session_id.clone() });
        }
        let payload = EventPayload::GoalActivated {
            goal_id: new_id(),
            objective: message.objective,
            revision: 1,
            selection: message.selection,
        };
        let seq = self.append(ctx, None, Some(Origin::User), payload)?;
        Ok((seq, self.current_goal().ok_or(EngineError::ShuttingDown)?))
    }

    fn change_goal_lifecycle(
        &mut self,
        ctx: &mut Context<Self>,
        message: ChangeGoalLifecycle,
    ) -> Result<(u64, GoalState), EngineError> {
        let Some(goal) = self.root_goals()?.current().cloned() else {
            return Err(self.goal_error(GoalErrorKind::NoGoal));
        };
        if goal.goal_id != message.goal_id {
            return Err(self.goal_error(GoalErrorKind::StaleGoal { current_goal_id: goal.goal_id }));
        }
        if goal.revision != message.expected_revision {
            return Err(self.goal_error(GoalErrorKind::RevisionConflict { found: goal.revision }));
        }
        let payload = GoalBook::lifecycle(&goal, message.action, message.selection).map_err(|refusal| {
            self.goal_error(match refusal {
                LifecycleRefusal::Terminal { status } => GoalErrorKind::Terminal { status },
                LifecycleRefusal::WrongStatus { status } => {
                    GoalErrorKind::WrongStatus { status, action: message.action }
                }
                LifecycleRefusal::SelectionNotAllowed => GoalErrorKind::SelectionNotAllowed { action: message.action },
            })
        })?;
        let seq = self.append(ctx, None, Some(Origin::User), payload)?;
        Ok((seq, self.current_goal().ok_or(EngineError::ShuttingDown)?))
    }

    fn update_goal_checklist(
        &mut self,
        ctx: &mut Context<Self>,
        message: UpdateGoalChecklist,
    ) -> Result<(u64, GoalState), EngineError> {
        self.root_goals()?;
        if let Err(reason) = check_checklist(&message.items) {
            return Err(self.goal_error(GoalErrorKind::ChecklistTooLarge { reason }));
        }
        let goals = self.root_goals()?;
        let events = match goals.checklist_update(message.items) {
            Some(events) => events,
            None => {
                let kind = match goals.current() {
                    Some(goal) => GoalErrorKind::Terminal { status: goal.status },
                    None => GoalErrorKind::NoGoal,
                };
                return Err(self.goal_error(kind));
            }
        };
        let seq = self.append_goal_events(ctx, Some(message.run_id), Origin::GOAL_UPDATE_TOOL, events)?;
        Ok((seq, self.current_goal().ok_or(EngineError::ShuttingDown)?))
    }

    fn prepare_goal_run(&mut self) -> Result<Option<GoalRunPlan>, EngineError> {
        let state = self.ready_state()?;
        if state.origin != SessionOrigin::Root || state.creation_lost || state.runs.active.is_some() {
            return Ok(None);
        }
        Ok(self.goal_run_target())
    }

    /// What the active goal's next automatic run asks for, and the sticky fallback it would start on.
    fn goal_run_target(&self) -> Option<GoalRunPlan> {
        let state = self.state.as_ref()?;
        let goal = state.goals.active()?;
        let selection = goal
            .selection
            .as_ref()
            .or_else(|| state.runs.latest_selection())
            .unwrap_or(&state.creation_selection)
            .clone();
        let sticky = state.runs.sticky_fallback(&FallbackScope::of(&selection)).map(|sticky| sticky.model.clone());
        Some(GoalRunPlan { goal_id: goal.goal_id.clone(), selection, sticky })
    }

    fn start_goal_run(
        &mut self,
        ctx: &mut Context<Self>,
        message: StartGoalRun,
    ) -> Result<(u64, Option<String>), EngineError> {
        let state = self.ready_state()?;
        let Some(goal) = state.goals.active().filter(|goal| goal.goal_id == message.goal_id).cloned() else {
            return Ok((0, None));
        };
        if state.runs.active.is_some() {
            return Ok((0, None));
        }
        if let Some(pause) = message.max_idle_runs.and_then(|bound| state.goals.idle_pause(bound)) {
            let seq = self.append(ctx, None, Some(Origin::GOAL), pause)?;
            return Ok((seq, None));
        }
        let run = StartRun { request: RunRequest::engine("goal", reminder(&goal)), prepared: message.prepared };
        let (seq, run_id) = self.start_run_as(ctx, run, Origin::GOAL)?;
        Ok((seq, Some(run_id)))
    }

    /// When the actor starts: a committed all-finished checklist whose completion was never written gets it now
    /// (the daemon stopped between the two), then the supervisor learns whether the goal wants wake-ups.
    pub(super) fn goals_started(&mut self, ctx: &mut Context<Self>) {
        let repair = self.state.as_ref().and_then(|state| state.goals.missing_completion());
        if let Some(completion) = repair {
            tracing::info!(session_id = %self.session_id, "appending the completion of an all-finished goal");
            if let Err(error) = self.append(ctx, None, Some(Origin::GOAL), completion) {
                tracing::error!(session_id = %self.session_id, %error, "could not complete a finished goal");
            }
        }
        self.report_goal();
    }

    /// Tells the supervisor, when it changed, whether this session's goal is active and whether the session is
    /// idle, so its goal actor exists exactly while the goal is active and wakes when the session becomes idle.
    pub(super) fn report_goal(&mut self) {
        let Some(state) = self.state.as_ref() else { return };
        let Some(goal) = state.goals.current() else { return };
        let report = GoalReport {
            session_id: self.session_id.clone(),
            goal_id: goal.goal_id.clone(),
            active: goal.status == GoalStatus::Active,
            idle: state.runs.active.is_none(),
        };
        if self.goal_reported.as_ref() == Some(&report) {
            return;
        }
        self.goal_reported = Some(report.clone());
        self.supervisor.do_send(report);
    }
}

impl Handler<GetGoal> for SessionActor {
    type Result = Result<Option<GoalState>, EngineError>;

    fn handle(&mut self, _: GetGoal, _: &mut Context<Self>) -> Self::Result {
        Ok(self.root_goals()?.current().cloned())
    }
}

impl Handler<SetGoal> for SessionActor {
    type Result = ResponseFuture<Result<GoalState, EngineError>>;

    fn handle(&mut self, message: SetGoal, ctx: &mut Context<Self>) -> Self::Result {
        let accepted = self.set_goal(ctx, message);
        self.durable_reply(accepted)
    }
}

impl Handler<ChangeGoalLifecycle> for SessionActor {
    type Result = ResponseFuture<Result<GoalState, EngineError>>;

    fn handle(&mut self, message: ChangeGoalLifecycle, ctx: &mut Context<Self>) -> Self::Result {
        let accepted = self.change_goal_lifecycle(ctx, message);
        self.durable_reply(accepted)
    }
}

impl Handler<UpdateGoalChecklist> for SessionActor {
    type Result = ResponseFuture<Result<GoalState, EngineError>>;

    fn handle(&mut self, message: UpdateGoalChecklist, ctx: &mut Context<Self>) -> Self::Result {
        let accepted = self.update_goal_checklist(ctx, message);
        self.durable_reply(accepted)
    }
}

impl Handler<PrepareGoalRun> for SessionActor {
    type Result = Result<Option<GoalRunPlan>, EngineError>;

    fn handle(&mut self, _: PrepareGoalRun, _: &mut Context<Self>) -> Self::Result {
        self.prepare_goal_run()
    }
}

impl Handler<GoalRunTarget> for SessionActor {
    type Result = Result<Option<GoalRunPlan>, EngineError>;

    fn handle(&mut self, _: GoalRunTarget, _: &mut Context<Self>) -> Self::Result {
        self.root_goals()?;
        Ok(self.goal_run_target())
    }
}

impl Handler<StartGoalRun> for SessionActor {
    type Result = ResponseFuture<Result<Option<String>, EngineError>>;

    fn handle(&mut self, message: StartGoalRun, ctx: &mut Context<Self>) -> Self::Result {
        let accepted = self.start_goal_run(ctx, message);
        self.durable_reply(accepted)
    }
}
