//! Fallback stickiness end to end, against fake vendors: a run whose first model fails falls back; the next run
//! of the same agent starts on the fallback (and `run_started` records that effective selection); a
//! `reset_fallback` run goes back to the first model, and once it answers, later runs stay there.

use troupe_protocol::method;
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::run::RunStartParams;

use super::support::*;
use troupe_test_support::FakeServer;
use troupe_test_support::replies::{anthropic_text, models_list, openai_error, openai_text};

/// Starts a run of the `chain` agent requesting `openai/first` and returns its events, `run_started` first.
async fn run(
    client: &troupe_protocol::client::Client,
    deliveries: &mut troupe_protocol::client::Deliveries,
    session_id: &str,
    client_run_id: &str,
    reset_fallback: bool,
) -> Vec<StoredEvent> {
    let started = within(
        "run.start",
        client.call::<method::RunStart>(RunStartParams {
            session_id: session_id.to_owned(),
            client_run_id: client_run_id.to_owned(),
            selection: selection_of("chain", "openai/first"),
            input: format!("run {client_run_id}"),
            reset_fallback,
            attachments: Vec::new(),
        }),
    )
    .await
    .expect("run.start");
    let run_id = started.run_id;
    let events = events_until(deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    events.into_iter().filter(|event| event.run_id.as_deref() == Some(&run_id)).collect()
}

/// The effective selection's model, the chain position and the chain `run_started` recorded.
fn start_of(events: &[StoredEvent]) -> (String, u32, Vec<String>) {
    match &events[0].payload {
        EventPayload::RunStarted { selection, fallback_index, model_chain, .. } => (
            selection.model.model.clone(),
            *fallback_index,
            model_chain.iter().map(|model| model.model.clone()).collect(),
        ),
        other => panic!("not run_started: {other:?}"),
    }
}

fn final_text(events: &[StoredEvent]) -> String {
    match &events.last().unwrap().payload {
        EventPayload::RunCompleted { final_text: Some(text) } => text.clone(),
        other => panic!("the run did not complete: {other:?}"),
    }
}

#[tokio::test]
async fn a_committed_fallback_sticks_for_the_next_run_and_reset_fallback_returns_to_the_first_model() {
    // The first model refuses the key once (auth: move on at once), then answers.
    let first = FakeServer::start(vec![
        models_list(&["first"]),
        openai_error(401, "bad key"),
        openai_text("three"),
        openai_text("four"),
    ])
    .await;
    let backup = FakeServer::start(vec![models_list(&["backup"]), anthropic_text("one"), anthropic_text("two")]).await;
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[agents.chain]\nmodels = [\"openai/first\", \"anthropic/backup\"]\n".into()),
        ..DaemonSetup::default()
    });
    let (client, mut deliveries) = daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", first.base_url))], Some("k1")).await.unwrap();
    connect_provider(&client, "anthropic", &[("base_url", &backup.base_url)], Some("k2")).await.unwrap();
    let session = daemon.create_session(&client).await;
    client.subscribe(&session.session_id, None).await.unwrap();
    let id = &session.session_id;

    let one = run(&client, &mut deliveries, id, "r1", false).await;
    assert_eq!(start_of(&one), ("openai/first".into(), 0, vec!["openai/first".into(), "anthropic/backup".into()]));
    assert!(
        one.iter()
            .any(|event| matches!(&event.payload, EventPayload::ModelFallback { to, .. } if to == "anthropic/backup"))
    );
    assert_eq!(final_text(&one), "one");

    // The next run asks for the first model again and starts on the fallback that answered.
    let two = run(&client, &mut deliveries, id, "r2", false).await;
    assert_eq!(start_of(&two), ("anthropic/backup".into(), 1, vec!["anthropic/backup".into()]));
    assert_eq!(final_text(&two), "two");
    assert_eq!(first.requests().len(), 2, "the first model was not asked again");

    // A redelivery of r2 is the same run, although the state it is planned against changed since.
    let redelivered = within(
        "run.start again",
        client.call::<method::RunStart>(RunStartParams {
            session_id: id.clone(),
            client_run_id: "r2".into(),
            selection: selection_of("chain", "openai/first"),
            input: "run r2".into(),
            reset_fallback: false,
            attachments: Vec::new(),
        }),
    )
    .await
    .expect("a redelivery");
    assert_eq!(Some(redelivered.run_id.as_str()), two[0].run_id.as_deref());

    // reset_fallback starts at the first model, which answers now; later runs stay there.
    let three = run(&client, &mut deliveries, id, "r3", true).await;
    assert_eq!(start_of(&three).0, "openai/first");
    assert_eq!(final_text(&three), "three");
    let four = run(&client, &mut deliveries, id, "r4", false).await;
    assert_eq!(start_of(&four), ("openai/first".into(), 0, vec!["openai/first".into(), "anthropic/backup".into()]));
    assert_eq!(final_text(&four), "four");
    assert_eq!(backup.requests().len(), 3, "the backup answered only runs one and two");
}
