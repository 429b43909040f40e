//! Presence (troupe extension): the handshake's `client_info`, `session.presence`, `session.presence_changed`
//! sent only to the connections that asked, and `session.presence_unsubscribe`.

use serde_json::{Value, json};
use troupe_protocol::client::ClientOptions;
use troupe_protocol::types::runtime::ClientInfo;

use super::support::*;

/// A raw socket handshaken with `client_info` (none when `None`).
async fn connect(daemon: &TestDaemon, client_info: Option<Value>) -> RawSocket {
    let mut socket = daemon.raw().await;
    let mut params = json!({"protocol_version": 20});
    if let Some(client_info) = client_info {
        params["client_info"] = client_info;
    }
    let reply = socket.call(0, "handshake", params).await;
    assert_eq!(reply["result"]["protocol_version"], 20, "{reply}");
    socket
}

async fn subscribe(socket: &mut RawSocket, id: u64, session_id: &str) {
    let reply = socket.call(id, "events.subscribe", json!({"session_id": session_id})).await;
    assert!(reply["result"]["last_seq"].is_u64(), "{reply}");
}

/// Calls `session.presence` and returns its result.
async fn presence(socket: &mut RawSocket, id: u64, session_id: &str) -> Value {
    let reply = socket.call(id, "session.presence", json!({"session_id": session_id})).await;
    assert_eq!(reply["result"]["session_id"], session_id, "{reply}");
    reply["result"].clone()
}

/// The names in a presence list, in its order.
fn names(clients: &Value) -> Vec<Value> {
    clients.as_array().expect("clients").iter().map(|client| client["name"].clone()).collect()
}

/// The next `session.presence_changed`, skipping other notifications; fails on a response.
async fn next_presence_change(socket: &mut RawSocket) -> Value {
    loop {
        let frame = socket.recv().await;
        assert!(frame.get("id").is_none(), "a response while waiting for a presence change: {frame}");
        if frame["method"] == "session.presence_changed" {
            return frame["params"].clone();
        }
    }
}

/// Calls `session.get` and returns every frame that came before its reply, asserting none of them is a presence
/// notification: the connection never asked for them (or stopped asking).
async fn assert_no_presence_notice_before_reply(socket: &mut RawSocket, id: u64, session_id: &str) {
    socket
        .send(&json!({"jsonrpc": "2.0", "id": id, "method": "session.get", "params": {"session_id": session_id}}))
        .await;
    loop {
        let frame = socket.recv().await;
        assert_ne!(frame["method"], "session.presence_changed", "an unasked-for presence notice: {frame}");
        if frame["id"] == id {
            assert!(frame["result"]["session"].is_object(), "{frame}");
            return;
        }
    }
}

#[tokio::test]
async fn presence_lists_subscribers_by_name_and_tells_only_the_watcher_when_one_leaves() {
    let daemon = TestDaemon::start();
    let (writer, _) = daemon.client().await;
    let session_id = daemon.create_session(&writer).await.session_id;

    let mut alpha = connect(&daemon, Some(json!({"name": "alpha", "version": "1.2.3"}))).await;
    subscribe(&mut alpha, 1, &session_id).await;
    let mut beta = connect(&daemon, Some(json!({"name": "beta"}))).await;
    subscribe(&mut beta, 1, &session_id).await;

    // The watcher is not subscribed, so it is not in the list; strict clients (no client_info) would show null.
    let mut watcher = connect(&daemon, Some(json!({"name": "watcher"}))).await;
    let listed = presence(&mut watcher, 1, &session_id).await;
    let clients = listed["clients"].as_array().expect("clients");
    assert_eq!(names(&listed["clients"]), vec![json!("alpha"), json!("beta")], "{listed}");
    assert_eq!(clients[0]["version"], "1.2.3");
    assert_eq!(clients[1]["version"], Value::Null, "a version not sent is null: {listed}");
    let alpha_id = clients[0]["connection_id"].as_str().expect("connection_id").to_owned();
    assert_ne!(alpha_id, clients[1]["connection_id"].as_str().expect("connection_id"));
    for client in clients {
        let since = client["since"].as_str().expect("since");
        assert!(
            since.len() >= 20 && since.as_bytes()[10] == b'T' && since.ends_with('Z'),
            "since is RFC 3339 UTC: {since}"
        );
    }

    drop(beta);
    let changed = next_presence_change(&mut watcher).await;
    assert_eq!(changed["session_id"], session_id.as_str());
    assert_eq!(changed["clients"].as_array().map(Vec::len), Some(1), "{changed}");
    assert_eq!(changed["clients"][0]["connection_id"], alpha_id.as_str());
    assert_eq!(changed["clients"][0]["name"], "alpha");

    // alpha never asked: the change reached the watcher, and alpha's frames up to a later reply have none.
    assert_no_presence_notice_before_reply(&mut alpha, 2, &session_id).await;
}

