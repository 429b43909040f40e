//! `SessionSupervisor`: finds or starts the `SessionActor` of a session, and knows every session on disk.
//!
//! It keeps an index of all sessions' metadata (built at start from the `meta.json` caches, or from the logs
//! where a cache is missing or stale, then kept current by the session actors), so listing and tree queries
//! never load logs; next to it, every session's spent usage (`usage_index`), so the usage rollups do not either, and
//! every session's named artifacts (`artifacts`), so the files no session names can be collected.
//! It is the only place that starts session actors, which is what guarantees one writer per
//! log: a session is started at most once at a time, and a crashed or hibernated actor is replaced only after
//! its mailbox is gone. The engine reads the live registry directly (a shared map only this actor writes) and
//! comes here when a session is not live.
//!
//! Here: the live registry, starting and opening session actors, and the ports' messages. New root sessions are
//! created in `creation.rs`; the index's scan and upkeep are in `index.rs`, what the engine asks of it in
//! `queries.rs`; child sessions, goals, deletion, run lookups and usage have files of their own.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use dashmap::DashMap;
use troupe_protocol::types::common::SessionMeta;
use troupe_protocol::types::session::PermissionMode;
use troupe_runtime::data_dir::DataDir;

use crate::approval_trees::ApprovalTrees;
use crate::error::EngineError;
use crate::run_registry::RunRegistry;
use crate::session_actor::{Drain, Opening, SessionActor, SessionLimits};

mod artifacts;
mod children;
mod creation;
mod directory;
mod goals;
mod index;
mod index_check;
mod queries;
mod removal;
mod run_lookup;
mod takeover;
mod usage;
mod usage_index;
pub use crate::ports::supervisor::{
    ApprovalsFor, ChildRefused, CreateChildSession, GetTree, GoalReport, OpenSession, SessionArtifactsChanged,
    SessionGone, SessionMetaChanged, SessionStopped, SessionUsageChanged,
};
use crate::ports::{ApprovalLease, SessionPort, SupervisorPort};
pub use artifacts::InstallArtifactCollection;
pub use creation::{CreateSession, ForkSession};
pub use directory::InstallDirectory;
pub use goals::InstallGoals;
use index::{RESCAN_FIRST_DELAY, scan_sessions};
pub use queries::{CountSessions, IndexedMeta, ListChildren, ListRootSessions, SessionCounts};
pub use removal::DeleteTree;
pub use run_lookup::FindRunSession;
pub use usage::{AgentUsage, GlobalUsage, TreeUsage};

/// A live session actor, as the engine sees it.
#[derive(Clone)]
pub struct LiveSession {
    pub addr: Addr<SessionActor>,
    /// Built once with the actor: what the actors below the supervisor get for it (`OpenSession`).
    pub port: SessionPort,
    pub incarnation: u64,
    /// Its metadata as published at its newest durable batch (`published_meta`), read by `session.get` without
    /// asking the actor.
    pub meta: crate::published_meta::PublishedMeta,
    /// Its spent usage not yet in the supervisor's usage index (`published_usage`), taken before each rollup.
    pub usage: crate::published_usage::PublishedUsage,
    /// The session thread it runs on (`None` when the supervisor's own thread hosts it, as in unit tests).
    pub arbiter: Option<ArbiterHandle>,
}

/// The registry of live session actors: written only by the supervisor, read by the engine.
pub type LiveSessions = Arc<DashMap<String, LiveSession>>;

/// What the supervisor writes and the engine reads without a message: the live actors and the index's view.
pub struct EngineReads {
    pub live: LiveSessions,
    pub index: crate::index_view::IndexView,
}

/// The session's live actor, starting it (loading its log) when it is not live. For the router, above
/// the session actors; the actors below get its port (`OpenSession`).
#[derive(Message)]
#[rtype(result = "Result<LiveSession, EngineError>")]
pub struct OpenSessionActor {
    pub session_id: String,
}

/// `session.set_permission_mode`: the mode of the tree that contains the session.
#[derive(Message)]
#[rtype(result = "Result<(), EngineError>")]
pub struct SetPermissionMode {
    pub session_id: String,
    pub mode: PermissionMode,
}

/// Test-only size query: approval actors alive, and trees' modes remembered.
#[cfg(feature = "test-hooks")]
#[derive(Message)]
#[rtype(result = "(usize, usize)")]
pub struct CountApprovals;

/// Waits until every live session has made everything it accepted durable and written its metadata cache (used at
/// shutdown).
#[derive(Message)]
#[rtype(result = "()")]
pub struct DrainAll;

