//! The engine's side of `GET /metrics`: the registry its parts count into, and a scrape that first reads the
//! state gauges (connections, sessions, active runs, pending approvals) from their owners, as `daemon.status`
//! does, so they never drift from what the daemon really holds.

use troupe_runtime::metrics::{Metrics, StateGauges};

use super::Engine;

impl Engine {
    /// The daemon's metrics. The gateway's connections report to it as its `ServerObserver`.
    pub fn metrics(&self) -> &Metrics {
        &self.services.metrics
    }

    /// One scrape: the state gauges refreshed, then every family encoded (`troupe_runtime::metrics::CONTENT_TYPE`).
    /// While the daemon stops, the gauges keep their last values.
    pub async fn metrics_text(&self) -> String {
        if let Ok(status) = self.daemon_status_now().await {
            self.services.metrics.set_state(StateGauges {
                connections_open: status.connections,
                sessions_live: status.sessions_live,
                sessions_hibernated: status.sessions_hibernated,
                runs_active: status.runs_active,
                approvals_pending: status.approvals_pending,
            });
        }
        self.services.metrics.encode()
    }
}
