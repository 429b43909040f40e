//! The commands that follow a session: `troupe watch` and `troupe run`. Both print as they read, so a session of
//! any length costs them the same memory: the client hands the history over in bounded replays (the daemon
//! pages a long one) and drops nothing it cannot make up by cursor (see the back-pressure docs of
//! `troupe_protocol::client`). `run` does not read the history at all: it follows the session from its end.
//! Both follow the child sessions of delegations as they start (see [`follow_child`]).

use std::time::Duration;

use anyhow::anyhow;
use troupe_protocol::client::{
    ClientDelivery, ClientOptions, ClientProtocol, DeliveryStream, ReconnectPolicy, ReplayReason,
};
use troupe_protocol::types::common::{SessionIdParams, SessionMeta, SessionStatus};
use troupe_protocol::types::events::{EventPayload, StoredEvent};

use crate::cli_errors::explained;
use crate::commands::{Connected, Connection};
use crate::output::{Output, exit_when_stdout_closes, line};
use crate::render::Printer;
use crate::style::{Style, clean};

/// `troupe watch`: prints a session's events, then follows it live. Survives daemon restarts: it reconnects and
/// resumes from the last event it printed, so nothing is printed twice or skipped. `from` is the first event to
/// print, the `#N` watch itself prints (the protocol's cursor is the event before it).
pub async fn watch(connection: &Connection, session: String, from: Option<u64>, out: Output) -> anyhow::Result<()> {
    exit_when_stdout_closes();
    let options = ClientOptions {
        reconnect: Some(ReconnectPolicy::default()),
        request_timeout: Duration::from_secs(30),
        ..ClientOptions::default()
    };
    let Connected { client, mut deliveries } = connection.open(options).await?;
    let session_id = crate::session_ref::resolve_session_id(&client, &session).await?;
    let session =
        client.session_get(SessionIdParams { session_id: session_id.clone() }).await.map_err(explained)?.session;
    if out == Output::Human {
        let style = Style::stdout();
        line(&format!(
            "watching {}  {}  ({})",
            style.bold(&session.session_id),
            crate::commands::title_of(&session),
            crate::commands::home_shortened(&clean(&session.cwd))
        ));
        print_skipped(&session);
        if let Some(first) = from.filter(|first| *first > 1) {
            line(&format!("from #{first} (events before it are not printed)"));
        }
    }
    client.subscribe(&session_id, from.map(|first| first.saturating_sub(1))).await.map_err(explained)?;
    let mut printer = Printer::new(out);
    if from.is_some() {
        follow_running_children(&client, &mut printer, &session_id).await;
    }
    // One line when the daemon goes away and one when it is back, however many attempts lie between.
    let mut unreachable = false;
    loop {
        let delivery = tokio::select! {
            delivery = deliveries.next() => delivery,
            () = crate::quiet_tools::until(printer.quiet_due()) => {
                printer.say_quiet();
                continue;
            }
            _ = tokio::signal::ctrl_c() => break,
        };
        let Some(delivery) = delivery else {
            return Err(anyhow!("the connection to the daemon ended"));
        };
        match delivery {
            ClientDelivery::Live(event) => {
                printer.event(&event, true);
                follow_child(&client, &mut printer, &event).await;
            }
            ClientDelivery::ReplayEvent(event) => {
                printer.event(&event, false);
                follow_child(&client, &mut printer, &event).await;
            }
            ClientDelivery::ToolOutputDelta(params) | ClientDelivery::ToolOutputSnapshot(params) => {
                printer.tool_output(&params)
            }
            ClientDelivery::ToolOutputGap(_) => printer.output_gap(),
            ClientDelivery::ReplayStart { reason: ReplayReason::Gap, after_seq, session_id: gap_session } => {
                if gap_session == session_id {
                    eprintln!("[fell behind after #{after_seq}; catching up]");
                } else {
                    eprintln!("[fell behind in child session {gap_session} after #{after_seq}; catching up]");
                }
            }
            ClientDelivery::Disconnected { .. } if !unreachable => {
                eprintln!("daemon unreachable, retrying…");
                unreachable = true;
            }
            ClientDelivery::Reconnected if unreachable => {
                eprintln!("reconnected");
                unreachable = false;
            }
            ClientDelivery::RecoveryFailed { detail, .. } => {
                return Err(anyhow!("could not resume the session: {detail}"));
            }
            _ => {}
        }
    }
    client.close().await;
    Ok(())
}

