//! The end of a model turn that asked for no tool: the run either completes or goes on with the steering inputs
//! pending at this boundary. The session decides which, atomically with appending the turn
//! ([`EndToolFreeTurn`]), so the turn, its usage and `run_completed` reach the disk in one batch: the tail
//! after the model's last byte waits for one `fdatasync`, not three.

use troupe_protocol::types::events::EventPayload;

use super::{RunLoop, RunOutcome};
use crate::ports::session::{EndToolFreeTurn, PromotedInput, TurnEnd};

/// What the loop does after a tool-free turn.
pub(super) enum TurnOutcome {
    /// The run is over (completed, cancelled, or its session is gone).
    Ended(RunOutcome),
    /// These inputs were submitted at the boundary: the run requests another turn with them.
    Continue(Vec<PromotedInput>),
}

impl RunLoop {
    /// Records a tool-free turn (`events`: its `model_turn_committed` and usage) and, unless inputs are pending,
    /// the run's end with `final_text`.
    pub(super) async fn end_tool_free_turn(&self, events: Vec<EventPayload>, final_text: String) -> TurnOutcome {
        if self.control.cancel.is_cancelled() {
            // The answer streamed before the cancel still goes into the log, then `run_cancelled` (`finish`).
            for payload in events {
                self.emit(payload).await;
            }
            return TurnOutcome::Ended(RunOutcome::Cancelled);
        }
        let end = EndToolFreeTurn { run_id: self.setup.run_id.clone(), events, final_text: final_text.clone() };
        match self.setup.session.send(end).await {
            Ok(Ok(TurnEnd::Completed)) => TurnOutcome::Ended(RunOutcome::Completed { final_text }),
            Ok(Ok(TurnEnd::Continue(promoted))) => TurnOutcome::Continue(promoted),
            // The session stopped, or no longer has this run active: it records the interruption when it loads.
            _ => TurnOutcome::Ended(RunOutcome::SessionLost),
        }
    }
}
