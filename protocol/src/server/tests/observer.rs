//! What the session layer tells its observer: handshakes, requests by method and outcome, drops and gaps.

use std::sync::Arc;
use std::time::Duration;

use bytestring::ByteString;
use parking_lot::Mutex;

use super::{Nothing, context, limits};
use crate::error::RpcError;
use crate::server::{DroppedNotification, HandshakeOutcome, ServerConnection, ServerObserver, SinkError};
use crate::transport::MessageFrame;

#[derive(Debug, PartialEq)]
enum Seen {
    Handshake(HandshakeOutcome),
    /// Method, error code (`None`: ok), whether the handler ran (timed).
    Request(&'static str, Option<i64>, bool),
    Dropped(DroppedNotification),
    Gap,
}

#[derive(Default)]
struct Recorder(Mutex<Vec<Seen>>);

impl ServerObserver for Recorder {
    fn handshake(&self, outcome: HandshakeOutcome) {
        self.0.lock().push(Seen::Handshake(outcome));
    }

    fn request_finished(&self, method: &'static str, result: Result<(), &RpcError>, elapsed: Option<Duration>) {
        self.0.lock().push(Seen::Request(method, result.err().map(|error| error.code), elapsed.is_some()));
    }

    fn notification_dropped(&self, kind: DroppedNotification) {
        self.0.lock().push(Seen::Dropped(kind));
    }

    fn gap_sent(&self) {
        self.0.lock().push(Seen::Gap);
    }
}

impl Recorder {
    fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.0.lock())
    }
}

fn request(id: u64, method: &str, params: serde_json::Value) -> MessageFrame {
    MessageFrame::Text(serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string())
}

#[tokio::test]
async fn handshakes_and_requests_are_reported_with_their_outcome() {
    let recorder = Arc::new(Recorder::default());
    let (connection, _outbound) =
        ServerConnection::with_observer(Arc::new(Nothing), limits(64, 1 << 20), recorder.clone());
    connection.handle_frame(request(1, "session.list", serde_json::json!({}))).await;
    connection.handle_frame(request(2, "handshake", serde_json::json!({"protocol_version": 19}))).await;
    // The version is right, so the handshake is admitted; this server's handler answers not_implemented.
    connection.handle_frame(request(3, "handshake", serde_json::json!({"protocol_version": 20}))).await;
    connection.handle_frame(request(4, "made.up", serde_json::json!({}))).await;
    assert_eq!(
        recorder.take(),
        [
            Seen::Request("session.list", Some(crate::error::codes::HANDSHAKE_REQUIRED), false),
            Seen::Handshake(HandshakeOutcome::Refused),
            Seen::Request("handshake", Some(crate::error::codes::INVALID_PARAMS), false),
            Seen::Handshake(HandshakeOutcome::Refused),
            Seen::Request("handshake", Some(crate::error::codes::ENGINE_ERROR), true),
            Seen::Request("unknown", Some(crate::error::codes::METHOD_NOT_FOUND), true),
        ]
    );
}

#[tokio::test]
async fn drops_are_reported_when_they_happen_and_gaps_when_they_are_written() {
    let recorder = Arc::new(Recorder::default());
    let (connection, mut outbound) =
        ServerConnection::with_observer(Arc::new(Nothing), limits(1, 1 << 20), recorder.clone());
    let ctx = context(&connection);
    let sink = ctx.event_sink("s");
    sink.channel.open();
    connection.shared.queue.try_push(&ByteString::from("reply")).unwrap();
    assert_eq!(sink.offer_transient(&ByteString::from("output")), Ok(false));
    assert_eq!(sink.offer(1, &ByteString::from("event")), Err(SinkError::Lagging));
    assert_eq!(
        recorder.take(),
        [Seen::Dropped(DroppedNotification::Transient), Seen::Dropped(DroppedNotification::Event)]
    );
    assert_eq!(&*outbound.next().await.unwrap(), "reply");
    assert_eq!(recorder.take(), [], "an ordinary frame is no gap");
    assert!(outbound.next().await.unwrap().contains(r#""type":"gap""#));
    assert_eq!(recorder.take(), [Seen::Gap]);
}

#[tokio::test]
async fn a_transient_frame_with_no_room_to_be_held_while_gated_is_reported_dropped() {
    let recorder = Arc::new(Recorder::default());
    let (connection, _outbound) =
        ServerConnection::with_observer(Arc::new(Nothing), limits(1, 1 << 20), recorder.clone());
    let ctx = context(&connection);
    // Gated until the subscribing request replies: one frame is held, the next has no room.
    let sink = ctx.event_sink("s");
    assert_eq!(sink.offer_transient(&ByteString::from("first")), Ok(true));
    assert_eq!(sink.offer_transient(&ByteString::from("second")), Ok(false));
    assert_eq!(recorder.take(), [Seen::Dropped(DroppedNotification::Transient)]);
}
