//! `GoalActor`: one per root session whose goal is active; it owns the goal's wake-up schedule.
//!
//! The session actor stays the only writer of the log: it reports to the supervisor ([`GoalReport`]) whether its
//! goal is active and whether it is idle, and the supervisor's book ([`GoalActors`]) keeps a goal actor exactly
//! while the goal is active (started, and restarted if it died, like the approval actors of `approval_trees.rs`).
//! When the session is idle the goal actor starts the next automatic run: it asks the session for the goal and its
//! selection, checks against the runtime snapshot that some model of the selection's chain can run now, resolves
//! the agent's chain and policy as `run.start` does, and has the session append `run_started` (origin
//! `engine:goal`). While no model can run (a provider disconnected, an agent removed) it starts nothing and leaves
//! the goal's lifecycle alone: `session.goal.get` reports the goal `blocked`, and the periodic wake-up starts the
//! run once the runtime or the selection changes. A pause, a cancel or the completion ends the goal actor; resume
//! starts a new one.
//!
//! Restarts: the book keeps a marker file `goal-active` in the directory of each session whose goal is active (a
//! hint, like `meta.json`: the log decides). At start the supervisor opens the sessions that have one, so an active
//! goal continues without any request. The markers are written in report order on one thread of their own.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use actix::prelude::*;
use std::collections::HashMap;
use troupe_protocol::types::goal::GoalBlocked;
use troupe_runtime::data_dir::DataDir;
use troupe_runtime::runnable::selection_blocked;

use crate::error::EngineError;
use crate::ports::SupervisorPort;
use crate::ports::session::{PrepareGoalRun, StartGoalRun};
pub use crate::ports::supervisor::GoalReport;
use crate::ports::supervisor::{ApprovalsFor, OpenSession};
use crate::run_services::RunServices;
use crate::run_start::PreparedRun;
use crate::runtime_actor::{GetSnapshot, RuntimeActor};

/// The name of the marker file of a session whose goal is active.
pub const GOAL_MARKER: &str = "goal-active";

/// How often a goal actor checks on its session even without a report (a wake-up that failed, a session that
/// hibernated between runs, a selection that could not run and may now: a provider reconnected).
const RECHECK_EVERY: Duration = Duration::from_secs(3);

/// What a goal actor needs to start runs, shared by all of them.
#[derive(Clone)]
pub struct GoalRuns {
    pub runtime: Addr<RuntimeActor>,
    pub services: Arc<RunServices>,
    /// `[goals] max_idle_runs`, when the operator opted in to the bound.
    pub max_idle_runs: Option<u32>,
}

/// The supervisor's book of goal actors, by root session id.
pub struct GoalActors {
    actors: HashMap<String, Addr<GoalActor>>,
    runs: GoalRuns,
    data_dir: DataDir,
    /// The marker writer's queue: (session directory, whether the goal is active), applied in order.
    markers: mpsc::Sender<(PathBuf, bool)>,
}

impl GoalActors {
    pub fn new(runs: GoalRuns, data_dir: DataDir) -> Self {
        let (markers, queue) = mpsc::channel::<(PathBuf, bool)>();
        let spawned = std::thread::Builder::new().name("troupe-goal-markers".into()).spawn(move || {
            for (session_dir, active) in queue {
                let marker = session_dir.join(GOAL_MARKER);
                let outcome = if active {
                    std::fs::File::create(&marker).and_then(|file| file.sync_all())
                } else {
                    match std::fs::remove_file(&marker) {
                        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
                        other => other,
                    }
                };
                if let Err(error) = outcome {
                    tracing::warn!(path = %marker.display(), %error, "could not update a goal marker");
                }
            }
        });
        if let Err(error) = spawned {
            tracing::error!(%error, "no goal marker thread: active goals will not resume after a restart");
        }
        GoalActors { actors: HashMap::new(), runs, data_dir, markers }
    }

    /// Keeps a goal actor exactly while the session's goal is active (a dead one is replaced), and wakes it when
    /// the session is idle.
    pub fn report(&mut self, report: GoalReport, supervisor: SupervisorPort) {
        let session_dir = self.data_dir.session_dir(&report.session_id);
        if !report.active {
            if let Some(addr) = self.actors.remove(&report.session_id) {
                addr.do_send(StopGoal);
            }
            let _ = self.markers.send((session_dir, false));
            return;
        }
        let known = self.actors.get(&report.session_id).filter(|addr| addr.connected()).cloned();
        let addr = known.unwrap_or_else(|| {
            let _ = self.markers.send((session_dir, true));
            let goal = GoalActor {
                session_id: report.session_id.clone(),
                supervisor,
                runs: self.runs.clone(),
                waking: false,
                again: false,
                blocked: false,
            };
            let addr = goal.start();
            self.actors.insert(report.session_id.clone(), addr.clone());
            addr
        });
        if report.idle {
            addr.do_send(Wake);
        }
    }

