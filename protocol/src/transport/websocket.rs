//! The client end of the daemon's WebSocket endpoint (`GET /ws`), over tokio-tungstenite.
//!
//! The bearer token travels in the `Authorization` header of the upgrade request, marked sensitive, and never
//! appears in an error or a log line. `ws://` is plain TCP; `wss://` is TLS (rustls, see [`tls`]) for a daemon
//! behind a TLS-terminating reverse proxy, trusting the built-in and system roots plus an optional CA file.
//! `unix:/path` reaches a daemon listening on a unix socket (`unix.rs`).
//!
//! The stream is split into a read half and a write half. Control frames need no help from the caller: when a
//! Ping arrives, tungstenite queues the Pong and writes it during the next read (or send), and the shared client
//! always has a `recv` pending, so an idle connection keeps answering the daemon's keepalive pings.

use std::path::Path;

use futures::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::error::ProtocolError;
use tokio_tungstenite::tungstenite::http::{HeaderValue, StatusCode, header};
use tokio_tungstenite::{Connector, MaybeTlsStream, WebSocketStream};
use zeroize::Zeroizing;

use super::{MessageFrame, OpenFailure, Transport, TransportError};

mod refusal;
mod tls;
mod unix;

/// The write half of a WebSocket over any stream (TCP, TLS or a unix socket).
type Writer = std::pin::Pin<Box<dyn futures::Sink<Message, Error = WsError> + Send>>;
/// The read half of a WebSocket over any stream.
type Reader = std::pin::Pin<Box<dyn futures::Stream<Item = Result<Message, WsError>> + Send>>;

/// A WebSocket connection to a troupe daemon, as a frame-level [`Transport`].
pub struct WebSocketTransport {
    writer: Writer,
    reader: Reader,
}

impl std::fmt::Debug for WebSocketTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebSocketTransport").finish_non_exhaustive()
    }
}

impl WebSocketTransport {
    /// Opens `url` (`ws://host:port/ws`, or `wss://` through TLS) and authenticates with `Authorization: Bearer
    /// <token>`.
    ///
    /// A refused upgrade comes back as a readable error: HTTP 401 says "unauthorized (check the token)", HTTP 403
    /// says "forbidden origin", and the statuses a proxy or a wrong URL cause say what to change (`refusal.rs`).
    pub async fn connect(url: &str, token: &str) -> Result<WebSocketTransport, TransportError> {
        Self::connect_trusting(url, token, None).await
    }

    /// [`WebSocketTransport::connect`], where a `wss://` URL also trusts the certificate authorities in the PEM
    /// file `ca_cert` (a private CA, or a proxy's self-signed certificate). Ignored for `ws://`.
    pub async fn connect_trusting(
        url: &str,
        token: &str,
        ca_cert: Option<&Path>,
    ) -> Result<WebSocketTransport, TransportError> {
        if let Some(path) = unix::socket_path(url) {
            return unix::connect(path, token).await;
        }
        let mut request = url
            .into_client_request()
            .map_err(|error| TransportError::new(format!("`{url}` is not a usable WebSocket URL: {error}")))?;
        let connector = match request.uri().scheme_str() {
            Some("ws") => Connector::Plain,
            Some("wss") => Connector::Rustls(tls::client_config(ca_cert)?),
            _ => {
                return Err(TransportError::new(format!(
                    "`{url}` is not a WebSocket URL: it must start with ws:// or wss://"
                )));
            }
        };
        let target = describe_target(&request);

        authorize(&mut request, token)?;

        // Requests and notifications are small frames where latency matters more than packing.
        let disable_nagle = true;
        let (socket, _response) =
            tokio_tungstenite::connect_async_tls_with_config(request, None, disable_nagle, Some(connector))
                .await
                .map_err(|error| describe_connect_error(&target, error))?;
        Ok(WebSocketTransport::from_socket::<MaybeTlsStream<TcpStream>>(socket))
    }

    /// Wraps an upgraded WebSocket, whatever stream it runs on.
    fn from_socket<S>(socket: WebSocketStream<S>) -> WebSocketTransport
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (writer, reader) = socket.split();
        WebSocketTransport { writer: Box::pin(writer), reader: Box::pin(reader) }
    }
}

