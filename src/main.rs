//! `troupe`: the daemon and its command-line clients. Argument parsing and wiring only.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{CommandFactory as _, Parser, Subcommand};
use troupe::cli_errors::UsageError;
use troupe::client_args::ClientArgs;
use troupe::commands::{self, ConnectRequest, block_on};
use troupe::daemon::{self, DaemonOptions};
use troupe::follow;
use troupe::history_cmd;
use troupe::run_cmd::{self, RunEnd, RunRequest, Shown};
use troupe::run_control::{self, RunTarget};
use troupe::selection::SelectionFlags;
use troupe::style::Style;
use troupe_protocol::types::session::{PermissionMode, TitleChange};
use troupe_runtime::data_dir::DataDir;

#[derive(Parser)]
#[command(name = "troupe", version, about = "A coding-agent daemon: durable sessions shared live over WebSocket")]
struct Cli {
    /// Without one: the TUI (`troupe tui`), or this help when built without the `tui` feature.
    #[command(subcommand)]
    command: Option<Command>,
    /// Also before the subcommand (`troupe --url X sessions`); with no subcommand, where the TUI connects.
    #[command(flatten)]
    client: ClientArgs,
    /// JSON output, also before the subcommand (`troupe --json sessions`).
    #[arg(long, global = true)]
    json: bool,
}

/// Printed after `troupe run --help`.
const SELECTION_HELP: &str = "Which model runs (first that applies):
  1. --model PROVIDER/MODEL
  2. --agent NAME: the first model of its chain whose provider can run (the run falls back along the chain)
  3. the session's last selection (run --session, continue)
  4. the session's creation selection (troupe create --model)
  5. for a new session, the `default` agent's chain
A selection none of whose models can run is refused before anything is created.
Exit codes: 0 completed, 1 failed, 130 cancelled.";

/// Printed after `troupe exec --help`.
const EXEC_HELP: &str = "Prints only the final answer on stdout (with --json: one JSON object per event, then the
outcome). The model is chosen as for `troupe run`.

Exit codes:
  0    the run completed
  1    the run failed (or the command could not start it)
  2    the run needed an approval, which exec cannot answer: the run is cancelled and the approval is named;
       allow such operations with --mode auto_approve_y (or yolo), or use `troupe run` and `troupe approve`
  130  the run was cancelled (Ctrl-C or `troupe cancel`)";

