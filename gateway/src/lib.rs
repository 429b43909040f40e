//! troupe-gateway: the daemon's HTTP and WebSocket edge.
//!
//! [`start`] binds the listener and serves `GET /ws` (the WebSocket upgrade, checked for origin and bearer
//! token before any frame), `GET /healthz` and `GET /readyz` on the current actix `System`, and the web console
//! (`console/`: its page, files and sign-in) at `/`. Each accepted
//! WebSocket gets one `ConnectionActor` that drives a [`troupe_protocol::server::ServerConnection`] over it:
//! text frames in, the protocol session's outbound queue out, keepalive pings, close codes 1003 (binary frame),
//! 1009 (frame over `max_frame_bytes`) and 1001 (graceful stop).
//!
//! The gateway is generic over the engine: anything implementing
//! [`ServerProtocol`](troupe_protocol::server::ServerProtocol) can sit behind it. It knows nothing of sessions,
//! runs or JSON-RPC framing; only this crate knows HTTP and WebSockets.
//!
//! The console's sign-ins are kept by a [`ConsoleBook`]: a single daemon's in a file of its data dir; a cluster
//! node's in the cluster, through the [`ConsoleShare`] port the daemon fills (`troupe-cluster` implements it, this
//! crate does not depend on it), so a code minted on one node signs a browser in on any node, once, and the
//! browser stays signed in whichever node a load balancer sends it to.
//!
//! It installs no signal handlers: the binary owns SIGINT/SIGTERM and calls [`RunningGateway::stop`].

mod auth;
mod connection_actor;
mod connection_registry;
mod console;
mod console_book;
mod error;
mod frame_size_guard;
mod frame_tasks;
mod gateway_state;
mod http_routes;
mod listener;
mod metrics_endpoint;
mod metrics_route;
mod origin;
mod read_gate;
mod responses;
mod socket_body;
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

pub use crate::console::rfc3339;
pub use crate::console_book::share::{
    ConsoleShare, Digest, ShareChange, ShareError, ShareFuture, ShareSink, SharedSession,
};
pub use crate::console_book::{CODE_TTL, ConsoleBook, LoginCode};
pub use crate::error::GatewayError;
pub use crate::gateway_state::Readiness;
pub use crate::listener::Listener;
pub use crate::metrics_endpoint::{MetricsEndpoint, MetricsRender};
pub use crate::origin::normalize_origin;
pub use crate::token::Token;

use crate::connection_actor::Keepalive;
use crate::connection_registry::{ConnectionRegistry, GoingAway};
use crate::gateway_state::GatewayState;
use crate::origin::OriginPolicy;

/// The largest inbound message accepted by default (16 MiB).
pub const DEFAULT_MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// The mode of the unix socket: the daemon's user and group may connect (a proxy joins the group), nobody else.
pub const UNIX_SOCKET_MODE: u32 = 0o660;

/// How the gateway listens and whom it lets in.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    /// Where to listen. Port 0 picks a free port; [`RunningGateway::local_addr`] says which.
    pub listen: Listener,
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
    /// The web console's sign-ins (`console/`); `None`: no console.
    pub console: Option<Arc<ConsoleBook>>,
}

impl GatewayConfig {
    /// The defaults of the wire contract: 16 MiB frames, 256 requests in flight, pings every 15 s, 45 s of
    /// patience, no extra origins, no trusted proxy.
    /// `listen` is TCP; set [`GatewayConfig::listen`] to a [`Listener::Unix`] for a unix socket.
    pub fn new(listen: SocketAddr, token: Token) -> Self {
        GatewayConfig {
            listen: Listener::Tcp(listen),
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
            console: None,
        }
    }
}

/// The machine's parallelism, capped at 4: connection handling is light, and the engine's actors need the
/// remaining cores more than idle workers do.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map(|count| count.get()).unwrap_or(1).clamp(1, 4)
}