#[tokio::test]
async fn the_caller_sees_itself_and_unsubscribing_stops_its_notices() {
    let daemon = TestDaemon::start();
    let (writer, _) = daemon.client().await;
    let session_id = daemon.create_session(&writer).await.session_id;

    // A subscribed caller is in its own list; a connection without client_info is listed with null names.
    let mut console = connect(&daemon, Some(json!({"name": "web console", "version": "0.1"}))).await;
    subscribe(&mut console, 1, &session_id).await;
    let listed = presence(&mut console, 2, &session_id).await;
    assert_eq!(names(&listed["clients"]), vec![json!("web console")], "{listed}");
    assert_eq!(listed["you"], listed["clients"][0]["connection_id"], "the caller is told which entry it is");
    let mut other_watcher = connect(&daemon, None).await;
    let listed = presence(&mut other_watcher, 1, &session_id).await;
    assert_eq!(names(&listed["clients"]), vec![json!("web console")], "{listed}");
    let other = listed["you"].as_str().expect("you");
    assert!(other.starts_with("connection-") && listed["clients"][0]["connection_id"] != other, "{listed}");

    let mut strict = connect(&daemon, None).await;
    subscribe(&mut strict, 1, &session_id).await;
    let changed = next_presence_change(&mut console).await;
    assert_eq!(names(&changed["clients"]), vec![json!("web console"), Value::Null], "{changed}");
    assert_eq!(next_presence_change(&mut other_watcher).await, changed, "every watcher gets the same list");

    // Subscribing again (a resubscribe from a cursor) changes nothing and keeps `since`.
    subscribe(&mut strict, 2, &session_id).await;
    let listed = presence(&mut other_watcher, 2, &session_id).await;
    assert_eq!(listed["clients"], changed["clients"], "a resubscribe is not a new presence");

    let reply = console.call(3, "session.presence_unsubscribe", json!({"session_id": session_id})).await;
    assert_eq!(reply["result"], json!({}), "{reply}");
    drop(strict);
    // The watcher that still watches hears of the departure; the one that unsubscribed does not.
    let changed = next_presence_change(&mut other_watcher).await;
    assert_eq!(names(&changed["clients"]), vec![json!("web console")], "{changed}");
    assert_no_presence_notice_before_reply(&mut console, 4, &session_id).await;
}

#[tokio::test]
async fn the_rust_client_names_itself_from_its_options() {
    let daemon = TestDaemon::start();
    let (writer, _) = daemon.client().await;
    let session_id = daemon.create_session(&writer).await.session_id;
    let options = ClientOptions { client_info: Some(ClientInfo::named("rust test")), ..ClientOptions::default() };
    let (client, _deliveries) = daemon.client_with(options).await;
    within("subscribe", client.subscribe(&session_id, None)).await.expect("subscribe");

    let mut watcher = connect(&daemon, None).await;
    let listed = presence(&mut watcher, 1, &session_id).await;
    assert_eq!(names(&listed["clients"]), vec![json!("rust test")], "{listed}");
}

#[tokio::test]
async fn a_bad_client_info_and_unknown_sessions_are_refused() {
    let daemon = TestDaemon::start();
    let mut socket = daemon.raw().await;
    let long_name = "x".repeat(129);
    for (client_info, says) in [
        (json!({"name": ""}), "empty"),
        (json!({"name": "two\nlines"}), "control or format character"),
        (json!({"name": "web console\u{202e}"}), "control or format character"),
        (json!({"name": long_name}), "at most 128"),
        (json!({"name": "fine", "version": "1\u{7}"}), "client_info.version"),
    ] {
        let reply = socket.call(1, "handshake", json!({"protocol_version": 20, "client_info": client_info})).await;
        assert_eq!(reply["error"]["code"], -32602, "{reply}");
        assert_eq!(reply["error"]["data"]["code"], "invalid_client_info", "{reply}");
        let detail = reply["error"]["data"]["detail"].as_str().expect("detail");
        assert!(detail.contains(says), "{detail}");
    }
    // Unknown fields are still refused, in client_info as in the handshake itself.
    for params in [
        json!({"protocol_version": 20, "client_info": {"name": "x", "colour": "red"}}),
        json!({"protocol_version": 20, "client": "x"}),
        json!({"protocol_version": 20, "client_info": "x"}),
    ] {
        let reply = socket.call(2, "handshake", params).await;
        assert_eq!(reply["error"]["code"], -32602, "{reply}");
    }
    // None of those counted as a handshake; the connection is still open for a good one.
    let before = socket.call(3, "session.presence", json!({"session_id": "nope"})).await;
    assert_eq!(before["error"]["code"], -32001, "{before}");
    let reply = socket.call(4, "handshake", json!({"protocol_version": 20, "client_info": {"name": "ok"}})).await;
    assert_eq!(reply["result"]["protocol_version"], 20, "{reply}");

    for method in ["session.presence", "session.presence_unsubscribe"] {
        let reply = socket.call(5, method, json!({"session_id": "no-such-session"})).await;
        assert_eq!(reply["error"]["code"], -32000, "{reply}");
        assert_eq!(reply["error"]["data"]["code"], "session_not_found", "{method}: {reply}");
    }
}

