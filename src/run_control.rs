//! The commands that act on a running run: `steer`, `recall`, `cancel` and `stdin`. Each names its run by id
//! (as `troupe run` and `troupe watch` print it, or a unique prefix of an active run's id) or by `--session S`,
//! meaning S's active run; `stdin --session` without `--call` writes to that run's one running command.

use troupe_protocol::client::{ClientError, ClientOptions, ClientProtocol};
use troupe_protocol::error_code::ErrorCode;
use troupe_protocol::types::common::SessionStatus;
use troupe_protocol::types::run::{RunIdParams, RunSteerParams, RunToolStdinParams};
use troupe_protocol::types::session::SessionListParams;

use crate::cli_errors::{explained, require_text};
use crate::connection::{Connected, Connection};
use crate::output::{Output, emit};
use crate::session_ref::{MIN_PREFIX, one_by_prefix};
use crate::session_scan::{SessionFacts, scan};

/// Which run a command acts on.
#[derive(Clone, Debug)]
pub enum RunTarget {
    /// A run id, as printed.
    Run(String),
    /// The active run of a session (its id or a unique prefix).
    Session(String),
}

impl RunTarget {
    /// From a `RUN_ID` argument and a `--session` flag (exactly one of them).
    pub fn from_args(run_id: Option<String>, session: Option<String>) -> Result<Self, crate::cli_errors::UsageError> {
        match (run_id, session) {
            (Some(run_id), None) => Ok(RunTarget::Run(run_id)),
            (None, Some(session)) => Ok(RunTarget::Session(session)),
            (Some(_), Some(_)) => {
                Err(crate::cli_errors::UsageError("give a RUN_ID or --session SESSION, not both".into()))
            }
            (None, None) => Err(crate::cli_errors::UsageError(
                "name the run: its RUN_ID (printed by `troupe run` and `troupe watch`) or --session SESSION".into(),
            )),
        }
    }
}

/// The run id a target names, and its session's facts when they were read to find it (a session, or a run id
/// prefix), for `stdin`'s running command.
async fn locate<C: ClientProtocol>(
    connected: &mut Connected<C>,
    target: &RunTarget,
) -> anyhow::Result<(String, Option<SessionFacts>)> {
    match target {
        RunTarget::Run(given) => resolve_run_id(connected, given).await,
        RunTarget::Session(given) => {
            let session_id = crate::session_ref::resolve_session_id(&connected.client, given).await?;
            let facts = scan(&connected.client, &mut connected.deliveries, &session_id).await?;
            let run_id = facts.require_active_run()?.run_id.clone();
            Ok((run_id, Some(facts)))
        }
    }
}

/// `troupe steer`: queues input for a running run. Exits 1 when the run did not accept it.
pub async fn steer(
    connection: &Connection,
    target: RunTarget,
    input: String,
    attachments: Vec<troupe_protocol::types::attachment::InputAttachment>,
    out: Output,
) -> anyhow::Result<()> {
    require_text(&input, "the steering text", "`troupe steer RUN_ID \"also update the docs\"`")?;
    let mut connected = connection.open(ClientOptions::default()).await?;
    let (run_id, _) = locate(&mut connected, &target).await?;
    let client = &connected.client;
    let result =
        client.run_steer(RunSteerParams { run_id: run_id.clone(), input, attachments }).await.map_err(explained)?;
    client.close().await;
    if !result.accepted {
        anyhow::bail!(
            "run {run_id} did not accept the input\n  hint: it may be ending; `troupe watch SESSION` shows it"
        );
    }
    emit(out, &serde_json::json!({"run_id": run_id, "queued": true}), || "queued for the next boundary".to_owned())
}

/// `troupe recall`: takes back the newest queued steer.
pub async fn recall(connection: &Connection, target: RunTarget, out: Output) -> anyhow::Result<()> {
    let mut connected = connection.open(ClientOptions::default()).await?;
    let (run_id, _) = locate(&mut connected, &target).await?;
    let client = &connected.client;
    let result = client.run_recall_steer(RunIdParams { run_id: run_id.clone() }).await.map_err(explained)?;
    client.close().await;
    let json = serde_json::json!({"run_id": run_id, "recalled": result.recalled});
    emit(out, &json, || match &result.recalled {
        Some(text) => format!("recalled: {}", crate::style::clean(text)),
        None => "nothing to recall".to_owned(),
    })
}