/// A started gateway. Dropping it does not stop the server; call [`RunningGateway::stop`].
pub struct RunningGateway {
    /// Where it listens: the TCP address actually bound (the real port when `listen` asked for port 0), or the
    /// unix socket.
    pub listening: Listener,
    /// The unix socket's identity (device, inode) as bound, so that `stop` removes only the file it created.
    unix_socket: Option<(u64, u64)>,
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
        let closes = live
            .into_iter()
            .map(|connection| tokio::time::timeout(GOING_AWAY_TIMEOUT, connection.send(GoingAway::DaemonStopping)));
        futures::future::join_all(closes).await;
        self.handle.stop(true).await;
        self.remove_unix_socket();
        info!("the gateway stopped");
    }

    /// The TCP address bound; `None` for a unix socket.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match &self.listening {
            Listener::Tcp(address) => Some(*address),
            Listener::Unix(_) => None,
        }
    }

    /// Removes the unix socket file, if it is still the one bound (a newer daemon may have replaced it).
    fn remove_unix_socket(&self) {
        use std::os::unix::fs::MetadataExt;
        let (Listener::Unix(path), Some(identity)) = (&self.listening, self.unix_socket) else {
            return;
        };
        match std::fs::symlink_metadata(path) {
            Ok(metadata) if (metadata.dev(), metadata.ino()) == identity => {
                if let Err(error) = std::fs::remove_file(path) {
                    tracing::warn!(path = %path.display(), %error, "could not remove the unix socket");
                }
            }
            _ => {}
        }
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
    if let Some(book) = &config.console {
        // A browser signed out on another node of a cluster: its sockets here close too.
        let registry = registry.clone();
        book.on_ended_elsewhere(Box::new(move |session| {
            for connection in registry.of_console_session(&session) {
                connection.do_send(GoingAway::SignedOut);
            }
        }));
    }
    let observer =
        config.metrics.as_ref().map_or_else(troupe_protocol::server::no_observer, |metrics| metrics.observer.clone());
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
        console: config.console,
        observer,
    });
    let workers = config.workers.max(1);
    let server = HttpServer::new(move || {
        App::new().wrap(console::security_headers()).app_data(state.clone()).configure(http_routes::configure::<S>)
    })
    .on_connect(set_nodelay)
    // The binary owns SIGINT/SIGTERM and stops the gateway itself, closing sockets with 1001 first.
    .disable_signals()
    .workers(workers)
    .shutdown_timeout(config.shutdown_timeout.as_secs().max(1));
    let bind_error = |source| GatewayError::Bind { address: config.listen.clone(), source };
    let (server, listening, unix_socket) = match &config.listen {
        Listener::Tcp(address) => {
            let server = server.bind(address).map_err(bind_error)?;
            let local_addr = server.addrs().first().copied().ok_or_else(|| {
                bind_error(std::io::Error::new(std::io::ErrorKind::AddrNotAvailable, "no address was bound"))
            })?;
            (server, Listener::Tcp(local_addr), None)
        }
        Listener::Unix(path) => {
            let server = server.bind_uds(path).map_err(bind_error)?;
            // Before `run`, so nothing is accepted before the mode is set. A client the umask's mode let connect in
            // the moment between waits in the backlog and is accepted later: the mode is a first fence, the token
            // the check.
            let identity = restrict_unix_socket(path).map_err(bind_error)?;
            (server, Listener::Unix(path.clone()), Some(identity))
        }
    };
    let server = server.run();
    info!(listen = %listening, workers, "gateway listening");
    Ok((RunningGateway { listening, unix_socket, handle: server.handle(), registry }, server))
}

/// Gives the fresh unix socket mode [`UNIX_SOCKET_MODE`] and returns its identity (device, inode).
fn restrict_unix_socket(path: &std::path::Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(UNIX_SOCKET_MODE))?;
    let metadata = std::fs::symlink_metadata(path)?;
    Ok((metadata.dev(), metadata.ino()))
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
