//! The JSON-RPC envelope over the real socket: handshake gating, every error code of wire.md, batches, and the
//! JSON-RPC 2.0 specification's own examples of invalid requests.

use serde_json::{Value, json};
use troupe_protocol::methods::METHOD_NAMES;

use super::support::*;

fn error_code(reply: &Value) -> i64 {
    reply["error"]["code"].as_i64().unwrap_or_else(|| panic!("not an error reply: {reply}"))
}

#[tokio::test]
async fn every_method_before_the_handshake_is_rejected_with_minus_32001() {
    let daemon = TestDaemon::start();
    let mut socket = daemon.raw().await;
    for (index, method) in METHOD_NAMES.iter().filter(|name| **name != "handshake").enumerate() {
        let reply = socket.call(index as u64 + 1, method, json!({})).await;
        assert_eq!(error_code(&reply), -32001, "{method}: {reply}");
        assert!(reply["error"]["data"]["detail"].as_str().unwrap().contains("handshake"), "{reply}");
    }
    // Unknown methods are gated too, and the connection is still usable afterwards.
    assert_eq!(error_code(&socket.call(99, "no.such.method", json!({})).await), -32001);
    socket.handshake().await;
}

#[tokio::test]
async fn the_handshake_accepts_only_protocol_20_and_then_sends_runtime_changed() {
    let daemon = TestDaemon::start();
    let mut socket = daemon.raw().await;
    let wrong = socket.call(1, "handshake", json!({"protocol_version": 19})).await;
    assert_eq!(error_code(&wrong), -32602);
    assert_eq!(wrong["error"]["data"]["code"], "unsupported_protocol_version");
    assert_eq!(wrong["error"]["data"]["supported"], json!([20]));
    // Still not handshaken.
    assert_eq!(error_code(&socket.call(2, "session.list", json!({})).await), -32001);

    socket.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "handshake", "params": {"protocol_version": 20}})).await;
    let reply = socket.recv().await;
    assert_eq!(reply["id"], 3, "the reply comes before any notification: {reply}");
    assert_eq!(reply["result"]["protocol_version"], 20);
    assert_eq!(reply["result"]["server"]["name"], "troupe");
    let changed = socket.recv().await;
    assert_eq!(changed["method"], "runtime.changed");
    assert_eq!(changed["params"]["previous_revision"], Value::Null);
    assert_eq!(changed["params"]["reasons"], json!(["startup"]));
    let snapshot = &changed["params"]["snapshot"];
    let models: Vec<&str> =
        snapshot["models"].as_array().unwrap().iter().map(|m| m["model"].as_str().unwrap()).collect();
    assert_eq!(models, ["local/echo", "local/scripted"]);
    assert_eq!(snapshot["agents"][0]["agent"], "default");
    assert_eq!(snapshot["agents"][0]["models"][0]["model"], "local/echo");

    // A repeated handshake is answered the same way.
    let again = socket.call(4, "handshake", json!({"protocol_version": 20})).await;
    assert_eq!(again["result"]["protocol_version"], 20);
}