/// Adds `Authorization: Bearer <token>` to the upgrade request. The formatted header is wiped when dropped; the
/// copy inside `HeaderValue` is marked sensitive so that http's `Debug` prints it as `Sensitive`.
fn authorize(
    request: &mut tokio_tungstenite::tungstenite::http::Request<()>,
    token: &str,
) -> Result<(), TransportError> {
    let bearer = Zeroizing::new(format!("Bearer {token}"));
    let mut authorization = HeaderValue::from_str(&bearer).map_err(|_| {
        TransportError::new("the token contains characters that cannot be sent in an HTTP header".to_owned())
    })?;
    authorization.set_sensitive(true);
    request.headers_mut().insert(header::AUTHORIZATION, authorization);
    Ok(())
}

/// Where the request goes: `host:port` without any user info the URL might carry, the scheme, the path.
fn describe_target<B>(request: &tokio_tungstenite::tungstenite::http::Request<B>) -> refusal::Target {
    let uri = request.uri();
    let host = uri.host().unwrap_or("?");
    let address = match uri.port_u16() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    };
    let scheme = if uri.scheme_str() == Some("wss") { refusal::Scheme::Wss } else { refusal::Scheme::Ws };
    refusal::Target { address, scheme, path: uri.path().to_owned() }
}

fn describe_connect_error(target: &refusal::Target, error: WsError) -> TransportError {
    let address = &target.address;
    let (detail, failure) = match error {
        WsError::Http(response) => {
            let unauthorized = response.status() == StatusCode::UNAUTHORIZED;
            (refusal::describe_refusal(target, &response), unauthorized.then_some(OpenFailure::Unauthorized))
        }
        WsError::Protocol(ProtocolError::WrongHttpVersion) => (refusal::describe_http_1_0(target), None),
        WsError::Io(error) => match tls::handshake_error(&error) {
            Some(tls_error) => (tls::describe_handshake_error(address, tls_error), None),
            None => (format!("cannot connect to {address}: {error}"), OpenFailure::of_io(&error)),
        },
        WsError::Tls(error) => (format!("the TLS handshake with {address} failed: {error}"), None),
        WsError::Url(error) => (format!("cannot connect to {address}: {error}"), None),
        other => (format!("the WebSocket handshake with {address} failed: {other}"), None),
    };
    TransportError(detail, failure)
}

impl Transport for WebSocketTransport {
    async fn send(&mut self, frame: MessageFrame) -> Result<(), TransportError> {
        let text = frame.into_text();
        // `SinkExt::send` flushes, so the frame is on the socket (or in the kernel's buffer) when this returns.
        self.writer
            .send(Message::Text(text.into()))
            .await
            .map_err(|error| TransportError::new(format!("sending a WebSocket frame failed: {error}")))
    }

    /// Cancel-safe: `StreamExt::next` on the read half only completes with a whole message, and a message that
    /// was partly read stays buffered inside tungstenite for the next call.
    async fn recv(&mut self) -> Option<MessageFrame> {
        loop {
            match self.reader.next().await? {
                Ok(Message::Text(text)) => {
                    return Some(MessageFrame::Text(text.as_str().to_owned()));
                }
                // Pings are answered by tungstenite itself (see the module docs); nothing to hand up.
                Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => continue,
                Ok(Message::Binary(_)) => {
                    // The protocol is text-only; a daemon never sends binary frames, so skip rather than fail.
                    tracing::debug!("ignoring a binary WebSocket frame");
                    continue;
                }
                Ok(Message::Close(_)) => return None,
                Err(error) => {
                    tracing::debug!(%error, "the WebSocket connection ended");
                    return None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wss_with_an_unreadable_ca_file_fails_before_dialing_and_without_the_token() {
        let error = WebSocketTransport::connect_trusting(
            "wss://127.0.0.1:9/ws",
            "secret-token",
            Some(Path::new("/nonexistent/ca.pem")),
        )
        .await
        .unwrap_err();
        assert!(error.0.contains("CA certificate file"), "{error}");
        assert!(!error.0.contains("secret-token"));
    }

    #[tokio::test]
    async fn other_schemes_are_refused() {
        let error = WebSocketTransport::connect("http://127.0.0.1:9/ws", "t").await.unwrap_err();
        assert!(error.0.contains("ws://"), "{error}");
        assert_eq!(error.1, None);
    }

    #[tokio::test]
    async fn a_dial_nothing_answers_is_unreachable() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let closed = listener.local_addr().unwrap();
        drop(listener);
        for url in [format!("ws://{closed}/ws"), "unix:/nonexistent/troupe.sock".to_owned()] {
            let error = WebSocketTransport::connect(&url, "t").await.unwrap_err();
            assert_eq!(error.1, Some(OpenFailure::Unreachable), "{url}: {error}");
        }
    }
}
