//! `troupe revert`, `troupe fork`, `troupe compact` and `troupe tree`: a session's history and its tree of
//! delegated sessions from the command line.
//!
//! The errors these methods add (`session_busy` for an active session, `seq_out_of_range`,
//! `no_user_message_in_prefix`) are explained here with the session's own id and run id in the hint, because a
//! user who typed `troupe revert S 12` wants to know which run to cancel or where to look up a valid sequence;
//! everything else falls back to [`explained`].

use std::time::Duration;
use troupe_protocol::error_code::ErrorCode;

use troupe_protocol::client::{ClientDelivery, ClientError, ClientOptions, ClientProtocol, DeliveryStream};
use troupe_protocol::types::common::{SessionIdParams, SessionMeta, SessionOrigin};
use troupe_protocol::types::events::{CompactionTrigger, EventPayload, StoredEvent};
use troupe_protocol::types::run::RunIdParams;
use troupe_protocol::types::session::{
    SessionCompactParams, SessionCompactResult, SessionForkParams, SessionRevertParams, SessionTreeNode,
};

use crate::cli_errors::explained;
use crate::commands::{Connected, Connection, status_name, title_of};
use crate::render::describe_event;

/// How long `troupe revert` looks for the event the visible history now ends with before leaving it out.
const LOOKUP_WAIT: Duration = Duration::from_secs(10);

/// How long `troupe compact` waits, after the answer, for the compaction's events it has not seen yet.
const TAIL_WAIT: Duration = Duration::from_secs(5);

/// How long `troupe compact` waits for the daemon's answer: a summary is one model request, which can be slow.
const COMPACT_WAIT: Duration = Duration::from_secs(15 * 60);

/// Explains a failed history call on `session_id` (see the module docs), else defers to [`explained`].
pub fn history_explained(error: ClientError, session_id: &str) -> anyhow::Error {
    let ClientError::Rpc(rpc) = &error else {
        return explained(error);
    };
    let said = crate::cli_errors::said(&error);
    let data = |key: &str| rpc.data.as_ref().and_then(|data| data.get(key)).cloned();
    let hint = match rpc.error_code() {
        Some(ErrorCode::SessionBusy) => {
            let run = data("active_run_id").and_then(|id| id.as_str().map(str::to_owned));
            let run = run.as_deref().unwrap_or("RUN_ID");
            format!("the session is running; cancel its run (`troupe cancel {run}`) or wait until it ends")
        }
        Some(ErrorCode::SeqOutOfRange) => {
            let last = data("last_seq").and_then(|seq| seq.as_u64());
            let range = last.map_or(String::new(), |last| format!(" (1 to {last})"));
            format!(
                "give the number of an event of the session{range}; `troupe watch {session_id}` shows the sequence \
                 numbers (#N) of its events"
            )
        }
        Some(ErrorCode::NoUserMessageInPrefix) => format!(
            "a fork starts from a conversation: give a sequence number at or after the first message you sent \
             (the \"user:\" lines of `troupe watch {session_id}`)"
        ),
        _ => return explained(error),
    };
    anyhow::anyhow!("{said}\n  hint: {hint}")
}