#[tokio::test]
async fn error_codes_of_the_wire_contract() {
    let daemon = TestDaemon::start();
    let mut socket = daemon.raw().await;
    socket.handshake().await;

    socket.send_text(r#"{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]"#).await;
    let parse = socket.recv_response().await;
    assert_eq!(error_code(&parse), -32700);
    assert_eq!(parse["id"], Value::Null);
    assert!(parse["error"]["data"]["detail"].is_string());

    let invalid = socket.call_raw(json!({"jsonrpc": "2.0", "method": 1, "params": "bar"})).await;
    assert_eq!(error_code(&invalid), -32600);
    assert_eq!(invalid["id"], Value::Null);

    let wrong_version = socket.call_raw(json!({"jsonrpc": "1.0", "method": "session.list", "id": 7})).await;
    assert_eq!(error_code(&wrong_version), -32600);
    assert_eq!(wrong_version["id"], 7);

    let unknown = socket.call(8, "session.explode", json!({})).await;
    assert_eq!(error_code(&unknown), -32601);
    assert!(unknown["error"]["data"]["detail"].as_str().unwrap().contains("session.explode"));

    let unknown_field = socket.call(9, "session.list", json!({"cwd": null, "colour": "red"})).await;
    assert_eq!(error_code(&unknown_field), -32602);
    assert!(unknown_field["error"]["data"]["detail"].as_str().unwrap().contains("colour"), "{unknown_field}");

    let missing_field = socket.call(10, "session.get", json!({})).await;
    assert_eq!(error_code(&missing_field), -32602);

    let positional = socket.call(11, "session.get", json!(["abc"])).await;
    assert_eq!(error_code(&positional), -32602);

    let not_found = socket.call(12, "session.get", json!({"session_id": "0190d3a4-0000-7000-8000-000000000000"})).await;
    assert_eq!(error_code(&not_found), -32000);
    assert_eq!(not_found["error"]["data"]["code"], "session_not_found");
    assert_eq!(not_found["error"]["data"]["session_id"], "0190d3a4-0000-7000-8000-000000000000");

    // The connection survived all of it.
    let list = socket.call(13, "session.list", json!({})).await;
    assert_eq!(list["result"]["sessions"], json!([]));
}

#[tokio::test]
async fn every_method_of_the_table_has_an_engine_handler() {
    let daemon = TestDaemon::start();
    let mut socket = daemon.raw().await;
    socket.handshake().await;
    let session = json!({"session_id": "s"});
    let mut examples = json!({
        "handshake": {"protocol_version": 20},
        "runtime.snapshot.get": {},
        "provider.connect": {"provider_id": "nope", "expected_catalog_revision": null, "setup_values": {}, "auth_method": "none", "auth_values": {}, "client_connect_id": "c"},
        "provider.disconnect": {"provider_id": "nope", "expected_runtime_revision": null, "expected_connection_generation": null, "client_request_id": "d"},
        "session.create": {"selection": echo_selection(), "cwd": "/nonexistent-dir"},
        "session.list": {},
        "session.get": session, "session.resume": session, "session.children": session, "session.tree": session,
        "session.rename": {"session_id": "s", "client_rename_id": "r", "change": {"type": "clear"}},
        "session.set_permission_mode": {"session_id": "s", "mode": "ask"},
        "session.goal.get": session,
        "session.goal.set": {"session_id": "s", "objective": "o"},
        "session.goal.lifecycle": {"session_id": "s", "goal_id": "g", "expected_revision": 1, "action": "pause"},
        "session.producers": session,
        "session.usage": session,
        "agent.usage": {"agent_id": "default"},
        "usage.global": {},
        "session.tree_usage": session,
        "skills.list": session,
        "skills.get": {"session_id": "s", "name": "n", "arguments": ""},
        "session.compact": {"session_id": "s", "focus": null},
        "session.revert": {"session_id": "s", "through_seq": 1},
        "session.fork": {"session_id": "s", "through_seq": 1},
        "run.start": {"session_id": "s", "client_run_id": "c", "selection": echo_selection(), "input": "hi"},
        "run.steer": {"run_id": "r", "input": "x"},
        "run.recall_steer": {"run_id": "r"},
        "run.cancel": {"run_id": "r"},
        "run.tool_stdin": {"run_id": "r", "tool_call_id": "t", "eof": true},
        "events.subscribe": session,
        "approval.list": {"root_session_id": "s"},
        "approval.respond": {"session_id": "s", "approval_id": "a", "request_revision": 1, "operation_fingerprint": "f", "client_response_id": "c", "decision": "reject"},
    });
    // troupe's extensions (added apart: one more entry above exceeds `json!`'s recursion limit).
    examples["session.archive"] = json!({"session_id": "s", "archived": true});
    examples["session.delete"] = session.clone();
    examples["session.diff"] = session.clone();
    examples["session.undo"] = session.clone();
    examples["session.attachment"] = json!({"session_id": "s", "path": "artifacts/a.png"});
    examples["session.files"] = json!({"session_id": "s", "dir": "src"});
    examples["session.file"] = json!({"session_id": "s", "path": "a.png"});
    examples["daemon.status"] = json!({});
    examples["console.login_code"] = json!({});
    examples["session.presence"] = session.clone();
    examples["session.presence_unsubscribe"] = session.clone();
    examples["tools.list"] = json!({});
    examples["tool_output.read"] = json!({"session_id": "s", "output_ref": "r", "stream": "stdout"});
    examples["tool_output.subscribe"] = json!({"session_id": "s", "tool_call_id": "t", "subscription_id": "n"});
    examples["tool_output.unsubscribe"] = json!({"subscription_id": "n"});
    for (index, method) in METHOD_NAMES.iter().enumerate() {
        let params = examples.get(*method).unwrap_or_else(|| panic!("no example params for {method}")).clone();
        let reply = socket.call(index as u64 + 1, method, params).await;
        // Valid params reach the engine: an answer or an engine refusal (no such session, ...), never
        // `not_implemented` or an unknown method.
        assert_ne!(reply["error"]["data"]["code"], "not_implemented", "{method}: {reply}");
        assert_ne!(reply["error"]["code"], -32601, "{method}: {reply}");
        assert!(reply.get("result").is_some() || reply["error"]["data"]["code"].is_string(), "{method}: {reply}");
    }
}

#[tokio::test]
async fn batches_follow_the_json_rpc_specification() {
    let daemon = TestDaemon::start();
    let mut socket = daemon.raw().await;
    socket.handshake().await;

    // Invalid JSON batch: one parse error, not an array.
    socket
        .send_text(
            r#"[{"jsonrpc": "2.0", "method": "session.list", "params": {}, "id": "1"}, {"jsonrpc": "2.0", "method""#,
        )
        .await;
    assert_eq!(error_code(&socket.recv_response().await), -32700);

    // Empty array: one invalid request, not an array.
    socket.send_text("[]").await;
    let empty = socket.recv_response().await;
    assert!(empty.is_object(), "{empty}");
    assert_eq!(error_code(&empty), -32600);

    // Invalid members: one error each.
    socket.send_text("[1]").await;
    let one = socket.recv_response().await;
    assert_eq!(one.as_array().unwrap().len(), 1);
    assert_eq!(error_code(&one[0]), -32600);
    socket.send_text("[1,2,3]").await;
    let three = socket.recv_response().await;
    assert_eq!(three.as_array().unwrap().iter().map(error_code).collect::<Vec<_>>(), [-32600; 3]);

    // A mixed batch: notifications get no member; everything else does.
    socket
        .send(&json!([
            {"jsonrpc": "2.0", "method": "session.list", "params": {}, "id": "1"},
            {"jsonrpc": "2.0", "method": "session.list", "params": {}},
            {"foo": "boo"},
            {"jsonrpc": "2.0", "method": "foo.get", "params": {"name": "myself"}, "id": "5"},
            {"jsonrpc": "2.0", "method": "runtime.snapshot.get", "params": {}, "id": "9"}
        ]))
        .await;
    let mixed = socket.recv_response().await;
    let members = mixed.as_array().unwrap();
    assert_eq!(members.len(), 4, "{mixed}");
    let by_id = |id: &str| members.iter().find(|member| member["id"] == id).unwrap_or_else(|| panic!("no {id}"));
    assert_eq!(by_id("1")["result"]["sessions"], json!([]));
    assert_eq!(error_code(by_id("5")), -32601);
    assert!(by_id("9")["result"]["snapshot"]["revision"].is_u64());
    assert!(members.iter().any(|member| member["id"].is_null() && error_code(member) == -32600));

    // All notifications: no reply frame at all, so the next frame answers the next request.
    socket
        .send(&json!([
            {"jsonrpc": "2.0", "method": "session.list", "params": {}},
            {"jsonrpc": "2.0", "method": "runtime.snapshot.get", "params": {}}
        ]))
        .await;
    let next = socket.call(42, "session.list", json!({})).await;
    assert_eq!(next["id"], 42, "{next}");
}

#[tokio::test]
async fn requests_over_the_in_flight_limit_are_answered_overloaded() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[limits]\nmax_in_flight = 1\n".into()),
        ..DaemonSetup::default()
    });
    let mut socket = daemon.raw().await;
    socket.handshake().await;
    // The members of one batch are admitted together, so all but the first exceed a limit of one.
    let batch: Vec<Value> =
        (0..20).map(|id| json!({"jsonrpc": "2.0", "id": id, "method": "session.list", "params": {}})).collect();
    socket.send(&Value::Array(batch)).await;
    let replies = socket.recv_response().await;
    let replies = replies.as_array().unwrap();
    assert_eq!(replies.len(), 20);
    let overloaded = replies.iter().filter(|reply| reply.get("error").is_some_and(|e| e["code"] == -32003)).count();
    assert_eq!(overloaded, 19, "{replies:?}");
    // Once the first finished, new requests are admitted again.
    assert!(socket.call(100, "session.list", json!({})).await.get("result").is_some());
}

