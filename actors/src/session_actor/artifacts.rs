//! The session actor's side of artifacts: whether the session's log names a path (`session.attachment` reads only
//! those), and the reports that keep the supervisor's artifact index current for collecting the unnamed ones.

use std::sync::Arc;

use actix::prelude::*;

use super::SessionActor;
use crate::error::EngineError;
use crate::ports::supervisor::SessionArtifactsChanged;

/// Whether the session's log names the artifact `path` (`artifacts/<name>`): an input's attachment or a file part of
/// a tool result, in any event of the log (hidden by a revert or replaced by a compaction too; in a fork, the copied
/// prefix's too).
#[derive(Message)]
#[rtype(result = "Result<bool, EngineError>")]
pub struct NamesArtifact {
    pub path: String,
}

impl Handler<NamesArtifact> for SessionActor {
    type Result = Result<bool, EngineError>;

    fn handle(&mut self, message: NamesArtifact, _: &mut Context<Self>) -> Self::Result {
        Ok(self.ready_state()?.artifacts.contains(&message.path))
    }
}

impl SessionActor {
    /// Tells the supervisor the artifacts the session names when they changed since the last report (the first
    /// time always, so that it knows the session's). The set only grows, so its size tells.
    pub(super) fn report_artifacts(&mut self) {
        let Some(state) = &self.state else { return };
        if self.artifacts_reported == Some(state.artifacts.len()) {
            return;
        }
        self.artifacts_reported = Some(state.artifacts.len());
        let artifacts = Arc::new(state.artifacts.clone());
        self.supervisor.do_send(SessionArtifactsChanged { session_id: self.session_id.clone(), artifacts });
    }
}
