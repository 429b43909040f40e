//! `Engine`: the daemon's implementation of the protocol's [`ServerProtocol`], on top of the actors.
//!
//! Each handler validates what the protocol layer could not (paths, idempotency keys, selections against the
//! runtime snapshot), sends a typed message to the actor that owns the state, and maps its `EngineError` into a
//! JSON-RPC error through the one conversion in `error.rs`. Methods of the reference that later parts of the
//! engine will implement keep the trait's default answer, `not_implemented`.

mod admin;
mod compaction;
mod goals;
mod history;
mod metrics;
mod presence;
mod producers;
mod runs;
mod sessions;
mod skills;
mod status;
#[cfg(feature = "test-hooks")]
pub(crate) mod test_hooks;
mod tool_output;
mod usage;
pub use status::ConsoleCodeMinter;

use std::path::PathBuf;
use std::time::Duration;
use troupe_protocol::error_code::ErrorCode;

use actix::prelude::*;
use dashmap::DashMap;
use std::collections::BTreeMap;
use std::sync::Arc;
use troupe_protocol::notification::RuntimeChanged;
use troupe_protocol::server::{ServerContext, ServerProtocol};
use troupe_protocol::types::approval::{
    ApprovalListParams, ApprovalListResult, ApprovalRespondParams, ApprovalRespondResult,
};
use troupe_protocol::types::common::{Empty, SessionIdParams, SessionOrigin};
use troupe_protocol::types::events::{EventsSubscribeParams, EventsSubscribeResult};
use troupe_protocol::types::provider::{
    ProviderConnectParams, ProviderConnectResult, ProviderDisconnectParams, ProviderDisconnectResult,
};
use troupe_protocol::types::run::{
    RunCancelResult, RunIdParams, RunRecallSteerResult, RunStartParams, RunStartResult, RunSteerParams, RunSteerResult,
    RunToolStdinParams, RunToolStdinResult,
};
use troupe_protocol::types::runtime::{
    HandshakeParams, HandshakeResult, PROTOCOL_VERSION, RuntimeChangedParams, RuntimeSnapshotGetResult, ServerInfo,
};
use troupe_protocol::types::session::{
    SessionChildrenResult, SessionCreateParams, SessionListParams, SessionListResult, SessionRenameParams,
    SessionRenameResult, SessionResult, SessionTreeResult, SetPermissionModeParams,
};
use troupe_protocol::types::skills::{SkillProblemInfo, SkillsGetParams, SkillsGetResult, SkillsListResult};
use troupe_protocol::{Encoded, RpcError};
use troupe_runtime::config::{AgentConfig, PermissionsConfig, ToolSettings};
use troupe_runtime::data_dir::DataDir;
use troupe_runtime::policy::PermissionRule;
use troupe_runtime::provider_store::ProviderStore;
use troupe_runtime::redact::Secrets;
use troupe_runtime::sandbox::Sandbox;

use crate::approval_actor::{ListTreeApprovals, RespondInTree};
use crate::error::{EngineError, check_idempotency_key};
use crate::run_services::RunServices;
use crate::runtime_actor::{
    ConnectProvider, DisconnectProvider, GetSnapshot, RegisterConnection, RuntimeActor, UnregisterConnection,
};
use crate::session_actor::{CancelActiveRun, GetMeta, RecallSteer, Rename, SessionActor, SessionLimits, Subscribe};
use crate::session_router::SessionRouter;
use crate::session_supervisor::{
    ApprovalsFor, DrainAll, FindRunSession, GetTree, IndexedMeta, ListChildren, LiveSessions, SessionSupervisor,
    SetPermissionMode,
};
use skills::SessionSkills;

