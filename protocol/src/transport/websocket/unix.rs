//! The WebSocket transport over a unix socket: `unix:/path` URLs, for a daemon that listens on a socket file
//! (`listen = "unix:/run/troupe/troupe.sock"`) instead of a TCP port.
//!
//! The upgrade is the same HTTP request as over TCP (`GET /ws`, `Authorization: Bearer`), sent to
//! `ws://localhost/ws` through the socket: the host is only what the request's `Host` header says, and the
//! daemon accepts any host from a client that sends no `Origin`.

use std::path::Path;

use tokio::net::UnixStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use super::refusal::{Scheme, Target};
use super::{WebSocketTransport, authorize, describe_connect_error};
use crate::transport::{OpenFailure, TransportError};

/// The prefix of a unix socket URL.
pub const UNIX_URL_PREFIX: &str = "unix:";

/// The socket path of a `unix:/path` URL; `None` for any other URL.
pub(super) fn socket_path(url: &str) -> Option<&Path> {
    url.strip_prefix(UNIX_URL_PREFIX).map(Path::new)
}

/// Connects to the daemon's unix socket at `path` and performs the authenticated WebSocket upgrade.
pub(super) async fn connect(path: &Path, token: &str) -> Result<WebSocketTransport, TransportError> {
    let address = format!("unix:{}", path.display());
    if !path.is_absolute() {
        return Err(TransportError::new(format!(
            "`{address}` is not a usable socket URL: the path must be absolute, as in unix:/run/troupe/troupe.sock"
        )));
    }
    let stream = UnixStream::connect(path)
        .await
        .map_err(|error| TransportError(format!("cannot connect to {address}: {error}"), OpenFailure::of_io(&error)))?;
    let mut request = "ws://localhost/ws"
        .into_client_request()
        .map_err(|error| TransportError::new(format!("building the WebSocket upgrade failed: {error}")))?;
    authorize(&mut request, token)?;
    let (socket, _response) = tokio_tungstenite::client_async(request, stream).await.map_err(|error| {
        // A unix socket is only ever the daemon itself (no TLS, the fixed path /ws).
        let target = Target { address: address.clone(), scheme: Scheme::Unix, path: "/ws".to_owned() };
        describe_connect_error(&target, error)
    })?;
    Ok(WebSocketTransport::from_socket(socket))
}
