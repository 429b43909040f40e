//! Nothing switches models silently: a session whose model can no longer run (its provider disconnected) is not
//! moved to another model by the CLI. When its agent's chain goes on, the run asks for the session's model and
//! falls back along the chain, recorded (`attempt_abandoned`, `model_fallback`) and printed; a later run that starts
//! on that fallback (stickiness) says which model was asked for, in `troupe run` and in the otherwise quiet
//! `troupe exec`, until `--reset-fallback`. When nothing can take over, the CLI refuses with the fix, and a
//! `run.start` naming the model fails on it, saying why, instead of running on another one.

use troupe_protocol::client::Client;
use troupe_protocol::method;
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::session::SessionListParams;

use super::cli_support::*;
use super::support::*;
use troupe_test_support::FakeServer;
use troupe_test_support::replies::{models_list, openai_text};

/// The only root session's id.
async fn only_session(client: &Client) -> String {
    let listed = within("session.list", client.call::<method::SessionList>(SessionListParams::default()))
        .await
        .expect("session.list")
        .sessions;
    assert_eq!(listed.len(), 1, "{listed:?}");
    listed[0].session_id.clone()
}

/// The session's whole log: a subscription from the start, up to `session.get`'s last seq.
async fn log_of(daemon: &TestDaemon, session_id: &str) -> Vec<StoredEvent> {
    let (client, mut deliveries) = daemon.client().await;
    let meta =
        within("session.get", client.call::<method::SessionGet>(SessionIdParams { session_id: session_id.into() }))
            .await
            .expect("session.get")
            .session;
    client.subscribe(session_id, None).await.expect("subscribe");
    events_until(&mut deliveries, |event| event.seq == meta.last_event_seq).await
}

fn runs_started(events: &[StoredEvent]) -> usize {
    events.iter().filter(|event| matches!(event.payload, EventPayload::RunStarted { .. })).count()
}

#[tokio::test]
async fn a_session_whose_model_cannot_run_falls_back_along_its_chain_out_loud() {
    let vendor = FakeServer::start(vec![models_list(&["first"]), openai_text("from first")]).await;
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[agents.chain]\nmodels = [\"openai/first\", \"local/echo\"]\n".into()),
        ..DaemonSetup::default()
    });
    let (client, _deliveries) = daemon.client().await;
    let base_url = format!("{}/v1", vendor.base_url);
    connect_provider(&client, "openai", &[("base_url", &base_url)], Some("k")).await.expect("connect openai");
    let cwd = daemon.project_path().to_str().expect("utf-8").to_owned();
    let first = troupe(&daemon, &["run", "--agent", "chain", "--cwd", &cwd, "hello"]).await.ok();
    assert!(first.contains("(chain, openai/first)") && first.contains("from first"), "{first}");
    let session_id = only_session(&client).await;
    disconnect_provider(&client, "openai").await;

    // No flags: the session's model is asked for, and the run's fallback is printed.
    let second = troupe(&daemon, &["run", "--session", &session_id, "second"]).await.ok();
    assert!(second.contains("(chain, openai/first)"), "the session's model, not a substitute: {second}");
    assert!(second.contains("openai/first failed (auth)") && second.contains("not connected"), "{second}");
    assert!(second.contains("falling back from openai/first to local/echo"), "{second}");
    assert!(second.contains("run completed"), "{second}");
    let log = log_of(&daemon, &session_id).await;
    let fallbacks: Vec<(String, String)> = log
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::ModelFallback { from, to, .. } => Some((from.clone(), to.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(fallbacks, vec![("openai/first".to_owned(), "local/echo".to_owned())], "recorded in the log");

    // The next run starts on the fallback (stickiness): even the quiet `exec` says which model was asked for.
    let third = troupe(&daemon, &["exec", "--session", &session_id, "third"]).await;
    assert!(third.succeeded(), "{third:?}");
    assert_eq!(third.stdout.trim(), "third", "local/echo answered: {third:?}");
    assert!(
        third.stderr.contains("note: openai/first was asked for: the run starts on local/echo"),
        "exec names the switch: {third:?}"
    );
    // `troupe watch` prints both, in order.
    let watched =
        troupe_until(&daemon, &["watch", &session_id], |line| line.contains("note: openai/first was asked for")).await;
    let fallback = watched.iter().position(|line| line.contains("falling back from openai/first to local/echo"));
    assert!(fallback.is_some_and(|at| at + 1 < watched.len()), "{watched:?}");

    // --reset-fallback asks for the first model again: it cannot run, so the run falls back, out loud, once more.
    let reset = troupe(&daemon, &["run", "--session", &session_id, "--reset-fallback", "fourth"]).await.ok();
    assert!(reset.contains("(chain, openai/first)") && !reset.contains("was asked for"), "{reset}");
    assert!(reset.contains("falling back from openai/first to local/echo"), "{reset}");
}

#[tokio::test]
async fn a_session_whose_model_cannot_run_and_has_no_fallback_is_refused_and_never_moved() {
    let vendor = FakeServer::start(vec![models_list(&["solo"]), openai_text("from solo")]).await;
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    let base_url = format!("{}/v1", vendor.base_url);
    connect_provider(&client, "openai", &[("base_url", &base_url)], Some("k")).await.expect("connect openai");
    let cwd = daemon.project_path().to_str().expect("utf-8").to_owned();
    troupe(&daemon, &["run", "--model", "openai/solo", "--cwd", &cwd, "hello"]).await.ok();
    let session_id = only_session(&client).await;
    disconnect_provider(&client, "openai").await;
    let before = runs_started(&log_of(&daemon, &session_id).await);

    // Without a model (the session's own) and with it: refused, with the fix; the default agent's local/echo is
    // not slipped in.
    let said = troupe(&daemon, &["run", "--session", &session_id, "again"]).await.refused();
    assert!(said.contains("this session's model: openai/solo needs provider openai, which is not connected"), "{said}");
    assert!(said.contains("troupe connect openai") && said.contains("--model"), "{said}");
    let said = troupe(&daemon, &["run", "--session", &session_id, "--model", "openai/solo", "again"]).await.refused();
    assert!(said.contains("not connected"), "{said}");
    assert_eq!(runs_started(&log_of(&daemon, &session_id).await), before, "no run was started");

    // Over the wire, a run asking for it fails on it, with why; no other model answers.
    client.subscribe(&session_id, None).await.expect("subscribe");
    let run_id = start_run(&client, &session_id, selection_of("default", "openai/solo"), "anyway").await;
    let events =
        events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    let run: Vec<&StoredEvent> = events.iter().filter(|event| event.run_id.as_deref() == Some(&run_id)).collect();
    assert!(!run.iter().any(|event| matches!(event.payload, EventPayload::ModelFallback { .. })), "{run:?}");
    assert!(!run.iter().any(|event| matches!(event.payload, EventPayload::ModelTurnCommitted { .. })), "{run:?}");
    match &run.last().expect("the run's end").payload {
        EventPayload::RunFailed { error, resolved_model, .. } => {
            assert!(error.contains("openai/solo") && error.contains("not connected"), "{error}");
            assert_eq!(resolved_model.as_deref(), Some("openai/solo"));
        }
        other => panic!("the run did not fail on its model: {other:?}"),
    }
}
