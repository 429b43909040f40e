//! `troupe goal set|show|pause|resume|cancel`: a root session's goal from the command line, and the lines
//! `troupe watch` prints for goal events.
//!
//! `pause`, `resume` and `cancel` act on the goal as the daemon reports it just before (its id and revision),
//! unless `--revision` pins the revision the user saw: then a goal that changed meanwhile is refused, not
//! silently acted on.

use clap::Subcommand;
use troupe_protocol::client::{ClientOptions, ClientProtocol};
use troupe_protocol::types::common::{RunSelection, SessionIdParams};
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::goal::{GoalLifecycleAction, GoalLifecycleParams, GoalSetParams, GoalState, GoalStatus};

use crate::cli_errors::{explained, require_text};
use crate::client_args::ClientArgs;
use crate::commands::{Connected, Connection, block_on};
use crate::selection::{SelectionFlags, SessionSelections};

/// The selection `--agent` and `--model` name for the goal's runs, with the CLI's precedence (`--model`, else
/// the agent's chain; the agent defaults to the session's), checked before anything changes; `None` when neither
/// is given (the session's own is used).
async fn goal_selection(
    client: &impl ClientProtocol,
    session_id: &str,
    flags: &SelectionFlags,
) -> anyhow::Result<Option<RunSelection>> {
    if flags.agent.is_none() && flags.model.is_none() {
        return Ok(None);
    }
    let session =
        client.session_get(SessionIdParams { session_id: session_id.to_owned() }).await.map_err(explained)?.session;
    let known = SessionSelections::of(&session, None);
    crate::selection::resolve(client, flags, &known).await.map(Some)
}

/// `troupe goal set`.
pub async fn set(
    connection: &Connection,
    session_id: String,
    objective: String,
    flags: SelectionFlags,
    json: bool,
) -> anyhow::Result<()> {
    require_text(&objective, "the objective", "`troupe goal set SESSION \"make the tests pass\"`")?;
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let session_id = crate::session_ref::resolve_session_id(&client, &session_id).await?;
    let selection = goal_selection(&client, &session_id, &flags).await?;
    let result =
        client.session_goal_set(GoalSetParams { session_id, objective, selection }).await.map_err(explained)?;
    print_goal(&result.goal, json)?;
    client.close().await;
    Ok(())
}

/// `troupe goal show`.
pub async fn show(connection: &Connection, session_id: String, json: bool) -> anyhow::Result<()> {
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let session_id = crate::session_ref::resolve_session_id(&client, &session_id).await?;
    let result = client.session_goal_get(SessionIdParams { session_id }).await.map_err(explained)?;
    if json {
        crate::outln_clean!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        match &result.goal {
            Some(goal) => crate::out_clean!("{}", describe_goal(goal)),
            None => crate::outln_clean!("no goal (set one with `troupe goal set SESSION OBJECTIVE`)"),
        }
    }
    client.close().await;
    Ok(())
}

/// `troupe goal pause|resume|cancel`.
pub async fn lifecycle(
    connection: &Connection,
    session_id: String,
    action: GoalLifecycleAction,
    revision: Option<u64>,
    flags: SelectionFlags,
    json: bool,
) -> anyhow::Result<()> {
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let session_id = crate::session_ref::resolve_session_id(&client, &session_id).await?;
    let selection = goal_selection(&client, &session_id, &flags).await?;
    let current =
        client.session_goal_get(SessionIdParams { session_id: session_id.clone() }).await.map_err(explained)?;
    let Some(goal) = current.goal else {
        anyhow::bail!(
            "session {session_id} has no goal\n  hint: set one with `troupe goal set {session_id} OBJECTIVE`"
        );
    };
    let params = GoalLifecycleParams {
        session_id,
        goal_id: goal.goal_id,
        expected_revision: revision.unwrap_or(goal.revision),
        action,
        selection,
    };
    let result = client.session_goal_lifecycle(params).await.map_err(explained)?;
    print_goal(&result.goal, json)?;
    client.close().await;
    Ok(())
}

/// The goal after a change: as JSON (`--json`) or in words.
fn print_goal(goal: &GoalState, json: bool) -> anyhow::Result<()> {
    if json {
        crate::outln_clean!("{}", serde_json::to_string_pretty(goal)?);
    } else {
        crate::out_clean!("{}", describe_goal(goal));
    }
    Ok(())
}

fn status_name(status: GoalStatus) -> &'static str {
    match status {
        GoalStatus::Active => "active",
        GoalStatus::Paused => "paused",
        GoalStatus::Completed => "completed",
        GoalStatus::Cancelled => "cancelled",
    }
}

/// A goal in a few lines: status, revision, objective, selection, why its automatic runs wait, checklist.
pub fn describe_goal(goal: &GoalState) -> String {
    let mut text = format!(
        "goal {} ({}, revision {}): {}\n",
        goal.goal_id,
        status_name(goal.status),
        goal.revision,
        goal.objective
    );
    if let Some(selection) = &goal.selection {
        text.push_str(&format!("  runs with {} on {}\n", selection.agent, selection.model.model));
    }
    if let Some(blocked) = &goal.blocked {
        text.push_str(&format!("  waiting: {}\n", crate::cli_errors::speak_cli(&blocked.detail)));
    }
    for item in &goal.items {
        text.push_str(&format!("  [{}] {}\n", if item.finished { "x" } else { " " }, item.description));
    }
    text
}

