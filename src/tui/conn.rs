//! What the TUI asks of the daemon, through the shared protocol client: listing sessions, opening one
//! (subscribing from its start, so the replay fills the transcript), runs, steering, approvals, the mode and the
//! runtime snapshot's agents and models.

use troupe_protocol::client::ClientProtocol;
use troupe_protocol::types::approval::{ApprovalFeedback, ApprovalRespondParams};
use troupe_protocol::types::attachment::InputAttachment;
use troupe_protocol::types::common::{Empty, ModelSelection, RunSelection, SessionIdParams};
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::run::{RunIdParams, RunStartParams, RunSteerParams, RunToolStdinParams};
use troupe_protocol::types::runtime::RuntimeSnapshot;
use troupe_protocol::types::session::{
    PermissionMode, SessionCreateParams, SessionListParams, SetPermissionModeParams,
};
use troupe_runtime::clock::new_id;

use super::keys::Action;
use super::state::{App, Choice, PickerRow};
use crate::selection::{SelectionFlags, SessionSelections};

/// The roots listed per refresh whose children are asked for too (one call each).
const CHILDREN_OF_FIRST: usize = 20;

/// Reloads the picker: root sessions, newest activity first, each followed by its delegated children.
pub async fn refresh<C: ClientProtocol>(client: &C, app: &mut App) -> anyhow::Result<()> {
    let mut roots = client.session_list(SessionListParams::default()).await?.sessions;
    roots.sort_by(|a, b| b.last_activity_at.cmp(&a.last_activity_at));
    let mut rows = Vec::new();
    for (index, root) in roots.into_iter().enumerate() {
        let children = if index < CHILDREN_OF_FIRST {
            let params = SessionIdParams { session_id: root.session_id.clone() };
            client.session_children(params).await.map(|result| result.children).unwrap_or_default()
        } else {
            Vec::new()
        };
        rows.push(PickerRow {
            session_id: root.session_id,
            title: root.title,
            status: root.status,
            last_activity_at: root.last_activity_at,
            cwd: Some(root.cwd),
            depth: 0,
        });
        rows.extend(children.into_iter().map(|child| PickerRow {
            session_id: child.session_id,
            title: child.title.or(Some(format!("({})", child.agent))),
            status: child.status,
            // `session.children` does not say when a child was last active.
            last_activity_at: String::new(),
            cwd: None,
            depth: 1,
        }));
    }
    app.rows = rows;
    app.selected = app.selected.min(app.rows.len().saturating_sub(1));
    Ok(())
}

/// Subscribes to the children a `delegate_started` names, so their approvals reach the prompt.
pub async fn follow_child<C: ClientProtocol>(client: &C, followed: &mut Vec<String>, event: &StoredEvent) {
    if let EventPayload::DelegateStarted { child_session_id, .. } = &event.payload
        && !followed.contains(child_session_id)
    {
        followed.push(child_session_id.clone());
        let _ = client.subscribe(child_session_id, None).await;
    }
}

/// Starts a run with `input` when the session is idle, else steers the active one.
async fn submit<C: ClientProtocol>(
    client: &C,
    app: &mut App,
    input: String,
    attachments: Vec<InputAttachment>,
) -> anyhow::Result<()> {
    match app.active_run.clone() {
        Some(run_id) => {
            let accepted = client.run_steer(RunSteerParams { run_id, input, attachments }).await?.accepted;
            app.notice_for_run(if accepted { "steer queued" } else { "the run did not take the steer" });
        }
        None => {
            let Some(session) = app.session.clone() else { return Ok(()) };
            let selection = selection_for_run(client, app).await?;
            let params = RunStartParams {
                session_id: session.session_id,
                client_run_id: new_id(),
                selection,
                input,
                reset_fallback: false,
                attachments,
            };
            let run_id = client.run_start(params).await?.run_id;
            app.active_run.get_or_insert(run_id);
        }
    }
    Ok(())
}

