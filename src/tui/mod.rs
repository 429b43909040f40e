//! The interactive TUI (`troupe` with no arguments, `troupe tui`): a thin adapter on the shared protocol client,
//! like the CLI. A session picker (root sessions and their children, refreshed every few seconds), the
//! transcript of the open session (replayed from its start by cursor, then live: streaming text, tool calls with
//! their output and colours, edits as diffs, run boundaries, errors), an input line that starts a run or steers
//! the active one, approval prompts (also of child sessions), the permission mode, an agent/model picker and a
//! status line. A lost daemon is dialled again and every followed session resumes from its cursor, as `troupe
//! watch` does.
//!
//! - [`state`]: the state and the reduction of events into it; [`keys`]: keys into actions;
//! - [`view`]: drawing; [`servers`]: the MCP servers overlay; [`ansi`]: tool output's colours into styles;
//!   [`markdown`]: the model's text into styles; [`conn`]: the calls to the daemon.

pub mod ansi;
pub mod at_path;
pub mod conn;
pub mod keys;
pub mod markdown;
pub mod servers;
pub mod state;
pub mod view;

#[cfg(test)]
mod approval_view_tests;
#[cfg(test)]
mod tests;

use std::time::Duration;

use crossterm::event::{Event, KeyEventKind};
use futures::FutureExt as _;
use troupe_protocol::client::{ClientDelivery, ClientOptions, ClientProtocol, DeliveryStream, ReconnectPolicy};
use troupe_protocol::types::events::EventPayload;

use crate::commands::{Connected, Connection};
use keys::Action;
use state::{App, Screen};

/// At most this many deliveries already waiting are applied between two frames.
const DELIVERIES_PER_FRAME: usize = 1000;

/// How often the picker re-reads the session list, and the session screen its tree's permission mode.
const PICKER_REFRESH: Duration = Duration::from_secs(2);

/// Runs the TUI until the person quits. `session`: open this one (id or unique prefix) instead of the picker.
pub async fn run(connection: Connection, session: Option<String>) -> anyhow::Result<()> {
    refuse_without_a_terminal()?;
    let options = ClientOptions {
        reconnect: Some(ReconnectPolicy::default()),
        request_timeout: Duration::from_secs(30),
        client_info: Some(troupe_protocol::types::runtime::ClientInfo::named("troupe tui")),
        ..ClientOptions::default()
    };
    let Connected { client, mut deliveries } = connection.open(options).await?;
    let mut app = App::new(connection.url());
    // The MCP servers, for the status line's word when one does not work (`runtime.changed` keeps them current).
    if let Ok(result) = client.runtime_snapshot_get(Default::default()).await {
        app.mcp_servers = Some(result.snapshot.mcp_servers);
    }
    let mut followed = Vec::new();
    match session {
        Some(given) => {
            let session_id = crate::session_ref::resolve_session_id(&client, &given).await?;
            conn::perform(&client, &mut app, &mut followed, Action::Open(session_id)).await?;
        }
        None => conn::refresh(&client, &mut app).await?,
    }
    let (keys_tx, mut keys_rx) = tokio::sync::mpsc::unbounded_channel();
    // crossterm's reads block: they run on their own thread, which ends when the receiver is gone.
    std::thread::spawn(move || {
        while let Ok(event) = crossterm::event::read() {
            if keys_tx.send(event).is_err() {
                break;
            }
        }
    });
    let mut terminal = ratatui::try_init()?;
    let mut refresh = tokio::time::interval(PICKER_REFRESH);
    // Ticks missed while the daemon is away are not made up in a burst on return.
    refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let result = async {
        while !app.quit {
            // A notice goes after a while: the loop wakes up then to draw the screen without it.
            let notice_goes = app.expire_notice(std::time::Instant::now()).map(tokio::time::Instant::from_std);
            terminal.draw(|frame| view::draw(frame, &app))?;
            tokio::select! {
                () = tokio::time::sleep_until(notice_goes.unwrap_or_else(tokio::time::Instant::now)), if notice_goes.is_some() => {}
                delivery = deliveries.next() => {
                    let Some(delivery) = delivery else { anyhow::bail!("the connection to the daemon ended") };
                    deliver(&client, &mut app, &mut followed, delivery).await;
                    // What is already there is taken before the next frame: a long replay is drawn once per
                    // batch, not once per event.
                    for _ in 0..DELIVERIES_PER_FRAME {
                        match deliveries.next().now_or_never() {
                            Some(Some(delivery)) => deliver(&client, &mut app, &mut followed, delivery).await,
                            _ => break,
                        }
                    }
                }
                Some(event) = keys_rx.recv() => {
                    if let Event::Key(key) = event
                        && key.kind != KeyEventKind::Release
                        && let Some(action) = keys::handle_key(&mut app, key)
                        && let Err(error) = conn::perform(&client, &mut app, &mut followed, action).await
                    {
                        app.notice = Some(crate::style::clean(&format!("{error:#}")));
                    }
                }
                // Not while the daemon is away: a call then waits for the reconnection (up to the request
                // timeout), and keys would wait with it. `Reconnected` reads the mode again.
                _ = refresh.tick(), if app.connected => {
                    let refreshed = match app.screen {
                        Screen::Picker => conn::refresh(&client, &mut app).await,
                        Screen::Session => conn::read_mode(&client, &mut app).await,
                    };
                    // While the daemon is away the status line says so already.
                    if let Err(error) = refreshed
                        && app.connected
                    {
                        app.notice = Some(crate::style::clean(&format!("{error:#}")));
                    }
                }
            }
        }
        Ok(())
    }
    .await;
    ratatui::restore();
    client.close().await;
    result
}

