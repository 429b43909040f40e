//! What a client command learns by reading a session's events: its latest run selection (for the selection
//! precedence of `troupe run --session`), its active run and that run's running tool calls (for
//! `cancel/steer/recall/stdin --session`). The daemon keeps no method for these, so the command reads the log
//! through a subscription, once, from the start.

use anyhow::anyhow;
use troupe_protocol::client::{ClientDelivery, ClientProtocol, DeliveryStream};
use troupe_protocol::types::common::{RunSelection, SessionIdParams, SessionMeta};
use troupe_protocol::types::events::EventPayload;

use crate::cli_errors::explained;
use crate::render::is_run_end;

/// A session as its events describe it.
#[derive(Clone, Debug)]
pub struct SessionFacts {
    pub session: SessionMeta,
    /// The selection its latest `run_started` asked for (the requested model, not a sticky fallback), if it ran.
    pub last_selection: Option<RunSelection>,
    pub active_run: Option<ActiveRun>,
}

/// The run a session is busy with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActiveRun {
    pub run_id: String,
    /// Its tool calls that started and have not ended: `(tool_call_id, tool)`.
    pub running_tools: Vec<(String, String)>,
}

impl SessionFacts {
    /// The session's active run, or an error that says there is none.
    pub fn require_active_run(&self) -> anyhow::Result<&ActiveRun> {
        self.active_run.as_ref().ok_or_else(|| {
            anyhow!(
                "session {} has no active run\n  hint: start one with `troupe run --session {} TEXT`",
                crate::style::short_id(&self.session.session_id),
                crate::style::short_id(&self.session.session_id)
            )
        })
    }
}

/// Subscribes `client` to `session_id` from its start and reads its events up to the end it had when asked.
/// The subscription stays: later events arrive on `deliveries` as live ones.
pub async fn scan<C: ClientProtocol>(
    client: &C,
    deliveries: &mut C::Deliveries,
    session_id: &str,
) -> anyhow::Result<SessionFacts> {
    let session =
        client.session_get(SessionIdParams { session_id: session_id.to_owned() }).await.map_err(explained)?.session;
    let target = session.last_event_seq;
    client.subscribe(session_id, None).await.map_err(explained)?;
    let mut facts = SessionFacts { session, last_selection: None, active_run: None };
    let mut seen = 0;
    while seen < target {
        let Some(delivery) = deliveries.next().await else {
            anyhow::bail!("the connection to the daemon ended while reading session {session_id}");
        };
        let event = match delivery {
            ClientDelivery::Live(event) | ClientDelivery::ReplayEvent(event) => event,
            ClientDelivery::RecoveryFailed { detail, .. } => {
                anyhow::bail!("cannot read session {session_id}: {detail}")
            }
            _ => continue,
        };
        if event.session_id != session_id {
            continue;
        }
        seen = seen.max(event.seq);
        match &event.payload {
            EventPayload::RunStarted { .. } => {
                facts.last_selection = event.payload.requested_selection();
                if let Some(run_id) = &event.run_id {
                    facts.active_run = Some(ActiveRun { run_id: run_id.clone(), running_tools: Vec::new() });
                }
            }
            EventPayload::ToolCallStarted { tool_call_id, tool, .. } => {
                if let Some(active) = active_mut(&mut facts, event.run_id.as_deref()) {
                    active.running_tools.push((tool_call_id.clone(), tool.clone()));
                }
            }
            EventPayload::ToolCallTerminated { tool_call_id, .. } => {
                if let Some(active) = active_mut(&mut facts, event.run_id.as_deref()) {
                    active.running_tools.retain(|(id, _)| id != tool_call_id);
                }
            }
            payload if is_run_end(payload) && active_mut(&mut facts, event.run_id.as_deref()).is_some() => {
                facts.active_run = None;
            }
            _ => {}
        }
    }
    Ok(facts)
}

fn active_mut<'a>(facts: &'a mut SessionFacts, run_id: Option<&str>) -> Option<&'a mut ActiveRun> {
    facts.active_run.as_mut().filter(|active| Some(active.run_id.as_str()) == run_id)
}
