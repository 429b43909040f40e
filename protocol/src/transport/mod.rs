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

/// The transport is closed.
#[derive(Debug, thiserror::Error)]
#[error("transport closed: {0}")]
pub struct TransportError(pub String);

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
        self.sender.send(frame).await.map_err(|_| TransportError("the other end was dropped".into()))
    }

    async fn recv(&mut self) -> Option<MessageFrame> {
        self.receiver.recv().await
    }
}