/// The TUI draws on the terminal and reads keys from it: into a pipe or a file it would write escape codes nobody
/// reads and wait for keys that never come. Refused (a usage error, exit 2) before anything is dialled.
fn refuse_without_a_terminal() -> anyhow::Result<()> {
    use std::io::IsTerminal as _;
    let missing = match (std::io::stdin().is_terminal(), std::io::stdout().is_terminal()) {
        (true, true) => return Ok(()),
        (_, false) => "stdout",
        (false, true) => "stdin",
    };
    Err(crate::cli_errors::UsageError(format!(
        "the TUI needs a terminal, and {missing} is not one\n  hint: without a terminal use the commands: `troupe \
         sessions` lists sessions, `troupe run \"TASK\"` or `troupe exec \"TASK\"` runs one, `troupe watch SESSION` \
         follows one; `troupe --help` lists them all"
    ))
    .into())
}

async fn deliver<C: ClientProtocol>(client: &C, app: &mut App, followed: &mut Vec<String>, delivery: ClientDelivery) {
    match delivery {
        ClientDelivery::Live(event) | ClientDelivery::ReplayEvent(event) => {
            if !followed.contains(&event.session_id) {
                return;
            }
            if matches!(event.payload, EventPayload::DelegateStarted { .. }) {
                conn::follow_child(client, followed, &event).await;
            }
            app.apply(&event);
        }
        ClientDelivery::ToolOutputDelta(params) => live_output(app, followed, &params, "byte_offset"),
        ClientDelivery::ToolOutputSnapshot(params) => live_output(app, followed, &params, "start_offset"),
        ClientDelivery::Disconnected { .. } => app.connected = false,
        ClientDelivery::Reconnected => {
            app.connected = true;
            // A restarted daemon starts every tree in the default mode.
            let _ = conn::read_mode(client, app).await;
        }
        ClientDelivery::RuntimeChanged(changed) => app.mcp_servers = Some(changed.snapshot.mcp_servers),
        ClientDelivery::RecoveryFailed { detail, .. } => {
            app.notice = Some(format!("could not resume the session: {}", crate::style::clean(&detail)));
        }
        _ => {}
    }
}

/// The bytes of an `events.tool_output_delta` or `_snapshot` (base64 at `offset_key`), shown as they come: the
/// durable `tool_call_progress` events arrive in 16 KiB pieces only.
fn live_output(app: &mut App, followed: &[String], params: &serde_json::Value, offset_key: &str) {
    use base64::Engine as _;
    let text = |key: &str| params.get(key).and_then(serde_json::Value::as_str);
    let (Some(session_id), Some(tool_call_id), Some(data)) = (text("session_id"), text("tool_call_id"), text("data"))
    else {
        return;
    };
    let stream = serde_json::from_value(params.get("stream").cloned().unwrap_or_default());
    let offset = params.get(offset_key).and_then(serde_json::Value::as_u64);
    let bytes = base64::engine::general_purpose::STANDARD.decode(data);
    if let (true, Ok(stream), Some(offset), Ok(bytes)) =
        (followed.iter().any(|followed| followed == session_id), stream, offset, bytes)
    {
        app.tool_output(tool_call_id, stream, offset, &bytes);
    }
}
