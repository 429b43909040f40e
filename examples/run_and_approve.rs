//! run_and_approve: run an agent and approve its command from a second connection, with the shared Rust client.
//!
//! What it does:
//!
//! 1. opens two connections with `Client::connect_websocket` (bearer token, protocol-20 handshake): the first
//!    runs and watches the session, the second plays another client (a second terminal, a phone) that answers;
//! 2. writes a `local/scripted` script (a turn that calls the `shell` tool, then a text turn) and connects the
//!    `local` provider with it, so no model vendor or key is needed;
//! 3. creates a session in the current directory and puts it in `ask` mode, so the command waits for a person;
//! 4. subscribes from cursor 0 with `client.subscribe`: the client itself keeps the cursor, and recovers from a
//!    gap or a reconnect by subscribing again from it (the `ReplayStart` deliveries say when);
//! 5. starts a run on `local/scripted` and prints its events; at `approval_requested` the second client lists the
//!    pending approvals (`approval.list`) and approves the command once (`approval.respond`);
//! 6. stops at the run's terminal event: exit status 0 on `run_completed`, 1 otherwise;
//! 7. disconnects the `local` provider again, since the script it was given is deleted at exit: `local/scripted`
//!    goes back to having no script instead of pointing at a file that is gone.
//!
//! How to run it: see the Rust section of `examples/README.md` (the commands there are the ones CI runs).
//! `TROUPE_URL` selects the daemon (default `ws://127.0.0.1:7419/ws`); `TROUPE_TOKEN` is required;
//! `TROUPE_CA_CERT` names a PEM file of one more CA to trust for a `wss://` URL, as the CLI's `--ca-cert` does.

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use serde_json::json;
use troupe_protocol::client::{Client, ClientDelivery, ClientOptions, Deliveries, ReplayReason};
use troupe_protocol::method;
use troupe_protocol::types::approval::{
    ApprovalDecision, ApprovalListParams, ApprovalRecord, ApprovalRespondParams, ApprovalStatus,
};
use troupe_protocol::types::common::{ModelSelection, RunSelection};
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::provider::{ProviderConnectParams, ProviderDisconnectParams};
use troupe_protocol::types::run::RunStartParams;
use troupe_protocol::types::session::{PermissionMode, SessionCreateParams, SetPermissionModeParams};

const DEFAULT_URL: &str = "ws://127.0.0.1:7419/ws";
const MODEL: &str = "local/scripted";

fn main() -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start a tokio runtime: {error}");
            return std::process::ExitCode::from(2);
        }
    };
    match runtime.block_on(run()) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::from(2)
        }
    }
}