#[tokio::test]
async fn a_connection_watches_a_bounded_number_of_sessions() {
    let daemon = TestDaemon::start();
    let (writer, _) = daemon.client().await;
    let mut watcher = connect(&daemon, Some(json!({"name": "greedy"}))).await;
    let limit = troupe_actors::presence_actor::MAX_WATCHED_SESSIONS;
    let mut sessions = Vec::new();
    for index in 0..=limit {
        let session_id = daemon.create_session(&writer).await.session_id;
        let reply = watcher.call(index as u64 + 1, "session.presence", json!({"session_id": session_id})).await;
        if index < limit {
            assert!(reply["result"]["clients"].is_array(), "{reply}");
        } else {
            assert_eq!(reply["error"]["data"]["code"], "too_many_presence_watches", "{reply}");
            assert_eq!(reply["error"]["data"]["limit"], limit, "{reply}");
        }
        sessions.push(session_id);
    }
    // Watching one already watched is a renewal, not one more; unsubscribing one makes room.
    let again = watcher.call(100, "session.presence", json!({"session_id": sessions[0]})).await;
    assert!(again["result"]["clients"].is_array(), "{again}");
    let reply = watcher.call(101, "session.presence_unsubscribe", json!({"session_id": sessions[0]})).await;
    assert_eq!(reply["result"], json!({}), "{reply}");
    let now = watcher.call(102, "session.presence", json!({"session_id": sessions[limit]})).await;
    assert!(now["result"]["clients"].is_array(), "{now}");
}

#[tokio::test]
async fn a_subscription_ended_by_deleting_the_session_leaves_the_list() {
    let daemon = TestDaemon::start();
    let (writer, _) = daemon.client().await;
    let session_id = daemon.create_session(&writer).await.session_id;
    let mut follower = connect(&daemon, Some(json!({"name": "follower"}))).await;
    subscribe(&mut follower, 1, &session_id).await;
    let mut watcher = connect(&daemon, None).await;
    let listed = presence(&mut watcher, 1, &session_id).await;
    assert_eq!(names(&listed["clients"]), vec![json!("follower")], "{listed}");

    // The follower's connection stays open; its subscription ends with the session's gap.
    let params = troupe_protocol::types::common::SessionIdParams { session_id: session_id.clone() };
    within("session.delete", writer.call::<troupe_protocol::method::SessionDelete>(params))
        .await
        .expect("session.delete");
    let changed = next_presence_change(&mut watcher).await;
    assert_eq!(changed["clients"], json!([]), "{changed}");
}

#[tokio::test]
async fn watching_presence_lets_an_idle_session_hibernate_and_sees_the_next_subscriber() {
    let setup = DaemonSetup { hibernate_after: Some(std::time::Duration::from_millis(200)), ..DaemonSetup::default() };
    let daemon = TestDaemon::start_with(setup);
    let (writer, _) = daemon.client().await;
    let session_id = daemon.create_session(&writer).await.session_id;
    let mut watcher = connect(&daemon, Some(json!({"name": "watcher"}))).await;
    let mut first = connect(&daemon, Some(json!({"name": "first"}))).await;
    subscribe(&mut first, 1, &session_id).await;
    let listed = presence(&mut watcher, 1, &session_id).await;
    assert_eq!(names(&listed["clients"]), vec![json!("first")], "{listed}");

    drop(first);
    assert_eq!(next_presence_change(&mut watcher).await["clients"], json!([]));
    // The watch holds no subscription: the session goes idle and stops like any unwatched one.
    eventually("the watched session hibernates", || !daemon.engine().is_live(&session_id)).await;

    // The next subscribe loads it again, and the watcher hears of it.
    let mut second = connect(&daemon, Some(json!({"name": "second"}))).await;
    subscribe(&mut second, 1, &session_id).await;
    let changed = next_presence_change(&mut watcher).await;
    assert_eq!(names(&changed["clients"]), vec![json!("second")], "{changed}");
}
