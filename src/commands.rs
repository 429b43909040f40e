//! Client commands: small programs on the shared protocol client, for people at a terminal.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use troupe_protocol::client::{Client, ClientDelivery, ClientOptions, ReconnectPolicy, ReplayReason};
use troupe_protocol::method;
use troupe_protocol::types::common::{ModelSelection, RunSelection, SessionIdParams, SessionMeta};
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::provider::{ProviderConnectParams, ProviderDisconnectParams};
use troupe_protocol::types::run::{RunIdParams, RunStartParams, RunSteerParams, RunToolStdinParams};
use troupe_protocol::types::session::{PermissionMode, SetPermissionModeParams};

use crate::render::Printer;
use troupe_protocol::types::session::{SessionCreateParams, SessionListParams, SessionRenameParams, TitleChange};
use troupe_runtime::catalog::{DEFAULT_AGENT, LOCAL_ECHO};
use troupe_runtime::clock::new_id;
use troupe_runtime::data_dir::DataDir;
use troupe_runtime::token::load_or_create_token;

/// Where a client command connects, and with which token.
#[derive(Clone, Debug)]
pub struct Connection {
    pub url: String,
    /// The token given on the command line or in `TROUPE_TOKEN`; otherwise read from the data directory.
    pub token: Option<String>,
    pub data_dir: Option<PathBuf>,
}

impl Connection {
    fn token(&self) -> anyhow::Result<String> {
        if let Some(token) = &self.token {
            return Ok(token.clone());
        }
        let data_dir = DataDir::resolve(self.data_dir.clone())?;
        let token = load_or_create_token(&data_dir)
            .with_context(|| format!("reading the token from {}", data_dir.token_path().display()))?;
        Ok(token.as_str().to_owned())
    }

    pub(crate) async fn connect(
        &self,
        options: ClientOptions,
    ) -> anyhow::Result<(Client, troupe_protocol::client::Deliveries)> {
        let token = self.token()?;
        Client::connect_websocket(&self.url, &token, options)
            .await
            .with_context(|| format!("connecting to {}", self.url))
    }
}

/// `troupe sessions`: root sessions, most recently active first.
pub async fn sessions(connection: &Connection, cwd: Option<String>, json: bool) -> anyhow::Result<()> {
    let (client, _deliveries) = connection.connect(ClientOptions::default()).await?;
    let result = client.call::<method::SessionList>(SessionListParams { cwd }).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&result.sessions)?);
    } else if result.sessions.is_empty() {
        println!("no sessions");
    } else {
        for session in &result.sessions {
            println!("{}", session_line(session));
        }
    }
    client.close().await;
    Ok(())
}

fn session_line(session: &SessionMeta) -> String {
    format!(
        "{}  {:<11}  {}  {}  {}",
        session.session_id,
        format!("{:?}", session.status).to_lowercase(),
        session.last_activity_at,
        session.title.as_deref().unwrap_or("(untitled)"),
        session.cwd
    )
}

/// `troupe create`: creates a root session and prints its id.
pub async fn create(
    connection: &Connection,
    cwd: Option<String>,
    agent: Option<String>,
    model: Option<String>,
) -> anyhow::Result<()> {
    let cwd = Some(absolute_cwd(cwd)?);
    let selection = selection(agent, model);
    let (client, _deliveries) = connection.connect(ClientOptions::default()).await?;
    let result = client.call::<method::SessionCreate>(SessionCreateParams { selection, cwd }).await?;
    println!("{}", result.session.session_id);
    client.close().await;
    Ok(())
}

/// `troupe rename`: sets, clears or resets a session's title.
pub async fn rename(connection: &Connection, session_id: String, change: TitleChange) -> anyhow::Result<()> {
    let (client, _deliveries) = connection.connect(ClientOptions::default()).await?;
    let result = client
        .call::<method::SessionRename>(SessionRenameParams { session_id, client_rename_id: new_id(), change })
        .await?;
    println!("{}", session_line(&result.session));
    client.close().await;
    Ok(())
}

