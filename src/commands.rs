//! Client commands: small programs on the shared protocol client, for people at a terminal. Each uses the client
//! through the [`ClientProtocol`] trait only; the commands that follow a session (`run`, `watch`) live in
//! [`crate::follow`].

use anyhow::Context as _;
use troupe_protocol::client::{ClientOptions, ClientProtocol};
use troupe_protocol::types::common::{SessionIdParams, SessionMeta, SessionStatus};
use troupe_protocol::types::provider::{ProviderConnectParams, ProviderDisconnectParams};
use troupe_protocol::types::session::{PermissionMode, SetPermissionModeParams};
use troupe_protocol::types::session::{SessionCreateParams, SessionListParams, SessionRenameParams, TitleChange};
use troupe_runtime::clock::new_id;

use crate::cli_errors::explained;
pub(crate) use crate::connection::Connected;
pub use crate::connection::Connection;
use crate::output::{Output, emit, line};
use crate::selection::{SelectionFlags, SessionSelections};
use crate::style::{Style, clean, id_prefix, relative_time, short_id, unique_prefix_len};

/// Runs one command to its end on a current-thread runtime of its own.
pub fn block_on<T>(future: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(future)
}

/// `troupe sessions`: root sessions, most recently active first: one line each (short id, status, last activity,
/// title, cwd, and in a cluster the node that hosts it), or with `--json` the daemon's whole records.
pub async fn sessions(connection: &Connection, cwd: Option<String>, all: bool, out: Output) -> anyhow::Result<()> {
    // `--cwd .` means this directory: resolved here, since the daemon's own directory is another one.
    let cwd = cwd.map(|cwd| absolute_cwd(Some(cwd))).transpose()?;
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let result = client.session_list(SessionListParams { cwd, include_archived: all }).await.map_err(explained)?;
    client.close().await;
    if out == Output::Json {
        line(&serde_json::to_string_pretty(&result.sessions)?);
    } else if result.sessions.is_empty() {
        line("no sessions (start one with `troupe run \"TEXT\"`)");
    } else {
        let style = Style::stdout();
        let id_len = unique_prefix_len(result.sessions.iter().map(|session| session.session_id.as_str()));
        for session in &result.sessions {
            // Only `--all` lists archived sessions; they are marked at the end of their line.
            let archived = if session.archived { format!("  {}", style.dim("[archived]")) } else { String::new() };
            // In a cluster, the machine that hosts the session (its workspace is there).
            let node = match &session.node {
                Some(node) => format!("  {}", style.dim(&format!("on {}", clean(node)))),
                None => String::new(),
            };
            line(&format!("{}{node}{archived}", session_line_with(session, style, id_len)));
        }
    }
    Ok(())
}

/// One line for a session: `0193a1b2  idle     5 min ago  Fix the parser  ~/src/app`.
pub fn session_line(session: &SessionMeta, style: Style) -> String {
    session_line_with(session, style, short_id(&session.session_id).len())
}

/// [`session_line`] with the id cut to `id_len` characters, so that every id of a listing is unique.
fn session_line_with(session: &SessionMeta, style: Style, id_len: usize) -> String {
    let status = status_name(session.status);
    let title = title_of(session);
    format!(
        "{}  {:<11} {:<12} {}  {}",
        style.bold(id_prefix(&session.session_id, id_len)),
        status,
        relative_time(&session.last_activity_at),
        title,
        style.dim(&home_shortened(&clean(&session.cwd)))
    )
}

/// A session's title, cleaned, or `(untitled)`.
pub fn title_of(session: &SessionMeta) -> String {
    session.title.as_deref().map(clean).unwrap_or_else(|| "(untitled)".to_owned())
}

/// A session's status in one word.
pub fn status_name(status: SessionStatus) -> &'static str {
    match status {
        SessionStatus::Idle => "idle",
        SessionStatus::Running => "running",
        SessionStatus::Completed => "completed",
        SessionStatus::Failed => "failed",
        SessionStatus::Cancelled => "cancelled",
        SessionStatus::Interrupted => "interrupted",
    }
}

/// `path` with the home directory written `~`.
pub fn home_shortened(path: &str) -> String {
    match std::env::var("HOME") {
        Ok(home) if !home.is_empty() && home != "/" => match path.strip_prefix(home.trim_end_matches('/')) {
            Some("") => "~".to_owned(),
            Some(rest) if rest.starts_with('/') => format!("~{rest}"),
            _ => path.to_owned(),
        },
        _ => path.to_owned(),
    }
}

