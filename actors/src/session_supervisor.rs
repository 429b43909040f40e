//! `SessionSupervisor`: finds or starts the `SessionActor` of a session, and knows every session on disk.
//!
//! It keeps an index of all sessions' metadata (built at start from the `meta.json` caches, or from the logs
//! where a cache is missing or stale, then kept current by the session actors), so listing and tree queries
//! never load logs; next to it, every session's spent usage (`usage_index`), so the usage rollups do not either.
//! It is the only place that starts session actors, which is what guarantees one writer per
//! log: a session is started at most once at a time, and a crashed or hibernated actor is replaced only after
//! its mailbox is gone. The engine reads the live registry directly (a shared map only this actor writes) and
//! comes here when a session is not live.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use dashmap::DashMap;
use troupe_protocol::types::common::{RunSelection, SessionMeta, SessionOrigin};
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::session::{PermissionMode, SessionChildSummary, SessionTreeNode};
use troupe_runtime::clock::{new_id, now_rfc3339};
use troupe_runtime::data_dir::DataDir;
use troupe_runtime::event_log::{self, EventStore};
use troupe_runtime::fork::FORK_DIR_SUFFIX;
use troupe_runtime::meta_cache;
use troupe_runtime::session_state::SessionState;
use troupe_runtime::usage_book::UsageSummary;

use crate::approval_trees::ApprovalTrees;
use crate::error::EngineError;
use crate::run_registry::RunRegistry;
use crate::session_actor::{Drain, GetMeta, Opening, SessionActor, SessionLimits};

mod children;
mod goals;
mod removal;
mod run_lookup;
mod usage;
mod usage_index;
pub use crate::ports::supervisor::{
    ApprovalsFor, ChildRefused, CreateChildSession, DELEGATE_ORIGIN, GetTree, GoalReport, OpenSession, SessionGone,
    SessionMetaChanged, SessionStopped, SessionUsageChanged,
};
use crate::ports::{ApprovalLease, SessionPort, SupervisorPort};
pub use goals::InstallGoals;
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
}

/// The registry of live session actors: written only by the supervisor, read by the engine.
pub type LiveSessions = Arc<DashMap<String, LiveSession>>;

/// Creates a root session and replies once its log is durable.
#[derive(Message)]
#[rtype(result = "Result<SessionMeta, EngineError>")]
pub struct CreateSession {
    pub selection: RunSelection,
    pub cwd: String,
}

/// The session's live actor, starting it (loading its log) when it is not live. For the router, above
/// the session actors; the actors below get its port (`OpenSession`).
#[derive(Message)]
#[rtype(result = "Result<LiveSession, EngineError>")]
pub struct OpenSessionActor {
    pub session_id: String,
}

/// How many sessions known on disk are loaded and how many are not (`daemon.status`).
#[derive(Message)]
#[rtype(result = "SessionCounts")]
pub struct CountSessions;

/// The answer to [`CountSessions`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionCounts {
    pub live: usize,
    pub hibernated: usize,
}

/// The indexed metadata of one session, without loading it.
#[derive(Message)]
#[rtype(result = "Result<SessionMeta, EngineError>")]
pub struct IndexedMeta {
    pub session_id: String,
}

/// Root sessions, most recently active first, optionally only those with this exact cwd; archived ones only
/// when asked.
#[derive(Message)]
#[rtype(result = "Vec<SessionMeta>")]
pub struct ListRootSessions {
    pub cwd: Option<String>,
    pub include_archived: bool,
}

#[derive(Message)]
#[rtype(result = "Result<Vec<SessionChildSummary>, EngineError>")]
pub struct ListChildren {
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
    /// Direct children of each session, in creation order.
    children: HashMap<String, Vec<String>>,
    /// Child sessions being created, by the root of their tree (`children.rs`); those already indexed count once.
    creating_children: HashMap<String, std::collections::HashSet<String>>,
    /// Every session's spent usage (`usage_index`), for the usage rollups.
    usage: usage_index::UsageIndex,
    live: LiveSessions,
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
}