pub struct SessionSupervisor {
    data_dir: DataDir,
    /// Sessions' memory bounds and idle time.
    sessions: SessionLimits,
    /// Threads session actors run on, used round-robin, so sessions do not share one thread.
    arbiters: Vec<ArbiterHandle>,
    next_arbiter: usize,
    /// Every session known on disk, by id.
    index: HashMap<String, SessionMeta>,
    /// Sessions indexed from the session index a clean stop wrote and not yet checked against their logs
    /// (`index_check`).
    unchecked: std::collections::HashSet<String>,
    /// Direct children of each session, in creation order.
    children: HashMap<String, Vec<String>>,
    /// Child sessions being created, by the root of their tree (`children.rs`); those already indexed count once.
    creating_children: HashMap<String, std::collections::HashSet<String>>,
    /// Every session's spent usage (`usage_index`), for the usage rollups.
    usage: usage_index::UsageIndex,
    /// Every session's named artifacts, and their collection (`artifacts`).
    artifacts: artifacts::ArtifactIndex,
    live: LiveSessions,
    /// What the engine reads of `index` without a message (`index_view.rs`): set wherever `index` changes.
    view: crate::index_view::IndexView,
    /// The approval actors of the trees in use, and the trees' modes.
    approvals: ApprovalTrees,
    next_incarnation: u64,
    /// Searches of the logs for runs the registry does not hold: one at a time, and ids not found are remembered
    /// for a while (`run_lookup`).
    run_lookups: run_lookup::RunLookups,
    /// The goal actors of root sessions with an active goal (`goal_actor.rs`); installed by the engine.
    goals: Option<crate::goal_actor::GoalActors>,
    /// Given to each session actor, so that it can start the runs producer messages wake (`producers.rs`).
    run_context: Option<crate::run_start::EngineRunContext>,
    /// This actor's port, built when first needed (`port`).
    port: Option<SupervisorPort>,
    /// The cluster's session directory (`directory`); `None` on a single node.
    directory: Option<Arc<dyn troupe_runtime::session_directory::SessionDirectory>>,
    /// Whether the directory's entries as of its watch's start are indexed (`directory`).
    directory_loaded: bool,
    /// A look for dead nodes' sessions to take over is under way (`takeover`).
    takeover_looking: bool,
    /// Dead nodes' sessions whose leases were read still held, with when they expire (`takeover`).
    takeover_not_before: HashMap<String, std::time::Instant>,
}

impl SessionSupervisor {
    /// A supervisor with an empty index: it builds the index from the data directory when it starts, on a blocking
    /// thread, before it handles any message. `runs` tells which trees have a run in flight; trees start in
    /// `default_mode` (`[permissions] default_mode`).
    pub fn new(
        data_dir: DataDir,
        sessions: SessionLimits,
        arbiters: Vec<ArbiterHandle>,
        reads: EngineReads,
        runs: RunRegistry,
        run_context: Option<crate::run_start::EngineRunContext>,
        default_mode: troupe_protocol::types::session::PermissionMode,
    ) -> Self {
        SessionSupervisor {
            run_context,
            data_dir,
            sessions,
            arbiters,
            next_arbiter: 0,
            index: HashMap::new(),
            unchecked: Default::default(),
            children: HashMap::new(),
            creating_children: HashMap::new(),
            usage: usage_index::UsageIndex::default(),
            artifacts: Default::default(),
            live: reads.live,
            view: reads.index,
            approvals: ApprovalTrees::new(sessions.hibernate_after, runs, default_mode),
            next_incarnation: 1,
            run_lookups: Default::default(),
            goals: None,
            port: None,
            directory: None,
            directory_loaded: false,
            takeover_looking: false,
            takeover_not_before: HashMap::new(),
        }
    }

    fn start_actor(&mut self, session_id: &str, opening: Opening, ctx: &mut Context<Self>) -> LiveSession {
        let incarnation = self.next_incarnation;
        self.next_incarnation += 1;
        let session_dir = self.data_dir.session_dir(session_id);
        let supervisor = self.port(ctx);
        let sessions = self.sessions;
        let id = session_id.to_owned();
        let producers = crate::session_actor::ProducerLane::new(self.run_context.clone());
        let meta = crate::published_meta::PublishedMeta::default();
        let usage = crate::published_usage::PublishedUsage::default();
        let (published, published_usage) = (meta.clone(), usage.clone());
        let build = move |_: &mut Context<SessionActor>| {
            SessionActor::new(id, session_dir, incarnation, supervisor, opening, sessions, producers)
                .publishing_to(published, published_usage)
        };
        let arbiter = (!self.arbiters.is_empty()).then(|| {
            let arbiter = self.arbiters[self.next_arbiter % self.arbiters.len()].clone();
            self.next_arbiter = self.next_arbiter.wrapping_add(1);
            arbiter
        });
        // Every connection reaches the actor through the live map's one address (`session_router.rs`): a mailbox
        // of no bound never parks it.
        let addr = crate::unbounded_mailbox::start_unbounded(arbiter.as_ref(), build);
        let live = LiveSession { port: SessionPort::new(&addr), addr, incarnation, meta, usage, arbiter };
        self.live.insert(session_id.to_owned(), live.clone());
        live
    }