#[tokio::test]
async fn a_crashing_session_leaves_others_alone_and_comes_back_from_its_log() {
    // One session thread: the healthy session shares the thread of the actor that panics.
    let daemon = TestDaemon::start_with(DaemonSetup { session_threads: Some(1), ..DaemonSetup::default() });
    let (client, _deliveries) = daemon.client().await;
    let crashing = daemon.create_session(&client).await;
    let healthy = daemon.create_session(&client).await;

    within("panic hook", daemon.engine().inject_session_panic(&crashing.session_id)).await.expect("hook");

    let mut socket = daemon.raw().await;
    socket.handshake().await;
    // The other session, on the same thread, is unaffected: it still answers and still writes.
    let other = socket.call(1, "session.resume", json!({"session_id": healthy.session_id})).await;
    assert_eq!(other["result"]["session"]["session_id"], json!(healthy.session_id));
    let written = socket
        .call(3, "session.rename", json!({"session_id": healthy.session_id, "client_rename_id": "healthy", "change": {"type": "set", "title": "still here"}}))
        .await;
    assert_eq!(written["result"]["session"]["title"], "still here", "{written}");
    // The crashed session restarts from its log on next use, with its state intact.
    let renamed = socket
        .call(2, "session.rename", json!({"session_id": crashing.session_id, "client_rename_id": "after-crash", "change": {"type": "set", "title": "back"}}))
        .await;
    assert_eq!(renamed["result"]["session"]["title"], "back", "{renamed}");
    assert_eq!(renamed["result"]["session"]["last_event_seq"], 2);
}