impl SessionSupervisor {
    /// A supervisor with an empty index: it builds the index from the data directory when it starts, on a blocking
    /// thread, before it handles any message. `runs` tells which trees have a run in flight; trees start in
    /// `default_mode` (`[permissions] default_mode`).
    pub fn new(
        data_dir: DataDir,
        sessions: SessionLimits,
        arbiters: Vec<ArbiterHandle>,
        live: LiveSessions,
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
            children: HashMap::new(),
            creating_children: HashMap::new(),
            usage: usage_index::UsageIndex::default(),
            live,
            approvals: ApprovalTrees::new(sessions.hibernate_after, runs, default_mode),
            next_incarnation: 1,
            run_lookups: Default::default(),
            goals: None,
            port: None,
        }
    }

    /// Runs that were in flight when the daemon stopped get `run_interrupted` now: opening their sessions loads
    /// the logs, and a session that finds an active run without an actor records the interruption.
    /// Indexes what a scan of the sessions directory found. A scan that could not read the directory is tried again
    /// after `retry_in`, then less and less often, until one succeeds: otherwise every session on disk would stay
    /// unknown (unlisted, `session_not_found`) until the next restart, although the directory became readable.
    fn index_scanned(
        &mut self,
        scanned: Result<std::io::Result<Vec<(SessionMeta, UsageSummary)>>, tokio::task::JoinError>,
        ctx: &mut Context<Self>,
        retry_in: Duration,
    ) {
        let error = match scanned {
            Ok(Ok(sessions)) => {
                for (meta, usage) in sessions {
                    // A session created or changed since the scan began is known better already.
                    if !self.index.contains_key(&meta.session_id) {
                        self.usage.set(&meta.session_id, usage);
                        self.index_meta(meta);
                    }
                }
                return;
            }
            Ok(Err(error)) => error.to_string(),
            Err(error) => format!("the scanning thread failed: {error}"),
        };
        tracing::error!(
            %error, retry_in_ms = retry_in.as_millis() as u64,
            "cannot read the sessions directory; its sessions are unknown until it can be read"
        );
        ctx.run_later(retry_in, move |supervisor, ctx| {
            let data_dir = supervisor.data_dir.clone();
            let scan = async move { tokio::task::spawn_blocking(move || scan_sessions(&data_dir)).await };
            ctx.spawn(scan.into_actor(supervisor).map(move |scanned, supervisor, ctx| {
                let known = supervisor.index.len();
                supervisor.index_scanned(scanned, ctx, (retry_in * 2).min(RESCAN_MAX_DELAY));
                if supervisor.index.len() > known {
                    tracing::info!(sessions = supervisor.index.len(), "session index built");
                    supervisor.interrupt_runs_left_in_flight(ctx);
                }
            }));
        });
    }

    fn interrupt_runs_left_in_flight(&mut self, ctx: &mut Context<Self>) {
        let running: Vec<String> = self
            .index
            .values()
            .filter(|meta| meta.status == troupe_protocol::types::common::SessionStatus::Running)
            .map(|meta| meta.session_id.clone())
            .collect();
        for session_id in running {
            if self.live.contains_key(&session_id) {
                // Its actor is up already (a later scan found nothing new about it): it closed the run when it loaded.
                continue;
            }
            tracing::info!(%session_id, "interrupting a run left in flight");
            self.start_actor(&session_id, Opening::Load, ctx);
        }
    }

    fn index_meta(&mut self, meta: SessionMeta) {
        if !self.index.contains_key(&meta.session_id)
            && let Some(parent) = meta.origin.parent_session_id()
        {
            self.children.entry(parent.to_owned()).or_default().push(meta.session_id.clone());
        }
        self.index.insert(meta.session_id.clone(), meta);
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
        let published = meta.clone();
        let build = move |_: &mut Context<SessionActor>| {
            SessionActor::new(id, session_dir, incarnation, supervisor, opening, sessions, producers)
                .publishing_to(published)
        };
        let addr = if self.arbiters.is_empty() {
            SessionActor::create(build)
        } else {
            let arbiter = &self.arbiters[self.next_arbiter % self.arbiters.len()];
            self.next_arbiter = self.next_arbiter.wrapping_add(1);
            SessionActor::start_in_arbiter(arbiter, build)
        };
        let live = LiveSession { port: SessionPort::new(&addr), addr, incarnation, meta };
        self.live.insert(session_id.to_owned(), live.clone());
        live
    }

    /// The supervisor's port, built once, for the actors it starts.
    fn port(&mut self, ctx: &mut Context<Self>) -> SupervisorPort {
        self.port.get_or_insert_with(|| SupervisorPort::new(&ctx.address())).clone()
    }

    /// Every root session on disk.
    pub(crate) fn root_session_ids(&self) -> Vec<String> {
        let roots = self.index.values().filter(|meta| meta.origin == SessionOrigin::Root);
        roots.map(|meta| meta.session_id.clone()).collect()
    }

    fn meta(&self, session_id: &str) -> Result<&SessionMeta, EngineError> {
        self.index.get(session_id).ok_or_else(|| EngineError::SessionNotFound { session_id: session_id.to_owned() })
    }

    fn root_of(&self, session_id: &str) -> Result<String, EngineError> {
        let meta = self.meta(session_id)?;
        Ok(meta.origin.root_session_id().unwrap_or(&meta.session_id).to_owned())
    }

    fn tree(&self, session_id: &str, visited: &mut HashSet<String>) -> Result<SessionTreeNode, EngineError> {
        let session = self.meta(session_id)?.clone();
        visited.insert(session_id.to_owned());
        let mut children = Vec::new();
        for child in self.children.get(session_id).into_iter().flatten() {
            // A damaged index must not loop forever.
            if !visited.contains(child) {
                children.push(self.tree(child, visited)?);
            }
        }
        Ok(SessionTreeNode { session, children })
    }
}

