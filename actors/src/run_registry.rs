//! Which session each run belongs to, for `run.steer`, `run.recall_steer`, `run.cancel` and `run.tool_stdin`.
//!
//! Bounded whatever the daemon's uptime: a run is *active* from the moment its `RunActor` is built (inside the
//! session's `run.start`, before the start is acknowledged) until that actor is dropped (its run ended, or the
//! daemon stopped), through a [`RunRegistration`] the actor holds. An ended run moves to a short list of recently
//! finished runs, the newest [`FINISHED_RUNS_KEPT`], so that a request about a run that just ended still reaches
//! its session and gets that session's answer (`run_not_active`, or `cancelled: false` for `run.cancel`). A run
//! older than that, or from before the daemon started, is `run_not_found`: the daemon no longer knows it.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;

/// How many ended runs are remembered (run id and session id each, some 100 bytes).
pub const FINISHED_RUNS_KEPT: usize = 128;

/// Shared by the engine (lookups) and run actors (registration); cheap to clone.
#[derive(Clone, Default)]
pub struct RunRegistry {
    inner: Arc<Mutex<Runs>>,
}

#[derive(Default)]
struct Runs {
    /// Runs with a live run actor: run id → session id.
    active: HashMap<String, String>,
    /// Recently ended (or replayed) runs: run id → session id, with their order, oldest first.
    finished: HashMap<String, String>,
    finished_order: VecDeque<String>,
}

impl Runs {
    fn remember_finished(&mut self, run_id: String, session_id: String) {
        if self.finished.insert(run_id.clone(), session_id).is_none() {
            self.finished_order.push_back(run_id);
        }
        while self.finished_order.len() > FINISHED_RUNS_KEPT {
            if let Some(oldest) = self.finished_order.pop_front() {
                self.finished.remove(&oldest);
            }
        }
    }
}

/// Sizes, for tests and diagnostics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunRegistrySizes {
    pub active: usize,
    pub finished: usize,
}

impl RunRegistry {
    /// Registers an active run; it stays active until the returned registration is dropped.
    pub fn register(&self, run_id: &str, session_id: &str) -> RunRegistration {
        let mut runs = self.inner.lock();
        runs.active.insert(run_id.to_owned(), session_id.to_owned());
        RunRegistration { registry: self.clone(), run_id: run_id.to_owned(), session_id: session_id.to_owned() }
    }

    /// Notes a run id the engine handed out (a fresh run, or the first run of a redelivered `run.start`). A run that
    /// is not active (a redelivery of one that ended) joins the recently finished ones, so it is known for a while.
    pub fn note_started(&self, run_id: &str, session_id: &str) {
        let mut runs = self.inner.lock();
        if !runs.active.contains_key(run_id) {
            runs.remember_finished(run_id.to_owned(), session_id.to_owned());
        }
    }

    /// The session of an active or recently finished run.
    pub fn session_of(&self, run_id: &str) -> Option<String> {
        let runs = self.inner.lock();
        runs.active.get(run_id).or_else(|| runs.finished.get(run_id)).cloned()
    }

    /// The sessions of the active runs (a session appears once per active run).
    pub fn active_sessions(&self) -> Vec<String> {
        self.inner.lock().active.values().cloned().collect()
    }

    pub fn sizes(&self) -> RunRegistrySizes {
        let runs = self.inner.lock();
        RunRegistrySizes { active: runs.active.len(), finished: runs.finished.len() }
    }
}

/// Keeps a run active in the registry while it is held; dropping it moves the run to the recently finished.
pub struct RunRegistration {
    registry: RunRegistry,
    run_id: String,
    session_id: String,
}

impl Drop for RunRegistration {
    fn drop(&mut self) {
        let mut runs = self.registry.inner.lock();
        runs.active.remove(&self.run_id);
        runs.remember_finished(std::mem::take(&mut self.run_id), std::mem::take(&mut self.session_id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn active_runs_leave_when_their_registration_drops_and_finished_ones_are_bounded() {
        let registry = RunRegistry::default();
        let first = registry.register("run-0", "s");
        registry.note_started("run-0", "s");
        assert_eq!(registry.sizes(), RunRegistrySizes { active: 1, finished: 0 });
        drop(first);
        assert_eq!(registry.sizes(), RunRegistrySizes { active: 0, finished: 1 });
        assert_eq!(registry.session_of("run-0").as_deref(), Some("s"));
        for index in 1..=FINISHED_RUNS_KEPT + 10 {
            drop(registry.register(&format!("run-{index}"), "s"));
        }
        assert_eq!(registry.sizes(), RunRegistrySizes { active: 0, finished: FINISHED_RUNS_KEPT });
        assert_eq!(registry.session_of("run-0"), None, "the oldest ended runs are forgotten");
        assert!(registry.session_of(&format!("run-{}", FINISHED_RUNS_KEPT + 10)).is_some());
    }

    #[test]
    fn a_redelivered_start_of_an_ended_run_is_remembered_as_finished() {
        let registry = RunRegistry::default();
        registry.note_started("old-run", "s");
        assert_eq!(registry.sizes(), RunRegistrySizes { active: 0, finished: 1 });
        assert_eq!(registry.session_of("old-run").as_deref(), Some("s"));
    }
}
