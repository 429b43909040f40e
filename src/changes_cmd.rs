//! `troupe diff SESSION [--run RUN]` and `troupe undo SESSION [--run RUN] [--force]`: a run's file changes shown
//! and taken back, on the daemon's `session.diff` and `session.undo` (troupe extensions, `docs/protocol.md`).
//!
//! `diff` prints unified diffs on stdout (plain when piped, so `git apply` takes them; coloured and cleaned of
//! terminal controls on a terminal) and what is not a diff (which run, notes) on stderr. A run is named by its id
//! or a unique prefix among the session's runs that changed files.

use std::io::IsTerminal as _;

use anyhow::anyhow;
use troupe_protocol::client::{ClientError, ClientOptions, ClientProtocol};
use troupe_protocol::error_code::ErrorCode;
use troupe_protocol::types::changes::{
    FileDiff, SessionDiffParams, SessionDiffResult, SessionUndoParams, ShellChanges, UndoAction, UndoConflict,
    UndoConflictReason,
};

use crate::cli_errors::explained;
use crate::client_args::ClientArgs;
use crate::commands::{Connected, Connection};
use crate::output::line;
use crate::session_ref::{MIN_PREFIX, one_by_prefix, resolve_session_id};
use crate::style::{Style, clean};

/// The commands that show and take back a run's file changes.
#[derive(clap::Subcommand, Debug)]
pub enum ChangesCommand {
    /// Print the files a run changed as a unified diff, from before the run to after it: those write_file and
    /// edit_file wrote, then, in a git repository, what its shell commands changed (the work tree before its first
    /// command against after its last).
    Diff {
        #[command(flatten)]
        client: ClientArgs,
        /// The session: its id or a unique prefix.
        session: String,
        /// The run (its id or a unique prefix); default: the session's last run that changed files.
        #[arg(long, value_name = "RUN")]
        run: Option<String>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Put back the files a run changed with write_file or edit_file as they were before it: files it created are
    /// removed. Refuses, listing them, files changed since the run unless --force. Not while a run is active. What
    /// shell commands changed is shown by `troupe diff`, not taken back.
    Undo {
        #[command(flatten)]
        client: ClientArgs,
        /// The session: its id or a unique prefix.
        session: String,
        /// The run (its id or a unique prefix); default: the session's last run whose changes are not undone yet.
        #[arg(long, value_name = "RUN")]
        run: Option<String>,
        /// Also restore files changed since the run (their later changes are lost).
        #[arg(long)]
        force: bool,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
}

impl ChangesCommand {
    /// Runs the command to its end; its exit code (0: these commands fail only with an error).
    pub fn run(self) -> anyhow::Result<u8> {
        crate::commands::block_on(async move {
            match self {
                ChangesCommand::Diff { client, session, run, json } => {
                    diff(&client.connection(), &session, run.as_deref(), json).await
                }
                ChangesCommand::Undo { client, session, run, force, json } => {
                    undo(&client.connection(), &session, run.as_deref(), force, json).await
                }
            }
        })?;
        Ok(0)
    }
}

/// The whole id of the run `given` names among the session's runs that changed files.
async fn resolve_run(client: &impl ClientProtocol, session_id: &str, given: &str) -> anyhow::Result<String> {
    let given = given.trim();
    let all = client
        .session_diff(SessionDiffParams { session_id: session_id.to_owned(), run_id: None })
        .await
        .map_err(changes_error)?;
    if all.runs.iter().any(|run| run.run_id == given) || given.len() < MIN_PREFIX {
        return Ok(given.to_owned());
    }
    let run = one_by_prefix(
        given,
        all.runs,
        |run| run.run_id.as_str(),
        "runs that changed files",
        || {
            format!(
                "no run {given} of session {session_id} changed files\n  hint: `troupe diff {session_id}` lists them"
            )
        },
    )?;
    Ok(run.run_id)
}

/// `troupe diff`.
async fn diff(connection: &Connection, given: &str, run: Option<&str>, json: bool) -> anyhow::Result<()> {
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let session_id = resolve_session_id(&client, given).await?;
    let run_id = match run {
        Some(run) => Some(resolve_run(&client, &session_id, run).await?),
        None => None,
    };
    let result = client.session_diff(SessionDiffParams { session_id, run_id }).await.map_err(changes_error);
    client.close().await;
    let result = result?;
    if json {
        line(&serde_json::to_string(&result)?);
        return Ok(());
    }
    print_diff(&result);
    Ok(())
}

fn print_diff(result: &SessionDiffResult) {
    let Some(run_id) = &result.run_id else {
        eprintln!("no run of session {} changed files", result.session_id);
        return;
    };
    let terminal = std::io::stdout().is_terminal();
    let style = Style::stdout();
    if !result.files.is_empty() || result.shell.is_none() {
        let undone = if result.undone { ", undone since" } else { "" };
        eprintln!("run {run_id}: {} changed by its file tools{undone}", files_word(result.files.len()));
    }
    for file in &result.files {
        print_file(file, terminal, style);
    }
    if let Some(shell) = &result.shell {
        print_shell(run_id, shell, terminal, style);
    }
    if result.runs.len() > 1 {
        eprintln!("{}", runs_list(&result.session_id, run_id, &result.runs));
    }
}

/// The session's runs that changed files, oldest first, the one shown marked: how to pick another with `--run`.
fn runs_list(session_id: &str, shown: &str, runs: &[troupe_protocol::types::changes::ChangedRun]) -> String {
    let mut text = format!(
        "runs of session {session_id} that changed files, oldest first (`troupe diff {session_id} --run RUN` shows one):"
    );
    for run in runs {
        let mut what = Vec::new();
        if run.files > 0 {
            what.push(format!("{} by file tools", files_word(usize::try_from(run.files).unwrap_or(usize::MAX))));
        }
        if run.shell {
            what.push("shell commands changed the repository".to_owned());
        }
        if run.undone {
            what.push("undone".to_owned());
        }
        let marker = if run.run_id == shown { "*" } else { " " };
        text.push_str(&format!("\n {marker} {}  {}", run.run_id, what.join(", ")));
    }
    text
}

/// What the run's shell commands changed in the repository.
fn print_shell(run_id: &str, shell: &ShellChanges, terminal: bool, style: Style) {
    let count = shell.files.len() + usize::try_from(shell.more_files).unwrap_or(usize::MAX);
    eprintln!(
        "run {run_id}: {} changed in the git repository {} while its shell commands ran (not undone by `troupe undo`)",
        files_word(count),
        clean(&shell.repository)
    );
    if let Some(note) = &shell.note {
        eprintln!("  {}", clean(note));
    }
    for file in &shell.files {
        print_file(file, terminal, style);
    }
    if shell.more_files > 0 {
        eprintln!("  … and {} more files, not shown", shell.more_files);
    }
    if !shell.left_out.is_empty() {
        let listed: Vec<String> = shell.left_out.iter().map(|path| clean(path)).collect();
        eprintln!("  left out (new or changed files over 1 MiB are not compared): {}", listed.join(", "));
    }
}

fn files_word(count: usize) -> String {
    if count == 1 { "1 file".to_owned() } else { format!("{count} files") }
}

/// One file's diff on stdout; what is not diff text on stderr.
fn print_file(file: &FileDiff, terminal: bool, style: Style) {
    if let Some(note) = &file.note {
        eprintln!("{}: {}", file.path, note);
    }
    let Some(unified) = &file.unified else {
        if file.binary {
            eprintln!("{}: binary, {} → {} bytes", file.path, file.bytes_before, file.bytes_after);
        }
        return;
    };
    if !terminal {
        crate::output::text(unified);
    } else {
        for text in unified.lines() {
            let text = clean(text);
            let painted = if text.starts_with("+++") || text.starts_with("---") {
                style.bold(&text)
            } else if text.starts_with('+') {
                style.green(&text)
            } else if text.starts_with('-') {
                style.red(&text)
            } else if text.starts_with("@@") {
                style.cyan(&text)
            } else {
                text
            };
            line(&painted);
        }
    }
    if file.truncated {
        eprintln!("{}: the diff was cut; `troupe diff --json` has the same cut text", file.path);
    }
}

/// `troupe undo`.
async fn undo(connection: &Connection, given: &str, run: Option<&str>, force: bool, json: bool) -> anyhow::Result<()> {
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let session_id = resolve_session_id(&client, given).await?;
    let run_id = match run {
        Some(run) => Some(resolve_run(&client, &session_id, run).await?),
        None => None,
    };
    let result = client.session_undo(SessionUndoParams { session_id, run_id, force }).await.map_err(changes_error);
    client.close().await;
    let result = result?;
    if json {
        line(&serde_json::to_string(&result)?);
        return Ok(());
    }
    let style = Style::stdout();
    line(&format!("undid run {} of session {}", style.bold(&result.run_id), result.session_id));
    for file in &result.files {
        let action = match file.action {
            UndoAction::Restored => "restored",
            UndoAction::Removed => "removed (the run created it)",
            UndoAction::Unchanged => "already as before the run",
            UndoAction::Left => "left as it is (its content before the run was not recorded)",
        };
        line(&format!("  {}: {action}", clean(&file.path)));
    }
    Ok(())
}

/// The refusals of `session.undo` and `session.diff` in the CLI's words; the rest as every command says them.
fn changes_error(error: ClientError) -> anyhow::Error {
    let ClientError::Rpc(rpc) = &error else { return explained(error) };
    let field = |name: &str| {
        rpc.data.as_ref().and_then(|data| data.get(name)).and_then(|value| value.as_str()).map(str::to_owned)
    };
    let session = field("session_id").unwrap_or_default();
    match rpc.error_code() {
        Some(ErrorCode::UndoConflict) => {
            let files: Vec<UndoConflict> = rpc
                .data
                .as_ref()
                .and_then(|data| data.get("files"))
                .and_then(|files| serde_json::from_value(files.clone()).ok())
                .unwrap_or_default();
            let listed: Vec<String> = files
                .iter()
                .map(|file| match file.reason {
                    UndoConflictReason::ChangedSince => format!("  {}: changed since the run", clean(&file.path)),
                    UndoConflictReason::NotRecorded => {
                        format!("  {}: its content before the run was not recorded", clean(&file.path))
                    }
                    UndoConflictReason::Refused => format!(
                        "  {}: the path cannot be used now (outside the session's folder, through a symbolic link, \
                         or denied); the daemon's log says why",
                        clean(&file.path)
                    ),
                })
                .collect();
            let run = field("run_id").unwrap_or_default();
            anyhow!(
                "nothing was undone: {} of run {run} cannot be put back safely:\n{}\n  hint: `troupe diff {session} \
                 --run {run}` shows the run's changes; `troupe undo {session} --run {run} --force` restores them \
                 anyway (later changes to those files are lost)",
                files_word(files.len()),
                listed.join("\n")
            )
        }
        Some(ErrorCode::NothingToUndo) => anyhow!(
            "{}\n  hint: `troupe diff {session}` lists the session's runs that changed files; what shell commands \
             changed is shown there but is not taken back by undo (use git in the repository)",
            said(rpc)
        ),
        Some(ErrorCode::RunChangedNoFiles) => {
            anyhow!("{}\n  hint: `troupe diff {session}` lists the session's runs that changed files", said(rpc))
        }
        _ => explained(error),
    }
}

fn said(rpc: &troupe_protocol::RpcError) -> String {
    clean(rpc.detail().unwrap_or(&rpc.message))
}
