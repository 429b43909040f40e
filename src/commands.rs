//! Client commands: small programs on the shared protocol client, for people at a terminal. Each uses the client
//! through the [`ClientProtocol`] trait only; the commands that follow a session (`run`, `watch`) live in
//! [`crate::follow`].

use std::path::PathBuf;

use anyhow::Context as _;
use troupe_protocol::client::{Client, ClientOptions, ClientProtocol};
use troupe_protocol::types::common::{ModelSelection, RunSelection, SessionIdParams, SessionMeta};
use troupe_protocol::types::provider::{ProviderConnectParams, ProviderDisconnectParams};
use troupe_protocol::types::run::{RunIdParams, RunSteerParams, RunToolStdinParams};
use troupe_protocol::types::session::{PermissionMode, SetPermissionModeParams};

use crate::cli_errors::{explained, require_text};
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
        Client::connect_websocket(&self.url, &token, options).await.map_err(|error| {
            anyhow::anyhow!(
                "cannot connect to the daemon at {}: {error}\n  hint: start it with `troupe serve`, or point --url \
                 (TROUPE_URL) at it; the token comes from --token (TROUPE_TOKEN) or --data-dir",
                self.url
            )
        })
    }

    /// Connects and hands the client out as a [`ClientProtocol`], which is all a command may use.
    pub(crate) async fn open(&self, options: ClientOptions) -> anyhow::Result<Connected<impl ClientProtocol>> {
        let (client, deliveries) = self.connect(options).await?;
        Ok(Connected { client, deliveries })
    }
}

/// A connected client and its delivery stream.
pub(crate) struct Connected<C: ClientProtocol> {
    pub(crate) client: C,
    pub(crate) deliveries: C::Deliveries,
}

/// `troupe sessions`: root sessions, most recently active first.
pub async fn sessions(connection: &Connection, cwd: Option<String>, json: bool) -> anyhow::Result<()> {
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let result = client.session_list(SessionListParams { cwd }).await.map_err(explained)?;
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
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let result = client.session_create(SessionCreateParams { selection, cwd }).await.map_err(explained)?;
    println!("{}", result.session.session_id);
    client.close().await;
    Ok(())
}

/// `troupe rename`: sets, clears or resets a session's title.
pub async fn rename(connection: &Connection, session_id: String, change: TitleChange) -> anyhow::Result<()> {
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let result = client
        .session_rename(SessionRenameParams { session_id, client_rename_id: new_id(), change })
        .await
        .map_err(explained)?;
    println!("{}", session_line(&result.session));
    client.close().await;
    Ok(())
}

pub(crate) fn selection(agent: Option<String>, model: Option<String>) -> RunSelection {
    RunSelection {
        agent: agent.unwrap_or_else(|| DEFAULT_AGENT.to_owned()),
        model: ModelSelection { model: model.unwrap_or_else(|| LOCAL_ECHO.to_owned()), variant: None },
        preset: None,
    }
}

pub(crate) fn absolute_cwd(cwd: Option<String>) -> anyhow::Result<String> {
    let path = match cwd {
        Some(cwd) => std::path::absolute(&cwd).with_context(|| format!("resolving {cwd}"))?,
        None => std::env::current_dir()?,
    };
    Ok(path.to_string_lossy().into_owned())
}

/// `troupe steer`: queues input for a running run. Exits 1 when the run did not accept it.
pub async fn steer(connection: &Connection, run_id: String, input: String) -> anyhow::Result<()> {
    require_text(&input, "the steering text", "`troupe steer RUN_ID \"also update the docs\"`")?;
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let result = client.run_steer(RunSteerParams { run_id: run_id.clone(), input }).await.map_err(explained)?;
    client.close().await;
    if !result.accepted {
        anyhow::bail!(
            "run {run_id} did not accept the input\n  hint: it may be ending; `troupe watch SESSION` shows it"
        );
    }
    println!("queued for the next boundary");
    Ok(())
}

/// `troupe recall`: takes back the newest queued steer.
pub async fn recall(connection: &Connection, run_id: String) -> anyhow::Result<()> {
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let result = client.run_recall_steer(RunIdParams { run_id }).await.map_err(explained)?;
    match result.recalled {
        Some(text) => println!("recalled: {text}"),
        None => println!("nothing to recall"),
    }
    client.close().await;
    Ok(())
}

/// `troupe cancel`.
pub async fn cancel(connection: &Connection, run_id: String) -> anyhow::Result<()> {
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let result = client.run_cancel(RunIdParams { run_id }).await.map_err(explained)?;
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
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let send = |data: Option<String>, eof: bool| {
        let params = RunToolStdinParams { run_id: run_id.clone(), tool_call_id: tool_call_id.clone(), data, eof };
        let call = client.run_tool_stdin(params);
        async move { call.await.map(|result| result.accepted).map_err(explained) }
    };
    let accepted = match text {
        Some(text) => send(Some(text), eof).await?,
        None => {
            use tokio::io::AsyncBufReadExt;
            let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
            let mut accepted = true;
            while accepted && let Some(line) = lines.next_line().await? {
                accepted = send(Some(format!("{line}\n")), false).await?;
            }
            accepted && send(None, true).await?
        }
    };
    client.close().await;
    if !accepted {
        anyhow::bail!(
            "tool call {tool_call_id} did not take the input: it is not running, or its stdin is closed\n  hint: \
             `troupe watch SESSION` shows the tool calls of a run (\"tool shell (ID)\")"
        );
    }
    client.close().await;
    Ok(())
}

/// `troupe mode`: sets the permission mode of a session's whole tree.
pub async fn mode(connection: &Connection, session_id: String, mode: PermissionMode) -> anyhow::Result<()> {
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    client.session_set_permission_mode(SetPermissionModeParams { session_id, mode }).await.map_err(explained)?;
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
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
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
        .provider_connect(ProviderConnectParams {
            provider_id,
            expected_catalog_revision: None,
            setup_values,
            auth_method,
            auth_values,
            client_connect_id: new_id(),
        })
        .await
        .map_err(explained)?;
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
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let result = client
        .provider_disconnect(ProviderDisconnectParams {
            provider_id,
            expected_runtime_revision: None,
            expected_connection_generation: None,
            client_request_id: new_id(),
        })
        .await
        .map_err(explained)?;
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
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let session =
        client.session_get(SessionIdParams { session_id: session_id.clone() }).await.map_err(explained)?.session;
    let root_session_id = match &session.origin {
        SessionOrigin::Root => session.session_id.clone(),
        SessionOrigin::Delegated { root_session_id, .. } => root_session_id.clone(),
    };
    let pending = client
        .approval_list(ApprovalListParams { root_session_id, status: Some(ApprovalStatus::Pending) })
        .await
        .map_err(explained)?
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
        .approval_respond(ApprovalRespondParams {
            session_id: record.session_id.clone(),
            approval_id: record.approval_id.clone(),
            request_revision: record.revision,
            operation_fingerprint: record.operation_fingerprint.clone(),
            client_response_id: new_id(),
            decision: answer.decision,
            feedback: answer.feedback.map(|message| ApprovalFeedback { message }),
        })
        .await
        .map_err(explained)?;
    println!(
        "{}: {}",
        result.approval.operation.summary,
        serde_json::to_string(&result.approval.status)?.trim_matches('"')
    );
    client.close().await;
    Ok(())
}