/// `troupe revert`: reverts the session to `through_seq` and prints the session after it, the event its
/// visible history now ends with, which events left the conversation, the revert marker, and what the daemon
/// appended after the marker (the `run interrupted` that closes a run the revert cut in two), each by the `#N`
/// that `troupe watch` prints.
pub async fn revert(connection: &Connection, session_id: String, through_seq: u64, json: bool) -> anyhow::Result<()> {
    let Connected { client, mut deliveries } = connection.open(ClientOptions::default()).await?;
    let session_id = crate::session_ref::resolve_session_id(&client, &session_id).await?;
    let params = SessionRevertParams { session_id: session_id.clone(), through_seq };
    let session = client.session_revert(params).await.map_err(|error| history_explained(error, &session_id))?.session;
    if json {
        crate::outln_clean!("{}", serde_json::to_string_pretty(&session)?);
        client.close().await;
        return Ok(());
    }
    crate::outln_clean!("{}", session_summary(&session));
    let (target, from_marker) =
        revert_events(&client, &mut deliveries, &session_id, through_seq, session.last_event_seq).await;
    match target {
        Some(event) => crate::outln_clean!("the conversation now ends with #{through_seq}: {}", event_line(&event)),
        None => crate::outln_clean!("the conversation now ends with #{through_seq}"),
    }
    let Some((marker, after)) = from_marker.split_first() else {
        client.close().await;
        return Ok(());
    };
    let (first_hidden, last_hidden) = (through_seq + 1, marker.seq.saturating_sub(1));
    let hidden = match first_hidden.cmp(&last_hidden) {
        std::cmp::Ordering::Less => Some(format!("events #{first_hidden} to #{last_hidden} are")),
        std::cmp::Ordering::Equal => Some(format!("event #{first_hidden} is")),
        std::cmp::Ordering::Greater => None,
    };
    if let Some(hidden) = hidden {
        crate::outln_clean!(
            "{hidden} no longer part of the conversation; the log keeps them (`troupe watch {session_id}` shows them)"
        );
    }
    crate::outln_clean!("#{}: the revert marker", marker.seq);
    for event in after {
        crate::outln_clean!("#{}: {}", event.seq, event_line(event));
    }
    client.close().await;
    Ok(())
}

/// `troupe fork`: copies the session through `through_seq` into a new session; prints its id (alone on stdout,
/// for scripts) and, on stderr, how to follow and continue it.
pub async fn fork(connection: &Connection, session_id: String, through_seq: u64, json: bool) -> anyhow::Result<()> {
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let session_id = crate::session_ref::resolve_session_id(&client, &session_id).await?;
    let params = SessionForkParams { session_id: session_id.clone(), through_seq };
    let result = client.session_fork(params).await.map_err(|error| history_explained(error, &session_id))?;
    if json {
        crate::outln_clean!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        crate::outln_clean!("{}", result.session_id);
        let fork = &result.session_id;
        eprintln!(
            "forked {session_id} at #{through_seq}; follow the fork with `troupe watch {fork}`, continue it with \
             `troupe run --session {fork} TEXT`"
        );
    }
    client.close().await;
    Ok(())
}

/// `troupe compact`: asks for a checkpoint and waits for the answer, printing the compaction's progress. Ctrl-C
/// cancels the compaction. Returns whether a checkpoint was committed.
pub async fn compact(
    connection: &Connection,
    session_id: String,
    focus: Option<String>,
    json: bool,
) -> anyhow::Result<bool> {
    let options = ClientOptions { request_timeout: COMPACT_WAIT, ..ClientOptions::default() };
    let Connected { client, mut deliveries } = connection.open(options).await?;
    let session_id = crate::session_ref::resolve_session_id(&client, &session_id).await?;
    let session = client
        .session_get(SessionIdParams { session_id: session_id.clone() })
        .await
        .map_err(|error| history_explained(error, &session_id))?
        .session;
    // Followed from its end, to learn the compaction's id (for Ctrl-C) and its checkpoint.
    client.subscribe(&session_id, Some(session.last_event_seq)).await.map_err(explained)?;
    let call = client.session_compact(SessionCompactParams { session_id: session_id.clone(), focus });
    tokio::pin!(call);
    let mut seen = CompactionEvents { quiet: json, ..CompactionEvents::default() };
    let result = loop {
        tokio::select! {
            result = &mut call => break result.map_err(|error| history_explained(error, &session_id))?,
            delivery = deliveries.next() => {
                if let Some(ClientDelivery::Live(event) | ClientDelivery::ReplayEvent(event)) = delivery {
                    seen.see(event);
                }
            }
            _ = tokio::signal::ctrl_c() => match &seen.compaction_id {
                Some(id) => {
                    let cancelled = client.run_cancel(RunIdParams { run_id: id.clone() }).await.map_err(explained)?;
                    eprintln!("cancel requested: {}", cancelled.cancelled);
                }
                None => eprintln!("the compaction has not started yet; press Ctrl-C again once it has"),
            },
        }
    };
    // The answer may overtake the compaction's last events on the subscription: wait for them, briefly.
    let rest = async {
        while !seen.ended {
            match deliveries.next().await {
                Some(ClientDelivery::Live(event) | ClientDelivery::ReplayEvent(event)) => seen.see(event),
                Some(_) => {}
                None => break,
            }
        }
    };
    let _ = tokio::time::timeout(TAIL_WAIT, rest).await;
    let checkpoint = seen.checkpoint;
    client.close().await;
    if json {
        crate::outln_clean!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        crate::outln_clean!("{}", compact_outcome(&result, checkpoint.as_ref()));
    }
    Ok(result.compacted)
}