/// How the engine is set up.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub data_dir: DataDir,
    /// Agents from `config.toml`.
    pub agents: BTreeMap<String, AgentConfig>,
    /// Tool limits from `config.toml`.
    pub tools: ToolSettings,
    /// Permission rules from `config.toml`.
    pub permissions: PermissionsConfig,
    /// Sessions' memory bounds and idle time (an idle session with no subscribers stops after
    /// `hibernate_after`).
    pub sessions: SessionLimits,
    /// Threads that run session actors.
    pub session_threads: usize,
    /// The cwd of sessions created without one.
    pub default_cwd: PathBuf,
    /// The largest input of `run.start` and `run.steer`, in bytes.
    pub max_input_bytes: usize,
    /// The kernel's bounds on tool processes, built from `[sandbox]` (the daemon killed what a previous daemon
    /// left behind before starting the engine).
    pub sandbox: Arc<Sandbox>,
    /// Secrets masked in tool output (the daemon token; the engine adds connected providers' keys).
    pub secrets: Secrets,
    /// `[plugins.<name>]`: the plugin subprocesses started with the engine (`plugin_host`).
    pub plugins: BTreeMap<String, troupe_runtime::config::PluginConfig>,
    /// `[goals]`: the bound on automatic runs without checklist progress.
    pub goals: troupe_runtime::config::GoalsConfig,
    /// `[delegation]`: the `delegate` tool's depth and concurrency bounds.
    pub delegation: troupe_runtime::config::DelegationConfig,
    /// `[models]`: context windows and prices beyond the catalog's.
    pub models: troupe_runtime::config::ModelsConfig,
    /// `[compaction]`: automatic compaction of runs.
    pub compaction: troupe_runtime::config::CompactionConfig,
    /// `[titles]`: automatic session titles.
    pub titles: troupe_runtime::config::TitlesConfig,
}

/// The engine. Cheap to share: every field is an address or a shared map.
pub struct Engine {
    runtime: Addr<RuntimeActor>,
    supervisor: Addr<SessionSupervisor>,
    live: LiveSessions,
    default_cwd: PathBuf,
    max_input_bytes: usize,
    /// Bytes of events in one `events.subscribe` reply.
    replay_page_bytes: usize,
    /// Also holds the registry of active and recently ended runs (`run_registry.rs`), for `run.*` requests.
    services: Arc<RunServices>,
    /// Owned so that the session threads stop with the engine.
    session_arbiters: Vec<Arbiter>,
    /// The threads that write sessions' durable batches (`log_writers.rs`); stopped after the session threads.
    log_writers: crate::log_writers::LogWriters,
    /// One host per enabled plugin; stopped before the sessions drain.
    plugins: crate::plugin_host::PluginHosts,
    /// Runtime producer registrations and the plugins' recovery reports (`engine/producers.rs`).
    producers: Arc<crate::producers::ProducerRegistry>,
    /// Start time, connection count and listen address for `daemon.status` (`engine/status.rs`).
    status: status::StatusFacts,
    /// Who follows which session, for `session.presence` (`engine/presence.rs`).
    presence: Addr<crate::presence_actor::PresenceActor>,
}

