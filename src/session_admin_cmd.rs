//! `troupe rm SESSION [--yes]`, `troupe archive SESSION` and `troupe unarchive SESSION`: putting sessions away,
//! on the daemon's `session.delete` and `session.archive` (troupe extensions, `docs/protocol.md`).
//!
//! Both act on a root session and its whole tree of delegated sessions. `rm` cannot be undone, so it asks first on
//! a terminal, and without a terminal to ask on it refuses unless `--yes` says the question was answered. An
//! archived session is only hidden from `troupe sessions` (`--all` shows it): it can still be watched and run.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use troupe_protocol::error_code::ErrorCode;

use anyhow::anyhow;
use troupe_protocol::client::{ClientError, ClientOptions, ClientProtocol};
use troupe_protocol::types::common::{SessionIdParams, SessionMeta};
use troupe_protocol::types::session::{SessionArchiveParams, SessionTreeNode};

use crate::cli_errors::explained;
use crate::client_args::ClientArgs;
use crate::commands::{Connected, Connection, title_of};
use crate::output::line;
use crate::session_ref::resolve_session_id;
use crate::style::Style;

/// The commands that put sessions away.
#[derive(clap::Subcommand, Debug)]
pub enum SessionAdminCommand {
    /// Delete a session and every session it delegated to, for good (asks first on a terminal).
    Rm {
        #[command(flatten)]
        client: ClientArgs,
        /// The session: its id or a unique prefix (a root session; a delegated one goes with its root).
        session: String,
        /// Delete without asking (required when stdin is not a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
        /// Print the deleted ids as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Hide a session (and its delegated sessions) from `troupe sessions`; `troupe sessions --all` still shows it
    /// and it can still be watched and run.
    Archive {
        #[command(flatten)]
        client: ClientArgs,
        /// The session: its id or a unique prefix.
        session: String,
        /// Print the session's record as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show an archived session in `troupe sessions` again.
    Unarchive {
        #[command(flatten)]
        client: ClientArgs,
        /// The session: its id or a unique prefix.
        session: String,
        /// Print the session's record as JSON.
        #[arg(long)]
        json: bool,
    },
}

impl SessionAdminCommand {
    /// Runs the command to its end; its exit code (0: these commands fail only with an error).
    pub fn run(self) -> anyhow::Result<u8> {
        crate::commands::block_on(async move {
            match self {
                SessionAdminCommand::Rm { client, session, yes, json } => {
                    remove(&client.connection(), &session, yes, json).await
                }
                SessionAdminCommand::Archive { client, session, json } => {
                    archive(&client.connection(), &session, true, json).await
                }
                SessionAdminCommand::Unarchive { client, session, json } => {
                    archive(&client.connection(), &session, false, json).await
                }
            }
        })?;
        Ok(0)
    }
}

/// `troupe rm`.
async fn remove(connection: &Connection, given: &str, yes: bool, json: bool) -> anyhow::Result<()> {
    if !yes && !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "not deleting {given}: there is no terminal to confirm on (stdin is not a terminal)\n  hint: add --yes \
             to delete without asking"
        );
    }
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let session_id = resolve_session_id(&client, given).await?;
    let tree = client.session_tree(SessionIdParams { session_id: session_id.clone() }).await.map_err(admin_error)?;
    let below = descendants(&tree.tree);
    if !yes && !confirm(&tree.tree.session, below)? {
        client.close().await;
        anyhow::bail!("nothing deleted");
    }
    let result =
        client.session_delete(SessionIdParams { session_id: session_id.clone() }).await.map_err(admin_error)?;
    client.close().await;
    if json {
        line(&serde_json::to_string(&result)?);
        return Ok(());
    }
    let style = Style::stdout();
    for deleted in &result.deleted_session_ids {
        let what = if *deleted == session_id { "session" } else { "delegated session" };
        let title = if *deleted == session_id { format!("  {}", title_of(&tree.tree.session)) } else { String::new() };
        line(&format!("deleted {what} {}{title}", style.bold(deleted)));
    }
    Ok(())
}

/// `troupe archive` and `troupe unarchive`.
async fn archive(connection: &Connection, given: &str, archived: bool, json: bool) -> anyhow::Result<()> {
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let session_id = resolve_session_id(&client, given).await?;
    let result = client.session_archive(SessionArchiveParams { session_id, archived }).await.map_err(admin_error)?;
    client.close().await;
    if json {
        line(&serde_json::to_string(&result)?);
        return Ok(());
    }
    let session = &result.session;
    let id = Style::stdout().bold(&session.session_id);
    if archived {
        line(&format!("archived {id}  {}  (`troupe sessions --all` shows it)", title_of(session)));
    } else {
        line(&format!("unarchived {id}  {}", title_of(session)));
    }
    Ok(())
}

/// How many sessions are below `node`.
fn descendants(node: &SessionTreeNode) -> usize {
    node.children.iter().map(|child| 1 + descendants(child)).sum()
}

/// Asks on the terminal; true for `y` or `yes`.
fn confirm(session: &SessionMeta, below: usize) -> anyhow::Result<bool> {
    let also = match below {
        0 => String::new(),
        1 => " and its delegated session".to_owned(),
        count => format!(" and its {count} delegated sessions"),
    };
    let mut stderr = std::io::stderr().lock();
    write!(
        stderr,
        "Delete session {} {}{also}? This cannot be undone. [y/N] ",
        &session.session_id,
        title_of(session)
    )?;
    stderr.flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim().to_lowercase().as_str(), "y" | "yes"))
}

/// The refusals of `session.delete` and `session.archive` in the CLI's words; the rest as every command says them.
fn admin_error(error: ClientError) -> anyhow::Error {
    let ClientError::Rpc(rpc) = &error else { return explained(error) };
    let field = |name: &str| {
        rpc.data.as_ref().and_then(|data| data.get(name)).and_then(|value| value.as_str()).map(str::to_owned)
    };
    match rpc.error_code() {
        Some(ErrorCode::NotRootSession) => {
            let (session, root) = (field("session_id").unwrap_or_default(), field("root_session_id"));
            match root {
                Some(root) => anyhow!(
                    "{session} is a delegated session of {root}; it goes with its whole tree\n  hint: name the root: \
                     `troupe rm {root}` or `troupe archive {root}`"
                ),
                None => explained(error),
            }
        }
        Some(ErrorCode::SessionBusy) => {
            let busy = field("busy_session_id").or_else(|| field("session_id")).unwrap_or_default();
            if let Some(run) = field("active_run_id") {
                anyhow!(
                    "session {busy} is at work (run or compaction {run}); nothing was deleted\n  hint: `troupe cancel \
                     {run}` (or let it finish), then delete again"
                )
            } else if let Some(goal) = field("goal_id") {
                anyhow!(
                    "session {busy} has an active goal ({goal}); nothing was deleted\n  hint: `troupe goal pause \
                     {busy}` or `troupe goal cancel {busy}`, then delete again"
                )
            } else {
                explained(error)
            }
        }
        _ => explained(error),
    }
}