/// The first wait before the sessions directory is read again after it could not be read at start; doubled at each
/// failure up to [`RESCAN_MAX_DELAY`].
const RESCAN_FIRST_DELAY: Duration = Duration::from_millis(250);
const RESCAN_MAX_DELAY: Duration = Duration::from_secs(10);

/// Reads every session's metadata and spent usage: the cache when it matches the log's length, else the log
/// itself (and then refreshes the cache). Sessions whose log cannot be projected are logged and left out. An error
/// when the sessions directory exists but cannot be read (its permissions, an I/O error): then nothing is known yet.
fn scan_sessions(data_dir: &DataDir) -> std::io::Result<Vec<(SessionMeta, UsageSummary)>> {
    let entries = match std::fs::read_dir(data_dir.sessions_dir()) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error),
    };
    let mut sessions = Vec::new();
    for entry in entries.flatten() {
        let session_dir = entry.path();
        let Some(session_id) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if !session_dir.is_dir() {
            continue;
        }
        if session_id.starts_with('.') {
            // A fork being copied (`.<id>.fork`) when the daemon stopped: never renamed into place, so it is not a
            // session. Removed so it does not accumulate.
            if session_id.ends_with(FORK_DIR_SUFFIX) {
                let _ = std::fs::remove_dir_all(&session_dir);
            }
            // A deletion a crash interrupted after its rename (`removal`): the session is already gone.
            if removal::is_deletion_staging(&session_id) {
                tracing::info!(path = %session_dir.display(), "removing a deleted session's leftover directory");
                let _ = std::fs::remove_dir_all(&session_dir);
            }
            continue;
        }
        let log_len = meta_cache::log_len(&session_dir);
        if let Some(cached) = meta_cache::read(&session_dir)
            && Some(cached.log_len_bytes) == log_len
            && cached.meta.session_id == session_id
        {
            sessions.push((cached.meta, cached.usage));
            continue;
        }
        // Streamed: the projection is built line by line, no event is kept.
        let mut projector = SessionState::projector();
        match event_log::open(&session_dir, 0, |event| projector.apply(event)) {
            Ok(opened) => {
                let fallback_time = event_log::modified_rfc3339(&session_dir);
                let mut state = projector.finish(&session_id, opened.skipped, &fallback_time);
                if let Err(error) = troupe_runtime::branch::settle_loaded(&mut state, &*opened.store.reader()) {
                    tracing::warn!(%session_id, %error, "could not read a reverted session's visible events");
                }
                let (meta, usage) = (state.meta(), state.usage.summary().clone());
                if let Err(error) = meta_cache::write(&session_dir, &meta, &usage, opened.store.len_bytes()) {
                    tracing::warn!(%session_id, %error, "could not write the metadata cache");
                }
                sessions.push((meta, usage));
            }
            Err(troupe_runtime::error::RuntimeError::SessionNotFound { .. }) => {
                tracing::warn!(%session_id, "skipping a session directory without an event log")
            }
            Err(error) => {
                // The log is there but cannot be read now (permissions, a directory in its place, an I/O error).
                // The session stays indexed, its damage reported, so that requests reach it: each tries to load it
                // again and answers with the error until the file is repaired, with no restart needed.
                tracing::warn!(%session_id, %error, "a session's log cannot be opened; it stays listed");
                let fallback_time = event_log::modified_rfc3339(&session_dir);
                let skipped = vec![troupe_protocol::types::common::SkippedEvent {
                    seq: Some(1),
                    line: None,
                    reason: format!("the log could not be opened: {error}"),
                }];
                let meta = SessionState::projector().finish(&session_id, skipped, &fallback_time).meta();
                sessions.push((meta, UsageSummary::default()));
            }
        }
    }
    Ok(sessions)
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