impl Engine {
    /// Starts the actors (the supervisor builds the session index on a blocking thread before it answers anything).
    /// Must be called inside a running actix System. Reads `providers.json` here, before anything is served.
    pub fn start(config: EngineConfig) -> Result<Engine, EngineError> {
        crate::blocking_check::install();
        let store = ProviderStore::open(config.data_dir.root())
            .map_err(|error| EngineError::Internal { detail: error.to_string() })?;
        let agent_rules = config
            .agents
            .iter()
            .map(|(name, agent)| (name.clone(), agent.permissions.iter().map(PermissionRule::from).collect()))
            .collect();
        let mut services =
            RunServices::new(config.sandbox.clone(), config.secrets.clone(), config.permissions.clone(), agent_rules);
        services.tool_limits.shell_timeout = Duration::from_secs(config.tools.shell_timeout_secs);
        services.tool_limits.max_output_bytes = config.tools.max_output_bytes;
        services.configured_agents = config.agents.keys().cloned().collect();
        services.delegation = config.delegation;
        services.compaction = config.compaction;
        services.titles = config.titles;
        services.models.configure(config.models);
        let services = Arc::new(services);
        let log_writers = crate::log_writers::LogWriters::start(config.session_threads)
            .map_err(|error| EngineError::Internal { detail: format!("starting the log writer threads: {error}") })?;
        let session_arbiters: Vec<Arbiter> = (0..config.session_threads).map(|_| Arbiter::new()).collect();
        for arbiter in &session_arbiters {
            // Queued before any session actor can be started there, so every session finds its writers.
            arbiter.spawn_fn(log_writers.installer());
        }
        if session_arbiters.is_empty() {
            // Sessions then run on this thread's arbiter.
            log_writers.installer()();
        }
        let handles = session_arbiters.iter().map(Arbiter::handle).collect();
        let live: LiveSessions = Arc::new(DashMap::new());
        let goals_data_dir = config.data_dir.clone();
        let status = status::StatusFacts::new(config.data_dir.root().display().to_string());
        let runtime = RuntimeActor::new(store, config.agents, services.clone()).start();
        let run_context = crate::run_start::EngineRunContext {
            runtime: runtime.clone(),
            services: services.clone(),
            max_input_bytes: config.max_input_bytes,
        };
        let supervisor = SessionSupervisor::new(
            config.data_dir,
            config.sessions,
            handles,
            live.clone(),
            services.runs.clone(),
            Some(run_context),
            config.permissions.default_mode,
        )
        .start();
        supervisor.do_send(crate::session_supervisor::InstallGoals {
            runs: crate::goal_actor::GoalRuns {
                runtime: runtime.clone(),
                services: services.clone(),
                max_idle_runs: config.goals.max_idle_runs,
            },
            data_dir: goals_data_dir,
        });
        let producers: Arc<crate::producers::ProducerRegistry> = Default::default();
        producers.set_recovery_source(services.plugins.clone());
        let plugins = crate::plugin_host::PluginHosts::start(
            &config.plugins,
            services.plugins.clone(),
            crate::plugin_host::PluginContext {
                sessions: SessionRouter { supervisor: supervisor.clone(), live: live.clone() },
                producers: producers.clone(),
                max_body_bytes: config.max_input_bytes,
            },
        );
        Ok(Engine {
            plugins,
            runtime,
            supervisor,
            live,
            default_cwd: config.default_cwd,
            max_input_bytes: config.max_input_bytes,
            replay_page_bytes: config.sessions.replay_page_bytes,
            services,
            session_arbiters,
            log_writers,
            producers,
            status,
            presence: crate::presence_actor::PresenceActor::default().start(),
        })
    }

    /// Waits until every accepted operation is durable and stops the session threads and the log writers.
    pub async fn shutdown(&self) {
        // Plugins first: what they emit while stopping is still written.
        self.plugins.shutdown().await;
        let _ = self.supervisor.send(DrainAll).await;
        for arbiter in &self.session_arbiters {
            arbiter.stop();
        }
        // Every accepted batch is durable by now; the writers finish anything a stopping session still queued.
        self.log_writers.stop().await;
    }

    /// The configured plugins' statuses and ready tools.
    pub fn plugins(&self) -> &crate::plugin_tools::PluginDirectory {
        &self.services.plugins
    }

    /// Whether the session's actor is running (not hibernated or never opened).
    pub fn is_live(&self, session_id: &str) -> bool {
        self.live.get(session_id).is_some_and(|live| live.addr.connected())
    }

    /// Sends a request to a session's actor, starting the actor when needed; see [`SessionRouter::ask`].
    async fn ask_session<M, R>(&self, session_id: &str, message: impl FnMut() -> M) -> Result<R, EngineError>
    where
        M: Message<Result = Result<R, EngineError>> + Send + 'static,
        R: Send + 'static,
        SessionActor: Handler<M>,
    {
        self.router().ask(session_id, message).await
    }

    pub(crate) fn router(&self) -> SessionRouter {
        SessionRouter { supervisor: self.supervisor.clone(), live: self.live.clone() }
    }

    async fn supervisor_ask<M, R>(&self, message: M) -> Result<R, EngineError>
    where
        M: Message<Result = R> + Send + 'static,
        R: Send + 'static,
        SessionSupervisor: Handler<M>,
    {
        self.supervisor.send(message).await.map_err(|_| EngineError::ShuttingDown)
    }

    /// Refuses an input larger than `[limits] max_input_bytes`, before anything is written.
    fn check_input_size(&self, what: &str, input: &str) -> Result<(), RpcError> {
        if input.len() <= self.max_input_bytes {
            return Ok(());
        }
        let detail = format!(
            "{what} is {} bytes; at most {} are accepted (`[limits] max_input_bytes` in the daemon's config.toml): \
             put large material in a file in the session's directory and refer to it",
            input.len(),
            self.max_input_bytes
        );
        let fields =
            [("size", serde_json::Value::from(input.len())), ("limit", serde_json::Value::from(self.max_input_bytes))];
        Err(RpcError::invalid_params_typed(ErrorCode::InputTooLarge, &detail, &fields))
    }

