//! `troupe`: the daemon and its command-line clients. Argument parsing and wiring only.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use troupe::client_args::ClientArgs;
use troupe::commands;
use troupe::daemon::{self, DaemonOptions};
use troupe::follow;
use troupe::history_cmd;
use troupe_protocol::types::session::{PermissionMode, TitleChange};
use troupe_runtime::data_dir::DataDir;
use troupe_runtime::token::load_or_create_token;

#[derive(Parser)]
#[command(name = "troupe", version, about = "A coding-agent daemon: durable sessions shared live over WebSocket")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon.
    Serve {
        /// Address to listen on (default from config.toml, else 127.0.0.1:7419).
        #[arg(long)]
        listen: Option<SocketAddr>,
        /// Data directory (default: $TROUPE_HOME, else ~/.troupe).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Stop idle sessions with no subscribers after this many milliseconds (overrides config.toml).
        #[arg(long, hide = true)]
        hibernate_after_ms: Option<u64>,
    },
    /// Print the bearer token, creating it if needed.
    Token {
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// List root sessions.
    Sessions {
        #[command(flatten)]
        client: ClientArgs,
        /// Only sessions in this directory.
        #[arg(long)]
        cwd: Option<String>,
        /// Print JSON instead of one line per session.
        #[arg(long)]
        json: bool,
    },
    /// Create a session and print its id.
    Create {
        #[command(flatten)]
        client: ClientArgs,
        /// The session's working directory (default: the current directory).
        #[arg(long)]
        cwd: Option<String>,
        #[arg(long)]
        agent: Option<String>,
        /// `<provider>/<model>`, e.g. local/echo.
        #[arg(long)]
        model: Option<String>,
    },
    /// Set, clear or reset a session's title.
    Rename {
        #[command(flatten)]
        client: ClientArgs,
        session_id: String,
        /// The new title.
        #[arg(required_unless_present_any = ["clear", "reset"])]
        title: Option<String>,
        /// Remove the title.
        #[arg(long, conflicts_with_all = ["title", "reset"])]
        clear: bool,
        /// Return to the automatic title.
        #[arg(long, conflicts_with_all = ["title", "clear"])]
        reset: bool,
    },
    /// Start a run and print it as it happens (creates a session in the current directory unless --session).
    Run {
        #[command(flatten)]
        client: ClientArgs,
        /// The session to run in.
        #[arg(long)]
        session: Option<String>,
        /// The directory of a new session (default: the current directory).
        #[arg(long)]
        cwd: Option<String>,
        #[arg(long)]
        agent: Option<String>,
        /// `<provider>/<model>`, e.g. local/echo or openai/gpt-4o.
        #[arg(long)]
        model: Option<String>,
        /// What to ask.
        input: String,
    },
    /// Queue input for a running run; it enters at the next boundary.
    Steer {
        #[command(flatten)]
        client: ClientArgs,
        run_id: String,
        input: String,
    },
    /// Take back the newest queued steer of a run.
    Recall {
        #[command(flatten)]
        client: ClientArgs,
        run_id: String,
    },
    /// Cancel a run (kills its running command).
    Cancel {
        #[command(flatten)]
        client: ClientArgs,
        run_id: String,
    },
    /// Write to a running command's stdin: TEXT, or the lines you type until Ctrl-D.
    Stdin {
        #[command(flatten)]
        client: ClientArgs,
        run_id: String,
        tool_call_id: String,
        text: Option<String>,
        /// Close the command's stdin after TEXT.
        #[arg(long)]
        eof: bool,
    },
    /// Set the permission mode of a session's tree: auto_approve, auto_approve_n, auto_approve_y, ask, yolo.
    Mode {
        #[command(flatten)]
        client: ClientArgs,
        session_id: String,
        #[arg(value_parser = parse_mode)]
        mode: PermissionMode,
    },
    /// Connect a provider: openai (any OpenAI-compatible server), anthropic, or local (a script).
    Connect {
        #[command(flatten)]
        client: ClientArgs,
        provider: String,
        /// The server's base URL, e.g. http://localhost:11434/v1 for Ollama.
        #[arg(long)]
        base_url: Option<String>,
        /// The environment variable holding the API key (keys are never taken on the command line).
        #[arg(long)]
        api_key_env: Option<String>,
        /// For `local`: the script file of local/scripted.
        #[arg(long)]
        script: Option<String>,
    },
    /// Disconnect a provider and forget its credentials.
    Disconnect {
        #[command(flatten)]
        client: ClientArgs,
        provider: String,
    },
    /// Answer a pending approval: approve once (default), for the whole session tree, reject, or cancel.
    Approve {
        #[command(flatten)]
        client: ClientArgs,
        session_id: String,
        /// The approval (default: the only pending one of the session).
        approval_id: Option<String>,
        /// Approve this operation for the whole session tree from now on.
        #[arg(long, conflicts_with_all = ["reject", "cancel"])]
        tree: bool,
        #[arg(long, conflicts_with = "cancel")]
        reject: bool,
        /// Why, for the model (with --reject).
        #[arg(long, requires = "reject")]
        feedback: Option<String>,
        #[arg(long)]
        cancel: bool,
    },
    /// Inspect the kernel sandbox that confines every command a tool runs.
    Sandbox {
        #[command(subcommand)]
        command: SandboxCommand,
    },
    /// A root session's goal: an objective with a checklist that drives automatic runs.
    Goal {
        #[command(subcommand)]
        command: GoalCommand,
    },
    /// Revert a session's conversation to event SEQ (an idle session); later events stay in the log, hidden.
    Revert {
        #[command(flatten)]
        client: ClientArgs,
        session_id: String,
        /// The last event to keep (the #N that `troupe watch` prints).
        seq: u64,
        /// Print the session as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Copy a session's conversation through event SEQ into a new session and print its id.
    Fork {
        #[command(flatten)]
        client: ClientArgs,
        session_id: String,
        /// The last event to copy (the #N that `troupe watch` prints).
        seq: u64,
        #[arg(long)]
        json: bool,
    },
    /// Summarize a session's history into a checkpoint that model requests start from (an idle session).
    Compact {
        #[command(flatten)]
        client: ClientArgs,
        session_id: String,
        /// What the summary should keep in particular.
        #[arg(long)]
        focus: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Print a session and the sessions delegated from it, as an indented tree.
    Tree {
        #[command(flatten)]
        client: ClientArgs,
        session_id: String,
        #[arg(long)]
        json: bool,
    },
    /// Print token counts and estimated cost: of all sessions, or of one session, agent or session tree.
    Usage {
        #[command(flatten)]
        client: ClientArgs,
        /// One session: its visible conversation, and what it spent in all when a revert hid turns.
        #[arg(long, conflicts_with_all = ["agent", "tree"])]
        session: Option<String>,
        /// The requests of one agent, in every session.
        #[arg(long, conflicts_with = "tree")]
        agent: Option<String>,
        /// A session and every session delegated from it.
        #[arg(long)]
        tree: Option<String>,
        /// Print the daemon's result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a session's events and follow them live; survives daemon restarts.
    Watch {
        #[command(flatten)]
        client: ClientArgs,
        session_id: String,
        /// Start after this sequence instead of from the beginning.
        #[arg(long)]
        from: Option<u64>,
    },
}

#[derive(Subcommand)]
enum GoalCommand {
    /// Set the session's goal; automatic runs start at once.
    Set {
        #[command(flatten)]
        client: ClientArgs,
        session_id: String,
        objective: String,
        /// The agent of the goal's runs (with --model).
        #[arg(long)]
        agent: Option<String>,
        /// `<provider>/<model>` of the goal's runs (default: the session's latest selection).
        #[arg(long)]
        model: Option<String>,
    },
    /// Print the session's goal and checklist.
    Show {
        #[command(flatten)]
        client: ClientArgs,
        session_id: String,
        #[arg(long)]
        json: bool,
    },
    /// Stop automatic runs (the current run finishes).
    Pause {
        #[command(flatten)]
        client: ClientArgs,
        session_id: String,
        /// Refuse if the goal is no longer at this revision.
        #[arg(long)]
        revision: Option<u64>,
    },
    /// Start automatic runs again, optionally with another selection.
    Resume {
        #[command(flatten)]
        client: ClientArgs,
        session_id: String,
        #[arg(long)]
        revision: Option<u64>,
        #[arg(long)]
        agent: Option<String>,
        #[arg(long)]
        model: Option<String>,
    },
    /// Cancel the goal for good.
    Cancel {
        #[command(flatten)]
        client: ClientArgs,
        session_id: String,
        #[arg(long)]
        revision: Option<u64>,
    },
}

#[derive(Subcommand)]
enum SandboxCommand {
    /// Print what a command run in SESSION_ID may read and write, and whether it reaches the network.
    Explain {
        #[command(flatten)]
        client: ClientArgs,
        session_id: String,
        /// Print JSON instead of sentences.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Serve { listen, data_dir, hibernate_after_ms } => serve(listen, data_dir, hibernate_after_ms),
        Command::Token { data_dir } => {
            let data_dir = DataDir::resolve(data_dir)?;
            data_dir.ensure_layout()?;
            println!("{}", load_or_create_token(&data_dir)?.as_str());
            Ok(())
        }
        Command::Sessions { client, cwd, json } => block_on(commands::sessions(&client.connection(), cwd, json)),
        Command::Create { client, cwd, agent, model } => {
            block_on(commands::create(&client.connection(), cwd, agent, model))
        }
        Command::Rename { client, session_id, title, clear, reset } => {
            let change = match (title, clear, reset) {
                (Some(title), _, _) => TitleChange::Set { title },
                (None, true, _) => TitleChange::Clear,
                _ => TitleChange::Reset,
            };
            block_on(commands::rename(&client.connection(), session_id, change))
        }
        Command::Run { client, session, cwd, agent, model, input } => {
            let request = follow::RunRequest { session_id: session, cwd, agent, model, input };
            let completed = block_on_value(follow::run(&client.connection(), request))?;
            if !completed {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Steer { client, run_id, input } => block_on(commands::steer(&client.connection(), run_id, input)),
        Command::Recall { client, run_id } => block_on(commands::recall(&client.connection(), run_id)),
        Command::Cancel { client, run_id } => block_on(commands::cancel(&client.connection(), run_id)),
        Command::Stdin { client, run_id, tool_call_id, text, eof } => {
            block_on(commands::stdin(&client.connection(), run_id, tool_call_id, text, eof))
        }
        Command::Mode { client, session_id, mode } => block_on(commands::mode(&client.connection(), session_id, mode)),
        Command::Connect { client, provider, base_url, api_key_env, script } => {
            let api_key = match api_key_env {
                Some(variable) => {
                    Some(std::env::var(&variable).with_context(|| format!("reading the API key from ${variable}"))?)
                }
                None => None,
            };
            block_on(commands::connect(&client.connection(), provider, base_url, script, api_key))
        }
        Command::Approve { client, session_id, approval_id, tree, reject, feedback, cancel } => {
            use troupe_protocol::types::approval::ApprovalDecision;
            let decision = match (tree, reject, cancel) {
                (true, _, _) => ApprovalDecision::ApproveTree,
                (_, true, _) => ApprovalDecision::Reject,
                (_, _, true) => ApprovalDecision::Cancel,
                _ => ApprovalDecision::ApproveOnce,
            };
            let answer = commands::Answer { decision, feedback };
            block_on(commands::approve(&client.connection(), session_id, approval_id, answer))
        }
        Command::Disconnect { client, provider } => block_on(commands::disconnect(&client.connection(), provider)),
        Command::Sandbox { command: SandboxCommand::Explain { client, session_id, json } } => {
            block_on(troupe::sandbox_explain::explain_command(&client.connection(), session_id, json))
        }
        Command::Goal { command } => goal(command),
        Command::Revert { client, session_id, seq, json } => {
            block_on(history_cmd::revert(&client.connection(), session_id, seq, json))
        }
        Command::Fork { client, session_id, seq, json } => {
            block_on(history_cmd::fork(&client.connection(), session_id, seq, json))
        }
        Command::Compact { client, session_id, focus, json } => {
            if !block_on_value(history_cmd::compact(&client.connection(), session_id, focus, json))? {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Tree { client, session_id, json } => {
            block_on(history_cmd::tree(&client.connection(), session_id, json))
        }
        Command::Usage { client, session, agent, tree, json } => {
            let scope = troupe::usage_cmd::UsageScope::from_flags(session, agent, tree);
            block_on(troupe::usage_cmd::usage(&client.connection(), scope, json))
        }
        Command::Watch { client, session_id, from } => block_on(follow::watch(&client.connection(), session_id, from)),
    }
}

fn goal(command: GoalCommand) -> anyhow::Result<()> {
    use troupe::goal_cli;
    use troupe_protocol::types::goal::GoalLifecycleAction as Action;
    match command {
        GoalCommand::Set { client, session_id, objective, agent, model } => {
            let selection = goal_cli::optional_selection(agent, model)?;
            block_on(goal_cli::set(&client.connection(), session_id, objective, selection))
        }
        GoalCommand::Show { client, session_id, json } => {
            block_on(goal_cli::show(&client.connection(), session_id, json))
        }
        GoalCommand::Pause { client, session_id, revision } => {
            block_on(goal_cli::lifecycle(&client.connection(), session_id, Action::Pause, revision, None))
        }
        GoalCommand::Resume { client, session_id, revision, agent, model } => {
            let selection = goal_cli::optional_selection(agent, model)?;
            block_on(goal_cli::lifecycle(&client.connection(), session_id, Action::Resume, revision, selection))
        }
        GoalCommand::Cancel { client, session_id, revision } => {
            block_on(goal_cli::lifecycle(&client.connection(), session_id, Action::Cancel, revision, None))
        }
    }
}

fn parse_mode(text: &str) -> Result<PermissionMode, String> {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
        .map_err(|_| "one of auto_approve, auto_approve_n, auto_approve_y, ask, yolo".to_owned())
}

fn block_on_value<T>(future: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(future)
}

fn block_on(future: impl Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(future)
}

fn serve(listen: Option<SocketAddr>, data_dir: Option<PathBuf>, hibernate_after_ms: Option<u64>) -> anyhow::Result<()> {
    let explicit_data_dir = data_dir.is_some();
    let data_dir = DataDir::resolve(data_dir)?;
    let data_dir_display = data_dir.root().display().to_string();
    actix_web::rt::System::new().block_on(async move {
        let daemon = daemon::start(DaemonOptions {
            data_dir,
            listen,
            hibernate_after: hibernate_after_ms.map(Duration::from_millis),
            session_threads: None,
        })
        .await?;
        // Machine-readable first line: tests and scripts read the bound address from it.
        println!("troupe listening on {}", daemon.url());
        let data_dir_flag = if explicit_data_dir { format!(" --data-dir {}", data_dir_display) } else { String::new() };
        println!("token: {} (print it with `troupe token{data_dir_flag}`)", daemon.token_path.display());
        wait_for_shutdown_signal().await.context("installing signal handlers")?;
        tracing::info!("shutting down");
        daemon.shutdown().await;
        Ok(())
    })
}

async fn wait_for_shutdown_signal() -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    Ok(())
}
