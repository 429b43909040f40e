//! `troupe run`, `troupe exec` and `troupe continue`: start a run and follow it to its end.
//!
//! Everything that can be refused is checked before a session is created: empty input, an unknown agent, a
//! model whose provider is not connected (see [`crate::selection`]). `run` prints the run as it happens;
//! `exec` prints only the final answer, for scripts, and exits with a code that says how the run ended
//! ([`RunEnd::exit_code`]).

use anyhow::anyhow;
use troupe_protocol::client::{ClientDelivery, ClientOptions, ClientProtocol, DeliveryStream};
use troupe_protocol::types::approval::ApprovalRecord;
use troupe_protocol::types::attachment::InputAttachment;
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::run::{RunIdParams, RunStartParams};
use troupe_protocol::types::session::{
    PermissionMode, SessionCreateParams, SessionListParams, SetPermissionModeParams,
};
use troupe_runtime::clock::new_id;

use crate::cli_errors::{explained, require_text};
use crate::commands::{Connected, Connection, absolute_cwd};
use crate::follow::{drain_children, follow_child};
use crate::output::{Output, exit_when_stdout_closes, json_line, line};
use crate::render::{Printer, describe_event, is_run_end};
use crate::selection::{SelectionFlags, SessionSelections};
use crate::session_scan::scan;
use crate::spinner::Spinner;
use crate::style::clean;

/// How a followed run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunEnd {
    Completed,
    Failed,
    Cancelled,
    /// `exec` met an approval nobody could answer, and cancelled the run.
    NeedsApproval,
}

impl RunEnd {
    /// 0 completed, 1 failed (or interrupted), 2 stopped at an approval, 130 cancelled (as by Ctrl-C).
    pub fn exit_code(&self) -> u8 {
        match self {
            RunEnd::Completed => 0,
            RunEnd::Failed => 1,
            RunEnd::NeedsApproval => 2,
            RunEnd::Cancelled => 130,
        }
    }
}

/// How the run is shown while it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shown {
    /// Every event (`run`), as words or JSON lines.
    Follow(Output),
    /// Nothing but the final answer (`exec`); progress on stderr with `--verbose`; with JSON, the events.
    Exec { verbose: bool, json: bool },
}

/// What `troupe run`, `exec` or `continue` was asked for.
#[derive(Clone, Debug)]
pub struct RunRequest {
    /// Run in this session (id or unique prefix); `None`: a new session in `cwd`.
    pub session: Option<String>,
    pub cwd: Option<String>,
    pub flags: SelectionFlags,
    /// Start at the model asked for rather than at the session's sticky fallback (`run.start`'s `reset_fallback`).
    pub reset_fallback: bool,
    /// A permission mode for a new session's tree (`exec --mode`).
    pub mode: Option<PermissionMode>,
    pub input: String,
    /// `--attach`: the files read and checked (`crate::attach_files`).
    pub attachments: Vec<InputAttachment>,
    pub shown: Shown,
}

/// Starts the run (creating a session when none is given) and follows it to its end.
pub async fn run(connection: &Connection, request: RunRequest) -> anyhow::Result<RunEnd> {
    require_text(&request.input, "the run's input", "`troupe run \"make the tests pass\"`")?;
    exit_when_stdout_closes();
    let Connected { client, mut deliveries } = connection.open(ClientOptions::default()).await?;
    let (session_id, selection, created_here) = match &request.session {
        Some(given) => {
            let session_id = crate::session_ref::resolve_session_id(&client, given).await?;
            // Reading the session subscribes to it: its later events arrive live.
            let facts = scan(&client, &mut deliveries, &session_id).await?;
            let known = SessionSelections::of(&facts.session, facts.last_selection.clone());
            (session_id, crate::selection::resolve(&client, &request.flags, &known).await?, false)
        }
        None => {
            let cwd = absolute_cwd(request.cwd.clone())?;
            let selection = crate::selection::resolve(&client, &request.flags, &SessionSelections::default()).await?;
            let params = SessionCreateParams { selection: selection.clone(), cwd: Some(cwd) };
            let created = client.session_create(params).await.map_err(explained)?.session;
            if let Some(mode) = request.mode {
                let params = SetPermissionModeParams { session_id: created.session_id.clone(), mode };
                client.session_set_permission_mode(params).await.map_err(explained)?;
            }
            // Followed from its end: the history is not this command's business.
            client.subscribe(&created.session_id, Some(created.last_event_seq)).await.map_err(explained)?;
            (created.session_id, selection, true)
        }
    };
    let params = RunStartParams {
        session_id: session_id.clone(),
        client_run_id: new_id(),
        selection,
        input: request.input.clone(),
        reset_fallback: request.reset_fallback,
        attachments: request.attachments.clone(),
    };
    let run_id = match client.run_start(params).await {
        Ok(started) => started.run_id,
        Err(error) => {
            if created_here {
                // The daemon refused the input (an unknown `/skill`, say): the session made for it holds nothing,
                // so it goes too, and `troupe continue` does not pick an empty session.
                let _ = client.session_delete(SessionIdParams { session_id: session_id.clone() }).await;
            }
            return Err(explained(error));
        }
    };
    if matches!(request.shown, Shown::Follow(Output::Human)) {
        if created_here {
            eprintln!("created session {session_id}");
        }
        eprintln!(
            "steer it with `troupe steer {run_id} TEXT` (or --session {session_id}), stop it with `troupe cancel \
             {run_id}`"
        );
    }
    let end = follow_run(&client, &mut deliveries, &run_id, request.shown).await;
    client.close().await;
    end
}