    /// The session that owns `run_id`: from the registry when the run is active or ended recently (see
    /// `run_registry.rs`), else from the logs (`session_supervisor/run_lookup.rs`), so that a run that ended before
    /// this daemon started gets its session's answer for an ended run. Only an id no session started is unknown.
    async fn session_of_run(&self, run_id: &str) -> Result<String, EngineError> {
        if let Some(session_id) = self.services.runs.session_of(run_id) {
            return Ok(session_id);
        }
        let found = self.supervisor_ask(FindRunSession { run_id: run_id.to_owned() }).await?;
        let session_id = found.ok_or_else(|| EngineError::RunNotFound { run_id: run_id.to_owned() })?;
        // Remembered among the recently finished, so asking again does not search the logs again.
        self.services.runs.note_started(run_id, &session_id);
        Ok(session_id)
    }

    /// The canonical form of a requested cwd. Resolving it walks the file system, so it runs on a blocking thread.
    async fn resolve_cwd(&self, requested: Option<&str>) -> Result<String, EngineError> {
        let Some(requested) = requested else {
            return Ok(self.default_cwd.to_string_lossy().into_owned());
        };
        let invalid = |reason: &str| EngineError::InvalidCwd { cwd: requested.to_owned(), reason: reason.to_owned() };
        let path = PathBuf::from(requested);
        if !path.is_absolute() {
            return Err(invalid("it must be an absolute path"));
        }
        let resolved = tokio::task::spawn_blocking(move || {
            let canonical = path.canonicalize().map_err(|error| format!("it cannot be resolved ({error})"))?;
            if !canonical.is_dir() {
                return Err("it is not a directory".to_owned());
            }
            Ok(canonical)
        })
        .await
        .map_err(|error| EngineError::Internal { detail: format!("resolving the cwd failed: {error}") })?;
        let canonical = resolved.map_err(|reason| invalid(&reason))?;
        canonical.into_os_string().into_string().map_err(|_| invalid("it is not valid UTF-8"))
    }
}

impl ServerProtocol for Engine {
    fn connected(&self, _connection_id: u64) {
        self.status.connected();
    }

    fn disconnected(&self, connection_id: u64) {
        self.status.disconnected();
        self.runtime.do_send(UnregisterConnection { connection_id });
        self.presence.do_send(crate::presence_actor::ConnectionClosed { connection_id });
    }

    async fn handshake(&self, ctx: &ServerContext, _: HandshakeParams) -> Result<HandshakeResult, RpcError> {
        let snapshot = self
            .runtime
            .send(RegisterConnection { notifier: ctx.connection_notifier() })
            .await
            .map_err(|_| RpcError::from(EngineError::ShuttingDown))?;
        ctx.notify_after_reply::<RuntimeChanged>(&RuntimeChangedParams {
            previous_revision: None,
            snapshot,
            reasons: vec!["startup".to_owned()],
        });
        Ok(HandshakeResult {
            protocol_version: PROTOCOL_VERSION,
            server: ServerInfo { name: "troupe".to_owned(), version: env!("CARGO_PKG_VERSION").to_owned() },
        })
    }

    async fn runtime_snapshot_get(&self, _: &ServerContext, _: Empty) -> Result<RuntimeSnapshotGetResult, RpcError> {
        let snapshot = self.runtime.send(GetSnapshot).await.map_err(|_| RpcError::from(EngineError::ShuttingDown))?;
        Ok(RuntimeSnapshotGetResult { snapshot })
    }

    async fn session_create(&self, _: &ServerContext, params: SessionCreateParams) -> Result<SessionResult, RpcError> {
        self.create_session(params).await
    }

    async fn session_list(&self, _: &ServerContext, params: SessionListParams) -> Result<SessionListResult, RpcError> {
        self.list_sessions(params).await
    }

    async fn session_get(
        &self,
        _: &ServerContext,
        params: SessionIdParams,
    ) -> Result<Encoded<SessionResult>, RpcError> {
        self.get_session(params).await
    }

