//! Client commands: small programs on the shared protocol client, for people at a terminal.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use troupe_protocol::client::{
    Client, ClientDelivery, ClientOptions, ReconnectPolicy, ReplayReason,
};
use troupe_protocol::method;
use troupe_protocol::types::common::{ModelSelection, RunSelection, SessionIdParams, SessionMeta};
use troupe_protocol::types::events::{EventPayload, StoredEvent, TitleChangeKind};
use troupe_protocol::types::session::{
    SessionCreateParams, SessionListParams, SessionRenameParams, TitleChange,
};
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
        let token = load_or_create_token(&data_dir).with_context(|| {
            format!("reading the token from {}", data_dir.token_path().display())
        })?;
        Ok(token.as_str().to_owned())
    }

    async fn connect(
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
pub async fn sessions(
    connection: &Connection,
    cwd: Option<String>,
    json: bool,
) -> anyhow::Result<()> {
    let (client, _deliveries) = connection.connect(ClientOptions::default()).await?;
    let result = client
        .call::<method::SessionList>(SessionListParams { cwd })
        .await?;
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
    let cwd = match cwd {
        Some(cwd) => Some(std::path::absolute(&cwd).with_context(|| format!("resolving {cwd}"))?),
        None => Some(std::env::current_dir()?),
    };
    let cwd = cwd.map(|path| path.to_string_lossy().into_owned());
    let selection = RunSelection {
        agent: agent.unwrap_or_else(|| DEFAULT_AGENT.to_owned()),
        model: ModelSelection {
            model: model.unwrap_or_else(|| LOCAL_ECHO.to_owned()),
            variant: None,
        },
        preset: None,
    };
    let (client, _deliveries) = connection.connect(ClientOptions::default()).await?;
    let result = client
        .call::<method::SessionCreate>(SessionCreateParams { selection, cwd })
        .await?;
    println!("{}", result.session.session_id);
    client.close().await;
    Ok(())
}

/// `troupe rename`: sets, clears or resets a session's title.
pub async fn rename(
    connection: &Connection,
    session_id: String,
    change: TitleChange,
) -> anyhow::Result<()> {
    let (client, _deliveries) = connection.connect(ClientOptions::default()).await?;
    let result = client
        .call::<method::SessionRename>(SessionRenameParams {
            session_id,
            client_rename_id: new_id(),
            change,
        })
        .await?;
    println!("{}", session_line(&result.session));
    client.close().await;
    Ok(())
}

/// `troupe watch`: prints a session's events, then follows it live. Survives daemon restarts: it reconnects and
/// resumes from the last event it printed, so nothing is printed twice or skipped.
pub async fn watch(
    connection: &Connection,
    session_id: String,
    from: Option<u64>,
) -> anyhow::Result<()> {
    let options = ClientOptions {
        reconnect: Some(ReconnectPolicy::default()),
        request_timeout: Duration::from_secs(30),
        ..ClientOptions::default()
    };
    let (client, mut deliveries) = connection.connect(options).await?;
    let session = client
        .call::<method::SessionGet>(SessionIdParams {
            session_id: session_id.clone(),
        })
        .await?
        .session;
    println!(
        "watching {}  {}  ({})",
        session.session_id,
        session.title.as_deref().unwrap_or("(untitled)"),
        session.cwd
    );
    for skipped in &session.skipped_events {
        let position = match (skipped.seq, skipped.line) {
            (Some(seq), _) => format!("seq {seq}"),
            (None, Some(line)) => format!("line {line}"),
            (None, None) => "unknown position".to_owned(),
        };
        println!(
            "! skipped unreadable event at {position}: {}",
            skipped.reason
        );
    }
    client.subscribe(&session_id, from).await?;
    loop {
        let delivery = tokio::select! {
            delivery = deliveries.next() => delivery,
            _ = tokio::signal::ctrl_c() => break,
        };
        let Some(delivery) = delivery else {
            return Err(anyhow!("the connection to the daemon ended"));
        };
        match delivery {
            ClientDelivery::Live(event) | ClientDelivery::ReplayEvent(event) => {
                println!("{}", describe_event(&event))
            }
            ClientDelivery::ReplayStart {
                reason: ReplayReason::Gap,
                after_seq,
                ..
            } => {
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

/// One line per event: `#seq  time  what`.
pub fn describe_event(event: &StoredEvent) -> String {
    let time = event.timestamp.get(11..19).unwrap_or(&event.timestamp);
    let what = match &event.payload {
        EventPayload::SessionCreated { cwd, selection, .. } => {
            format!(
                "session created in {cwd} ({} with {})",
                selection.agent, selection.model.model
            )
        }
        EventPayload::SessionTitleCommitted { title, change, .. } => match (change, title) {
            (TitleChangeKind::Set, Some(title)) => format!("title set to {title:?}"),
            (TitleChangeKind::Reset, _) => "title reset".to_owned(),
            _ => "title cleared".to_owned(),
        },
        EventPayload::SessionReverted { through_seq } => format!("reverted to #{through_seq}"),
        EventPayload::SessionForked {
            source_session_id,
            through_seq,
        } => {
            format!("forked from {source_session_id} at #{through_seq}")
        }
        EventPayload::UserInputAdmitted { input, .. } => format!("steer queued: {input}"),
        EventPayload::UserInputSubmitted { input, .. } => format!("user: {input}"),
        EventPayload::UserInputRecalled { input, .. } => format!("steer recalled: {input}"),
        EventPayload::RunStarted {
            input, selection, ..
        } => format!("run started ({}): {input}", selection.model.model),
        EventPayload::RunCompleted { final_text } => {
            format!("run completed: {}", final_text.as_deref().unwrap_or(""))
        }
        EventPayload::RunFailed { error, .. } => format!("run failed: {error}"),
        EventPayload::RunCancelled { .. } => "run cancelled".to_owned(),
        EventPayload::RunInterrupted { .. } => "run interrupted".to_owned(),
        EventPayload::Unknown => "(an event kind this client does not know)".to_owned(),
    };
    format!("#{:<5} {time}  {what}", event.seq)
}