/// `troupe create`: creates a root session and prints its id. The selection follows the CLI's precedence
/// (`--model`, else the agent's chain) and is checked before the session exists.
pub async fn create(
    connection: &Connection,
    cwd: Option<String>,
    flags: SelectionFlags,
    out: Output,
) -> anyhow::Result<()> {
    let cwd = Some(absolute_cwd(cwd)?);
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let selection = crate::selection::resolve(&client, &flags, &SessionSelections::default()).await?;
    let result = client.session_create(SessionCreateParams { selection, cwd }).await.map_err(explained)?;
    client.close().await;
    let session = &result.session;
    emit(out, &serde_json::to_value(session)?, || session.session_id.clone())
}

/// `troupe rename`: sets, clears or resets a session's title.
pub async fn rename(connection: &Connection, session: String, change: TitleChange, out: Output) -> anyhow::Result<()> {
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let session_id = crate::session_ref::resolve_session_id(&client, &session).await?;
    let result = client
        .session_rename(SessionRenameParams { session_id, client_rename_id: new_id(), change })
        .await
        .map_err(explained)?;
    client.close().await;
    emit(out, &serde_json::to_value(&result.session)?, || session_line(&result.session, Style::stdout()))
}

pub(crate) fn absolute_cwd(cwd: Option<String>) -> anyhow::Result<String> {
    let path = match cwd {
        Some(cwd) => std::path::absolute(&cwd).with_context(|| format!("resolving {cwd}"))?,
        None => std::env::current_dir()?,
    };
    Ok(path.to_string_lossy().into_owned())
}

/// `troupe mode SESSION [MODE]`: sets the permission mode of a session's whole tree, or, without MODE, prints it
/// (after a restart, the daemon's `[permissions] default_mode`, whatever a client had set before).
pub async fn mode(
    connection: &Connection,
    session: String,
    mode: Option<PermissionMode>,
    out: Output,
) -> anyhow::Result<()> {
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let session_id = crate::session_ref::resolve_session_id(&client, &session).await?;
    let (mode, words) = match mode {
        Some(mode) => {
            let params = SetPermissionModeParams { session_id: session_id.clone(), mode };
            client.session_set_permission_mode(params).await.map_err(explained)?;
            (Some(mode), format!("mode {} for the tree of session {session_id}", mode_name(mode)))
        }
        None => {
            let tree = client.session_tree(SessionIdParams { session_id: session_id.clone() }).await;
            let mode = tree.map_err(explained)?.permission_mode;
            let words = match mode {
                Some(mode) => format!("mode {} (the tree of session {session_id})", mode_name(mode)),
                None => format!("the daemon does not say the mode of session {session_id}'s tree (an older daemon)"),
            };
            (mode, words)
        }
    };
    client.close().await;
    let json = serde_json::json!({"session_id": session_id, "mode": mode});
    emit(out, &json, || words)
}

/// A mode as `troupe mode` takes it.
fn mode_name(mode: PermissionMode) -> String {
    serde_json::to_value(mode).ok().and_then(|value| value.as_str().map(str::to_owned)).unwrap_or_default()
}

/// What `troupe connect` sends.
#[derive(Clone, Debug, Default)]
pub struct ConnectRequest {
    pub provider_id: String,
    pub base_url: Option<String>,
    pub script: Option<String>,
    /// Read from the environment variable the person named, never from the command line.
    pub api_key: Option<String>,
    /// Let the daemon use a plain-http server off loopback (a LAN Ollama), with a warning.
    pub allow_insecure_http: bool,
}

/// `troupe connect`: connects a provider. The API key is read from the environment variable named by the
/// caller, never from the command line, where other users could see it.
pub async fn connect(connection: &Connection, request: ConnectRequest, out: Output) -> anyhow::Result<()> {
    let mut setup_values = std::collections::BTreeMap::new();
    if let Some(base_url) = request.base_url {
        setup_values.insert("base_url".to_owned(), base_url);
    }
    if let Some(script) = request.script {
        let script = std::path::absolute(&script).with_context(|| format!("resolving {script}"))?;
        setup_values.insert("script".to_owned(), script.to_string_lossy().into_owned());
    }
    if request.allow_insecure_http {
        eprintln!(
            "warning: --allow-insecure-http: requests and the API key go over plain http, readable by anyone on the \
             network between the daemon and the server"
        );
        setup_values.insert("allow_insecure_http".to_owned(), "true".to_owned());
    }
    let (auth_method, auth_values) = match request.api_key {
        Some(key) => ("api_key".to_owned(), std::collections::BTreeMap::from([("api_key".to_owned(), key)])),
        None => ("none".to_owned(), std::collections::BTreeMap::new()),
    };
    // The model a newcomer wants next: with a script, the one that plays it.
    let scripted = setup_values.contains_key("script");
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let result = client
        .provider_connect(ProviderConnectParams {
            provider_id: request.provider_id,
            expected_catalog_revision: None,
            setup_values,
            auth_method,
            auth_values,
            client_connect_id: new_id(),
        })
        .await
        .map_err(explained)?;
    client.close().await;
    let provider = &result.durable_connection.provider_id;
    let models: Vec<&str> = result
        .snapshot
        .models
        .iter()
        .filter(|model| &model.provider_id == provider)
        .map(|model| model.model.as_str())
        .collect();
    let json = serde_json::json!({
        "provider_id": provider,
        "generation": result.durable_connection.generation,
        "models": models,
    });
    emit(out, &json, || {
        // The generation counts connections of the provider: past the first, this one replaced earlier settings.
        let again = if result.durable_connection.generation > 1 { " (its earlier settings replaced)" } else { "" };
        let mut text = format!("connected {provider}{again}");
        let suggested = models.iter().find(|model| scripted && model.ends_with("/scripted")).or(models.first());
        if let Some(suggested) = suggested {
            text.push_str(&format!(
                "\nmodels: {}\nuse one with `troupe run --model {} TEXT`",
                clean(&models.join(", ")),
                clean(suggested)
            ));
        }
        text
    })
}