/// Carries out one action; a failure becomes the status line's notice.
pub async fn perform<C: ClientProtocol>(
    client: &C,
    app: &mut App,
    followed: &mut Vec<String>,
    action: Action,
) -> anyhow::Result<()> {
    match action {
        Action::Refresh => refresh(client, app).await?,
        Action::Open(session_id) => open(client, app, followed, session_id).await?,
        Action::CreateSession => {
            // On the model picked (m on the picker, Ctrl-P in a session), else the default agent's first model.
            let flags = match &app.picked {
                Some(picked) => {
                    SelectionFlags { agent: Some(picked.agent.clone()), model: Some(picked.model.model.clone()) }
                }
                None => SelectionFlags::default(),
            };
            let selection = crate::selection::resolve(client, &flags, &SessionSelections::default()).await?;
            let cwd = std::env::current_dir()?.to_string_lossy().into_owned();
            let created = client.session_create(SessionCreateParams { selection, cwd: Some(cwd) }).await?.session;
            open(client, app, followed, created.session_id).await?;
        }
        Action::BackToPicker => {
            app.screen = super::state::Screen::Picker;
            refresh(client, app).await?;
        }
        Action::CompletePath => {
            let Some(session) = app.session.clone() else { return Ok(()) };
            let mut line = std::mem::take(&mut app.input);
            let completed = super::at_path::complete(client, &session.session_id, &mut line).await;
            app.input = line;
            app.notice = completed?;
        }
        Action::Submit(line) => {
            let Some(session) = app.session.clone() else { return Ok(()) };
            let (input, attachments) = super::at_path::take_attachments(client, &session.session_id, &line).await?;
            submit(client, app, input, attachments).await?;
        }
        Action::RecallSteer => {
            let Some(run_id) = app.active_run.clone() else { return Ok(()) };
            match client.run_recall_steer(RunIdParams { run_id }).await?.recalled {
                Some(recalled) => app.input = recalled,
                None => app.notice = Some("no steer to recall".to_owned()),
            }
        }
        Action::Cancel => {
            let Some(run_id) = app.active_run.clone() else { return Ok(()) };
            client.run_cancel(RunIdParams { run_id }).await?;
        }
        Action::Stdin(line) => {
            let (Some(run_id), Some(tool_call_id)) = (app.active_run.clone(), app.running_tools.last().cloned()) else {
                app.notice = Some("no command is running".to_owned());
                return Ok(());
            };
            let params = RunToolStdinParams { run_id, tool_call_id, data: Some(format!("{line}\n")), eof: false };
            client.run_tool_stdin(params).await?;
        }
        Action::Approve { decision, feedback } => {
            let Some(approval) = app.pending_approval().cloned() else { return Ok(()) };
            let params = ApprovalRespondParams {
                session_id: approval.session_id,
                approval_id: approval.approval_id.clone(),
                request_revision: approval.revision,
                operation_fingerprint: approval.operation_fingerprint,
                client_response_id: new_id(),
                decision,
                feedback: feedback.map(|message| ApprovalFeedback { message }),
            };
            client.approval_respond(params).await?;
            app.approvals.retain(|pending| pending.approval_id != approval.approval_id);
        }
        Action::CycleMode => {
            let Some(session_id) = app.session_id().map(str::to_owned) else { return Ok(()) };
            let mode = next_mode(app.mode.unwrap_or_default());
            client.session_set_permission_mode(SetPermissionModeParams { session_id, mode }).await?;
            // Set before the answer: every check after it uses this mode (until another client changes it, which
            // the next `read_mode` shows).
            app.mode = Some(mode);
        }
        Action::ShowServers => {
            let snapshot = client.runtime_snapshot_get(Empty {}).await?.snapshot;
            app.mcp_servers = Some(snapshot.mcp_servers);
            app.servers_shown = Some(0);
        }
        Action::LoadChoices => {
            let snapshot = client.runtime_snapshot_get(Empty {}).await?.snapshot;
            app.choices = choices(&snapshot);
            // The cursor starts on the first choice that can run.
            match app.choices.iter().position(|choice| choice.unusable.is_none()) {
                _ if app.choices.is_empty() => app.notice = Some("the daemon has no agents with models".to_owned()),
                first => app.choosing = Some(first.unwrap_or(0)),
            }
        }
    }
    Ok(())
}

