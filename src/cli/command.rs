//! The command line of `troupe`: every subcommand and its flags, as clap parses them (the help and the man pages
//! are generated from here). What each does is in `dispatch.rs`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use troupe::client_args::ClientArgs;
use troupe::selection::SelectionFlags;
use troupe_protocol::types::session::PermissionMode;

#[derive(Parser)]
#[command(name = "troupe", version, about = "A coding-agent daemon: durable sessions shared live over WebSocket")]
pub(crate) struct Cli {
    /// Without one: the TUI (`troupe tui`), or this help when built without the `tui` feature.
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
    /// Also before the subcommand (`troupe --url X sessions`); with no subcommand, where the TUI connects.
    #[command(flatten)]
    pub(crate) client: ClientArgs,
    /// JSON output, also before the subcommand (`troupe --json sessions`).
    #[arg(long, global = true)]
    pub(crate) json: bool,
}

/// Printed after `troupe run --help`.
const SELECTION_HELP: &str = "Which model runs (first that applies):
  1. --model PROVIDER/MODEL
  2. --agent NAME: the first model of its chain
  3. the session's last selection (run --session, continue)
  4. the session's creation selection (troupe create --model)
  5. for a new session, the `default` agent's first model
Nothing is switched: when that model cannot run but a later model of its agent's chain can, the run falls back
and prints `falling back from ... to ...`; later runs of the agent in the session start on that fallback and say
so (`note: ... was asked for`) until --reset-fallback. A selection none of whose models can run is refused before
anything is created.
Exit codes: 0 completed, 1 failed, 130 cancelled.";