    /// The supervisor's port, built once, for the actors it starts.
    fn port(&mut self, ctx: &mut Context<Self>) -> SupervisorPort {
        self.port.get_or_insert_with(|| SupervisorPort::new(&ctx.address())).clone()
    }
}

impl Actor for SessionSupervisor {
    type Context = Context<Self>;

    /// Builds the index on a blocking thread (it reads every session's cache or log) while messages wait, then
    /// interrupts the runs left in flight; from then on, checks now and then for idle trees' approval actors.
    fn started(&mut self, ctx: &mut Context<Self>) {
        let data_dir = self.data_dir.clone();
        let scan = async move { tokio::task::spawn_blocking(move || scan_sessions(&data_dir)).await };
        ctx.wait(scan.into_actor(self).map(|scanned, supervisor, ctx| {
            supervisor.index_scanned(scanned, ctx, RESCAN_FIRST_DELAY);
            tracing::info!(sessions = supervisor.index.len(), "session index built");
            supervisor.interrupt_runs_left_in_flight(ctx);
        }));
        let check_every = (self.sessions.hibernate_after / 2).clamp(Duration::from_millis(20), Duration::from_secs(5));
        ctx.run_interval(check_every, |supervisor, _| {
            let index = &supervisor.index;
            let root_of = |session_id: &str| {
                let meta = index.get(session_id)?;
                Some(meta.origin.root_session_id().unwrap_or(&meta.session_id).to_owned())
            };
            supervisor.approvals.forget_idle(root_of);
        });
    }
}

impl SessionSupervisor {
    /// The live actor of a session on disk, started (loading its log) when it has none or its actor is gone.
    fn open(&mut self, session_id: &str, ctx: &mut Context<Self>) -> Result<LiveSession, EngineError> {
        if let Some(live) = self.live.get(session_id)
            && live.addr.connected()
        {
            return Ok(live.clone());
        }
        self.meta(session_id)?;
        Ok(self.start_actor(session_id, Opening::Load, ctx))
    }
}

impl Handler<OpenSession> for SessionSupervisor {
    type Result = ResponseActFuture<Self, Result<SessionPort, EngineError>>;

    fn handle(&mut self, message: OpenSession, ctx: &mut Context<Self>) -> Self::Result {
        Box::pin(self.open_or_look_up(message.session_id, ctx).map(|opened, _, _| Ok(opened?.port)))
    }
}

impl Handler<OpenSessionActor> for SessionSupervisor {
    type Result = ResponseActFuture<Self, Result<LiveSession, EngineError>>;

    fn handle(&mut self, message: OpenSessionActor, ctx: &mut Context<Self>) -> Self::Result {
        self.open_or_look_up(message.session_id, ctx)
    }
}

impl Handler<SessionGone> for SessionSupervisor {
    type Result = ();

    fn handle(&mut self, message: SessionGone, _: &mut Context<Self>) {
        self.live.remove_if(&message.session_id, |_, live| live.port == message.port);
    }
}

impl Handler<SessionStopped> for SessionSupervisor {
    type Result = ();

    fn handle(&mut self, message: SessionStopped, _: &mut Context<Self>) {
        self.live.remove_if(&message.session_id, |_, live| live.incarnation == message.incarnation);
    }
}

impl Handler<ApprovalsFor> for SessionSupervisor {
    type Result = Result<ApprovalLease, EngineError>;

    fn handle(&mut self, message: ApprovalsFor, ctx: &mut Context<Self>) -> Self::Result {
        let root = self.root_of(&message.session_id)?;
        let port = self.port(ctx);
        // A tree's approval actor starts on the thread of the session that first needs it, so that the permission
        // check of each of that session's tool calls is answered without crossing threads (in a tree of one
        // session, every check).
        let arbiter = self.live.get(&message.session_id).and_then(|live| live.arbiter.clone());
        Ok(self.approvals.lease(&root, port, arbiter))
    }
}

impl Handler<SetPermissionMode> for SessionSupervisor {
    type Result = Result<(), EngineError>;

    fn handle(&mut self, message: SetPermissionMode, _: &mut Context<Self>) -> Self::Result {
        let root = self.root_of(&message.session_id)?;
        self.approvals.set_mode(&root, message.mode);
        Ok(())
    }
}

#[cfg(feature = "test-hooks")]
impl Handler<CountApprovals> for SessionSupervisor {
    type Result = MessageResult<CountApprovals>;

    fn handle(&mut self, _: CountApprovals, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.approvals.counts())
    }
}

impl Handler<DrainAll> for SessionSupervisor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: DrainAll, _: &mut Context<Self>) -> Self::Result {
        let sessions: Vec<LiveSession> = self.live.iter().map(|entry| entry.value().clone()).collect();
        Box::pin(async move {
            let drains = sessions.iter().map(|live| live.addr.send(Drain));
            for outcome in futures::future::join_all(drains).await {
                if let Ok(Err(error)) = outcome {
                    tracing::warn!(%error, "a session could not drain its log at shutdown");
                }
            }
        })
    }
}