/// Follows the child session a printed `delegate_started` names, through the same client, so that the
/// sub-agent's events print (with a margin naming it) next to its parent's as they happen; grandchildren too, as
/// their own `delegate_started` passes by. Its `delegate_finished` in the parent closes the story. A child that
/// cannot be followed is reported and the rest goes on.
pub(crate) async fn follow_child<C: ClientProtocol>(client: &C, printer: &mut Printer, event: &StoredEvent) {
    let EventPayload::DelegateStarted { child_session_id, agent, .. } = &event.payload else {
        return;
    };
    if !printer.adopt_child(&event.session_id, child_session_id, agent) {
        return;
    }
    if let Err(error) = client.subscribe(child_session_id, None).await {
        let said = crate::cli_errors::said(&error);
        eprintln!("[cannot follow child session {}: {said}]", clean(child_session_id));
    }
}

/// With `--from`, the `delegate_started` of a child still at work may lie before the cursor: such children (and
/// theirs) are followed from their current end, found in the session's tree.
async fn follow_running_children<C: ClientProtocol>(client: &C, printer: &mut Printer, session_id: &str) {
    let Ok(result) = client.session_tree(SessionIdParams { session_id: session_id.to_owned() }).await else {
        return;
    };
    let mut pending = vec![result.tree];
    while let Some(node) = pending.pop() {
        for child in node.children {
            let meta = &child.session;
            let agent = &meta.creation_selection.agent;
            if meta.status == SessionStatus::Running
                && printer.adopt_child(&node.session.session_id, &meta.session_id, agent)
            {
                match client.subscribe(&meta.session_id, Some(meta.last_event_seq)).await {
                    Ok(_) => eprintln!(
                        "{}",
                        clean(&format!("[following child session {} ({agent}), at work]", meta.session_id))
                    ),
                    Err(error) => {
                        let said = crate::cli_errors::said(&error);
                        eprintln!("[cannot follow child session {}: {said}]", clean(&meta.session_id))
                    }
                }
            }
            pending.push(child);
        }
    }
}

/// How long `troupe run` waits, after its run ended, for the end of a child's run it has not printed yet (the
/// child's events and the parent's come on separate subscriptions, so they may arrive out of step).
const CHILDREN_DRAIN: Duration = Duration::from_secs(3);

/// Prints what is left of the followed children's runs, up to [`CHILDREN_DRAIN`].
pub(crate) async fn drain_children<C: ClientProtocol>(
    client: &C,
    deliveries: &mut C::Deliveries,
    printer: &mut Printer,
) {
    let drain = async {
        while printer.children_running() {
            match deliveries.next().await {
                Some(ClientDelivery::Live(event) | ClientDelivery::ReplayEvent(event)) => {
                    printer.event(&event, true);
                    follow_child(client, printer, &event).await;
                }
                Some(ClientDelivery::ToolOutputDelta(params) | ClientDelivery::ToolOutputSnapshot(params)) => {
                    printer.tool_output(&params)
                }
                Some(_) => {}
                None => break,
            }
        }
    };
    let _ = tokio::time::timeout(CHILDREN_DRAIN, drain).await;
}

fn print_skipped(session: &SessionMeta) {
    for skipped in &session.skipped_events {
        let position = match (skipped.seq, skipped.line) {
            (Some(seq), _) => format!("seq {seq}"),
            (None, Some(line)) => format!("line {line}"),
            (None, None) => "unknown position".to_owned(),
        };
        line(&format!("! skipped unreadable event at {position}: {}", clean(&skipped.reason)));
    }
}