/// Whether the run completed.
async fn run() -> anyhow::Result<bool> {
    let url = std::env::var("TROUPE_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    let token = std::env::var("TROUPE_TOKEN").context("set TROUPE_TOKEN to the daemon's token (`troupe token`)")?;

    // As the CLI: one more CA to trust for `wss://` (a private CA or a self-signed certificate).
    let options =
        || ClientOptions { ca_cert: std::env::var_os("TROUPE_CA_CERT").map(Into::into), ..Default::default() };
    let (watcher, mut deliveries) =
        Client::connect_websocket(&url, &token, options()).await.with_context(|| format!("connecting to {url}"))?;
    println!("[watcher] connected to {url}");
    // The approver's deliveries are never read: it only makes calls, and the client's connection task keeps
    // reading the socket whether or not anyone drains them.
    let (approver, _approver_deliveries) =
        Client::connect_websocket(&url, &token, options()).await.with_context(|| format!("connecting to {url}"))?;
    println!("[approver] connected to {url}");

    // The daemon reads the script at each model request, so it must outlive the run.
    let scratch = tempfile::tempdir().context("a temporary directory for the script")?;
    let script_path = scratch.path().join("script.json");
    let script = json!({"turns": [
        {"text": "I will run a command.",
         "tool_calls": [{"tool": "shell", "arguments": {"command": "echo hello from an approved command"}}]},
        {"text": "The command ran and said hello."}
    ]});
    std::fs::write(&script_path, script.to_string()).context("writing the script")?;
    let generation = watcher
        .call::<method::ProviderConnect>(ProviderConnectParams {
            provider_id: "local".to_owned(),
            expected_catalog_revision: None,
            setup_values: [("script".to_owned(), script_path.to_string_lossy().into_owned())].into(),
            auth_method: "none".to_owned(),
            auth_values: Default::default(),
            client_connect_id: unique_id("connect"),
        })
        .await
        .context("provider.connect")?
        .durable_connection
        .generation;
    println!("connected the local provider with the script {} (it replaces any script it had)", script_path.display());
    let completed = run_session(&watcher, &mut deliveries, &approver).await;
    release_local_provider(&watcher, generation).await;
    approver.close().await;
    watcher.close().await;
    completed
}

/// Disconnects the `local` provider this program connected, so the daemon is not left with a script path that is
/// deleted at exit. Only while the connection is still this program's (`expected_connection_generation`): one
/// made by someone else meanwhile is theirs to keep.
async fn release_local_provider(watcher: &Client, generation: u64) {
    let released = watcher
        .call::<method::ProviderDisconnect>(ProviderDisconnectParams {
            provider_id: "local".to_owned(),
            expected_runtime_revision: None,
            expected_connection_generation: Some(generation),
            client_request_id: unique_id("disconnect"),
        })
        .await;
    match released {
        Ok(_) => println!("disconnected the local provider: local/scripted has no script again"),
        Err(error) => eprintln!("left the local provider connected ({error})"),
    }
}

/// Creates the session, runs it and answers its approval; whether the run completed.
async fn run_session(watcher: &Client, deliveries: &mut Deliveries, approver: &Client) -> anyhow::Result<bool> {
    let selection = RunSelection {
        agent: "default".to_owned(),
        model: ModelSelection { model: MODEL.to_owned(), variant: None },
        preset: None,
    };
    let cwd = std::env::current_dir()?.to_string_lossy().into_owned();
    let created = watcher
        .call::<method::SessionCreate>(SessionCreateParams { selection: selection.clone(), cwd: Some(cwd.clone()) })
        .await
        .context("session.create")?;
    let session_id = created.session.session_id;
    println!("created session {session_id} in {cwd}");
    watcher
        .call::<method::SessionSetPermissionMode>(SetPermissionModeParams {
            session_id: session_id.clone(),
            mode: PermissionMode::Ask,
        })
        .await
        .context("session.set_permission_mode")?;

    let last_seq = watcher.subscribe(&session_id, Some(0)).await.context("events.subscribe")?;
    println!("-- subscribed from cursor 0 (last stored seq {last_seq})");
    let run_id = watcher
        .call::<method::RunStart>(RunStartParams {
            session_id: session_id.clone(),
            client_run_id: unique_id("run"),
            selection,
            input: "Say hello with a shell command.".to_owned(),
            reset_fallback: false,
            attachments: Vec::new(),
        })
        .await
        .context("run.start")?
        .run_id;
    println!("started run {run_id} on {MODEL}");

    let completed = loop {
        let event = match deliveries.next().await {
            None => bail!("the connection to the daemon ended"),
            Some(ClientDelivery::ReplayEvent(event)) => {
                print_event(&event, "replay");
                event
            }
            Some(ClientDelivery::Live(event)) => {
                print_event(&event, "live");
                event
            }
            Some(ClientDelivery::ReplayStart { after_seq, reason: ReplayReason::Gap, .. }) => {
                println!("-- gap: the client subscribes again from #{after_seq}");
                continue;
            }
            Some(ClientDelivery::RecoveryFailed { detail, .. }) => bail!("could not resume the subscription: {detail}"),
            // Replay markers, runtime changes and live tool output: not needed here.
            Some(_) => continue,
        };
        if event.run_id.as_deref() != Some(run_id.as_str()) {
            continue;
        }
        match &event.payload {
            EventPayload::ApprovalRequested { approval } => approve(approver, &session_id, approval).await?,
            EventPayload::RunCompleted { .. } => break true,
            EventPayload::RunFailed { .. }
            | EventPayload::RunCancelled { .. }
            | EventPayload::RunInterrupted { .. } => {
                break false;
            }
            _ => {}
        }
    };
    println!("the run ended: {}", if completed { "run_completed" } else { "not completed" });
    Ok(completed)
}

/// Answers from the second client, as another client would: it finds the approval by listing the pending ones.
async fn approve(approver: &Client, session_id: &str, requested: &ApprovalRecord) -> anyhow::Result<()> {
    let listed = approver
        .call::<method::ApprovalList>(ApprovalListParams {
            root_session_id: session_id.to_owned(),
            status: Some(ApprovalStatus::Pending),
        })
        .await
        .context("approval.list")?;
    let Some(record) = listed.approvals.into_iter().find(|record| record.approval_id == requested.approval_id) else {
        bail!("approval {} is not pending", requested.approval_id);
    };
    // The summary holds the model's command: printed quoted, so control characters in it stay inert.
    println!("[approver] pending approval {}: {:?}", record.approval_id, record.operation.summary);
    let answer = approver
        .call::<method::ApprovalRespond>(ApprovalRespondParams {
            session_id: record.session_id.clone(),
            approval_id: record.approval_id.clone(),
            // The revision and fingerprint name exactly the operation that was shown: a changed operation is
            // refused instead of approved by mistake.
            request_revision: record.revision,
            operation_fingerprint: record.operation_fingerprint.clone(),
            client_response_id: unique_id("answer"),
            decision: ApprovalDecision::ApproveOnce,
            feedback: None,
        })
        .await
        .context("approval.respond")?;
    let status = serde_json::to_value(answer.approval.status).unwrap_or_default();
    println!("[approver] approved once: the approval is now {}", status.as_str().unwrap_or("?"));
    Ok(())
}

/// An idempotency key: the daemon answers a repeated request with the same key the way it answered the first.
fn unique_id(what: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
    format!("rust-example-{what}-{}-{nanos}", std::process::id())
}

/// One line per event, `#seq [replay|live] kind payload`; the streamed words are left out (they are repeated in
/// `model_turn_committed`).
fn print_event(event: &StoredEvent, how: &str) {
    if matches!(event.payload, EventPayload::TextDelta { .. }) {
        return;
    }
    let kind = event.payload.kind().unwrap_or("(unknown kind)");
    // The payload without its `type` tag, which `kind` already names.
    let mut fields = serde_json::to_value(&event.payload).unwrap_or_default();
    if let Some(object) = fields.as_object_mut() {
        object.remove("type");
    }
    let mut payload = fields.to_string();
    if payload.len() > 160 {
        let mut end = 157;
        while !payload.is_char_boundary(end) {
            end -= 1;
        }
        payload.truncate(end);
        payload.push_str("...");
    }
    println!("#{:<3} [{how}] {kind} {payload}", event.seq);
}