#[derive(Subcommand)]
enum Command {
    /// Run the daemon.
    Serve {
        /// Where to listen: `host:port`, or `unix:/absolute/path` for a unix socket (mode 0660) a reverse proxy on
        /// this host connects to (default from config.toml, else 127.0.0.1:7419).
        #[arg(long, value_name = "ADDRESS")]
        listen: Option<troupe_runtime::config::Listen>,
        /// How the daemon's log lines on stderr are written: `text`, or `json` (one object per line, with the
        /// fields of the connection, request and run they belong to) for log shippers.
        #[arg(long, value_enum, env = "TROUPE_LOG_FORMAT", default_value_t = troupe::logging::LogFormat::Text)]
        log_format: troupe::logging::LogFormat,
        /// Data directory (default: $TROUPE_HOME, else ~/.troupe).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Stop idle sessions with no subscribers after this many milliseconds (overrides config.toml).
        #[arg(long, hide = true)]
        hibernate_after_ms: Option<u64>,
    },
    /// Print the bearer token of a data dir (the one `troupe serve` wrote there).
    Token {
        #[arg(long, env = "TROUPE_HOME")]
        data_dir: Option<PathBuf>,
        /// Create the data dir and its token when it has none (otherwise a data dir no daemon used is refused).
        #[arg(long)]
        create: bool,
        /// Print `{"token": …, "path": …}`.
        #[arg(long)]
        json: bool,
    },
    /// List root sessions: short id, status, last activity, title, directory.
    Sessions {
        #[command(flatten)]
        client: ClientArgs,
        /// Only sessions in this directory.
        #[arg(long)]
        cwd: Option<String>,
        /// Print the daemon's records as JSON.
        #[arg(long)]
        json: bool,
        /// Archived sessions too (`troupe archive`), marked as such.
        #[arg(long)]
        all: bool,
    },
    /// Create a session and print its id (with neither --agent nor --model: the `default` agent).
    Create {
        #[command(flatten)]
        client: ClientArgs,
        /// The session's working directory (default: the current directory).
        #[arg(long)]
        cwd: Option<String>,
        #[command(flatten)]
        selection: SelectionFlags,
        #[arg(long)]
        json: bool,
    },
    /// Set, clear or reset a session's title.
    Rename {
        #[command(flatten)]
        client: ClientArgs,
        /// The session: its id or a unique prefix.
        session: String,
        /// The new title.
        #[arg(required_unless_present_any = ["clear", "reset"])]
        title: Option<String>,
        /// Remove the title.
        #[arg(long, conflicts_with_all = ["title", "reset"])]
        clear: bool,
        /// Return to the automatic title.
        #[arg(long, conflicts_with_all = ["title", "clear"])]
        reset: bool,
        #[arg(long)]
        json: bool,
    },
    /// Start a run and print it as it happens (creates a session in the current directory unless --session).
    #[command(after_help = SELECTION_HELP)]
    Run {
        #[command(flatten)]
        client: ClientArgs,
        /// The session to run in: its id or a unique prefix.
        #[arg(long)]
        session: Option<String>,
        /// The directory of a new session (default: the current directory).
        #[arg(long, conflicts_with = "session")]
        cwd: Option<String>,
        #[command(flatten)]
        selection: SelectionFlags,
        /// One JSON object per event instead of words.
        #[arg(long)]
        json: bool,
        /// What to ask (default: standard input, when it is not a terminal).
        input: Option<String>,
    },
    /// Run a task and print only its final answer, for scripts.
    #[command(after_help = EXEC_HELP)]
    Exec {
        #[command(flatten)]
        client: ClientArgs,
        /// The session to run in: its id or a unique prefix (default: a new one in --cwd).
        #[arg(long)]
        session: Option<String>,
        /// The directory of a new session (default: the current directory).
        #[arg(long, conflicts_with = "session")]
        cwd: Option<String>,
        #[command(flatten)]
        selection: SelectionFlags,
        /// The permission mode of the new session's tree, e.g. auto_approve_y or yolo.
        #[arg(long, value_parser = parse_mode, conflicts_with = "session")]
        mode: Option<PermissionMode>,
        /// Print the run's events on stderr as it goes.
        #[arg(long)]
        verbose: bool,
        /// One JSON object per event on stdout, then one with the outcome.
        #[arg(long)]
        json: bool,
        /// The task (default: standard input, when it is not a terminal).
        input: Option<String>,
    },
    /// Continue the most recent session of the current directory: with TEXT run it there, else watch it.
    Continue {
        #[command(flatten)]
        client: ClientArgs,
        #[command(flatten)]
        selection: SelectionFlags,
        #[arg(long)]
        json: bool,
        text: Option<String>,
    },
    /// Queue input for a running run; it enters at the next boundary.
    Steer {
        #[command(flatten)]
        client: ClientArgs,
        /// The active run of this session (id or unique prefix) instead of a RUN_ID.
        #[arg(long)]
        session: Option<String>,
        #[arg(long)]
        json: bool,
        /// RUN_ID TEXT, or with --session just TEXT.
        #[arg(required = true, num_args = 1..=2, value_names = ["RUN_ID", "TEXT"])]
        args: Vec<String>,
    },
    /// Take back the newest queued steer of a run.
    Recall {
        #[command(flatten)]
        client: ClientArgs,
        /// The active run of this session instead of a RUN_ID.
        #[arg(long)]
        session: Option<String>,
        #[arg(long)]
        json: bool,
        run_id: Option<String>,
    },
    /// Cancel a run (kills its running command).
    Cancel {
        #[command(flatten)]
        client: ClientArgs,
        /// The active run of this session instead of a RUN_ID.
        #[arg(long)]
        session: Option<String>,
        #[arg(long)]
        json: bool,
        run_id: Option<String>,
    },
    /// Write to a running command's stdin: TEXT and a newline, or the lines you type until Ctrl-D.
    Stdin {
        #[command(flatten)]
        client: ClientArgs,
        /// The active run of this session instead of a RUN_ID; its one running command unless --call.
        #[arg(long)]
        session: Option<String>,
        /// The tool call (with --session).
        #[arg(long)]
        call: Option<String>,
        /// Close the command's stdin after TEXT.
        #[arg(long)]
        eof: bool,
        /// Send TEXT without the trailing newline.
        #[arg(long)]
        no_newline: bool,
        #[arg(long)]
        json: bool,
        /// RUN_ID [TOOL_CALL_ID [TEXT]] (without TOOL_CALL_ID: the run's one running command), or with --session
        /// just [TEXT].
        #[arg(num_args = 0..=3, value_names = ["RUN_ID", "TOOL_CALL_ID", "TEXT"])]
        args: Vec<String>,
    },
    /// Set the permission mode of a session's tree: auto_approve, auto_approve_n, auto_approve_y, ask, yolo.
    Mode {
        #[command(flatten)]
        client: ClientArgs,
        session: String,
        #[arg(value_parser = parse_mode)]
        mode: PermissionMode,
        #[arg(long)]
        json: bool,
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
        /// Allow a plain http:// base URL off loopback (e.g. Ollama on another machine of your LAN).
        #[arg(long)]
        allow_insecure_http: bool,
        #[arg(long)]
        json: bool,
    },
    /// Disconnect a provider and forget its credentials.
    Disconnect {
        #[command(flatten)]
        client: ClientArgs,
        provider: String,
        #[arg(long)]
        json: bool,
    },
    /// Answer a pending approval: approve once (default), for the whole session tree, reject, or cancel.
    Approve {
        #[command(flatten)]
        client: ClientArgs,
        session: String,
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
        #[arg(long)]
        json: bool,
    },
    /// Inspect the kernel sandbox that confines every command a tool runs.
    Sandbox {
        #[command(subcommand)]
        command: SandboxCommand,
    },
    /// A root session's goal: an objective with a checklist that drives automatic runs.
    Goal {
        #[command(subcommand)]
        command: troupe::goal_cli::GoalCommand,
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
    /// Print a shell completion script: `troupe completions bash > ~/.local/share/bash-completion/completions/troupe`.
    Completions {
        #[arg(value_enum)]
        shell: CompletionShell,
    },
    /// Print a man page (roff), or write them all: `troupe man --dir ~/.local/share/man/man1`.
    Man {
        /// Write troupe.1 and the page of every command (troupe-run.1, troupe-goal-set.1, …) into this directory.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// The command whose page to print, e.g. `run` or `goal set` (default: troupe.1).
        command: Vec<String>,
    },
    /// Print a session's events and follow them live; survives daemon restarts.
    Watch {
        #[command(flatten)]
        client: ClientArgs,
        /// The session: its id or a unique prefix.
        session: String,
        /// Print from event #N on (the #N that watch prints) instead of from the first event.
        #[arg(long, value_name = "N")]
        from: Option<u64>,
        /// One JSON object per event instead of words.
        #[arg(long)]
        json: bool,
    },
    #[command(flatten)]
    Inspect(troupe::inspect_cmd::InspectCommand),
    #[command(flatten)]
    Status(troupe::status_cmd::StatusCommand),
    #[command(flatten)]
    SessionAdmin(troupe::session_admin_cmd::SessionAdminCommand),
    /// The interactive terminal UI (what `troupe` with no arguments starts).
    #[cfg(feature = "tui")]
    Tui {
        #[command(flatten)]
        client: ClientArgs,
        /// Open this session (its id or a unique prefix) instead of the session picker.
        session: Option<String>,
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let command = match cli.command {
        Some(command) => command,
        // `troupe tui`, with the flags given before no subcommand (`troupe --url X`) or the environment's.
        #[cfg(feature = "tui")]
        None => Command::Tui { client: cli.client, session: None },
        #[cfg(not(feature = "tui"))]
        None => {
            let _ = Cli::command().print_help();
            return ExitCode::SUCCESS;
        }
    };
    let serving = matches!(command, Command::Serve { .. });
    let log_format = match &command {
        Command::Serve { log_format, .. } => *log_format,
        _ => troupe::logging::LogFormat::Text,
    };
    // A client command says what it has to say itself: its own log lines stay quiet unless RUST_LOG asks.
    use troupe::logging::ProcessKind;
    // The TUI owns the terminal: log lines would write over its screen, so it sets up no logging.
    #[cfg(feature = "tui")]
    let tui = matches!(command, Command::Tui { .. });
    #[cfg(not(feature = "tui"))]
    let tui = false;
    if !tui {
        troupe::logging::init(if serving { ProcessKind::Daemon } else { ProcessKind::Client }, log_format);
    }
    match dispatch(command) {
        Ok(code) => ExitCode::from(code),
        Err(error) => report(&error),
    }
}

/// Prints an error for a person (never a backtrace): `error: …`, then its hints. Exit code 2 for a command line
/// that cannot work as given, 1 otherwise.
fn report(error: &anyhow::Error) -> ExitCode {
    let style = Style::stderr();
    // The chain can quote the daemon, a provider or a file: terminal controls removed at this one exit.
    let text = troupe::style::clean(&format!("{error:#}"));
    let mut lines = text.lines();
    let first = lines.next().unwrap_or("failed");
    eprintln!("{} {first}", style.red("error:"));
    for line in lines {
        eprintln!("{line}");
    }
    let usage = error.downcast_ref::<UsageError>().is_some();
    ExitCode::from(if usage { 2 } else { 1 })
}

/// Runs one command; its exit code.
fn dispatch(command: Command) -> anyhow::Result<u8> {
    use troupe::output::Output;
    match command {
        Command::Serve { listen, data_dir, hibernate_after_ms, log_format: _ } => {
            serve(listen, data_dir, hibernate_after_ms).map(done)
        }
        Command::Token { data_dir, create, json } => {
            commands::token(data_dir, create, Output::from_flag(json)).map(done)
        }
        Command::Sessions { client, cwd, json, all } => {
            block_on(commands::sessions(&client.connection(), cwd, all, Output::from_flag(json))).map(done)
        }
        Command::Create { client, cwd, selection, json } => {
            block_on(commands::create(&client.connection(), cwd, selection, Output::from_flag(json))).map(done)
        }
        Command::Rename { client, session, title, clear, reset, json } => {
            let change = match (title, clear, reset) {
                (Some(title), _, _) => TitleChange::Set { title },
                (None, true, _) => TitleChange::Clear,
                _ => TitleChange::Reset,
            };
            block_on(commands::rename(&client.connection(), session, change, Output::from_flag(json))).map(done)
        }
        Command::Run { client, session, cwd, selection, json, input } => {
            let request = RunRequest {
                session,
                cwd,
                flags: selection,
                mode: None,
                input: run_cmd::input_or_stdin(input, "troupe run \"make the tests pass\"")?,
                shown: Shown::Follow(Output::from_flag(json)),
            };
            block_on(run_cmd::run(&client.connection(), request)).map(|end| run_exit_code(&end))
        }
        Command::Exec { client, session, cwd, selection, mode, verbose, json, input } => {
            let request = RunRequest {
                session,
                cwd,
                flags: selection,
                mode,
                input: run_cmd::input_or_stdin(input, "troupe exec \"summarize README.md\"")?,
                shown: Shown::Exec { verbose, json },
            };
            let end = block_on(run_cmd::run(&client.connection(), request))?;
            if json {
                run_cmd::print_json_end(&end);
            }
            Ok(end.exit_code())
        }
        Command::Continue { client, selection, json, text } => {
            let connection = client.connection();
            let session = block_on(run_cmd::latest_here(&connection))?;
            let out = Output::from_flag(json);
            match text {
                Some(input) => {
                    let request = RunRequest {
                        session: Some(session),
                        cwd: None,
                        flags: selection,
                        mode: None,
                        input,
                        shown: Shown::Follow(out),
                    };
                    block_on(run_cmd::run(&connection, request)).map(|end| run_exit_code(&end))
                }
                None => block_on(follow::watch(&connection, session, None, out)).map(done),
            }
        }
        Command::Steer { client, session, json, mut args } => {
            let text = args.pop().unwrap_or_default();
            let target = RunTarget::from_args(args.pop(), session)?;
            block_on(run_control::steer(&client.connection(), target, text, Output::from_flag(json))).map(done)
        }
        Command::Recall { client, session, json, run_id } => {
            let target = RunTarget::from_args(run_id, session)?;
            block_on(run_control::recall(&client.connection(), target, Output::from_flag(json))).map(done)
        }
        Command::Cancel { client, session, json, run_id } => {
            let target = RunTarget::from_args(run_id, session)?;
            block_on(run_control::cancel(&client.connection(), target, Output::from_flag(json))).map(done)
        }
        Command::Stdin { client, session, call, eof, no_newline, json, args } => {
            let request = run_control::stdin_request(session, call, args, eof, no_newline)?;
            block_on(run_control::stdin(&client.connection(), request, Output::from_flag(json))).map(done)
        }
        Command::Mode { client, session, mode, json } => {
            block_on(commands::mode(&client.connection(), session, mode, Output::from_flag(json))).map(done)
        }
        Command::Connect { client, provider, base_url, api_key_env, script, allow_insecure_http, json } => {
            let api_key = match api_key_env {
                Some(variable) => Some(std::env::var(&variable).map_err(|_| {
                    anyhow::anyhow!(
                        "the environment variable {variable} is not set\n  hint: export it first, e.g. \
                         `export {variable}=sk-…`; keys are never taken on the command line"
                    )
                })?),
                None => None,
            };
            let request = ConnectRequest { provider_id: provider, base_url, script, api_key, allow_insecure_http };
            block_on(commands::connect(&client.connection(), request, Output::from_flag(json))).map(done)
        }
        Command::Approve { client, session, approval_id, tree, reject, feedback, cancel, json } => {
            use troupe_protocol::types::approval::ApprovalDecision;
            let decision = match (tree, reject, cancel) {
                (true, _, _) => ApprovalDecision::ApproveTree,
                (_, true, _) => ApprovalDecision::Reject,
                (_, _, true) => ApprovalDecision::Cancel,
                _ => ApprovalDecision::ApproveOnce,
            };
            let answer = commands::Answer { decision, feedback };
            let out = Output::from_flag(json);
            block_on(commands::approve(&client.connection(), session, approval_id, answer, out)).map(done)
        }
        Command::Disconnect { client, provider, json } => {
            block_on(commands::disconnect(&client.connection(), provider, Output::from_flag(json))).map(done)
        }
        Command::Sandbox { command: SandboxCommand::Explain { client, session_id, json } } => {
            block_on(troupe::sandbox_explain::explain_command(&client.connection(), session_id, json)).map(done)
        }
        Command::Goal { command } => command.run(),
        Command::Revert { client, session_id, seq, json } => {
            block_on(history_cmd::revert(&client.connection(), session_id, seq, json)).map(done)
        }
        Command::Fork { client, session_id, seq, json } => {
            block_on(history_cmd::fork(&client.connection(), session_id, seq, json)).map(done)
        }
        Command::Compact { client, session_id, focus, json } => {
            let compacted = block_on(history_cmd::compact(&client.connection(), session_id, focus, json))?;
            Ok(if compacted { 0 } else { 1 })
        }
        Command::Tree { client, session_id, json } => {
            block_on(history_cmd::tree(&client.connection(), session_id, json)).map(done)
        }
        Command::Usage { client, session, agent, tree, json } => {
            let scope = troupe::usage_cmd::UsageScope::from_flags(session, agent, tree);
            block_on(troupe::usage_cmd::usage(&client.connection(), scope, json)).map(done)
        }
        Command::Watch { client, session, from, json } => {
            block_on(follow::watch(&client.connection(), session, from, Output::from_flag(json))).map(done)
        }
        #[cfg(feature = "tui")]
        Command::Tui { client, session } => block_on(troupe::tui::run(client.connection(), session)).map(done),
        Command::Completions { shell } => {
            let mut buffer = Vec::new();
            clap_complete::generate(shell.generator(), &mut Cli::command(), "troupe", &mut buffer);
            print_all(&buffer)
        }
        Command::Man { dir, command } => troupe::man_cmd::man(Cli::command(), dir.as_deref(), &command).map(done),
        Command::Inspect(command) => command.run(),
        Command::Status(command) => command.run(),
        Command::SessionAdmin(command) => command.run(),
    }
}

/// The shells `troupe completions` writes for.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

impl CompletionShell {
    fn generator(self) -> clap_complete::Shell {
        match self {
            CompletionShell::Bash => clap_complete::Shell::Bash,
            CompletionShell::Zsh => clap_complete::Shell::Zsh,
            CompletionShell::Fish => clap_complete::Shell::Fish,
        }
    }
}

/// Writes generated text to stdout (a closed pipe ends the command quietly).
fn print_all(bytes: &[u8]) -> anyhow::Result<u8> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    troupe::output::checked(stdout.write_all(bytes).and_then(|()| stdout.flush()));
    Ok(0)
}

/// Exit code 0 for a command that returned.
fn done(_: ()) -> u8 {
    0
}

/// `troupe run`: 0 completed, 130 cancelled, 1 otherwise.
fn run_exit_code(end: &RunEnd) -> u8 {
    match end {
        RunEnd::Completed => 0,
        RunEnd::Cancelled => 130,
        _ => 1,
    }
}

fn parse_mode(text: &str) -> Result<PermissionMode, String> {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
        .map_err(|_| "one of auto_approve, auto_approve_n, auto_approve_y, ask, yolo".to_owned())
}

fn serve(
    listen: Option<troupe_runtime::config::Listen>,
    data_dir: Option<PathBuf>,
    hibernate_after_ms: Option<u64>,
) -> anyhow::Result<()> {
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