/// `troupe cancel`.
pub async fn cancel(connection: &Connection, target: RunTarget, out: Output) -> anyhow::Result<()> {
    let mut connected = connection.open(ClientOptions::default()).await?;
    let (run_id, _) = locate(&mut connected, &target).await?;
    let client = &connected.client;
    let result = client.run_cancel(RunIdParams { run_id: run_id.clone() }).await.map_err(explained)?;
    client.close().await;
    let json = serde_json::json!({"run_id": run_id, "cancelled": result.cancelled});
    emit(out, &json, || if result.cancelled { "cancelled".to_owned() } else { "the run was not running".to_owned() })
}

/// What `troupe stdin` sends.
#[derive(Clone, Debug)]
pub struct StdinRequest {
    pub target: RunTarget,
    /// The tool call; `None`: the run's one running command (with `--session`).
    pub tool_call_id: Option<String>,
    /// The text; `None`: the lines typed until end of input.
    pub text: Option<String>,
    pub eof: bool,
    /// Send TEXT as is, without the newline a waiting `read` needs.
    pub no_newline: bool,
}

/// `troupe stdin`: sends TEXT (with a newline unless `--no-newline`), or every line typed until end of input, to
/// a running tool call.
pub async fn stdin(connection: &Connection, request: StdinRequest, out: Output) -> anyhow::Result<()> {
    let mut connected = connection.open(ClientOptions::default()).await?;
    let (run_id, facts) = locate(&mut connected, &request.target).await?;
    let tool_call_id = match (request.tool_call_id, facts) {
        (Some(id), _) => id,
        (None, Some(facts)) => one_running_command(&facts)?,
        // A whole run id, taken as given: its session is looked for now.
        (None, None) => {
            let facts = facts_of_run(&mut connected, &run_id).await?;
            one_running_command(&facts)?
        }
    };
    let client = &connected.client;
    let send_raw = |data: Option<String>, eof: bool| {
        let params = RunToolStdinParams { run_id: run_id.clone(), tool_call_id: tool_call_id.clone(), data, eof };
        let call = client.run_tool_stdin(params);
        async move { call.await.map(|result| result.accepted) }
    };
    let send = |data: Option<String>, eof: bool| {
        let call = send_raw(data, eof);
        async move { call.await.map_err(explained) }
    };
    let accepted = match request.text {
        Some(mut text) => {
            if !request.no_newline && !text.ends_with('\n') {
                text.push('\n');
            }
            send(Some(text), request.eof).await?
        }
        None => {
            use tokio::io::AsyncBufReadExt;
            let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
            let mut accepted = true;
            let mut typed = false;
            while accepted && let Some(line) = lines.next_line().await? {
                accepted = send(Some(format!("{line}\n")), false).await?;
                typed = true;
            }
            // The end of input closes the command's stdin. A command that ended after taking every line typed has no
            // stdin left to close, and nothing typed was lost: only with nothing typed does a refusal mean the
            // command was not there to take input. Its whole run may have ended too (a quick command, then a quick
            // model): that is the same, not an error.
            accepted
                && match send_raw(None, true).await {
                    Ok(closed) => closed || typed,
                    Err(error) if typed && run_ended(&error) => true,
                    Err(error) => return Err(explained(error)),
                }
        }
    };
    client.close().await;
    if !accepted {
        anyhow::bail!(
            "tool call {tool_call_id} did not take the input: it is not running, or its stdin is closed\n  hint: \
             `troupe watch SESSION` shows the tool calls of a run (\"tool shell (ID)\")"
        );
    }
    emit(out, &serde_json::json!({"run_id": run_id, "tool_call_id": tool_call_id, "accepted": true}), String::new)
}

/// Whether `error` says the run is no longer active (`run_not_active`).
fn run_ended(error: &ClientError) -> bool {
    matches!(error, ClientError::Rpc(rpc) if rpc.error_code() == Some(ErrorCode::RunNotActive))
}

/// The length of a whole run id (a UUID): taken as given, without looking for it.
const WHOLE_RUN_ID: usize = 36;