    async fn session_resume(&self, _: &ServerContext, params: SessionIdParams) -> Result<SessionResult, RpcError> {
        let session = self.ask_session(&params.session_id, || GetMeta).await?;
        Ok(SessionResult { session })
    }

    async fn session_rename(
        &self,
        _: &ServerContext,
        params: SessionRenameParams,
    ) -> Result<SessionRenameResult, RpcError> {
        check_idempotency_key("client_rename_id", &params.client_rename_id)?;
        let session = self
            .ask_session(&params.session_id, || Rename {
                client_rename_id: params.client_rename_id.clone(),
                change: params.change.clone(),
            })
            .await?;
        Ok(SessionRenameResult { client_rename_id: params.client_rename_id, session })
    }

    async fn session_children(
        &self,
        _: &ServerContext,
        params: SessionIdParams,
    ) -> Result<SessionChildrenResult, RpcError> {
        let children = self.supervisor_ask(ListChildren { session_id: params.session_id }).await??;
        Ok(SessionChildrenResult { children })
    }

    async fn session_tree(&self, _: &ServerContext, params: SessionIdParams) -> Result<SessionTreeResult, RpcError> {
        let (tree, mode) = self.supervisor_ask(GetTree { session_id: params.session_id }).await??;
        Ok(SessionTreeResult { tree, permission_mode: Some(mode) })
    }

    async fn session_set_permission_mode(
        &self,
        _: &ServerContext,
        params: SetPermissionModeParams,
    ) -> Result<Empty, RpcError> {
        self.supervisor_ask(SetPermissionMode { session_id: params.session_id, mode: params.mode }).await??;
        Ok(Empty {})
    }

    async fn session_presence(
        &self,
        ctx: &ServerContext,
        params: SessionIdParams,
    ) -> Result<troupe_protocol::types::presence::SessionPresenceResult, RpcError> {
        self.watch_presence(ctx, params).await
    }

    async fn session_presence_unsubscribe(
        &self,
        ctx: &ServerContext,
        params: SessionIdParams,
    ) -> Result<Empty, RpcError> {
        self.unwatch_presence(ctx, params).await
    }

    async fn approval_list(
        &self,
        _: &ServerContext,
        params: ApprovalListParams,
    ) -> Result<ApprovalListResult, RpcError> {
        let meta = self.supervisor_ask(IndexedMeta { session_id: params.root_session_id.clone() }).await??;
        if meta.origin != SessionOrigin::Root {
            return Err(EngineError::NotRootSession { session_id: params.root_session_id }.into());
        }
        let (_, approvals) = self.supervisor_ask(ApprovalsFor { session_id: params.root_session_id }).await??;
        Ok(approvals
            .send(ListTreeApprovals { status: params.status })
            .await
            .map_err(|_| EngineError::ShuttingDown)??)
    }

    async fn approval_respond(
        &self,
        ctx: &ServerContext,
        params: ApprovalRespondParams,
    ) -> Result<ApprovalRespondResult, RpcError> {
        check_idempotency_key("client_response_id", &params.client_response_id)?;
        let client_response_id = params.client_response_id.clone();
        let (_, approvals) = self.supervisor_ask(ApprovalsFor { session_id: params.session_id.clone() }).await??;
        let answered_by = format!("client:connection-{}", ctx.connection_id());
        let approval =
            approvals.send(RespondInTree { params, answered_by }).await.map_err(|_| EngineError::ShuttingDown)??;
        Ok(ApprovalRespondResult { client_response_id, approval })
    }

    async fn skills_list(&self, _: &ServerContext, params: SessionIdParams) -> Result<SkillsListResult, RpcError> {
        let SessionSkills { discovery, effects } = self.session_skills(&params.session_id, None).await?;
        let skills = discovery
            .skills
            .iter()
            .zip(&effects)
            .map(|(found, effect)| troupe_runtime::skills::describe(found, *effect))
            .collect();
        let problems = discovery
            .problems
            .iter()
            .map(|problem| SkillProblemInfo {
                source: problem.source,
                location: problem.location.to_string_lossy().into_owned(),
                reason: problem.reason.clone(),
            })
            .collect();
        Ok(SkillsListResult { skills, problems })
    }

