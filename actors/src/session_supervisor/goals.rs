//! The supervisor's side of goals: it keeps the book of goal actors (`goal_actor.rs`), fed by the session actors'
//! reports, and resumes the goals active on disk once the engine installs the book.

use actix::prelude::*;
use troupe_runtime::data_dir::DataDir;

use super::SessionSupervisor;
use crate::goal_actor::{GoalActors, GoalRuns};
use crate::ports::supervisor::GoalReport;

impl Handler<GoalReport> for SessionSupervisor {
    type Result = ();

    fn handle(&mut self, report: GoalReport, ctx: &mut Context<Self>) {
        let port = self.port(ctx);
        match self.goals.as_mut() {
            Some(goals) => goals.report(report, port),
            None => tracing::warn!(session_id = %report.session_id, "a goal report before goals were installed"),
        }
    }
}

/// Sent by the engine right after it starts the supervisor: installs the book of goal actors. Handled after the
/// supervisor's index is built (the scan holds the mailbox), so it then resumes the active goals found on disk.
#[derive(Message)]
#[rtype(result = "()")]
pub struct InstallGoals {
    pub runs: GoalRuns,
    pub data_dir: DataDir,
}

impl Handler<InstallGoals> for SessionSupervisor {
    type Result = ();

    fn handle(&mut self, message: InstallGoals, ctx: &mut Context<Self>) {
        let goals = GoalActors::new(message.runs, message.data_dir);
        let port = self.port(ctx);
        goals.resume_after_start(self.root_session_ids(), port);
        self.goals = Some(goals);
    }
}