/// `troupe watch`: prints a session's events, then follows it live. Survives daemon restarts: it reconnects and
/// resumes from the last event it printed, so nothing is printed twice or skipped.
pub async fn watch(connection: &Connection, session_id: String, from: Option<u64>) -> anyhow::Result<()> {
    let options = ClientOptions {
        reconnect: Some(ReconnectPolicy::default()),
        request_timeout: Duration::from_secs(30),
        ..ClientOptions::default()
    };
    let (client, mut deliveries) = connection.connect(options).await?;
    let session = client.call::<method::SessionGet>(SessionIdParams { session_id: session_id.clone() }).await?.session;
    println!(
        "watching {}  {}  ({})",
        session.session_id,
        session.title.as_deref().unwrap_or("(untitled)"),
        session.cwd
    );
    print_skipped(&session);
    client.subscribe(&session_id, from).await?;
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
    let (client, mut deliveries) = connection.connect(ClientOptions::default()).await?;
    let selection = selection(request.agent, request.model);
    let session_id = match request.session_id {
        Some(session_id) => session_id,
        None => {
            let cwd = absolute_cwd(request.cwd)?;
            let created = client
                .call::<method::SessionCreate>(SessionCreateParams { selection: selection.clone(), cwd: Some(cwd) })
                .await?;
            eprintln!("created session {}", created.session.session_id);
            created.session.session_id
        }
    };
    let cursor = client.subscribe(&session_id, None).await?;
    let run_id = client
        .call::<method::RunStart>(RunStartParams {
            session_id: session_id.clone(),
            client_run_id: new_id(),
            selection,
            input: request.input,
            reset_fallback: false,
        })
        .await?
        .run_id;
    eprintln!(
        "run {run_id} started; steer it with `troupe steer {run_id} TEXT`, stop it with `troupe cancel {run_id}`"
    );
    let mut printer = Printer::default();
    loop {
        let delivery = tokio::select! {
            delivery = deliveries.next() => delivery,
            _ = tokio::signal::ctrl_c() => {
                let cancelled = client.call::<method::RunCancel>(RunIdParams { run_id: run_id.clone() }).await?;
                eprintln!("cancel requested: {}", cancelled.cancelled);
                continue;
            }
        };
        let Some(delivery) = delivery else {
            return Err(anyhow!("the connection to the daemon ended"));
        };
        let event = match delivery {
            ClientDelivery::Live(event) | ClientDelivery::ReplayEvent(event) if event.seq > cursor => event,
            ClientDelivery::ToolOutputDelta(params) | ClientDelivery::ToolOutputSnapshot(params) => {
                printer.tool_output(&params);
                continue;
            }
            _ => continue,
        };
        printer.event(&event, true);
        if event.run_id.as_deref() != Some(run_id.as_str()) {
            continue;
        }
        match &event.payload {
            EventPayload::RunCompleted { .. } => break,
            EventPayload::RunFailed { .. }
            | EventPayload::RunCancelled { .. }
            | EventPayload::RunInterrupted { .. } => {
                client.close().await;
                return Ok(false);
            }
            _ => {}
        }
    }
    client.close().await;
    Ok(true)
}

fn selection(agent: Option<String>, model: Option<String>) -> RunSelection {
    RunSelection {
        agent: agent.unwrap_or_else(|| DEFAULT_AGENT.to_owned()),
        model: ModelSelection { model: model.unwrap_or_else(|| LOCAL_ECHO.to_owned()), variant: None },
        preset: None,
    }
}

fn absolute_cwd(cwd: Option<String>) -> anyhow::Result<String> {
    let path = match cwd {
        Some(cwd) => std::path::absolute(&cwd).with_context(|| format!("resolving {cwd}"))?,
        None => std::env::current_dir()?,
    };
    Ok(path.to_string_lossy().into_owned())
}

/// `troupe steer`.
pub async fn steer(connection: &Connection, run_id: String, input: String) -> anyhow::Result<()> {
    let (client, _deliveries) = connection.connect(ClientOptions::default()).await?;
    let result = client.call::<method::RunSteer>(RunSteerParams { run_id, input }).await?;
    println!("{}", if result.accepted { "queued for the next boundary" } else { "not accepted" });
    client.close().await;
    Ok(())
}

/// `troupe recall`: takes back the newest queued steer.
pub async fn recall(connection: &Connection, run_id: String) -> anyhow::Result<()> {
    let (client, _deliveries) = connection.connect(ClientOptions::default()).await?;
    let result = client.call::<method::RunRecallSteer>(RunIdParams { run_id }).await?;
    match result.recalled {
        Some(text) => println!("recalled: {text}"),
        None => println!("nothing to recall"),
    }
    client.close().await;
    Ok(())
}

/// `troupe cancel`.
pub async fn cancel(connection: &Connection, run_id: String) -> anyhow::Result<()> {
    let (client, _deliveries) = connection.connect(ClientOptions::default()).await?;
    let result = client.call::<method::RunCancel>(RunIdParams { run_id }).await?;
    println!("{}", if result.cancelled { "cancelled" } else { "the run was not running" });
    client.close().await;
    Ok(())
}

/// `troupe stdin`: sends `text` (or, without it, every line typed until end of input) to a running tool.
pub async fn stdin(
    connection: &Connection,
    run_id: String,
    tool_call_id: String,
    text: Option<String>,
    eof: bool,
) -> anyhow::Result<()> {
    let (client, _deliveries) = connection.connect(ClientOptions::default()).await?;
    let send = |data: Option<String>, eof: bool| {
        client.call::<method::RunToolStdin>(RunToolStdinParams {
            run_id: run_id.clone(),
            tool_call_id: tool_call_id.clone(),
            data,
            eof,
        })
    };
    let accepted = match text {
        Some(text) => send(Some(text), eof).await?.accepted,
        None => {
            use tokio::io::AsyncBufReadExt;
            let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
            let mut accepted = true;
            while accepted && let Some(line) = lines.next_line().await? {
                accepted = send(Some(format!("{line}\n")), false).await?.accepted;
            }
            accepted && send(None, true).await?.accepted
        }
    };
    if !accepted {
        anyhow::bail!("not accepted: the tool call is not running or does not read stdin");
    }
    client.close().await;
    Ok(())
}

