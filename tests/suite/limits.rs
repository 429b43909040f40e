//! The bounds of `config.toml` at work: inputs larger than `[limits] max_input_bytes` are refused with a typed
//! -32602 before anything is written (the connection stays up and a run at the limit starts), and `[tools]`
//! bounds a shell call's time and the output its result keeps.

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tools_section_of_config_toml_bounds_shell_calls() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some(
            "[tools]
shell_timeout_secs = 1
max_output_bytes = 2000
"
            .to_owned(),
        ),
        ..DaemonSetup::default()
    });
    let script = json!({"turns": [
        {"tool_calls": [{"tool": "shell", "arguments": {"command": "sleep 30"}}]},
        {"tool_calls": [{"tool": "shell", "arguments": {"command": "head -c 10000 /dev/zero | tr '\\0' a"}}]},
        {"text": "done"}
    ]});
    let events = run_script_in_yolo(&daemon, daemon.project_path(), script).await;
    let outputs: Vec<String> = tool_results(&events).into_iter().map(|result| result.output).collect();
    assert!(outputs[0].contains("timed out after 1 s"), "{}", outputs[0]);
    assert!(outputs[1].contains("bytes elided"), "{}", &outputs[1][..200.min(outputs[1].len())]);
    assert!(outputs[1].len() < 2 * 2000 + 500, "{} bytes kept", outputs[1].len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loud_command_keeps_64_kib_of_each_stream_in_the_log_and_counts_the_rest() {
    use troupe_protocol::types::events::EventPayload;
    use troupe_protocol::types::tool_output::OutputStream;
    const DURABLE_CAP: u64 = 64 * 1024;
    const PRINTED: u64 = 200_000;
    let daemon = TestDaemon::start();
    let command = format!("head -c {PRINTED} /dev/zero | tr '\\0' a; head -c 1000 /dev/zero | tr '\\0' e >&2");
    let script =
        json!({"turns": [{"tool_calls": [{"tool": "shell", "arguments": {"command": command}}]}, {"text": "done"}]});
    let events = run_script_in_yolo(&daemon, daemon.project_path(), script).await;
    let mut recorded = [0u64; 2];
    let mut elided = [0u64; 2];
    for event in &events {
        match &event.payload {
            EventPayload::ToolCallProgress { stream, offset, text, .. } => {
                let index = usize::from(*stream == OutputStream::Stderr);
                assert_eq!(*offset, recorded[index], "progress chunks are contiguous from offset 0");
                recorded[index] += text.len() as u64;
            }
            EventPayload::ToolOutputElided { stream, elided_bytes, .. } => {
                elided[usize::from(*stream == OutputStream::Stderr)] += elided_bytes;
            }
            _ => {}
        }
    }
    assert_eq!(recorded[0], DURABLE_CAP, "stdout kept in the log");
    assert_eq!(elided[0], PRINTED - DURABLE_CAP, "stdout counted as elided");
    assert_eq!((recorded[1], elided[1]), (1000, 0), "a quiet stderr is kept whole");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hibernate_after_secs_from_config_toml_unloads_an_idle_session() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[limits]\nhibernate_after_secs = 1\n".to_owned()),
        ..DaemonSetup::default()
    });
    let (client, _deliveries) = daemon.client().await;
    let session = daemon.create_session(&client).await;
    set_title(&client, &session.session_id, "wake", "awake").await.unwrap();
    assert!(daemon.engine().is_live(&session.session_id));
    let started = std::time::Instant::now();
    eventually("the idle session hibernates", || !daemon.engine().is_live(&session.session_id)).await;
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(900),
        "not before its second: {:?}",
        started.elapsed()
    );
}