/// `troupe continue`: the most recent root session whose cwd is the current directory.
pub async fn latest_here(connection: &Connection) -> anyhow::Result<String> {
    let cwd = absolute_cwd(None)?;
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let sessions = client
        .session_list(SessionListParams { cwd: Some(cwd.clone()), include_archived: false })
        .await
        .map_err(explained)?;
    client.close().await;
    let newest = sessions.sessions.into_iter().max_by(|a, b| a.last_activity_at.cmp(&b.last_activity_at));
    match newest {
        Some(session) => Ok(session.session_id),
        None => anyhow::bail!(
            "no session in {}\n  hint: start one here with `troupe run \"TEXT\"`; `troupe sessions` lists them all",
            clean(&cwd)
        ),
    }
}

/// The spinner's words while a request to the model is out.
const WAITING_FOR_MODEL: &str = "waiting for the model…";

/// What the follower saw of the run.
#[derive(Default)]
struct Seen {
    /// The text of the run's latest model turn in its own session: the final answer once it completed.
    answer: String,
    /// The approval that stopped an `exec`.
    approval: Option<ApprovalRecord>,
}

/// Prints the session's events until run `run_id` ends, and how it ended.
async fn follow_run<C: ClientProtocol>(
    client: &C,
    deliveries: &mut C::Deliveries,
    run_id: &str,
    shown: Shown,
) -> anyhow::Result<RunEnd> {
    let mut printer = match shown {
        Shown::Follow(out) => Printer::new(out),
        Shown::Exec { json: true, .. } => Printer::new(Output::Json),
        Shown::Exec { .. } => Printer::default(),
    };
    let printing = !matches!(shown, Shown::Exec { json: false, .. });
    let spinner = Spinner::new(shown == Shown::Follow(Output::Human));
    spinner.wait_for(WAITING_FOR_MODEL);
    let mut seen = Seen::default();
    let mut interrupted = false;
    loop {
        let delivery = tokio::select! {
            delivery = deliveries.next() => delivery,
            () = crate::quiet_tools::until(printer.quiet_due()) => {
                spinner.erase_frame();
                printer.say_quiet();
                continue;
            }
            _ = tokio::signal::ctrl_c(), if !interrupted => {
                interrupted = true;
                let cancelled =
                    client.run_cancel(RunIdParams { run_id: run_id.to_owned() }).await.map_err(explained)?;
                eprintln!("{}", if cancelled.cancelled { "cancelling the run…" } else { "the run has ended" });
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
                spinner.erase_frame();
                if printing {
                    printer.tool_output(&params);
                }
                continue;
            }
            ClientDelivery::ToolOutputGap(_) => {
                if printing {
                    printer.output_gap();
                }
                continue;
            }
            ClientDelivery::RecoveryFailed { detail, .. } => {
                return Err(anyhow!("lost the session while following the run: {detail}"));
            }
            _ => continue,
        };
        spinner.erase_frame();
        if printing {
            printer.event(&event, true);
        } else if let Shown::Exec { verbose: true, .. } = shown
            && let Some(what) = describe_event(&event)
        {
            eprintln!("{}", clean(&what));
        } else if let Some(switch) = crate::event_words::model_switch(&event.payload) {
            // Quiet as `exec` is, a run that moves to another model than the one asked for says so.
            eprintln!("note: {}", clean(&switch));
        }
        follow_child(client, &mut printer, &event).await;
        note(&mut seen, &event, run_id);
        // The run's own events move the spinner; a child's do not.
        if event.run_id.as_deref() == Some(run_id) {
            match &event.payload {
                EventPayload::RunStarted { .. } | EventPayload::ToolCallTerminated { .. } => {
                    spinner.wait_for(WAITING_FOR_MODEL)
                }
                EventPayload::ApprovalRequested { .. } => spinner.wait_for("waiting for an approval (troupe approve)"),
                // Text and tool output stream on an open line, which a frame must not overwrite.
                EventPayload::TextDelta { .. }
                | EventPayload::ToolCallStarted { .. }
                | EventPayload::ApprovalUserDecisionRecorded { .. } => spinner.clear(),
                payload if is_run_end(payload) => spinner.clear(),
                _ => {}
            }
        }
        if let (Shown::Exec { .. }, Some(approval)) = (shown, &seen.approval) {
            return stop_at_approval(client, deliveries, run_id, approval.clone()).await;
        }
        if event.run_id.as_deref() != Some(run_id) || !is_run_end(&event.payload) {
            continue;
        }
        if printing {
            drain_children(client, deliveries, &mut printer).await;
        }
        let end = match event.payload {
            EventPayload::RunCompleted { .. } => RunEnd::Completed,
            EventPayload::RunCancelled { .. } => RunEnd::Cancelled,
            _ => RunEnd::Failed,
        };
        if let Shown::Exec { json: false, .. } = shown {
            match &end {
                RunEnd::Completed => line(clean(&seen.answer).trim_end()),
                RunEnd::Failed => {
                    if let EventPayload::RunFailed { error, .. } = &event.payload {
                        eprintln!("error: the run failed: {}", crate::cli_errors::speak_cli(error));
                    }
                }
                _ => eprintln!("the run was cancelled"),
            }
        }
        return Ok(end);
    }
}