/// The `troupe watch` line of a goal event; `None` for other kinds.
pub fn describe_event(payload: &EventPayload) -> Option<String> {
    Some(match payload {
        EventPayload::GoalActivated { objective, revision, .. } => format!("goal set (r{revision}): {objective}"),
        EventPayload::GoalChecklistRevised { revision, items, .. } => {
            let finished = items.iter().filter(|item| item.finished).count();
            let mut text = format!("goal checklist (r{revision}): {finished} of {} finished", items.len());
            for item in items {
                text.push_str(&format!("\n        [{}] {}", if item.finished { "x" } else { " " }, item.description));
            }
            text
        }
        EventPayload::GoalLifecycleChanged { revision, status, reason, .. } => match reason {
            Some(reason) => format!("goal {} (r{revision}): {reason}", status_name(*status)),
            None => format!("goal {} (r{revision})", status_name(*status)),
        },
        _ => return None,
    })
}

#[derive(Subcommand)]
pub enum GoalCommand {
    /// Set the session's goal; automatic runs start at once.
    Set {
        #[command(flatten)]
        client: ClientArgs,
        /// The root session: its id or a unique prefix (`troupe sessions` lists them).
        session_id: String,
        /// What the goal is to achieve, in words the model reads.
        objective: String,
        /// The agent of the goal's runs; its first model unless --model is given.
        #[arg(long)]
        agent: Option<String>,
        /// `<provider>/<model>` of the goal's runs (neither flag: the session's latest selection).
        #[arg(long)]
        model: Option<String>,
        /// Print the goal as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the session's goal and checklist.
    Show {
        #[command(flatten)]
        client: ClientArgs,
        /// The root session: its id or a unique prefix (`troupe sessions` lists them).
        session_id: String,
        /// Print JSON instead of words.
        #[arg(long)]
        json: bool,
    },
    /// Stop automatic runs (the current run finishes).
    Pause {
        #[command(flatten)]
        client: ClientArgs,
        /// The root session: its id or a unique prefix (`troupe sessions` lists them).
        session_id: String,
        /// Refuse if the goal is no longer at this revision.
        #[arg(long)]
        revision: Option<u64>,
        /// Print the goal as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Start automatic runs again, optionally with another selection.
    Resume {
        #[command(flatten)]
        client: ClientArgs,
        /// The root session: its id or a unique prefix (`troupe sessions` lists them).
        session_id: String,
        /// Refuse if the goal is no longer at this revision (the one `troupe goal show` printed).
        #[arg(long)]
        revision: Option<u64>,
        #[command(flatten)]
        selection: SelectionFlags,
        /// Print the goal as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Cancel the goal for good.
    Cancel {
        #[command(flatten)]
        client: ClientArgs,
        /// The root session: its id or a unique prefix (`troupe sessions` lists them).
        session_id: String,
        /// Refuse if the goal is no longer at this revision (the one `troupe goal show` printed).
        #[arg(long)]
        revision: Option<u64>,
        /// Print the goal as JSON.
        #[arg(long)]
        json: bool,
    },
}

impl GoalCommand {
    /// Runs the command; its exit code.
    pub fn run(self) -> anyhow::Result<u8> {
        use GoalLifecycleAction as Action;
        match self {
            GoalCommand::Set { client, session_id, objective, agent, model, json } => {
                let flags = SelectionFlags { agent, model };
                block_on(set(&client.connection(), session_id, objective, flags, json))
            }
            GoalCommand::Show { client, session_id, json } => block_on(show(&client.connection(), session_id, json)),
            GoalCommand::Pause { client, session_id, revision, json } => {
                let flags = SelectionFlags::default();
                block_on(lifecycle(&client.connection(), session_id, Action::Pause, revision, flags, json))
            }
            GoalCommand::Resume { client, session_id, revision, selection, json } => {
                block_on(lifecycle(&client.connection(), session_id, Action::Resume, revision, selection, json))
            }
            GoalCommand::Cancel { client, session_id, revision, json } => {
                let flags = SelectionFlags::default();
                block_on(lifecycle(&client.connection(), session_id, Action::Cancel, revision, flags, json))
            }
        }?;
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_protocol::types::goal::GoalItem;

    #[test]
    fn goal_events_get_one_readable_line_each() {
        let revised = EventPayload::GoalChecklistRevised {
            goal_id: "g".into(),
            revision: 2,
            items: vec![
                GoalItem { description: "tests".into(), finished: true },
                GoalItem { description: "docs".into(), finished: false },
            ],
        };
        let text = describe_event(&revised).unwrap();
        assert!(text.starts_with("goal checklist (r2): 1 of 2 finished"), "{text}");
        assert!(text.contains("[ ] docs"), "{text}");
        let paused = EventPayload::GoalLifecycleChanged {
            goal_id: "g".into(),
            revision: 5,
            status: GoalStatus::Paused,
            reason: Some("3 automatic runs".into()),
            selection: None,
        };
        assert_eq!(describe_event(&paused).unwrap(), "goal paused (r5): 3 automatic runs");
        assert_eq!(describe_event(&EventPayload::RunCompleted { final_text: None }), None);
    }
}