async fn open<C: ClientProtocol>(
    client: &C,
    app: &mut App,
    followed: &mut Vec<String>,
    session_id: String,
) -> anyhow::Result<()> {
    let session = client.session_get(SessionIdParams { session_id: session_id.clone() }).await?.session;
    app.open(session);
    followed.clear();
    followed.push(session_id.clone());
    client.subscribe(&session_id, None).await?;
    read_mode(client, app).await
}

/// Reads the open session's tree mode from the daemon: it belongs to the tree, not to this TUI (another client may
/// change it, and a restarted daemon starts every tree in the default), and no event carries it. `session.tree`
/// reports it (troupe extension, `docs/protocol.md`), from the daemon's index without loading any session, so the
/// TUI reads it on opening, on reconnecting and every few seconds. A daemon that does not report it leaves the mode
/// unknown.
pub async fn read_mode<C: ClientProtocol>(client: &C, app: &mut App) -> anyhow::Result<()> {
    let Some(opened) = app.session_id().map(str::to_owned) else { return Ok(()) };
    let mode = client.session_tree(SessionIdParams { session_id: opened.clone() }).await?.permission_mode;
    // The person may have opened another session while the call was out.
    if app.session_id() == Some(opened.as_str()) {
        app.mode = mode;
    }
    Ok(())
}

/// Every agent with each of its models, in the snapshot's order; a model that cannot run now carries why (the
/// first line of the refusal `troupe run --model` would print). Then, as the console's model menu lists them,
/// every other model that can run now (its provider connected), with the `default` agent (else the first).
pub fn choices(snapshot: &RuntimeSnapshot) -> Vec<Choice> {
    let known = SessionSelections::default();
    let in_chains: std::collections::HashSet<&str> =
        snapshot.agents.iter().flat_map(|agent| agent.models.iter().map(|model| model.model.as_str())).collect();
    let host = snapshot
        .agents
        .iter()
        .find(|agent| agent.agent == troupe_runtime::catalog::DEFAULT_AGENT)
        .or(snapshot.agents.first());
    let others = snapshot
        .models
        .iter()
        .filter(|model| !in_chains.contains(model.model.as_str()))
        .filter(|model| crate::selection::usable(snapshot, model) == crate::selection::Usable::Yes)
        .filter_map(|model| Some((host?, ModelSelection { model: model.model.clone(), variant: None })));
    snapshot
        .agents
        .iter()
        .flat_map(|agent| agent.models.iter().map(move |model| (agent, model.clone())))
        .chain(others)
        .map(|(agent, model)| {
            let flags = SelectionFlags { agent: Some(agent.agent.clone()), model: Some(model.model.clone()) };
            let unusable = crate::selection::decide(snapshot, &flags, &known)
                .err()
                .map(|error| error.to_string().lines().next().unwrap_or_default().to_owned());
            Choice { selection: RunSelection { agent: agent.agent.clone(), model, preset: None }, unusable }
        })
        .collect()
}

/// Picked in the TUI > the agent's chain > the session's last selection > its creation selection.
async fn selection_for_run<C: ClientProtocol>(client: &C, app: &App) -> anyhow::Result<RunSelection> {
    let flags = match &app.picked {
        Some(picked) => SelectionFlags { agent: Some(picked.agent.clone()), model: Some(picked.model.model.clone()) },
        None => SelectionFlags::default(),
    };
    let known = match &app.session {
        Some(session) => SessionSelections::of(session, app.last_selection.clone()),
        None => SessionSelections::default(),
    };
    crate::selection::resolve(client, &flags, &known).await
}

/// The five modes in a cycle.
pub fn next_mode(mode: PermissionMode) -> PermissionMode {
    match mode {
        PermissionMode::AutoApprove => PermissionMode::Ask,
        PermissionMode::Ask => PermissionMode::AutoApproveY,
        PermissionMode::AutoApproveY => PermissionMode::AutoApproveN,
        PermissionMode::AutoApproveN => PermissionMode::Yolo,
        PermissionMode::Yolo => PermissionMode::AutoApprove,
    }
}
