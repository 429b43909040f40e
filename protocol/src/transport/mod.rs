//! Frame-level transports. A [`Transport`] moves whole frames and knows nothing of JSON-RPC.
//!
//! - [`InProcessTransport`]: a pair of bounded channels, for a client and a server in one process (tests, the
//!   benchmarks).
//! - [`WebSocketTransport`]: the client end of the daemon's `GET /ws` endpoint, over tokio-tungstenite (TCP, TLS,
//!   or a unix socket for a `unix:/path` URL).

mod websocket;

pub use websocket::WebSocketTransport;

use serde_json::Value;
use tokio::sync::mpsc;

/// One frame: JSON text as received, or a value already parsed (in-process transports skip the text).
#[derive(Clone, Debug, PartialEq)]
pub enum MessageFrame {
    Text(String),
    Value(Value),
}

impl MessageFrame {
    /// The frame as JSON text.
    pub fn into_text(self) -> String {
        match self {
            MessageFrame::Text(text) => text,
            MessageFrame::Value(value) => value.to_string(),
        }
    }
}

/// The transport is closed, or could not be opened: what happened, in words, and why it could not be opened when
/// that is known (a client says different things for each).
#[derive(Debug, thiserror::Error)]
#[error("transport closed: {0}")]
pub struct TransportError(pub String, pub Option<OpenFailure>);

impl TransportError {
    /// An error without an [`OpenFailure`].
    pub fn new(message: String) -> Self {
        TransportError(message, None)
    }
}

/// Why a connection could not be opened, for the failures a client explains differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenFailure {
    /// Nothing answered at the address (refused, no such socket file, unreachable host).
    Unreachable,
    /// The operating system refused to connect (`EACCES`: a unix socket this user may not open).
    PermissionDenied,
    /// The daemon answered and refused the token (HTTP 401).
    Unauthorized,
}

impl OpenFailure {
    /// A connection that failed with an OS error, by its kind: `None` for the errors of a peer that answered (a
    /// reset or an end of file in the TLS handshake) and for a host name that did not resolve.
    pub(crate) fn of_io(error: &std::io::Error) -> Option<OpenFailure> {
        use std::io::ErrorKind;
        match error.kind() {
            ErrorKind::PermissionDenied => Some(OpenFailure::PermissionDenied),
            ErrorKind::ConnectionRefused
            | ErrorKind::NotFound
            | ErrorKind::HostUnreachable
            | ErrorKind::NetworkUnreachable
            | ErrorKind::AddrNotAvailable
            | ErrorKind::TimedOut => Some(OpenFailure::Unreachable),
            _ => None,
        }
    }
}

/// A frame-level, bidirectional channel. `recv` must be cancel-safe: callers race it against other work.
pub trait Transport: Send + 'static {
    fn send(&mut self, frame: MessageFrame) -> impl Future<Output = Result<(), TransportError>> + Send;
    /// The next frame, or `None` once the peer has closed.
    fn recv(&mut self) -> impl Future<Output = Option<MessageFrame>> + Send;
}

/// One end of an in-memory transport pair, for running a client and a server in one process.
pub struct InProcessTransport {
    sender: mpsc::Sender<MessageFrame>,
    receiver: mpsc::Receiver<MessageFrame>,
}

impl InProcessTransport {
    /// Two connected ends. `capacity` bounds each direction.
    pub fn pair(capacity: usize) -> (InProcessTransport, InProcessTransport) {
        let (a_sender, b_receiver) = mpsc::channel(capacity.max(1));
        let (b_sender, a_receiver) = mpsc::channel(capacity.max(1));
        (
            InProcessTransport { sender: a_sender, receiver: a_receiver },
            InProcessTransport { sender: b_sender, receiver: b_receiver },
        )
    }
}

impl Transport for InProcessTransport {
    async fn send(&mut self, frame: MessageFrame) -> Result<(), TransportError> {
        self.sender.send(frame).await.map_err(|_| TransportError::new("the other end was dropped".into()))
    }

    async fn recv(&mut self) -> Option<MessageFrame> {
        self.receiver.recv().await
    }
}