/// `troupe disconnect`.
pub async fn disconnect(connection: &Connection, provider_id: String, out: Output) -> anyhow::Result<()> {
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let result = client
        .provider_disconnect(ProviderDisconnectParams {
            provider_id: provider_id.clone(),
            expected_runtime_revision: None,
            expected_connection_generation: None,
            client_request_id: new_id(),
        })
        .await
        .map_err(explained)?;
    client.close().await;
    let json = serde_json::json!({"provider_id": provider_id, "disconnected": result.disconnected});
    emit(out, &json, || if result.disconnected { "disconnected".to_owned() } else { "it was not connected".to_owned() })
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
    session: String,
    approval_id: Option<String>,
    answer: Answer,
    out: Output,
) -> anyhow::Result<()> {
    use troupe_protocol::types::approval::{
        ApprovalFeedback, ApprovalListParams, ApprovalRespondParams, ApprovalStatus,
    };
    use troupe_protocol::types::common::SessionOrigin;
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let session_id = crate::session_ref::resolve_session_id(&client, &session).await?;
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
        // The whole id, or a prefix of it, as for sessions and runs.
        .filter(|record| approval_id.as_ref().is_none_or(|id| record.approval_id.starts_with(id.trim())))
        .collect();
    let record = match (mine.as_slice(), &approval_id) {
        ([record], _) => record.clone(),
        ([], Some(id)) => anyhow::bail!(
            "no pending approval {id} in session {session_id}\n  hint: `troupe approvals {session_id}` lists the \
             pending ones"
        ),
        ([], None) => anyhow::bail!(
            "no approval is pending in session {session_id}\n  hint: `troupe approvals` lists the pending ones"
        ),
        (more, given) => anyhow::bail!(
            "{} pending approvals {}; name one: {}",
            more.len(),
            given.as_ref().map_or("in this session".to_owned(), |id| format!("start with {id}")),
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
    client.close().await;
    let status = serde_json::to_value(result.approval.status)?;
    emit(out, &serde_json::to_value(&result.approval)?, || {
        let summary = troupe_protocol::diagnostic::visible_line(&result.approval.operation.summary, 100);
        format!("{summary}: {}", status.as_str().unwrap_or("?"))
    })
}

/// `troupe token`: prints the data dir's token. A data dir without token and config was never used by a daemon:
/// refused unless `--create`, so a mistyped path does not get a token of its own. With `--json`: `{"token",
/// "path"}` (the file it is in).
pub fn token(data_dir: Option<std::path::PathBuf>, create: bool, out: Output) -> anyhow::Result<()> {
    let explicit = data_dir.clone();
    let data_dir = troupe_runtime::data_dir::DataDir::resolve(data_dir)?;
    let path = data_dir.token_path();
    if !path.exists() && !data_dir.config_path().exists() && !create {
        let flag = explicit.map(|dir| format!(" --data-dir {}", dir.display())).unwrap_or_default();
        anyhow::bail!(
            "no daemon has run with data dir {} (it has no token)\n  hint: `troupe serve{flag}` creates it; or \
             `troupe token{flag} --create` makes the token now",
            data_dir.root().display()
        );
    }
    data_dir.ensure_layout()?;
    let token = troupe_runtime::token::load_or_create_token(&data_dir)?;
    let json = serde_json::json!({ "token": token.as_str(), "path": data_dir.token_path() });
    emit(out, &json, || token.as_str().to_owned())
}
