//! [`GatewayState`], what every route of every worker shares, and the [`Readiness`] it polls: below the routes
//! (`http_routes.rs`, `metrics_route.rs`, `console/`), which all take it, so that none of them needs another.

use std::sync::Arc;

use troupe_protocol::server::{ServerLimits, SharedObserver};

use crate::connection_actor::Keepalive;
use crate::connection_registry::ConnectionRegistry;
use crate::console_book::ConsoleBook;
use crate::metrics_endpoint::MetricsEndpoint;
use crate::origin::OriginPolicy;
use crate::token::Token;

/// Whether the daemon is ready to serve; polled by `GET /readyz`.
pub type Readiness = Arc<dyn Fn() -> bool + Send + Sync>;

/// What every worker's routes share. One instance per gateway, behind `web::Data`.
pub(crate) struct GatewayState<S> {
    pub(crate) engine: Arc<S>,
    pub(crate) token: Token,
    pub(crate) origins: OriginPolicy,
    pub(crate) trust_proxy: bool,
    pub(crate) max_frame_bytes: usize,
    pub(crate) limits: ServerLimits,
    pub(crate) keepalive: Keepalive,
    pub(crate) readiness: Readiness,
    pub(crate) registry: Arc<ConnectionRegistry>,
    pub(crate) metrics: Option<MetricsEndpoint>,
    /// The web console's sign-ins; `None`: no console (404 on its routes, no cookie accepted at `/ws`).
    pub(crate) console: Option<Arc<ConsoleBook>>,
    /// What every connection reports to: the metrics' observer, or one that observes nothing. Decided once.
    pub(crate) observer: SharedObserver,
}
