//! The commands that follow a session: `troupe watch` and `troupe run`. Both print as they read, so a session of
//! any length costs them the same memory: the client hands the history over in bounded replays (the daemon
//! pages a long one) and drops nothing it cannot make up by cursor (see the back-pressure docs of
//! `troupe_protocol::client`). `run` does not read the history at all: it follows the session from its end.

use std::time::Duration;

use anyhow::anyhow;
use troupe_protocol::client::{
    ClientDelivery, ClientOptions, ClientProtocol, DeliveryStream, ReconnectPolicy, ReplayReason,
};
use troupe_protocol::types::common::{SessionIdParams, SessionMeta};
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::run::{RunIdParams, RunStartParams};
use troupe_protocol::types::session::SessionCreateParams;
use troupe_runtime::clock::new_id;

use crate::cli_errors::{explained, require_text};
use crate::commands::{Connected, Connection, absolute_cwd, selection};
use crate::render::Printer;

/// `troupe watch`: prints a session's events, then follows it live. Survives daemon restarts: it reconnects and
/// resumes from the last event it printed, so nothing is printed twice or skipped.
pub async fn watch(connection: &Connection, session_id: String, from: Option<u64>) -> anyhow::Result<()> {
    let options = ClientOptions {
        reconnect: Some(ReconnectPolicy::default()),
        request_timeout: Duration::from_secs(30),
        ..ClientOptions::default()
    };
    let Connected { client, mut deliveries } = connection.open(options).await?;
    let session =
        client.session_get(SessionIdParams { session_id: session_id.clone() }).await.map_err(explained)?.session;
    println!(
        "watching {}  {}  ({})",
        session.session_id,
        session.title.as_deref().unwrap_or("(untitled)"),
        session.cwd
    );
    print_skipped(&session);
    client.subscribe(&session_id, from).await.map_err(explained)?;
    let mut printer = Printer::default();
    loop {
        let delivery = tokio::select! {
            delivery = deliveries.next() => delivery,
            _ = tokio::signal::ctrl_c() => break,
        };
        let Some(delivery) = delivery else {
            return Err(anyhow!("the connection to the daemon ended"));
        };
        match delivery {
            ClientDelivery::Live(event) => printer.event(&event, true),
            ClientDelivery::ReplayEvent(event) => printer.event(&event, false),
            ClientDelivery::ToolOutputDelta(params) | ClientDelivery::ToolOutputSnapshot(params) => {
                printer.tool_output(&params)
            }
            ClientDelivery::ToolOutputGap(_) => printer.output_gap(),
            ClientDelivery::ReplayStart { reason: ReplayReason::Gap, after_seq, .. } => {
                eprintln!("[fell behind after #{after_seq}; catching up]");
            }
            ClientDelivery::Disconnected { detail } => {
                eprintln!("[disconnected: {detail}; reconnecting]")
            }
            ClientDelivery::Reconnected => eprintln!("[reconnected; resuming]"),
            ClientDelivery::RecoveryFailed { detail, .. } => {
                return Err(anyhow!("could not resume the session: {detail}"));
            }
            _ => {}
        }
    }
    client.close().await;
    Ok(())
}

fn print_skipped(session: &SessionMeta) {
    for skipped in &session.skipped_events {
        let position = match (skipped.seq, skipped.line) {
            (Some(seq), _) => format!("seq {seq}"),
            (None, Some(line)) => format!("line {line}"),
            (None, None) => "unknown position".to_owned(),
        };
        println!("! skipped unreadable event at {position}: {}", skipped.reason);
    }
}

/// What `troupe run` was asked for.
pub struct RunRequest {
    pub session_id: Option<String>,
    pub cwd: Option<String>,
    pub agent: Option<String>,
    pub model: Option<String>,
    pub input: String,
}

/// `troupe run`: starts a run (creating a session when none is given), prints it as it happens, and exits when
/// it ends: 0 when it completed, 1 otherwise.
pub async fn run(connection: &Connection, request: RunRequest) -> anyhow::Result<bool> {
    require_text(&request.input, "the run's input", "`troupe run \"make the tests pass\"`")?;
    let Connected { client, mut deliveries } = connection.open(ClientOptions::default()).await?;
    let selection = selection(request.agent, request.model);
    let session = match request.session_id {
        Some(session_id) => client.session_get(SessionIdParams { session_id }).await.map_err(explained)?.session,
        None => {
            let cwd = absolute_cwd(request.cwd)?;
            let created = client
                .session_create(SessionCreateParams { selection: selection.clone(), cwd: Some(cwd) })
                .await
                .map_err(explained)?;
            eprintln!("created session {}", created.session.session_id);
            created.session
        }
    };
    let session_id = session.session_id;
    // Followed from its end: the history is not this command's business, and a long one would only cost time.
    client.subscribe(&session_id, Some(session.last_event_seq)).await.map_err(explained)?;
    let run_id = client
        .run_start(RunStartParams {
            session_id: session_id.clone(),
            client_run_id: new_id(),
            selection,
            input: request.input,
            reset_fallback: false,
        })
        .await
        .map_err(explained)?
        .run_id;
    eprintln!(
        "run {run_id} started; steer it with `troupe steer {run_id} TEXT`, stop it with `troupe cancel {run_id}`"
    );
    let completed = follow_run(&client, &mut deliveries, &run_id).await;
    client.close().await;
    completed
}

/// Prints the session's events until run `run_id` ends; whether it completed.
async fn follow_run<C: ClientProtocol>(
    client: &C,
    deliveries: &mut C::Deliveries,
    run_id: &str,
) -> anyhow::Result<bool> {
    let mut printer = Printer::default();
    loop {
        let delivery = tokio::select! {
            delivery = deliveries.next() => delivery,
            _ = tokio::signal::ctrl_c() => {
                let cancelled =
                    client.run_cancel(RunIdParams { run_id: run_id.to_owned() }).await.map_err(explained)?;
                eprintln!("cancel requested: {}", cancelled.cancelled);
                continue;
            }
        };
        let Some(delivery) = delivery else {
            return Err(anyhow!(
                "the connection to the daemon ended before the run did\n  hint: `troupe watch SESSION` shows how it went"
            ));
        };
        let event = match delivery {
            ClientDelivery::Live(event) | ClientDelivery::ReplayEvent(event) => event,
            ClientDelivery::ToolOutputDelta(params) | ClientDelivery::ToolOutputSnapshot(params) => {
                printer.tool_output(&params);
                continue;
            }
            ClientDelivery::ToolOutputGap(_) => {
                printer.output_gap();
                continue;
            }
            ClientDelivery::RecoveryFailed { detail, .. } => {
                return Err(anyhow!("lost the session while following the run: {detail}"));
            }
            _ => continue,
        };
        printer.event(&event, true);
        if event.run_id.as_deref() != Some(run_id) {
            continue;
        }
        match &event.payload {
            EventPayload::RunCompleted { .. } => return Ok(true),
            EventPayload::RunFailed { .. }
            | EventPayload::RunCancelled { .. }
            | EventPayload::RunInterrupted { .. } => {
                return Ok(false);
            }
            _ => {}
        }
    }
}