/// Remembers the final answer and a pending approval from `event`.
fn note(seen: &mut Seen, event: &StoredEvent, run_id: &str) {
    match &event.payload {
        EventPayload::ModelTurnCommitted { text, .. } if event.run_id.as_deref() == Some(run_id) => {
            seen.answer = text.clone();
        }
        EventPayload::ApprovalRequested { approval } => seen.approval = Some((**approval).clone()),
        _ => {}
    }
}

/// `exec` cannot answer an approval: it cancels the run and says what was asked and how to allow it.
async fn stop_at_approval<C: ClientProtocol>(
    client: &C,
    deliveries: &mut C::Deliveries,
    run_id: &str,
    approval: ApprovalRecord,
) -> anyhow::Result<RunEnd> {
    let _ = client.run_cancel(RunIdParams { run_id: run_id.to_owned() }).await;
    // Wait (briefly) for the cancellation to be recorded, so the session is idle when the command exits.
    let settle = async {
        while let Some(delivery) = deliveries.next().await {
            if let ClientDelivery::Live(event) = delivery
                && event.run_id.as_deref() == Some(run_id)
                && is_run_end(&event.payload)
            {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), settle).await;
    // What was refused, once, every line and control of it seen (a `\r` must not make it read as something else).
    let whole = format!("`troupe watch {} --json` has it whole", approval.session_id);
    eprintln!(
        "error: the run needs approval, and exec cannot ask; the run was cancelled\n  it asked: {}\n  hint: allow such \
         operations with `troupe exec --mode auto_approve_y …` (or set the mode of a session's tree with `troupe mode \
         SESSION MODE`), or use `troupe run` and answer with `troupe approve`",
        crate::event_words::approval_what(&approval.operation, &whole),
    );
    Ok(RunEnd::NeedsApproval)
}

/// Prints the last line of an `exec --json`: shaped as the event lines before it, so one filter reads them all
/// (`jq -r .payload.type` ends with `exec_end`): `{"payload": {"type": "exec_end", "status": …, "exit_code": …}}`.
pub fn print_json_end(end: &RunEnd) {
    let status = match end {
        RunEnd::Completed => "completed",
        RunEnd::Failed => "failed",
        RunEnd::Cancelled => "cancelled",
        RunEnd::NeedsApproval => "needs_approval",
    };
    let payload = serde_json::json!({"type": "exec_end", "status": status, "exit_code": end.exit_code()});
    json_line(&serde_json::json!({ "payload": payload }));
}

/// The run's input: the argument, else standard input when it is not a terminal (`echo hi | troupe run`).
pub fn input_or_stdin(input: Option<String>, example: &str) -> anyhow::Result<String> {
    if let Some(input) = input {
        return Ok(input);
    }
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        return Err(crate::cli_errors::UsageError(format!(
            "what should the run do?\n  hint: give it as the last argument, in quotes, e.g. `{example}`, or pipe it in"
        ))
        .into());
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
        .map_err(|error| anyhow::anyhow!("cannot read the input from stdin: {error}"))?;
    Ok(text)
}
