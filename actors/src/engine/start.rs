//! Building the engine: [`EngineConfig`] and [`Engine::start`], which starts the actors, the session threads,
//! the log writers and the plugins, and wires them together.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use dashmap::DashMap;
use troupe_runtime::config::{AgentConfig, PermissionsConfig, ToolSettings};
use troupe_runtime::data_dir::DataDir;
use troupe_runtime::policy::PermissionRule;
use troupe_runtime::provider_store::ProviderStore;
use troupe_runtime::redact::Secrets;
use troupe_runtime::sandbox::Sandbox;

use super::{Engine, status};
use crate::error::EngineError;
use crate::run_services::RunServices;
use crate::runtime_actor::RuntimeActor;
use crate::session_actor::SessionLimits;
use crate::session_router::SessionRouter;
use crate::session_supervisor::{LiveSessions, SessionSupervisor};

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
    /// How old an artifact no session names must be before it is removed (`[limits] artifact_grace_secs`); on a
    /// single node only (`session_supervisor/artifacts.rs`).
    pub artifact_grace: Duration,
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
    /// `[mcp_servers.<name>]`: the MCP servers whose tools runs offer (`troupe_runtime::mcp`).
    pub mcp_servers: BTreeMap<String, troupe_runtime::config::McpServerConfig>,
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
    /// Where session logs are replicated before an append is durable: the cluster's JetStream, or `None` on a
    /// single node.
    pub log_replica: Option<Arc<dyn troupe_runtime::event_log::LogReplica>>,
    /// Where running tools' live output is shared with the other nodes (a cluster), or `None` on a single node.
    pub live_output: Option<Arc<dyn troupe_runtime::live_output_share::LiveOutputShare>>,
    /// The cluster's session directory: every node's sessions are listed, and this node's published. `None` on a
    /// single node.
    pub session_directory: Option<Arc<dyn troupe_runtime::session_directory::SessionDirectory>>,
    /// When this node takes over a dead node's sessions (`[cluster] takeover`).
    pub takeover: troupe_runtime::config::cluster::Takeover,
    /// Where this node's presence lists go and other nodes' come from (a cluster); `None` on a single node.
    pub presence_share: Option<Arc<dyn troupe_runtime::presence_share::PresenceShare>>,
    /// The cluster's shared provider connections: a connection made through any node is made on every node. `None`
    /// on a single node.
    pub provider_share: Option<Arc<dyn troupe_runtime::provider_share::ProviderShare>>,
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
        services.tool_limits.web_fetch_local = config.tools.web_fetch_local;
        services.tool_limits.shell_snapshots = config.tools.shell_snapshots;
        services.configured_agents = config.agents.keys().cloned().collect();
        services.delegation = config.delegation;
        services.compaction = config.compaction;
        services.titles = config.titles;
        services.log_replica = config.log_replica;
        services.live_output = config.live_output;
        services.models.configure(config.models);
        // On this thread, which lives as long as the engine: the servers' processes die when it ends.
        services.mcp = troupe_runtime::mcp::McpServers::start(&config.mcp_servers, config.sandbox.clone());
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
        let index_view = crate::index_view::IndexView::new(config.session_directory.is_none());
        let goals_data_dir = config.data_dir.clone();
        let status = status::StatusFacts::new(config.data_dir.root().display().to_string());
        let runtime = RuntimeActor::new(store, config.agents, services.clone()).start();
        if let Some(share) = config.provider_share {
            runtime.do_send(crate::runtime_actor::InstallProviderShare { share });
        }
        let run_context = crate::run_start::EngineRunContext {
            runtime: runtime.clone(),
            services: services.clone(),
            max_input_bytes: config.max_input_bytes,
        };
        let supervisor = SessionSupervisor::new(
            config.data_dir,
            config.sessions,
            handles,
            crate::session_supervisor::EngineReads { live: live.clone(), index: index_view.clone() },
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
        let node = config.session_directory.as_ref().map(|directory| directory.node().to_owned());
        match config.session_directory {
            Some(directory) => {
                supervisor.do_send(crate::session_supervisor::InstallDirectory { directory, takeover: config.takeover })
            }
            // Artifacts are collected on a single node only: a cluster node's files are its own, while its
            // sessions may move to another node.
            None => supervisor
                .do_send(crate::session_supervisor::InstallArtifactCollection { grace: config.artifact_grace }),
        }
        let router = SessionRouter { supervisor, live };
        let producers: Arc<crate::producers::ProducerRegistry> = Default::default();
        producers.set_recovery_source(services.plugins.clone());
        let plugins = crate::plugin_host::PluginHosts::start(
            &config.plugins,
            services.plugins.clone(),
            crate::plugin_host::PluginContext {
                sessions: router.clone(),
                producers: producers.clone(),
                max_body_bytes: config.max_input_bytes,
            },
        );
        Ok(Engine {
            plugins,
            runtime,
            router,
            index_view,
            default_cwd: config.default_cwd,
            max_input_bytes: config.max_input_bytes,
            replay_page_bytes: config.sessions.replay_page_bytes,
            services,
            session_arbiters,
            log_writers,
            producers,
            status,
            presence: match config.presence_share {
                Some(share) => crate::presence_actor::PresenceActor::shared(share),
                None => crate::presence_actor::PresenceActor::default(),
            }
            .start(),
            node,
            forwarder: std::sync::OnceLock::new(),
        })
    }
}
