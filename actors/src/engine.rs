//! `Engine`: the daemon's implementation of the protocol's
//! [`ServerProtocol`](troupe_protocol::server::ServerProtocol), on top of the actors.
//!
//! Each handler validates what the protocol layer could not (paths, idempotency keys, selections against the
//! runtime snapshot), sends a typed message to the actor that owns the state, and maps its `EngineError` into a
//! JSON-RPC error through the one conversion in `error.rs`. Methods of the reference that later parts of the
//! engine will implement keep the trait's default answer, `not_implemented`.
//!
//! `engine/start.rs` builds the engine and its actors; `engine/dispatch.rs` hands each method to its handler, in
//! the file of its concern (`engine/runs.rs`, `engine/sessions.rs`, ...); this file holds the engine's state and
//! the helpers they share.

mod admin;
mod approvals;
mod attachments;
mod call_record;
mod changes;
mod compaction;
mod dispatch;
mod forward;
mod goals;
mod history;
mod metrics;
mod presence;
mod producers;
mod remote_follow;
mod remote_named_follow;
mod remote_named_output;
mod remote_output;
mod runs;
mod sessions;
mod skills;
mod start;
mod status;
#[cfg(feature = "test-hooks")]
pub(crate) mod test_hooks;
mod tool_output;
mod usage;
pub use start::EngineConfig;
pub use status::{ClusterProbe, ConsoleCodeMinter};

use std::path::PathBuf;
use std::sync::Arc;

use actix::prelude::*;

use crate::error::EngineError;
use crate::run_services::RunServices;
use crate::runtime_actor::RuntimeActor;
use crate::session_actor::SessionActor;
use crate::session_router::SessionRouter;
use crate::session_supervisor::{DrainAll, FindRunSession, SessionSupervisor};

/// The engine. Cheap to share: every field is an address or a shared map.
pub struct Engine {
    runtime: Addr<RuntimeActor>,
    /// The supervisor and the live sessions' map, for requests to sessions: built once, since cloning an address
    /// allocates.
    router: SessionRouter,
    /// The supervisor's index, read by `session.get` of a hibernated session without a message (`index_view.rs`).
    index_view: crate::index_view::IndexView,
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
    /// This node's name in a cluster; `None` on a single node.
    node: Option<String>,
    /// In a cluster, where requests for sessions other nodes host are sent on to them (`engine/forward.rs`).
    forwarder: std::sync::OnceLock<std::sync::Arc<dyn troupe_protocol::server::RequestForwarder>>,
}

impl Engine {
    /// Waits until every accepted operation is durable and stops the session threads and the log writers.
    pub async fn shutdown(&self) {
        // Plugins first: what they emit while stopping is still written.
        self.plugins.shutdown().await;
        self.services.mcp.shutdown().await;
        let _ = self.router.supervisor.send(DrainAll).await;
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
        self.router.live(session_id).is_some()
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

    pub(crate) fn router(&self) -> &SessionRouter {
        &self.router
    }

    async fn supervisor_ask<M, R>(&self, message: M) -> Result<R, EngineError>
    where
        M: Message<Result = R> + Send + 'static,
        R: Send + 'static,
        SessionSupervisor: Handler<M>,
    {
        self.router.supervisor.send(message).await.map_err(|_| EngineError::ShuttingDown)
    }

    /// Refuses an input larger than `[limits] max_input_bytes`, before anything is written.
    fn check_input_size(&self, what: &'static str, input: &str) -> Result<(), EngineError> {
        if input.len() <= self.max_input_bytes {
            return Ok(());
        }
        Err(EngineError::InputTooLarge { what, size: input.len(), limit: self.max_input_bytes })
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
