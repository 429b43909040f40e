//! troupe-gateway: the daemon's HTTP and WebSocket edge.
//!
//! [`start`] binds the listener and serves `GET /ws` (the WebSocket upgrade, checked for origin and bearer
//! token before any frame), `GET /healthz` and `GET /readyz` on the current actix `System`. Each accepted
//! WebSocket gets one `ConnectionActor` that drives a [`troupe_protocol::server::ServerConnection`] over it:
//! text frames in, the protocol session's outbound queue out, keepalive pings, close codes 1003 (binary frame),
//! 1009 (frame over `max_frame_bytes`) and 1001 (graceful stop).
//!
//! The gateway is generic over the engine: anything implementing
//! [`ServerProtocol`](troupe_protocol::server::ServerProtocol) can sit behind it. It knows nothing of sessions,
//! runs or JSON-RPC framing; only this crate knows HTTP and WebSockets.
//!
//! It installs no signal handlers: the binary owns SIGINT/SIGTERM and calls [`RunningGateway::stop`].

mod auth;
mod connection_actor;
mod connection_registry;
mod frame_size_guard;
mod http_routes;
mod metrics_route;
mod origin;
mod read_gate;
#[cfg(test)]
mod test_support;
mod token;

use std::any::Any;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::{Extensions, Server, ServerHandle};
use actix_web::{App, HttpServer, web};
use tracing::{debug, info};
use troupe_protocol::server::{ServerLimits, ServerProtocol};

pub use crate::metrics_route::{MetricsEndpoint, MetricsRender};
pub use crate::origin::normalize_origin;
pub use crate::token::Token;

use crate::connection_actor::{GoingAway, Keepalive};
use crate::connection_registry::ConnectionRegistry;
use crate::http_routes::GatewayState;
use crate::origin::OriginPolicy;

/// The largest inbound message accepted by default (16 MiB).
pub const DEFAULT_MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// Whether the daemon is ready to serve; polled by `GET /readyz`.
pub type Readiness = Arc<dyn Fn() -> bool + Send + Sync>;

/// How the gateway listens and whom it lets in.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    /// Where to listen. Port 0 picks a free port; [`RunningGateway::local_addr`] says which.
    pub listen: SocketAddr,
    /// The bearer token every WebSocket must present.
    pub token: Token,
    /// Browser origins allowed besides the daemon's own, as `scheme://host[:port]`. They are normalized
    /// (lowercase, default ports dropped) at start; a value that is not an origin fails [`start`].
    pub allowed_origins: Vec<String>,
    /// Whether `X-Forwarded-Host`/`X-Forwarded-Proto`/`X-Forwarded-For` come from a trusted reverse proxy.
    pub trust_proxy: bool,
    /// The largest inbound message, whole or fragmented; a larger one closes the socket with 1009.
    pub max_frame_bytes: usize,
    /// Per-connection protocol limits (requests in flight, outbound queue).
    pub limits: ServerLimits,
    /// How often the server pings each WebSocket.
    pub ping_interval: Duration,
    /// How long a WebSocket may stay silent (no pong, no frame) before it is closed.
    pub pong_timeout: Duration,
    /// Worker threads, each with its own arbiter; connections are spread across them.
    pub workers: usize,
    /// How long a graceful stop waits for connections to finish after they were told to close.
    pub shutdown_timeout: Duration,
    /// `GET /metrics` and the observer connections report to; `None`: no metrics (404).
    pub metrics: Option<MetricsEndpoint>,
}

impl GatewayConfig {
    /// The defaults of the wire contract: 16 MiB frames, 256 requests in flight, pings every 15 s, 45 s of
    /// patience, no extra origins, no trusted proxy.
    pub fn new(listen: SocketAddr, token: Token) -> Self {
        GatewayConfig {
            listen,
            token,
            allowed_origins: Vec::new(),
            trust_proxy: false,
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            limits: ServerLimits::default(),
            ping_interval: Duration::from_secs(15),
            pong_timeout: Duration::from_secs(45),
            workers: default_workers(),
            shutdown_timeout: Duration::from_secs(5),
            metrics: None,
        }
    }
}