/// Printed after `troupe exec --help`.
const EXEC_HELP: &str = "Prints only the final answer on stdout. With --json: one JSON object per event (its kind
in .payload.type), then the outcome in the same shape:
  {\"payload\": {\"type\": \"exec_end\", \"status\": \"completed\", \"exit_code\": 0}}
(status: completed, failed, cancelled or needs_approval). The model is chosen as for `troupe run`.

Exit codes:
  0    the run completed
  1    the run failed (or the command could not start it)
  2    the run needed an approval, which exec cannot answer: the run is cancelled and the approval is named;
       allow such operations with --mode auto_approve_y (or yolo), or use `troupe run` and `troupe approve`
  130  the run was cancelled (Ctrl-C or `troupe cancel`)";

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Run the daemon.
    Serve {
        /// Where to listen: `host:port`, or `unix:/absolute/path` for a unix socket (mode 0660) a reverse proxy on
        /// this host connects to (default from config.toml, else 127.0.0.1:7419).
        #[arg(long, value_name = "ADDRESS")]
        listen: Option<troupe_runtime::config::Listen>,
        /// How the daemon's log lines on stderr are written: `text`, or `json` (one object per line, with the
        /// fields of the connection, request and run they belong to) for log shippers. The default level is info;
        /// the line per answered request is at debug (`RUST_LOG=info,troupe_protocol=debug`).
        #[arg(long, value_enum, env = "TROUPE_LOG_FORMAT", default_value_t = troupe::logging::LogFormat::Text)]
        log_format: troupe::logging::LogFormat,
        /// Data directory (default: $TROUPE_HOME, else ~/.troupe).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Stop idle sessions with no subscribers after this many milliseconds (overrides config.toml).
        #[arg(long, hide = true)]
        hibernate_after_ms: Option<u64>,
        /// Join a troupe cluster on these NATS servers (JetStream; comma-separated `nats://host:4222` URLs;
        /// overrides `[cluster] nats` in config.toml). See deploy/cluster.md.
        #[arg(long, value_name = "NATS_URLS")]
        cluster: Option<String>,
        /// This node's name in the cluster (overrides `[cluster] node`; default: the host's name).
        #[arg(long, value_name = "NAME")]
        node: Option<String>,
    },
    /// Print the bearer token of a data dir (the one `troupe serve` wrote there).
    Token {
        /// The data directory whose token to print (default: $TROUPE_HOME, else ~/.troupe).
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
        /// Print JSON instead of words.
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
        /// Print JSON instead of words.
        #[arg(long)]
        json: bool,
    },
    /// Start a run and print it as it happens (creates a session in the current directory unless --session).
    #[command(after_help = SELECTION_HELP)]
    Run {
        #[command(flatten)]
        client: ClientArgs,
        #[command(flatten)]
        place: RunPlace,
        #[command(flatten)]
        selection: SelectionFlags,
        /// Start at the model asked for, not at the fallback an earlier run of the agent moved this session to.
        #[arg(long)]
        reset_fallback: bool,
        /// One JSON object per event instead of words (its kind in .payload.type; live tool output is
        /// `tool_output`, with its base64 `data`).
        #[arg(long)]
        json: bool,
        /// Attach an image (PNG, JPEG, GIF, WebP) or a PDF to the prompt; repeat for more (at most 8, 10 MiB in all).
        #[arg(long = "attach", value_name = "FILE")]
        attach: Vec<std::path::PathBuf>,
        /// What to ask (default: standard input, when it is not a terminal).
        input: Option<String>,
    },
    /// Run a task and print only its final answer, for scripts.
    #[command(after_help = EXEC_HELP)]
    Exec {
        #[command(flatten)]
        client: ClientArgs,
        #[command(flatten)]
        place: RunPlace,
        #[command(flatten)]
        selection: SelectionFlags,
        /// Start at the model asked for, not at the fallback an earlier run of the agent moved this session to.
        #[arg(long)]
        reset_fallback: bool,
        /// The permission mode of the new session's tree, e.g. auto_approve_y or yolo.
        #[arg(long, value_parser = parse_mode, conflicts_with = "session")]
        mode: Option<PermissionMode>,
        /// Print the run's events on stderr as it goes.
        #[arg(long)]
        verbose: bool,
        /// One JSON object per event on stdout, then one with the outcome (`.payload.type` is `exec_end`).
        #[arg(long)]
        json: bool,
        /// Attach an image (PNG, JPEG, GIF, WebP) or a PDF to the prompt; repeat for more (at most 8, 10 MiB in all).
        #[arg(long = "attach", value_name = "FILE")]
        attach: Vec<std::path::PathBuf>,
        /// The task (default: standard input, when it is not a terminal).
        input: Option<String>,
    },
    /// Continue the most recent session of the current directory: with TEXT run it there, else watch it.
    Continue {
        #[command(flatten)]
        client: ClientArgs,
        #[command(flatten)]
        selection: SelectionFlags,
        /// Start at the model asked for, not at the fallback an earlier run of the agent moved this session to.
        #[arg(long)]
        reset_fallback: bool,
        /// Print JSON instead of words.
        #[arg(long)]
        json: bool,
        /// Attach an image (PNG, JPEG, GIF, WebP) or a PDF to TEXT; repeat for more (at most 8, 10 MiB in all).
        #[arg(long = "attach", value_name = "FILE", requires = "text")]
        attach: Vec<std::path::PathBuf>,
        /// What to run in the session (without it: watch the session).
        text: Option<String>,
    },
    /// Queue input for a running run; it enters at the next boundary.
    Steer {
        #[command(flatten)]
        client: ClientArgs,
        /// The active run of this session (id or unique prefix) instead of a RUN_ID.
        #[arg(long)]
        session: Option<String>,
        /// Print JSON instead of words.
        #[arg(long)]
        json: bool,
        /// Attach an image (PNG, JPEG, GIF, WebP) or a PDF to the input; repeat for more (at most 8, 10 MiB in all).
        #[arg(long = "attach", value_name = "FILE")]
        attach: Vec<std::path::PathBuf>,
        /// RUN_ID TEXT, or with --session just TEXT.
        #[arg(required = true, num_args = 1..=2, value_names = ["RUN_ID", "TEXT"])]
        args: Vec<String>,
    },
    /// Take back the newest queued steer of a run.
    Recall {
        #[command(flatten)]
        client: ClientArgs,
        #[command(flatten)]
        run: RunArg,
        /// Print JSON instead of words.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a run (kills its running command).
    Cancel {
        #[command(flatten)]
        client: ClientArgs,
        #[command(flatten)]
        run: RunArg,
        /// Print JSON instead of words.
        #[arg(long)]
        json: bool,
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
        /// Print JSON instead of words.
        #[arg(long)]
        json: bool,
        /// RUN_ID [TOOL_CALL_ID [TEXT]] (without TOOL_CALL_ID: the run's one running command), or with --session
        /// just [TEXT].
        #[arg(num_args = 0..=3, value_names = ["RUN_ID", "TOOL_CALL_ID", "TEXT"])]
        args: Vec<String>,
    },
    /// Show, or set, the permission mode of a session's tree: auto_approve, auto_approve_n, auto_approve_y, ask,
    /// yolo. Modes are not kept across a daemon restart: every tree then starts in `[permissions] default_mode`.
    Mode {
        #[command(flatten)]
        client: ClientArgs,
        /// The session: its id or a unique prefix (`troupe sessions` lists them).
        session: String,
        /// The new mode; without it, the tree's current mode is printed.
        #[arg(value_parser = parse_mode)]
        mode: Option<PermissionMode>,
        /// Print JSON instead of words.
        #[arg(long)]
        json: bool,
    },
    /// Connect a provider: openai (any OpenAI-compatible server), anthropic, or local (a script).
    Connect {
        #[command(flatten)]
        client: ClientArgs,
        /// The provider: openai, anthropic or local (`troupe providers` lists them).
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
        /// Print JSON instead of words.
        #[arg(long)]
        json: bool,
    },
    /// Disconnect a provider and forget its credentials.
    Disconnect {
        #[command(flatten)]
        client: ClientArgs,
        /// The provider: openai, anthropic or local (`troupe providers` lists them).
        provider: String,
        /// Print JSON instead of words.
        #[arg(long)]
        json: bool,
    },
    /// Answer a pending approval: approve once (default), for the whole session tree, reject, or cancel.
    Approve {
        #[command(flatten)]
        client: ClientArgs,
        /// The session: its id or a unique prefix (`troupe sessions` lists them).
        session: String,
        /// The approval (default: the only pending one of the session).
        approval_id: Option<String>,
        /// Approve this operation for the whole session tree from now on.
        #[arg(long, conflicts_with_all = ["reject", "cancel"])]
        tree: bool,
        /// Refuse the operation; the model sees the refusal (and --feedback).
        #[arg(long, conflicts_with = "cancel")]
        reject: bool,
        /// Why, for the model (with --reject).
        #[arg(long, requires = "reject")]
        feedback: Option<String>,
        /// Withdraw the approval without an answer (the call is cancelled, the run goes on).
        #[arg(long)]
        cancel: bool,
        /// Print JSON instead of words.
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
        /// The session: its id or a unique prefix (`troupe sessions` lists them).
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
        /// The session: its id or a unique prefix (`troupe sessions` lists them).
        session_id: String,
        /// The last event to copy (the #N that `troupe watch` prints).
        seq: u64,
        /// Print JSON instead of words.
        #[arg(long)]
        json: bool,
    },
    /// Summarize a session's history into a checkpoint that model requests start from (an idle session).
    Compact {
        #[command(flatten)]
        client: ClientArgs,
        /// The session: its id or a unique prefix (`troupe sessions` lists them).
        session_id: String,
        /// What the summary should keep in particular.
        #[arg(long)]
        focus: Option<String>,
        /// Print JSON instead of words.
        #[arg(long)]
        json: bool,
    },
    /// Print a session and the sessions delegated from it, as an indented tree.
    Tree {
        #[command(flatten)]
        client: ClientArgs,
        /// The session: its id or a unique prefix (`troupe sessions` lists them).
        session_id: String,
        /// Print JSON instead of words.
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
    /// At each Tab it asks `troupe`, which completes session ids, modes, agents and models from the daemon that
    /// TROUPE_URL/TROUPE_TOKEN/TROUPE_HOME name (nothing when it cannot be reached within 2 seconds).
    Completions {
        /// The shell the script is for.
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
    /// Write the whole output of a tool call whose result was cut (`watch` and `run` print this command).
    Output {
        #[command(flatten)]
        client: ClientArgs,
        /// The session: its id or a unique prefix.
        session: String,
        /// The result's output_ref.
        output_ref: String,
        /// The stderr stream instead of stdout.
        #[arg(long)]
        stderr: bool,
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
        /// One JSON object per event instead of words (its kind in .payload.type; live tool output is
        /// `tool_output`, with its base64 `data`).
        #[arg(long)]
        json: bool,
    },
    #[command(flatten)]
    Inspect(troupe::inspect_cmd::InspectCommand),
    #[command(flatten)]
    Status(troupe::status_cmd::StatusCommand),
    #[command(flatten)]
    Open(troupe::open_cmd::OpenCommand),
    #[command(flatten)]
    SessionAdmin(troupe::session_admin_cmd::SessionAdminCommand),
    #[command(flatten)]
    Changes(troupe::changes_cmd::ChangesCommand),
    #[command(flatten)]
    Mcp(troupe::mcp_cmd::McpCommand),
    /// The interactive terminal UI (what `troupe` with no arguments starts).
    #[cfg(feature = "tui")]
    Tui {
        #[command(flatten)]
        client: ClientArgs,
        /// Open this session (its id or a unique prefix) instead of the session picker.
        session: Option<String>,
    },
}

/// Where `run` and `exec` run: an existing session, or a new one in a directory.
#[derive(clap::Args)]
pub(crate) struct RunPlace {
    /// The session to run in: its id or a unique prefix (default: a new one in --cwd).
    #[arg(long)]
    pub(crate) session: Option<String>,
    /// The directory of a new session (default: the current directory).
    #[arg(long, conflicts_with = "session")]
    pub(crate) cwd: Option<String>,
}

/// The run `recall` and `cancel` act on: its id, or the active run of a session.
#[derive(clap::Args)]
pub(crate) struct RunArg {
    /// The active run of this session instead of a RUN_ID.
    #[arg(long)]
    pub(crate) session: Option<String>,
    /// The run: the id `troupe run` printed ("run … started"), or that `troupe runs SESSION` lists.
    pub(crate) run_id: Option<String>,
}

#[derive(Subcommand)]
pub(crate) enum SandboxCommand {
    /// Print what a command run in SESSION_ID may read and write, and whether it reaches the network.
    Explain {
        #[command(flatten)]
        client: ClientArgs,
        /// The session: its id or a unique prefix (`troupe sessions` lists them).
        session_id: String,
        /// Print JSON instead of sentences.
        #[arg(long)]
        json: bool,
    },
}

/// The shells `troupe completions` writes for.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

impl CompletionShell {
    /// How the shell's script asks `troupe` for completions.
    pub(crate) fn completer(self) -> &'static dyn clap_complete::env::EnvCompleter {
        match self {
            CompletionShell::Bash => &clap_complete::env::Bash,
            CompletionShell::Zsh => &clap_complete::env::Zsh,
            CompletionShell::Fish => &clap_complete::env::Fish,
        }
    }
}

/// A permission mode as typed: its wire name.
fn parse_mode(text: &str) -> Result<PermissionMode, String> {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
        .map_err(|_| "one of auto_approve, auto_approve_n, auto_approve_y, ask, yolo".to_owned())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Cli;

    /// Every argument of every command, with the command's path, that `--help` shows without a description.
    fn undescribed(command: &clap::Command, path: &str, found: &mut Vec<String>) {
        for arg in command.get_arguments() {
            let builtin = matches!(arg.get_id().as_str(), "help" | "version");
            if !arg.is_hide_set() && !builtin && arg.get_help().is_none() && arg.get_long_help().is_none() {
                found.push(format!("{path} {}", arg.get_id()));
            }
        }
        for sub in command.get_subcommands() {
            undescribed(sub, &format!("{path} {}", sub.get_name()), found);
        }
    }

    #[test]
    fn every_argument_is_described_in_help() {
        let command = <Cli as clap::CommandFactory>::command();
        let mut found = Vec::new();
        undescribed(&command, "troupe", &mut found);
        assert!(found.is_empty(), "arguments without a description in --help:\n{}", found.join("\n"));
    }

    #[test]
    fn a_token_that_starts_with_a_hyphen_is_a_value_before_or_after_the_subcommand() {
        for args in [
            ["troupe", "sessions", "--token", "-uAbc_def", "--url", "ws://127.0.0.1:1/ws"],
            ["troupe", "--token", "-uAbc_def", "sessions", "--url", "ws://127.0.0.1:1/ws"],
        ] {
            let parsed = Cli::try_parse_from(args).unwrap_or_else(|error| panic!("{args:?}: {error}"));
            let token = match &parsed.command {
                Some(super::Command::Sessions { client, .. }) => client.token.clone(),
                _ => None,
            }
            .or(parsed.client.token.clone());
            assert_eq!(token.as_deref(), Some("-uAbc_def"), "{args:?}");
        }
    }

    #[test]
    fn run_and_exec_take_a_session_or_a_new_sessions_cwd_not_both() {
        for command in ["run", "exec"] {
            assert!(Cli::try_parse_from(["troupe", command, "--session", "s", "--cwd", "/tmp", "hi"]).is_err());
            let parsed = Cli::try_parse_from(["troupe", command, "--session", "s", "hi"]).unwrap();
            let place = match parsed.command {
                Some(super::Command::Run { place, .. } | super::Command::Exec { place, .. }) => place,
                _ => panic!("{command} parsed as another command"),
            };
            assert_eq!((place.session.as_deref(), place.cwd), (Some("s"), None));
        }
        assert!(Cli::try_parse_from(["troupe", "exec", "--session", "s", "--mode", "yolo", "hi"]).is_err());
    }

    #[test]
    fn recall_and_cancel_name_a_run_by_id_or_session() {
        for command in ["recall", "cancel"] {
            for (args, expected) in [(vec!["r1"], (None, Some("r1"))), (vec!["--session", "s"], (Some("s"), None))] {
                let parsed = Cli::try_parse_from([&["troupe", command][..], &args].concat()).unwrap();
                let run = match parsed.command {
                    Some(super::Command::Recall { run, .. } | super::Command::Cancel { run, .. }) => run,
                    _ => panic!("{command} parsed as another command"),
                };
                assert_eq!((run.session.as_deref(), run.run_id.as_deref()), expected, "{command} {args:?}");
            }
        }
    }
}