impl Handler<CreateSession> for SessionSupervisor {
    type Result = ResponseActFuture<Self, Result<SessionMeta, EngineError>>;

    fn handle(&mut self, message: CreateSession, ctx: &mut Context<Self>) -> Self::Result {
        let session_id = new_id();
        let first = StoredEvent {
            session_id: session_id.clone(),
            run_id: None,
            seq: 1,
            timestamp: now_rfc3339(),
            origin: Some("user".to_owned()),
            payload: EventPayload::SessionCreated {
                origin: SessionOrigin::Root,
                cwd: message.cwd,
                selection: message.selection,
            },
        };
        self.start_new_session(session_id, Opening::Create { first: Box::new(first) }, ctx)
    }
}

impl SessionSupervisor {
    /// Starts the actor of a session that is not on disk yet and indexes the session once its log is durable.
    pub(crate) fn start_new_session(
        &mut self,
        session_id: String,
        opening: Opening,
        ctx: &mut Context<Self>,
    ) -> ResponseActFuture<Self, Result<SessionMeta, EngineError>> {
        let addr = self.start_actor(&session_id, opening, ctx).addr;
        Box::pin(addr.send(GetMeta).into_actor(self).map(move |reply, supervisor, _| {
            let created = reply.unwrap_or_else(|_| {
                Err(EngineError::Unavailable {
                    session_id: session_id.clone(),
                    detail: "the new session stopped while starting".into(),
                })
            });
            match &created {
                Ok(meta) => supervisor.index_meta(meta.clone()),
                Err(_) => {
                    supervisor.live.remove(&session_id);
                }
            }
            created
        }))
    }
}

/// `session.fork`: a new root session whose log starts with `source`'s prefix; replies once it is durable.
#[derive(Message)]
#[rtype(result = "Result<SessionMeta, EngineError>")]
pub struct ForkSession {
    pub source: troupe_runtime::fork::ForkSource,
}

impl Handler<ForkSession> for SessionSupervisor {
    type Result = ResponseActFuture<Self, Result<SessionMeta, EngineError>>;

    fn handle(&mut self, message: ForkSession, ctx: &mut Context<Self>) -> Self::Result {
        self.start_new_session(new_id(), Opening::Fork { source: Box::new(message.source) }, ctx)
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
    type Result = Result<SessionPort, EngineError>;

    fn handle(&mut self, message: OpenSession, ctx: &mut Context<Self>) -> Self::Result {
        Ok(self.open(&message.session_id, ctx)?.port)
    }
}

impl Handler<OpenSessionActor> for SessionSupervisor {
    type Result = Result<LiveSession, EngineError>;

    fn handle(&mut self, message: OpenSessionActor, ctx: &mut Context<Self>) -> Self::Result {
        self.open(&message.session_id, ctx)
    }
}

impl Handler<SessionGone> for SessionSupervisor {
    type Result = ();

