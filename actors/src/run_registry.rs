//! Which session each run belongs to, for `run.steer`, `run.recall_steer`, `run.cancel` and `run.tool_stdin`.
//!
//! Bounded whatever the daemon's uptime: a run is *active* from the moment its `RunActor` is built (inside the
//! session's `run.start`, before the start is acknowledged) until that actor is dropped (its run ended, or the
//! daemon stopped), through a [`RunRegistration`] the actor holds. An ended run moves to a short list of recently
//! finished runs, the newest [`FINISHED_RUNS_KEPT`], so that a request about a run that just ended still reaches
//! its session and gets that session's answer (`run_not_active`, or `cancelled: false` for `run.cancel`). A run
//! older than that, or from before the daemon started, is looked for in the logs (`session_supervisor/run_lookup.rs`)
//! and, once found, remembered here among the finished; only an id no session started is `run_not_found`.
//!
//! It also tells who awaits a run how it ended (a parent's `delegate` call awaiting its child's run): an
//! [`EndWatch`] taken on a session *before* the run is started there resolves with the next run of that session to
//! end, reported by the run itself ([`RunRegistry::report_end`]) once its terminal event is durable. A run whose
//! actor goes without reporting (the daemon stopped) resolves the watch as interrupted. Watches live only while
//! their holder keeps them.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;

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
    /// End watches by session id: (watch id, where the next ending run of the session is reported).
    end_watches: HashMap<String, Vec<(u64, EndSender)>>,
    next_watch: u64,
}

/// Where a watched run's id and end are sent.
type EndSender = oneshot::Sender<(String, RunEnd)>;

/// How a run ended, as its awaiting parent learns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunEnd {
    Completed {
        final_text: String,
    },
    Failed {
        error: String,
    },
    Cancelled,
    /// The run's session or the daemon went away while it was in flight.
    Interrupted,
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

    /// Watches for the next run of `session_id` to end. Take it before starting the run, so a run that ends at
    /// once is not missed.
    pub fn watch_next_end(&self, session_id: &str) -> EndWatch {
        let mut runs = self.inner.lock();
        let id = runs.next_watch;
        runs.next_watch += 1;
        let (sender, receiver) = oneshot::channel();
        runs.end_watches.entry(session_id.to_owned()).or_default().push((id, sender));
        EndWatch { registry: self.clone(), session_id: session_id.to_owned(), id, receiver }
    }

    /// Sent by a run once its end is durable: resolves the watches of its session.
    pub fn report_end(&self, session_id: &str, run_id: &str, end: RunEnd) {
        let watches = self.inner.lock().end_watches.remove(session_id).unwrap_or_default();
        for (_, sender) in watches {
            let _ = sender.send((run_id.to_owned(), end.clone()));
        }
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
        // A run that reported its end took its session's watches; any left are told it was interrupted.
        for (_, sender) in runs.end_watches.remove(&self.session_id).unwrap_or_default() {
            let _ = sender.send((self.run_id.clone(), RunEnd::Interrupted));
        }
        runs.remember_finished(std::mem::take(&mut self.run_id), std::mem::take(&mut self.session_id));
    }
}

/// Awaits the next run of one session to end; see [`RunRegistry::watch_next_end`]. Dropping it withdraws it.
pub struct EndWatch {
    registry: RunRegistry,
    session_id: String,
    id: u64,
    receiver: oneshot::Receiver<(String, RunEnd)>,
}

impl EndWatch {
    /// The run that ended and how. Cancel-safe: awaiting it again after a dropped await still sees the end.
    pub async fn ended(&mut self) -> (String, RunEnd) {
        (&mut self.receiver).await.unwrap_or_else(|_| (String::new(), RunEnd::Interrupted))
    }
}

impl Drop for EndWatch {
    fn drop(&mut self) {
        let mut runs = self.registry.inner.lock();
        if let Some(watches) = runs.end_watches.get_mut(&self.session_id) {
            watches.retain(|(id, _)| *id != self.id);
            if watches.is_empty() {
                runs.end_watches.remove(&self.session_id);
            }
        }
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

    #[tokio::test]
    async fn a_watch_taken_before_a_run_sees_how_it_ended_and_goes_when_dropped() {
        let registry = RunRegistry::default();
        let mut watch = registry.watch_next_end("child");
        let run = registry.register("r1", "child");
        registry.report_end("other", "r9", RunEnd::Cancelled);
        registry.report_end("child", "r1", RunEnd::Completed { final_text: "done".into() });
        drop(run);
        assert_eq!(watch.ended().await, ("r1".to_owned(), RunEnd::Completed { final_text: "done".into() }));

        let mut watch = registry.watch_next_end("child");
        drop(registry.register("r2", "child"));
        assert_eq!(watch.ended().await, ("r2".to_owned(), RunEnd::Interrupted), "an actor gone without a report");

        drop(registry.watch_next_end("child"));
        assert!(registry.inner.lock().end_watches.is_empty(), "a dropped watch leaves nothing behind");
    }

    #[test]
    fn a_redelivered_start_of_an_ended_run_is_remembered_as_finished() {
        let registry = RunRegistry::default();
        registry.note_started("old-run", "s");
        assert_eq!(registry.sizes(), RunRegistrySizes { active: 0, finished: 1 });
        assert_eq!(registry.session_of("old-run").as_deref(), Some("s"));
    }
}
