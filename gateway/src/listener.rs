//! [`Listener`]: where the gateway listens, a TCP address or a unix socket.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Where the gateway listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listener {
    /// A TCP address; port 0 picks a free port.
    Tcp(SocketAddr),
    /// A unix socket, for a reverse proxy on the same host. The path must not exist (the daemon removes a stale
    /// one first); the socket is made mode 0660 before anything is served and removed by
    /// [`RunningGateway::stop`](crate::RunningGateway::stop).
    Unix(PathBuf),
}

impl From<SocketAddr> for Listener {
    fn from(address: SocketAddr) -> Self {
        Listener::Tcp(address)
    }
}

impl std::fmt::Display for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listener::Tcp(address) => write!(f, "{address}"),
            Listener::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}