/// `troupe mode`: sets the permission mode of a session's whole tree.
pub async fn mode(connection: &Connection, session_id: String, mode: PermissionMode) -> anyhow::Result<()> {
    let (client, _deliveries) = connection.connect(ClientOptions::default()).await?;
    client.call::<method::SessionSetPermissionMode>(SetPermissionModeParams { session_id, mode }).await?;
    client.close().await;
    Ok(())
}

/// `troupe connect`: connects a provider. The API key is read from the environment variable named by the
/// caller, never from the command line, where other users could see it.
pub async fn connect(
    connection: &Connection,
    provider_id: String,
    base_url: Option<String>,
    script: Option<String>,
    api_key: Option<String>,
) -> anyhow::Result<()> {
    let (client, _deliveries) = connection.connect(ClientOptions::default()).await?;
    let mut setup_values = std::collections::BTreeMap::new();
    if let Some(base_url) = base_url {
        setup_values.insert("base_url".to_owned(), base_url);
    }
    if let Some(script) = script {
        let script = std::path::absolute(&script).with_context(|| format!("resolving {script}"))?;
        setup_values.insert("script".to_owned(), script.to_string_lossy().into_owned());
    }
    let (auth_method, auth_values) = match api_key {
        Some(key) => ("api_key".to_owned(), std::collections::BTreeMap::from([("api_key".to_owned(), key)])),
        None => ("none".to_owned(), std::collections::BTreeMap::new()),
    };
    let result = client
        .call::<method::ProviderConnect>(ProviderConnectParams {
            provider_id,
            expected_catalog_revision: None,
            setup_values,
            auth_method,
            auth_values,
            client_connect_id: new_id(),
        })
        .await?;
    let provider = &result.durable_connection.provider_id;
    let models: Vec<&str> = result
        .snapshot
        .models
        .iter()
        .filter(|model| &model.provider_id == provider)
        .map(|model| model.model.as_str())
        .collect();
    println!("connected {provider} (generation {})", result.durable_connection.generation);
    if !models.is_empty() {
        println!("models: {}", models.join(", "));
    }
    client.close().await;
    Ok(())
}

/// `troupe disconnect`.
pub async fn disconnect(connection: &Connection, provider_id: String) -> anyhow::Result<()> {
    let (client, _deliveries) = connection.connect(ClientOptions::default()).await?;
    let result = client
        .call::<method::ProviderDisconnect>(ProviderDisconnectParams {
            provider_id,
            expected_runtime_revision: None,
            expected_connection_generation: None,
            client_request_id: new_id(),
        })
        .await?;
    println!("{}", if result.disconnected { "disconnected" } else { "it was not connected" });
    client.close().await;
    Ok(())
}

/// How `troupe approve` answers.
pub struct Answer {
    pub decision: troupe_protocol::types::approval::ApprovalDecision,
    pub feedback: Option<String>,
}

/// `troupe approve`: answers a pending approval of a session (the only pending one when no id is given), using
/// its current revision and fingerprint.
pub async fn approve(
    connection: &Connection,
    session_id: String,
    approval_id: Option<String>,
    answer: Answer,
) -> anyhow::Result<()> {
    use troupe_protocol::types::approval::{
        ApprovalFeedback, ApprovalListParams, ApprovalRespondParams, ApprovalStatus,
    };
    use troupe_protocol::types::common::SessionOrigin;
    let (client, _deliveries) = connection.connect(ClientOptions::default()).await?;
    let session = client.call::<method::SessionGet>(SessionIdParams { session_id: session_id.clone() }).await?.session;
    let root_session_id = match &session.origin {
        SessionOrigin::Root => session.session_id.clone(),
        SessionOrigin::Delegated { root_session_id, .. } => root_session_id.clone(),
    };
    let pending = client
        .call::<method::ApprovalList>(ApprovalListParams { root_session_id, status: Some(ApprovalStatus::Pending) })
        .await?
        .approvals;
    let mine: Vec<_> = pending
        .into_iter()
        .filter(|record| record.session_id == session_id)
        .filter(|record| approval_id.as_ref().is_none_or(|id| &record.approval_id == id))
        .collect();
    let record = match mine.as_slice() {
        [record] => record.clone(),
        [] => anyhow::bail!("no pending approval matches in session {session_id}"),
        more => anyhow::bail!(
            "{} approvals are pending; name one: {}",
            more.len(),
            more.iter().map(|r| r.approval_id.as_str()).collect::<Vec<_>>().join(", ")
        ),
    };
    let result = client
        .call::<method::ApprovalRespond>(ApprovalRespondParams {
            session_id: record.session_id.clone(),
            approval_id: record.approval_id.clone(),
            request_revision: record.revision,
            operation_fingerprint: record.operation_fingerprint.clone(),
            client_response_id: new_id(),
            decision: answer.decision,
            feedback: answer.feedback.map(|message| ApprovalFeedback { message }),
        })
        .await?;
    println!(
        "{}: {}",
        result.approval.operation.summary,
        serde_json::to_string(&result.approval.status)?.trim_matches('"')
    );
    client.close().await;
    Ok(())
}