/// The events of the manual compaction `troupe compact` asked for, as they pass on the subscription.
#[derive(Default)]
struct CompactionEvents {
    /// From its `compaction_started`: what Ctrl-C cancels.
    compaction_id: Option<String>,
    checkpoint: Option<StoredEvent>,
    /// Its `compaction_ended` passed.
    ended: bool,
    /// `--json`: print nothing but the answer.
    quiet: bool,
}

impl CompactionEvents {
    fn see(&mut self, event: StoredEvent) {
        let ours = |id: &String, known: &Option<String>| known.as_ref() == Some(id);
        match &event.payload {
            EventPayload::CompactionStarted { compaction_id, trigger: CompactionTrigger::Manual, .. }
                if self.compaction_id.is_none() =>
            {
                self.compaction_id = Some(compaction_id.clone());
                if !self.quiet {
                    eprintln!("{}", crate::style::clean(&event_line(&event)));
                }
            }
            EventPayload::ContextCheckpointCommitted { compaction_id, .. }
                if ours(compaction_id, &self.compaction_id) =>
            {
                self.checkpoint = Some(event);
            }
            EventPayload::CompactionEnded { compaction_id, .. } if ours(compaction_id, &self.compaction_id) => {
                self.ended = true;
            }
            _ => {}
        }
    }
}

/// What `troupe compact` prints once the daemon answered.
pub fn compact_outcome(result: &SessionCompactResult, checkpoint: Option<&StoredEvent>) -> String {
    if result.compacted {
        return match checkpoint.and_then(describe_event) {
            Some(line) => format!("compacted: {line}"),
            None => "compacted: model requests now start from the summary".to_owned(),
        };
    }
    match (&result.cancellation_reason, &result.reason) {
        (Some(cancelled), _) => format!("not compacted: cancelled ({cancelled})"),
        (None, Some(reason)) => format!("not compacted: {reason}"),
        (None, None) => "not compacted".to_owned(),
    }
}

/// `troupe tree`: the session and the sessions delegated from it, one indented line each.
pub async fn tree(connection: &Connection, session_id: String, json: bool) -> anyhow::Result<()> {
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let session_id = crate::session_ref::resolve_session_id(&client, &session_id).await?;
    let params = SessionIdParams { session_id: session_id.clone() };
    let result = client.session_tree(params).await.map_err(|error| history_explained(error, &session_id))?;
    if json {
        crate::outln_clean!("{}", serde_json::to_string_pretty(&result.tree)?);
    } else {
        crate::out_clean!("{}", render_tree(&result.tree));
    }
    client.close().await;
    Ok(())
}

/// The tree as text: `id  agent  status  title`, each child under its parent, indented by two spaces per level
/// with `└─ `; a root is marked `(root)`, a subtree's top names its parent.
pub fn render_tree(tree: &SessionTreeNode) -> String {
    let mut text = String::new();
    let mark = match &tree.session.origin {
        SessionOrigin::Root => "  (root)".to_owned(),
        SessionOrigin::Delegated { parent_session_id, depth, .. } => {
            format!("  (delegated from {parent_session_id}, depth {depth})")
        }
    };
    text.push_str(&format!("{}{mark}\n", node_line(&tree.session)));
    for child in &tree.children {
        render_children(child, 1, &mut text);
    }
    text
}

