//! [`MetricsEndpoint`]: what the daemon gives the gateway for `GET /metrics` (`metrics_route.rs`) and for its
//! connections to report to. The gateway knows nothing of what is counted.

use std::sync::Arc;

use futures::future::LocalBoxFuture;
use troupe_protocol::server::SharedObserver;

/// Produces the body of one scrape (refreshing whatever it reads from its owners first).
pub type MetricsRender = Arc<dyn Fn() -> LocalBoxFuture<'static, String> + Send + Sync>;

/// What `GET /metrics` serves and where connections report. Without one the route answers 404.
#[derive(Clone)]
pub struct MetricsEndpoint {
    /// Told about every connection's handshakes, requests, drops and gaps.
    pub observer: SharedObserver,
    pub render: MetricsRender,
    /// The content type of what `render` produces.
    pub content_type: &'static str,
    /// Serve without the bearer token (`metrics_public = true`: a scraper on a trusted network).
    pub public: bool,
}

impl std::fmt::Debug for MetricsEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsEndpoint").field("public", &self.public).finish_non_exhaustive()
    }
}