    /// After the daemon starts: opens the sessions whose goal was active, so that each reports its goal and gets
    /// its goal actor. Checking the markers reads the file system, so it runs on a blocking thread.
    pub fn resume_after_start(&self, session_ids: Vec<String>, supervisor: SupervisorPort) {
        let data_dir = self.data_dir.clone();
        actix::spawn(async move {
            let marked = tokio::task::spawn_blocking(move || {
                session_ids
                    .into_iter()
                    .filter(|session_id| data_dir.session_dir(session_id).join(GOAL_MARKER).exists())
                    .collect::<Vec<_>>()
            })
            .await
            .unwrap_or_default();
            for session_id in marked {
                tracing::info!(%session_id, "resuming an active goal");
                supervisor.do_send(OpenSession { session_id });
            }
        });
    }
}

/// The session may be idle: start the next automatic run if the goal wants one.
#[derive(Message)]
#[rtype(result = "()")]
struct Wake;

/// The goal is no longer active.
#[derive(Message)]
#[rtype(result = "()")]
struct StopGoal;

pub struct GoalActor {
    session_id: String,
    supervisor: SupervisorPort,
    runs: GoalRuns,
    /// A wake-up is in progress; another one asked meanwhile is remembered in `again`.
    waking: bool,
    again: bool,
    /// The latest wake-up found the selection unable to run (logged once per change).
    blocked: bool,
}

impl Actor for GoalActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(RECHECK_EVERY, |_, ctx| ctx.notify(Wake));
    }
}

impl Handler<Wake> for GoalActor {
    type Result = ();

    fn handle(&mut self, _: Wake, ctx: &mut Context<Self>) {
        if self.waking {
            self.again = true;
            return;
        }
        self.waking = true;
        let wake = wake_once(self.session_id.clone(), self.supervisor.clone(), self.runs.clone());
        ctx.spawn(wake.into_actor(self).map(|outcome, actor, ctx| {
            actor.waking = false;
            match outcome {
                Ok(Woke::Blocked(blocked)) => {
                    if !actor.blocked {
                        let detail = &blocked.detail;
                        tracing::info!(session_id = %actor.session_id, %detail, "a goal's automatic runs wait");
                    }
                    actor.blocked = true;
                }
                Ok(Woke::Done) => {
                    if std::mem::take(&mut actor.blocked) {
                        tracing::info!(session_id = %actor.session_id, "a goal's automatic runs can start again");
                    }
                }
                Err(error) => {
                    tracing::warn!(session_id = %actor.session_id, %error, "a goal's automatic run could not start");
                }
            }
            if std::mem::take(&mut actor.again) {
                ctx.notify(Wake);
            }
        }));
    }
}

impl Handler<StopGoal> for GoalActor {
    type Result = ();

    fn handle(&mut self, _: StopGoal, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

/// What a wake-up did.
enum Woke {
    /// A run started, or none was wanted (the goal is not active, the session is busy).
    Done,
    /// No model the goal's runs would use can run now: nothing was started, and the goal keeps its status.
    Blocked(GoalBlocked),
}

/// Starts the goal's next automatic run when the goal is active, the session idle and the selection can run.
async fn wake_once(session_id: String, supervisor: SupervisorPort, runs: GoalRuns) -> Result<Woke, EngineError> {
    let gone = |_| EngineError::ShuttingDown;
    let session = supervisor.send(OpenSession { session_id: session_id.clone() }).await.map_err(gone)??;
    let Some(plan) = session.send(PrepareGoalRun).await.map_err(gone)?? else {
        return Ok(Woke::Done);
    };
    let snapshot = runs.runtime.send(GetSnapshot).await.map_err(gone)?;
    // A run that can only fail is not started; the goal's lifecycle is the user's (`session.goal.get` reports the
    // goal as blocked meanwhile, and the next wake-up after the runtime changes starts the run).
    if let Some(blocked) = selection_blocked(&snapshot, &plan.selection, plan.sticky.as_ref()) {
        return Ok(Woke::Blocked(blocked));
    }
    let approvals = supervisor.send(ApprovalsFor { session_id: session_id.clone() }).await.map_err(gone)??;
    let prepared = PreparedRun::new(&runs.services, &snapshot, plan.selection, approvals)?;
    let started = session
        .send(StartGoalRun { goal_id: plan.goal_id, prepared, max_idle_runs: runs.max_idle_runs })
        .await
        .map_err(gone)??;
    if let Some(run_id) = started {
        runs.services.runs.note_started(&run_id, &session_id);
    }
    Ok(Woke::Done)
}