fn render_children(node: &SessionTreeNode, level: usize, text: &mut String) {
    text.push_str(&format!("{}└─ {}\n", "   ".repeat(level - 1), node_line(&node.session)));
    for child in &node.children {
        render_children(child, level + 1, text);
    }
}

fn node_line(session: &SessionMeta) -> String {
    format!(
        "{}  {}  {}  {}",
        session.session_id,
        session.creation_selection.agent,
        status_name(session.status),
        title_of(session)
    )
}

/// The session after a revert, in one line.
fn session_summary(session: &SessionMeta) -> String {
    format!("{}  {}  {}", session.session_id, status_name(session.status), title_of(session))
}

/// An event's `troupe watch` line on one line, or its kind when watch gives it none (streamed text, usage).
fn event_line(event: &StoredEvent) -> String {
    match describe_event(event) {
        Some(line) => line.split('\n').map(str::trim).collect::<Vec<_>>().join(" / "),
        None => match &event.payload {
            EventPayload::TextDelta { text, .. } => format!("assistant text …{}", tail(text, 60)),
            payload => payload.kind().unwrap_or("an event of a kind this client does not know").to_owned(),
        },
    }
}

fn tail(text: &str, chars: usize) -> String {
    let count = text.chars().count();
    text.chars().skip(count.saturating_sub(chars)).collect()
}

/// What `troupe revert` reports, read by a subscription from just before `through_seq` to `last`: the event at
/// `through_seq`, and the events from the latest marker of this revert on (the marker first); those that came
/// within [`LOOKUP_WAIT`]. The hidden events in between pass without being kept: a revert may hide thousands.
async fn revert_events<C: ClientProtocol>(
    client: &C,
    deliveries: &mut C::Deliveries,
    session_id: &str,
    through_seq: u64,
    last: u64,
) -> (Option<StoredEvent>, Vec<StoredEvent>) {
    let (mut target, mut from_marker) = (None, Vec::new());
    if client.subscribe(session_id, Some(through_seq.saturating_sub(1))).await.is_err() {
        return (target, from_marker);
    }
    let marker = EventPayload::SessionReverted { through_seq };
    let find = async {
        while let Some(delivery) = deliveries.next().await {
            if let ClientDelivery::Live(event) | ClientDelivery::ReplayEvent(event) = delivery
                && event.session_id == session_id
                && event.seq >= through_seq
            {
                let seq = event.seq;
                if seq == through_seq {
                    target = Some(event);
                } else if seq <= last && event.payload == marker {
                    from_marker = vec![event];
                } else if seq <= last && !from_marker.is_empty() {
                    from_marker.push(event);
                }
                if seq >= last {
                    return;
                }
            }
        }
    };
    let _ = tokio::time::timeout(LOOKUP_WAIT, find).await;
    (target, from_marker)
}

#[cfg(test)]
mod tests {
    use troupe_protocol::RpcError;
    use troupe_protocol::types::common::{ModelSelection, RunSelection, SessionStatus};

    use super::*;

    fn meta(id: &str, agent: &str, origin: SessionOrigin, status: SessionStatus, title: Option<&str>) -> SessionMeta {
        SessionMeta {
            session_id: id.into(),
            origin,
            cwd: "/work".into(),
            title: title.map(str::to_owned),
            title_updated_seq: None,
            creation_selection: RunSelection {
                agent: agent.into(),
                model: ModelSelection { model: "local/echo".into(), variant: None },
                preset: None,
            },
            status,
            last_event_seq: 9,
            created_at: "2026-01-01T00:00:00.000Z".into(),
            last_activity_at: "2026-01-01T00:00:00.000Z".into(),
            skipped_events: Vec::new(),
            archived: false,
            node: None,
            may_be_stale: false,
        }
    }

