//! [`ConnectionHandle`](crate::server::ConnectionHandle): the handshake's `client_info` and whether a
//! subscription is still open, as the engine's presence bookkeeping reads them.

use bytestring::ByteString;

use super::{connection, context, limits};
use crate::server::SinkError;
use crate::transport::MessageFrame;
use crate::types::runtime::ClientInfo;

#[tokio::test]
async fn the_handshake_s_client_info_is_remembered_and_a_bad_one_is_not() {
    let (connection, _outbound, ctx) = connection(limits(8, 1 << 20));
    let handle = ctx.connection();
    assert_eq!(handle.client_info(), None);
    let bad = r#"{"jsonrpc":"2.0","id":1,"method":"handshake","params":{"protocol_version":20,"client_info":{"name":"a\u0007"}}}"#;
    connection.handle_frame(MessageFrame::Text(bad.to_owned())).await;
    assert_eq!(handle.client_info(), None, "a refused handshake leaves nothing behind");
    let good = r#"{"jsonrpc":"2.0","id":2,"method":"handshake","params":{"protocol_version":20,"client_info":{"name":"web console","version":"1"}}}"#;
    connection.handle_frame(MessageFrame::Text(good.to_owned())).await;
    let expected = ClientInfo { name: "web console".to_owned(), version: Some("1".to_owned()) };
    assert_eq!(handle.client_info().as_deref(), Some(&expected));
    assert_eq!(context(&connection).client_info().as_deref(), Some(&expected), "every request's context sees it");
}

#[test]
fn a_handle_follows_its_connection_s_subscriptions() {
    let (connection, _outbound, ctx) = connection(limits(1, 1 << 20));
    let handle = ctx.connection();
    assert!(!handle.is_subscribed("a"));
    let sink = ctx.event_sink("a");
    assert!(handle.is_subscribed("a"), "subscribed from the moment the sink exists");
    assert!(!handle.is_subscribed("b"));
    // A subscriber that falls behind is no longer subscribed (it is sent a gap) ...
    sink.channel.open();
    connection.shared.queue.try_push(&ByteString::from("reply")).unwrap();
    assert_eq!(sink.offer(1, &ByteString::from("event")), Err(SinkError::Lagging));
    assert!(!handle.is_subscribed("a"));
    // ... until it subscribes again; a replaced subscription does not count against the new one.
    let request = context(&connection);
    let _again = request.event_sink("a");
    assert!(handle.is_subscribed("a"));
    connection.shared.close();
    assert!(handle.is_closed());
    assert!(!handle.is_subscribed("a"), "nothing is subscribed on a closed connection");
}
