//! The engine's side of `GET /metrics`: the registry its parts count into, and a scrape that first sets the state
//! gauges (connections, sessions, active runs, pending approvals) from the `daemon.status` view of their owners, so
//! they never drift from what the daemon really holds nor from what `troupe status` says.

use troupe_runtime::metrics::Metrics;

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
            self.services.metrics.set_state(&status);
        }
        self.services.metrics.encode()
    }
}