/// The machine's parallelism, capped at 4: connection handling is light, and the engine's actors need the
/// remaining cores more than idle workers do.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map(|count| count.get()).unwrap_or(1).clamp(1, 4)
}

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("allowed origin `{0}` is not of the form scheme://host[:port]")]
    InvalidAllowedOrigin(String),
    #[error("the bearer token is empty, which would let anyone in")]
    EmptyToken,
}

/// A started gateway. Dropping it does not stop the server; call [`RunningGateway::stop`].
pub struct RunningGateway {
    /// The address actually bound (the real port when `listen` asked for port 0).
    pub local_addr: SocketAddr,
    handle: ServerHandle,
    registry: Arc<ConnectionRegistry>,
}

/// How long [`RunningGateway::stop`] waits for one connection to queue its close frame.
const GOING_AWAY_TIMEOUT: Duration = Duration::from_secs(3);

impl RunningGateway {
    /// Graceful stop: new upgrades are refused, every open WebSocket is closed with 1001 (Going Away), then the
    /// HTTP server stops, waiting up to `shutdown_timeout` for connections to wind down.
    pub async fn stop(&self) {
        let live = self.registry.begin_shutdown();
        info!(connections = live.len(), "stopping the gateway");
        let closes =
            live.into_iter().map(|connection| tokio::time::timeout(GOING_AWAY_TIMEOUT, connection.send(GoingAway)));
        futures::future::join_all(closes).await;
        self.handle.stop(true).await;
        info!("the gateway stopped");
    }

    /// WebSockets open right now.
    pub fn open_connections(&self) -> usize {
        self.registry.len()
    }
}

/// Binds `config.listen` and prepares the server on the current actix `System`, returning at once.
///
/// The returned [`Server`] future must be awaited or spawned (`actix_web::rt::spawn`): until it is polled,
/// connections wait in the listen backlog and [`RunningGateway::stop`] cannot complete. It resolves once the
/// server has stopped.
pub fn start<S: ServerProtocol>(
    engine: Arc<S>,
    config: GatewayConfig,
    readiness: Readiness,
) -> Result<(RunningGateway, Server), GatewayError> {
    if config.token.is_empty() {
        return Err(GatewayError::EmptyToken);
    }
    let origins = OriginPolicy::new(&config.allowed_origins, config.trust_proxy)?;
    let registry = Arc::new(ConnectionRegistry::default());
    let state = web::Data::new(GatewayState {
        engine,
        token: config.token,
        origins,
        trust_proxy: config.trust_proxy,
        max_frame_bytes: config.max_frame_bytes.max(1),
        limits: config.limits,
        keepalive: Keepalive { ping_interval: config.ping_interval, pong_timeout: config.pong_timeout },
        readiness,
        registry: registry.clone(),
        metrics: config.metrics,
    });
    let workers = config.workers.max(1);
    let server = HttpServer::new(move || App::new().app_data(state.clone()).configure(http_routes::configure::<S>))
        .on_connect(set_nodelay)
        // The binary owns SIGINT/SIGTERM and stops the gateway itself, closing sockets with 1001 first.
        .disable_signals()
        .workers(workers)
        .shutdown_timeout(config.shutdown_timeout.as_secs().max(1))
        .bind(config.listen)
        .map_err(|source| GatewayError::Bind { address: config.listen, source })?;
    let local_addr = server.addrs().first().copied().ok_or_else(|| GatewayError::Bind {
        address: config.listen,
        source: std::io::Error::new(std::io::ErrorKind::AddrNotAvailable, "no address was bound"),
    })?;
    let server = server.run();
    info!(%local_addr, workers, "gateway listening");
    Ok((RunningGateway { local_addr, handle: server.handle(), registry }, server))
}

/// Disables Nagle's algorithm on every accepted socket: replies and event frames are small and must leave at
/// once, not wait for the client's delayed ACK (a 40 ms stall per exchange otherwise).
fn set_nodelay(connection: &dyn Any, _extensions: &mut Extensions) {
    if let Some(stream) = connection.downcast_ref::<actix_web::rt::net::TcpStream>()
        && let Err(error) = stream.set_nodelay(true)
    {
        debug!(%error, "could not set TCP_NODELAY on an accepted socket");
    }
}
