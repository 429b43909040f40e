//! JSON-RPC ids come back exactly as the client wrote them: numbers beyond 64 bits or beyond `f64`, `-0`,
//! strings with escapes, and `null` for errors about requests whose id could not be read, alone and in batches.

use futures::StreamExt;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio_tungstenite::tungstenite::Message;

use super::support::*;

/// Ids that a round trip through `f64` or `i64`/`u64` would change, or whose spelling would change.
const IDS: &[&str] = &["12345678901234567890123456789", "1.5e300", "1.0e400", "-0", "1E2", r#""x""#, r#""\u00e9""#];

/// The next text frame exactly as the daemon sent it.
async fn recv_text(socket: &mut RawSocket) -> String {
    loop {
        let message = within("a frame", socket.stream.next()).await.expect("stream open").expect("frame");
        match message {
            Message::Text(text) => {
                let text = text.to_string();
                if !text.contains(r#""method":"runtime.changed""#) {
                    return text;
                }
            }
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("unexpected frame {other:?}"),
        }
    }
}

/// The `id` member of one response, as raw JSON text.
fn id_of(response: &str) -> String {
    #[derive(Deserialize)]
    struct Response<'a> {
        #[serde(borrow)]
        id: &'a RawValue,
    }
    let response: Response<'_> = serde_json::from_str(response).unwrap_or_else(|error| panic!("{error}: {response}"));
    response.id.get().to_owned()
}

fn ids_of_batch(batch: &str) -> Vec<String> {
    let members: Vec<&RawValue> = serde_json::from_str(batch).unwrap_or_else(|error| panic!("{error}: {batch}"));
    members.iter().map(|member| id_of(member.get())).collect()
}

fn request(id: &str, method: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{}}}}"#)
}

#[tokio::test]
async fn ids_are_echoed_byte_for_byte_in_results_and_errors() {
    let daemon = TestDaemon::start();
    let mut socket = daemon.raw().await;
    // The handshake itself, with an id no `u64` holds.
    socket
        .send_text(r#"{"jsonrpc":"2.0","id":12345678901234567890123456789,"method":"handshake","params":{"protocol_version":20}}"#)
        .await;
    let reply = recv_text(&mut socket).await;
    assert_eq!(id_of(&reply), "12345678901234567890123456789", "{reply}");
    assert!(reply.contains(r#""result""#), "{reply}");

    for id in IDS {
        socket.send_text(&request(id, "session.list")).await;
        let reply = recv_text(&mut socket).await;
        assert_eq!(id_of(&reply), *id, "{reply}");
        assert!(reply.contains(r#""result""#), "{reply}");
        // An error answers the same id.
        socket.send_text(&request(id, "no.such.method")).await;
        let reply = recv_text(&mut socket).await;
        assert_eq!(id_of(&reply), *id, "{reply}");
        assert!(reply.contains("-32601"), "{reply}");
    }

    // A request whose id is null is answered with null, and so are requests whose id cannot be read.
    for (frame, code) in [
        (request("null", "no.such.method"), "-32601"),
        (request("true", "session.list"), "-32600"),
        (request("[1]", "session.list"), "-32600"),
        ("{not json".to_owned(), "-32700"),
    ] {
        socket.send_text(&frame).await;
        let reply = recv_text(&mut socket).await;
        assert_eq!(id_of(&reply), "null", "{reply}");
        assert!(reply.contains(code), "{reply}");
    }
}

#[tokio::test]
async fn ids_are_echoed_byte_for_byte_in_a_batch() {
    let daemon = TestDaemon::start();
    let mut socket = daemon.raw().await;
    socket.handshake().await;
    let mut members: Vec<String> = IDS.iter().map(|id| request(id, "session.list")).collect();
    members.push(request("1.0e400", "no.such.method"));
    members.push(request("null", "no.such.method"));
    members.push(request("{}", "session.list"));
    socket.send_text(&format!("[{}]", members.join(","))).await;
    let reply = recv_text(&mut socket).await;
    let mut expected: Vec<String> = IDS.iter().map(|id| (*id).to_owned()).collect();
    expected.extend(["1.0e400".to_owned(), "null".to_owned(), "null".to_owned()]);
    assert_eq!(ids_of_batch(&reply), expected, "{reply}");
}