    async fn skills_get(&self, _: &ServerContext, params: SkillsGetParams) -> Result<SkillsGetResult, RpcError> {
        let skills = self.session_skills(&params.session_id, None).await?;
        let Some((found, effect)) = skills.winner(&params.name) else {
            return Err(EngineError::SkillNotFound { name: params.name }.into());
        };
        if effect == troupe_protocol::types::skills::PermissionEffect::Deny {
            return Err(EngineError::SkillNotAllowed { name: params.name }.into());
        }
        Ok(SkillsGetResult {
            skill: troupe_runtime::skills::describe(found, effect),
            rendered: troupe_runtime::skills::render(&found.skill, &params.arguments),
        })
    }

    async fn events_subscribe(
        &self,
        ctx: &ServerContext,
        params: EventsSubscribeParams,
    ) -> Result<EventsSubscribeResult, RpcError> {
        // The reply carries at most one page of events; building it counts against the connection's budget,
        // so many pipelined subscribes build a few replies at a time.
        // Fails when the connection closed meanwhile (nobody would read the reply) or when a batch's subscribes
        // together would exceed the budget.
        ctx.reserve_reply_bytes(self.replay_page_bytes).await?;
        let result = self
            .ask_session(&params.session_id, || Subscribe {
                sink: ctx.event_sink(&params.session_id),
                cursor: params.cursor,
            })
            .await?;
        // Before the reply: a client that sees it and asks for the presence list finds itself in it.
        self.presence
            .do_send(crate::presence_actor::Subscribed { session_id: params.session_id, connection: ctx.connection() });
        Ok(result)
    }

    async fn tool_output_read(
        &self,
        _: &ServerContext,
        params: troupe_protocol::types::tool_output::ToolOutputReadParams,
    ) -> Result<troupe_protocol::types::tool_output::ToolOutputReadResult, RpcError> {
        self.read_tool_output(params).await
    }

    async fn tools_list(
        &self,
        _: &ServerContext,
        _: Empty,
    ) -> Result<troupe_protocol::types::tool_output::ToolsListResult, RpcError> {
        Ok(troupe_protocol::types::tool_output::ToolsListResult { tools: self.services.tool_descriptors() })
    }

    async fn tool_output_subscribe(
        &self,
        ctx: &ServerContext,
        params: troupe_protocol::types::tool_output::ToolOutputSubscribeParams,
    ) -> Result<troupe_protocol::types::tool_output::ToolOutputSubscribeResult, RpcError> {
        self.subscribe_tool_output(ctx, params).await
    }

    async fn tool_output_unsubscribe(
        &self,
        ctx: &ServerContext,
        params: troupe_protocol::types::tool_output::ToolOutputUnsubscribeParams,
    ) -> Result<troupe_protocol::types::tool_output::ToolOutputUnsubscribeResult, RpcError> {
        self.unsubscribe_tool_output(ctx, params)
    }

    async fn provider_connect(
        &self,
        _: &ServerContext,
        params: ProviderConnectParams,
    ) -> Result<ProviderConnectResult, RpcError> {
        check_idempotency_key("client_connect_id", &params.client_connect_id)?;
        Ok(self.runtime.send(ConnectProvider { params }).await.map_err(|_| EngineError::ShuttingDown)??)
    }

    async fn provider_disconnect(
        &self,
        _: &ServerContext,
        params: ProviderDisconnectParams,
    ) -> Result<ProviderDisconnectResult, RpcError> {
        check_idempotency_key("client_request_id", &params.client_request_id)?;
        Ok(self.runtime.send(DisconnectProvider { params }).await.map_err(|_| EngineError::ShuttingDown)??)
    }

    async fn run_start(&self, _: &ServerContext, params: RunStartParams) -> Result<RunStartResult, RpcError> {
        self.start_run(params).await
    }

    async fn run_steer(&self, _: &ServerContext, params: RunSteerParams) -> Result<RunSteerResult, RpcError> {
        self.steer_run(params).await
    }

    async fn run_recall_steer(&self, _: &ServerContext, params: RunIdParams) -> Result<RunRecallSteerResult, RpcError> {
        let session_id = self.session_of_run(&params.run_id).await?;
        let recalled = self.ask_session(&session_id, || RecallSteer { run_id: params.run_id.clone() }).await?;
        Ok(RunRecallSteerResult { recalled })
    }

