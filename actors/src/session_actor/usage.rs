//! The session actor's side of usage: `session.usage` from its projection, and the reports that keep the
//! supervisor's usage index current.

use actix::prelude::*;
use troupe_protocol::types::usage::SessionUsageResult;

use super::SessionActor;
use crate::error::EngineError;
use crate::ports::supervisor::SessionUsageChanged;

/// `session.usage`: the visible branch's usage and everything the session spent.
#[derive(Message)]
#[rtype(result = "Result<SessionUsageResult, EngineError>")]
pub struct GetUsage;

impl Handler<GetUsage> for SessionActor {
    type Result = Result<SessionUsageResult, EngineError>;

    fn handle(&mut self, _: GetUsage, _: &mut Context<Self>) -> Self::Result {
        let session_id = self.session_id.clone();
        let state = self.ready_state()?;
        Ok(SessionUsageResult { session_id, usage: state.usage.visible_rollup(), spent: state.usage.spent_rollup() })
    }
}

impl SessionActor {
    /// Leaves the session's spent usage for the supervisor's usage index (`published_usage`, taken before each
    /// rollup) when the durable batch `first..=last` holds the newest `model_usage_recorded`. A batch whose usage
    /// event was followed by another not yet durable is not reported: the later batch's report covers both, and
    /// the index never counts an event that is not on disk.
    pub(super) fn report_usage(&self, first: u64, last: u64) {
        if let Some(state) = &self.state
            && (first..=last).contains(&state.usage.last_usage_seq())
        {
            self.published_usage.leave(state.usage.summary().clone());
        }
    }

    /// Sends the supervisor the spent usage left and not taken (the actor is stopping).
    pub(super) fn flush_usage_report(&self) {
        if let Some(summary) = self.published_usage.take() {
            self.supervisor.do_send(SessionUsageChanged { session_id: self.session_id.clone(), summary });
        }
    }
}
