//! Inputs larger than `[limits] max_input_bytes` are refused with a typed -32602 before anything is written; the
//! connection stays up and a run at the limit starts.

use serde_json::json;

use super::support::*;

const LIMIT: usize = 1000;

fn start_params(session_id: &str, client_run_id: &str, input: &str) -> serde_json::Value {
    json!({"session_id": session_id, "client_run_id": client_run_id, "input": input, "reset_fallback": false,
        "selection": {"agent": "default", "model": {"model": "local/scripted", "variant": null}, "preset": null}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_over_the_limit_is_refused_and_nothing_is_written() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some(format!("[limits]\nmax_input_bytes = {LIMIT}\n")),
        ..DaemonSetup::default()
    });
    let (client, _deliveries) = daemon.client().await;
    // A slow first turn keeps the run active for the steering check.
    connect_script(&client, daemon.data_path(), json!({"turns": [{"text": "done", "delay_ms": 2000}]})).await;
    let session = daemon.create_session(&client).await;
    let mut raw = daemon.raw().await;
    raw.handshake().await;

    let too_large = "x".repeat(LIMIT + 1);
    let reply = raw.call(2, "run.start", start_params(&session.session_id, "big", &too_large)).await;
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    assert_eq!(reply["error"]["data"]["code"], "input_too_large", "{reply}");
    assert_eq!(reply["error"]["data"]["limit"], LIMIT, "{reply}");
    assert!(reply["error"]["data"]["detail"].as_str().unwrap().contains("max_input_bytes"), "{reply}");
    let meta = raw.call(3, "session.get", json!({"session_id": session.session_id})).await;
    assert_eq!(meta["result"]["session"]["last_event_seq"], session.last_event_seq, "nothing was written: {meta}");

    // The connection is still up, and an input at the limit runs.
    let at_limit = "y".repeat(LIMIT);
    let started = raw.call(4, "run.start", start_params(&session.session_id, "fits", &at_limit)).await;
    let run_id = started["result"]["run_id"].as_str().unwrap_or_else(|| panic!("{started}")).to_owned();
    let steer = raw.call(5, "run.steer", json!({"run_id": run_id, "input": too_large})).await;
    assert_eq!(steer["error"]["data"]["code"], "input_too_large", "{steer}");
    let steer = raw.call(6, "run.steer", json!({"run_id": run_id, "input": "small"})).await;
    assert_eq!(steer["result"]["accepted"], true, "{steer}");
}