    async fn run_cancel(&self, _: &ServerContext, params: RunIdParams) -> Result<RunCancelResult, RpcError> {
        let session_id = self.session_of_run(&params.run_id).await?;
        let cancelled = self.ask_session(&session_id, || CancelActiveRun { run_id: params.run_id.clone() }).await?;
        Ok(RunCancelResult { cancelled })
    }

    async fn session_producers(
        &self,
        _: &ServerContext,
        params: SessionIdParams,
    ) -> Result<troupe_protocol::types::producers::SessionProducersResult, RpcError> {
        Ok(self.producers_of(&params.session_id).await?)
    }

    async fn session_compact(
        &self,
        _: &ServerContext,
        params: troupe_protocol::types::session::SessionCompactParams,
    ) -> Result<troupe_protocol::types::session::SessionCompactResult, RpcError> {
        self.compact(params).await
    }

    async fn session_revert(
        &self,
        _: &ServerContext,
        params: troupe_protocol::types::session::SessionRevertParams,
    ) -> Result<SessionResult, RpcError> {
        self.revert(params).await
    }

    async fn session_fork(
        &self,
        _: &ServerContext,
        params: troupe_protocol::types::session::SessionForkParams,
    ) -> Result<troupe_protocol::types::session::SessionForkResult, RpcError> {
        self.fork(params).await
    }

    async fn session_goal_get(
        &self,
        _: &ServerContext,
        params: SessionIdParams,
    ) -> Result<troupe_protocol::types::goal::GoalGetResult, RpcError> {
        self.goal_get(params).await
    }

    async fn session_goal_set(
        &self,
        _: &ServerContext,
        params: troupe_protocol::types::goal::GoalSetParams,
    ) -> Result<troupe_protocol::types::goal::GoalResult, RpcError> {
        self.goal_set(params).await
    }

    async fn session_goal_lifecycle(
        &self,
        _: &ServerContext,
        params: troupe_protocol::types::goal::GoalLifecycleParams,
    ) -> Result<troupe_protocol::types::goal::GoalResult, RpcError> {
        self.goal_lifecycle(params).await
    }

    async fn session_usage(
        &self,
        _: &ServerContext,
        params: SessionIdParams,
    ) -> Result<troupe_protocol::types::usage::SessionUsageResult, RpcError> {
        self.usage_of_session(params).await
    }

    async fn agent_usage(
        &self,
        _: &ServerContext,
        params: troupe_protocol::types::usage::AgentUsageParams,
    ) -> Result<troupe_protocol::types::usage::AgentUsageResult, RpcError> {
        self.usage_of_agent(params).await
    }

    async fn usage_global(
        &self,
        _: &ServerContext,
        _: Empty,
    ) -> Result<troupe_protocol::types::usage::GlobalUsageResult, RpcError> {
        self.usage_of_everything().await
    }

    async fn session_tree_usage(
        &self,
        _: &ServerContext,
        params: SessionIdParams,
    ) -> Result<troupe_protocol::types::usage::SessionTreeUsageResult, RpcError> {
        self.usage_of_tree(params).await
    }

    async fn session_archive(
        &self,
        _: &ServerContext,
        params: troupe_protocol::types::session::SessionArchiveParams,
    ) -> Result<SessionResult, RpcError> {
        self.archive_session(params).await
    }

    async fn session_delete(
        &self,
        _: &ServerContext,
        params: SessionIdParams,
    ) -> Result<troupe_protocol::types::session::SessionDeleteResult, RpcError> {
        self.delete_session(params).await
    }

    async fn daemon_status(
        &self,
        _: &ServerContext,
        _: Empty,
    ) -> Result<troupe_protocol::types::daemon::DaemonStatusResult, RpcError> {
        self.daemon_status_now().await
    }

    async fn console_login_code(
        &self,
        context: &ServerContext,
        _: Empty,
    ) -> Result<troupe_protocol::types::daemon::ConsoleLoginCodeResult, RpcError> {
        self.console_login_code_now(context.authority())
    }

    async fn run_tool_stdin(
        &self,
        _: &ServerContext,
        params: RunToolStdinParams,
    ) -> Result<RunToolStdinResult, RpcError> {
        self.tool_stdin(params).await
    }
}
