//! `daemon.status` (a troupe extension): uptime, connections, sessions, runs and approvals, counted when asked.
//!
//! Nothing here is kept for the sake of status alone except the connection count, which the protocol layer's
//! `connected`/`disconnected` hooks maintain; the rest is read from the owners of the state at request time
//! (the supervisor's index and live map, the run registry, the approvals of each session with an active run), so
//! it cannot drift.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use troupe_protocol::RpcError;
use troupe_protocol::server::Authority;
use troupe_protocol::types::daemon::{ClusterStatus, ConsoleLoginCodeResult, DaemonStatusResult};

use super::Engine;
use crate::error::EngineError;
use crate::session_actor::CountPendingApprovals;
use crate::session_supervisor::CountSessions;

/// The daemon-wide facts `daemon.status` reports that no actor owns.
pub(crate) struct StatusFacts {
    started_at: String,
    started: Instant,
    connections: AtomicU64,
    /// Set once by the daemon after the gateway bound its listener (the engine starts before it).
    listen: OnceLock<String>,
    /// Mints web console sign-in codes; set once by the daemon when the console is on.
    console: OnceLock<ConsoleCodeMinter>,
    /// Asks the cluster how this node stands in it; set once by the daemon when it joined one.
    cluster: OnceLock<ClusterProbe>,
    data_dir: String,
}

impl StatusFacts {
    pub(crate) fn new(data_dir: String) -> Self {
        StatusFacts {
            started_at: troupe_runtime::clock::now_rfc3339(),
            started: Instant::now(),
            connections: AtomicU64::new(0),
            listen: OnceLock::new(),
            console: OnceLock::new(),
            cluster: OnceLock::new(),
            data_dir,
        }
    }

    pub(crate) fn connected(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn disconnected(&self) {
        // Saturating: a `disconnected` without its `connected` (an embedder's own transport) must not wrap.
        let _ = self.connections.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |count| count.checked_sub(1));
    }
}

/// Mints one web console sign-in code. The gateway owns the codes (it checks them at `POST /login`); the engine
/// only answers `console.login_code` with what this returns. A cluster node records the code in the cluster
/// first: the error says why it could not (no code was made).
pub type ConsoleCodeMinter = std::sync::Arc<
    dyn Fn() -> futures::future::BoxFuture<'static, Result<ConsoleLoginCodeResult, String>> + Send + Sync,
>;

/// How this node stands in its cluster, asked at each `daemon.status` (the cluster owns the answer).
pub type ClusterProbe = std::sync::Arc<dyn Fn() -> futures::future::BoxFuture<'static, ClusterStatus> + Send + Sync>;

impl Engine {
    /// Lets `console.login_code` mint sign-in codes. Without it (the console is off) the method answers
    /// `console_disabled`. The first call wins.
    pub fn set_console_minter(&self, minter: ConsoleCodeMinter) {
        let _ = self.status.console.set(minter);
    }

    /// Only the token mints sign-ins: a browser's session minting more would outlive its own sign-out (and a
    /// stolen cookie would keep its holder signed in for good).
    pub(super) async fn console_login_code_now(
        &self,
        authority: Authority,
    ) -> Result<ConsoleLoginCodeResult, RpcError> {
        if authority != Authority::Token {
            return Err(EngineError::ConsoleLoginCodeNeedsToken.into());
        }
        let minter = self.status.console.get().ok_or(EngineError::ConsoleDisabled)?;
        Ok(minter().await.map_err(|detail| EngineError::ConsoleCodeNotRecorded { detail })?)
    }

    /// Lets `daemon.status` report the cluster this node joined. The first call wins.
    pub fn set_cluster_probe(&self, probe: ClusterProbe) {
        let _ = self.status.cluster.set(probe);
    }

    /// Records where the daemon listens, for `daemon.status` (`host:port` or `unix:/path`). The first call wins.
    pub fn set_listen(&self, listen: String) {
        let _ = self.status.listen.set(listen);
    }

    pub(super) async fn daemon_status_now(&self) -> Result<DaemonStatusResult, RpcError> {
        let sessions = self.supervisor_ask(CountSessions).await?;
        // Only a session with an active run can have an approval waiting (a run's approvals are withdrawn when it
        // ends), and such a session never hibernates: asking it costs nothing. Asking the idle ones would count
        // as activity and keep them from hibernating for as long as something polls the status.
        let mut sessions_with_runs = self.services.runs.active_sessions();
        sessions_with_runs.sort_unstable();
        sessions_with_runs.dedup();
        let mut approvals_pending = 0;
        for session_id in sessions_with_runs {
            let Some(addr) = self.router.live(&session_id).map(|entry| entry.value().addr.clone()) else {
                continue;
            };
            // A session that stopped in between simply has nothing pending any more.
            approvals_pending += addr.send(CountPendingApprovals).await.unwrap_or(0);
        }
        let facts = &self.status;
        let cluster = match facts.cluster.get() {
            Some(probe) => Some(probe().await),
            None => None,
        };
        Ok(DaemonStatusResult {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            started_at: facts.started_at.clone(),
            uptime_ms: u64::try_from(facts.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            connections: facts.connections.load(Ordering::Relaxed),
            sessions_live: sessions.live as u64,
            sessions_hibernated: sessions.hibernated as u64,
            runs_active: self.services.runs.sizes().active as u64,
            approvals_pending: approvals_pending as u64,
            data_dir: Some(facts.data_dir.clone()),
            listen: facts.listen.get().cloned().unwrap_or_default(),
            cluster,
        })
    }
}
