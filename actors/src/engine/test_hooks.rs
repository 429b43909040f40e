//! Test-only hooks of the engine (the `test-hooks` feature, never in release builds): fault and load injection,
//! and size queries that show what grows with use shrinking again.

use std::time::Duration;

use super::Engine;
use crate::error::EngineError;
use crate::run_registry::RunRegistrySizes;

/// The sizes of the engine's per-run, per-tree and per-connection state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineSizes {
    /// Runs with a live run actor, and ended runs still remembered (at most `FINISHED_RUNS_KEPT`).
    pub runs: RunRegistrySizes,
    /// Approval actors alive (one per tree used recently or with a run in flight).
    pub approval_actors: usize,
    /// Trees whose permission mode is not the default (remembered while their approval actor is gone).
    pub tree_modes: usize,
    /// Connections registered for `runtime.changed`.
    pub notifiers: usize,
    /// Session actors alive.
    pub live_sessions: usize,
}

impl Engine {
    /// Test-only load hook: the session's actor handles nothing for `duration` (its mailbox fills meanwhile). Does
    /// not wait for the stall to end.
    pub async fn stall_session(&self, session_id: &str, duration: Duration) -> Result<(), EngineError> {
        let addr = self.router().addr(session_id).await?;
        addr.do_send(crate::session_actor::Stall { duration });
        Ok(())
    }

    /// Test-only fault hook: makes the session's actor panic while handling a message.
    pub async fn inject_session_panic(&self, session_id: &str) -> Result<(), EngineError> {
        let addr = self.router().addr(session_id).await?;
        let _ = addr.send(crate::session_actor::InjectPanic).await;
        Ok(())
    }

    /// Test-only size query.
    pub async fn sizes(&self) -> Result<EngineSizes, EngineError> {
        let (approval_actors, tree_modes) = self.supervisor_ask(crate::session_supervisor::CountApprovals).await?;
        let notifiers =
            self.runtime.send(crate::runtime_actor::CountNotifiers).await.map_err(|_| EngineError::ShuttingDown)?;
        let live_sessions = self.router.live.iter().filter(|live| live.addr.connected()).count();
        Ok(EngineSizes { runs: self.services.runs.sizes(), approval_actors, tree_modes, notifiers, live_sessions })
    }
}