    fn delegated(parent: &str, depth: u32) -> SessionOrigin {
        SessionOrigin::Delegated {
            root_session_id: "root".into(),
            parent_session_id: parent.into(),
            parent_run_id: "r".into(),
            parent_tool_call_id: "t".into(),
            depth,
        }
    }

    #[test]
    fn a_tree_is_indented_by_level_with_the_root_marked() {
        let grandchild = SessionTreeNode {
            session: meta("gc", "explore", delegated("c1", 2), SessionStatus::Running, None),
            children: Vec::new(),
        };
        let tree = SessionTreeNode {
            session: meta("root", "default", SessionOrigin::Root, SessionStatus::Idle, Some("Fix it")),
            children: vec![
                SessionTreeNode {
                    session: meta("c1", "helper", delegated("root", 1), SessionStatus::Completed, None),
                    children: vec![grandchild],
                },
                SessionTreeNode {
                    session: meta("c2", "helper", delegated("root", 1), SessionStatus::Failed, Some("Docs")),
                    children: Vec::new(),
                },
            ],
        };
        assert_eq!(
            render_tree(&tree),
            "root  default  idle  Fix it  (root)\n\
             └─ c1  helper  completed  (untitled)\n\
             \x20  └─ gc  explore  running  (untitled)\n\
             └─ c2  helper  failed  Docs\n"
        );
        let subtree = &tree.children[0];
        assert!(
            render_tree(subtree).starts_with("c1  helper  completed  (untitled)  (delegated from root, depth 1)\n")
        );
    }

    #[test]
    fn history_errors_name_the_run_to_cancel_and_where_sequence_numbers_are() {
        let busy = RpcError::engine(
            ErrorCode::SessionBusy,
            "session s has an active run",
            &[("active_run_id", serde_json::Value::String("run-7".into()))],
        );
        let text = history_explained(ClientError::Rpc(busy), "s").to_string();
        assert!(text.starts_with("session s has an active run\n"), "{text}");
        assert!(text.contains("the session is running; cancel its run (`troupe cancel run-7`) or wait"), "{text}");

        let range = RpcError::invalid_params_typed(
            ErrorCode::SeqOutOfRange,
            "through_seq 99 is past the end",
            &[("last_seq", serde_json::Value::from(12u64))],
        );
        let text = history_explained(ClientError::Rpc(range), "s").to_string();
        assert!(text.contains("(1 to 12)") && text.contains("`troupe watch s` shows the sequence numbers"), "{text}");

        let prefix = RpcError::invalid_params_typed(ErrorCode::NoUserMessageInPrefix, "no user message", &[]);
        let text = history_explained(ClientError::Rpc(prefix), "s").to_string();
        assert!(text.contains("first message you sent"), "{text}");

        let other = RpcError::engine(ErrorCode::SessionNotFound, "no session x", &[]);
        assert!(history_explained(ClientError::Rpc(other), "x").to_string().contains("troupe sessions"));
    }

    #[test]
    fn a_compaction_says_what_was_committed_or_why_not() {
        let committed = SessionCompactResult { compacted: true, reason: None, cancellation_reason: None };
        assert!(compact_outcome(&committed, None).starts_with("compacted"));
        let skipped = SessionCompactResult {
            compacted: false,
            reason: Some("nothing to compact".into()),
            cancellation_reason: None,
        };
        assert_eq!(compact_outcome(&skipped, None), "not compacted: nothing to compact");
        let cancelled =
            SessionCompactResult { compacted: false, reason: None, cancellation_reason: Some("run.cancel".into()) };
        assert_eq!(compact_outcome(&cancelled, None), "not compacted: cancelled (run.cancel)");
    }

    #[test]
    fn short_ids_come_from_the_random_end() {
        use crate::render::tail_id;
        assert_eq!(tail_id("01957a1d-0a00-7b11-9c21-4d5e6f7a8b92"), "6f7a8b92");
        assert_eq!(tail_id("abc"), "abc");
    }
}