/// Resolves `given` to a run id: a whole id as is, else the one active run of a running root session whose id
/// starts with it, with that session's facts (runs that ended take no steer, stdin or cancel, so only active runs
/// are looked at).
async fn resolve_run_id<C: ClientProtocol>(
    connected: &mut Connected<C>,
    given: &str,
) -> anyhow::Result<(String, Option<SessionFacts>)> {
    let given = given.trim();
    if given.len() >= WHOLE_RUN_ID {
        return Ok((given.to_owned(), None));
    }
    if given.len() < MIN_PREFIX {
        anyhow::bail!(
            "no run {given}\n  hint: give at least {MIN_PREFIX} characters of the run id that `troupe run`, \
             `troupe watch` or `troupe runs SESSION` print, or --session SESSION for its active run"
        );
    }
    let active: Vec<SessionFacts> =
        active_runs(connected).await?.into_iter().filter(|facts| facts.active_run.is_some()).collect();
    let facts = one_by_prefix(given, active, active_run_id, "active runs", || {
        format!(
            "no run {given}: the id of no active run starts with it\n  hint: `troupe runs SESSION` lists a \
             session's runs; only an active run can be steered, cancelled or given stdin"
        )
    })?;
    Ok((active_run_id(&facts).to_owned(), Some(facts)))
}

/// The id of the session's active run ("" when it has none).
fn active_run_id(facts: &SessionFacts) -> &str {
    facts.active_run.as_ref().map_or("", |active| active.run_id.as_str())
}

/// The facts of every running root session (each read from its events).
async fn active_runs<C: ClientProtocol>(connected: &mut Connected<C>) -> anyhow::Result<Vec<SessionFacts>> {
    let params = SessionListParams { cwd: None, include_archived: false };
    let sessions = connected.client.session_list(params).await.map_err(explained)?.sessions;
    let mut running = Vec::new();
    for session in sessions.iter().filter(|session| session.status == SessionStatus::Running) {
        running.push(scan(&connected.client, &mut connected.deliveries, &session.session_id).await?);
    }
    Ok(running)
}

/// The facts of the running root session whose active run is `run_id` (a run named without its session).
async fn facts_of_run<C: ClientProtocol>(connected: &mut Connected<C>, run_id: &str) -> anyhow::Result<SessionFacts> {
    let found = active_runs(connected)
        .await?
        .into_iter()
        .find(|facts| facts.active_run.as_ref().is_some_and(|active| active.run_id == run_id));
    found.ok_or_else(|| {
        anyhow::anyhow!(
            "no running session has run {run_id} active\n  hint: give the TOOL_CALL_ID after the RUN_ID, or name \
             the session with --session"
        )
    })
}

/// The tool call id of the active run's only running command.
fn one_running_command(facts: &SessionFacts) -> anyhow::Result<String> {
    let active = facts.require_active_run()?;
    match active.running_tools.as_slice() {
        [(id, _)] => Ok(id.clone()),
        [] => anyhow::bail!(
            "run {} has no running command\n  hint: `troupe watch SESSION` shows its tool calls",
            active.run_id
        ),
        several => {
            let ids: Vec<&str> = several.iter().map(|(id, _)| id.as_str()).collect();
            anyhow::bail!(
                "run {} has {} running commands ({})\n  hint: name one with --call TOOL_CALL_ID",
                active.run_id,
                several.len(),
                ids.join(", ")
            )
        }
    }
}

/// `stdin`'s arguments: `RUN_ID TOOL_CALL_ID [TEXT]`, or with `--session` `[TEXT]`.
pub fn stdin_request(
    session: Option<String>,
    call: Option<String>,
    mut args: Vec<String>,
    eof: bool,
    no_newline: bool,
) -> anyhow::Result<StdinRequest> {
    let (target, tool_call_id, text) = match session {
        Some(session) => {
            if args.len() > 1 {
                return Err(crate::cli_errors::UsageError(
                    "with --session, give only the TEXT (and --call ID for the command)".into(),
                )
                .into());
            }
            (RunTarget::Session(session), call, args.pop())
        }
        None => {
            if args.is_empty() {
                return Err(crate::cli_errors::UsageError(
                    "give RUN_ID [TOOL_CALL_ID [TEXT]] (as `troupe run`/`watch` print them), or --session SESSION \
                     [TEXT]"
                        .into(),
                )
                .into());
            }
            // RUN_ID alone: its one running command, the lines typed.
            let text = (args.len() == 3).then(|| args.pop()).flatten();
            let tool_call_id = (args.len() == 2).then(|| args.pop()).flatten();
            (RunTarget::Run(args.pop().unwrap_or_default()), call.or(tool_call_id), text)
        }
    };
    Ok(StdinRequest { target, tool_call_id, text, eof, no_newline })
}