    fn handle(&mut self, message: SessionGone, _: &mut Context<Self>) {
        self.live.remove_if(&message.session_id, |_, live| live.port == message.port);
    }
}

impl Handler<SessionMetaChanged> for SessionSupervisor {
    type Result = ();

    fn handle(&mut self, message: SessionMetaChanged, _: &mut Context<Self>) {
        // A deleted session's last reports may still be queued here (`removal`: its actor reported while it was
        // loaded or sealed for the deletion); they must not bring it back. Any other session that reports is
        // indexed or live (a new one is live before its first report).
        let session_id = &message.meta.session_id;
        if !self.index.contains_key(session_id) && !self.live.contains_key(session_id) {
            return;
        }
        self.index_meta(message.meta);
    }
}

impl Handler<SessionStopped> for SessionSupervisor {
    type Result = ();

    fn handle(&mut self, message: SessionStopped, _: &mut Context<Self>) {
        self.live.remove_if(&message.session_id, |_, live| live.incarnation == message.incarnation);
    }
}

impl Handler<IndexedMeta> for SessionSupervisor {
    type Result = Result<SessionMeta, EngineError>;

    fn handle(&mut self, message: IndexedMeta, _: &mut Context<Self>) -> Self::Result {
        self.meta(&message.session_id).cloned()
    }
}

impl Handler<CountSessions> for SessionSupervisor {
    type Result = MessageResult<CountSessions>;

    fn handle(&mut self, _: CountSessions, _: &mut Context<Self>) -> Self::Result {
        let live = self.index.keys().filter(|session_id| self.live.contains_key(*session_id)).count();
        MessageResult(SessionCounts { live, hibernated: self.index.len() - live })
    }
}

impl Handler<ListRootSessions> for SessionSupervisor {
    type Result = MessageResult<ListRootSessions>;

    fn handle(&mut self, message: ListRootSessions, _: &mut Context<Self>) -> Self::Result {
        let mut sessions: Vec<SessionMeta> = self
            .index
            .values()
            .filter(|meta| meta.origin == SessionOrigin::Root)
            .filter(|meta| message.cwd.as_ref().is_none_or(|cwd| &meta.cwd == cwd))
            .filter(|meta| message.include_archived || !meta.archived)
            .cloned()
            .collect();
        // RFC 3339 UTC timestamps of one format sort chronologically as strings.
        sessions
            .sort_by(|a, b| b.last_activity_at.cmp(&a.last_activity_at).then_with(|| a.session_id.cmp(&b.session_id)));
        MessageResult(sessions)
    }
}

impl Handler<ListChildren> for SessionSupervisor {
    type Result = Result<Vec<SessionChildSummary>, EngineError>;

    fn handle(&mut self, message: ListChildren, _: &mut Context<Self>) -> Self::Result {
        self.meta(&message.session_id)?;
        Ok(self
            .children
            .get(&message.session_id)
            .into_iter()
            .flatten()
            .filter_map(|child| self.index.get(child))
            .map(|meta| SessionChildSummary {
                session_id: meta.session_id.clone(),
                agent: meta.creation_selection.agent.clone(),
                title: meta.title.clone(),
                status: meta.status,
            })
            .collect())
    }
}

impl Handler<GetTree> for SessionSupervisor {
    type Result = Result<(SessionTreeNode, PermissionMode), EngineError>;

    fn handle(&mut self, message: GetTree, _: &mut Context<Self>) -> Self::Result {
        let tree = self.tree(&message.session_id, &mut HashSet::new())?;
        let root = self.root_of(&message.session_id)?;
        Ok((tree, self.approvals.mode(&root)))
    }
}

impl Handler<ApprovalsFor> for SessionSupervisor {
    type Result = Result<(String, ApprovalLease), EngineError>;

    fn handle(&mut self, message: ApprovalsFor, ctx: &mut Context<Self>) -> Self::Result {
        let root = self.root_of(&message.session_id)?;
        let port = self.port(ctx);
        let approvals = self.approvals.lease(&root, port);
        Ok((root, approvals))
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