#[tokio::test]
async fn an_error_echoes_a_huge_hostile_session_id_bounded_and_without_controls() {
    let daemon = TestDaemon::start();
    let mut socket = daemon.raw().await;
    socket.handshake().await;
    let session_id = format!("\u{1b}]0;owned\u{7}\u{202e}{}", "a".repeat(1 << 20));
    let reply = socket.call(1, "session.get", json!({"session_id": session_id})).await;
    assert_eq!(error_code(&reply), -32000, "{}", &reply.to_string()[..200]);
    let data = &reply["error"]["data"];
    assert_eq!(data["code"], "session_not_found");
    let echoed = data["session_id"].as_str().expect("the id is echoed");
    assert!(
        echoed.len() <= troupe_protocol::diagnostic::MAX_DIAGNOSTIC_BYTES && echoed.starts_with("aaa"),
        "the echoed id is cut like a detail and its controls are gone: {} bytes, {:?}",
        echoed.len(),
        &echoed[..echoed.len().min(40)]
    );
    assert!(reply.to_string().len() < 16 * 1024, "the whole reply is small: {} bytes", reply.to_string().len());
}

#[tokio::test]
async fn a_burst_of_requests_to_one_session_is_answered_whole() {
    // Every connection's requests reach a session through the one address the live map holds (not a clone per
    // request): a burst from one connection, all queued before the session's thread takes the first.
    let daemon = TestDaemon::start_with(DaemonSetup { session_threads: Some(1), ..DaemonSetup::default() });
    let (client, _deliveries) = daemon.client().await;
    let session = daemon.create_session(&client).await;
    let mut socket = daemon.raw().await;
    socket.handshake().await;
    let batch: Vec<Value> = (0..200)
        .map(|id| {
            let params = json!({"session_id": session.session_id});
            json!({"jsonrpc": "2.0", "id": id, "method": "session.resume", "params": params})
        })
        .collect();
    socket.send(&Value::Array(batch)).await;
    let replies = socket.recv_response().await;
    let replies = replies.as_array().unwrap();
    assert_eq!(replies.len(), 200);
    for reply in replies {
        assert_eq!(reply["result"]["session"]["session_id"], session.session_id.as_str(), "{reply}");
    }
}
