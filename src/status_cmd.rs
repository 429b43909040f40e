//! `troupe status` and `troupe config check`: is the daemon there, where are its files, what does it run with,
//! and is its configuration sound.
//!
//! `status` prints what it can find locally (the URL it tried, the data dir, the token file, the config's
//! problems) even when the daemon is not reachable, and exits 1 then, so that scripts can wait on it.

use std::path::PathBuf;

use clap::Subcommand;
use troupe_protocol::client::{ClientOptions, ClientProtocol};
use troupe_protocol::types::common::SessionStatus;
use troupe_protocol::types::daemon::DaemonStatusResult;
use troupe_protocol::types::runtime::{PROTOCOL_VERSION, RuntimeSnapshot, SandboxEnforcement};
use troupe_protocol::types::session::SessionListParams;
use troupe_runtime::data_dir::DataDir;

use crate::cli_errors::explained;
use crate::client_args::ClientArgs;
use crate::config_check_cmd::{problem_json, render_problems, restart_note};
use crate::connection::FailureKind;
use crate::inspect_cmd::closed_pipe_is_success;
use crate::style::Style;

/// `troupe status` and `troupe config …`, flattened into the `troupe` command line.
#[derive(Subcommand, Debug)]
pub enum StatusCommand {
    /// Whether the daemon is reachable, where its files are, its providers, sessions, sandbox and config
    /// problems. Exits 1 when the daemon cannot be reached.
    Status {
        #[command(flatten)]
        client: ClientArgs,
        /// Print JSON instead of words.
        #[arg(long)]
        json: bool,
    },
    /// The daemon's configuration (`config.toml` in the data dir).
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
}

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Check config.toml with the daemon's own loader (no daemon needed) and say whether a restart is due.
    /// Exits 1 when it has errors.
    Check {
        /// The data directory (default: $TROUPE_HOME, else ~/.troupe).
        #[arg(long, env = "TROUPE_HOME")]
        data_dir: Option<PathBuf>,
        /// Print JSON instead of words.
        #[arg(long)]
        json: bool,
    },
}

impl StatusCommand {
    /// Runs the command; its exit code: 1 when the daemon is unreachable (`status`) or the config has errors
    /// (`check`), else 0.
    pub fn run(self) -> anyhow::Result<u8> {
        let failed = match self {
            StatusCommand::Status { client, json } => crate::commands::block_on(status(&client, json)),
            StatusCommand::Config { command: ConfigCommand::Check { data_dir, json } } => {
                crate::config_check_cmd::check(data_dir, json)
            }
        };
        match failed {
            Ok(failed) => Ok(u8::from(failed)),
            Err(error) => closed_pipe_is_success(Err(error)).map(|()| 0),
        }
    }
}

/// What the daemon said, when it could be reached.
struct Reached {
    snapshot: RuntimeSnapshot,
    sessions: usize,
    running: usize,
    /// `daemon.status`; `None` from a daemon that predates it.
    daemon: Option<DaemonStatusResult>,
}

/// `troupe status`. Returns whether the daemon was unreachable.
async fn status(args: &ClientArgs, json: bool) -> anyhow::Result<bool> {
    let connection = args.connection();
    let url = connection.url();
    // A `--url` elsewhere (another machine, another data dir): the local files describe this machine only.
    let local = connection.targets_local_data_dir();
    let data_dir = DataDir::resolve(args.data_dir.clone())?;
    let token_file = data_dir.token_path();
    let reached = reach(&connection).await;
    let failure = reached.as_ref().err().map(|error| {
        error.downcast_ref::<crate::connection::ConnectFailure>().map_or(FailureKind::Other, |failure| failure.kind)
    });
    let problems = troupe_runtime::config::check_config(&data_dir);
    // Whether the daemon has the config's current contents: known of the local data dir's daemon only.
    let restart = local.then(|| restart_note(&data_dir));
    if json {
        let mut value = serde_json::json!({
            "reachable": reached.is_ok(),
            "failure": failure.map(failure_name),
            "url": url,
            "url_is_local_data_dir": local,
            "data_dir": data_dir.root().display().to_string(),
            "data_dir_exists": data_dir.root().is_dir(),
            "token_file": token_file.display().to_string(),
            "token_file_exists": token_file.is_file(),
            "token_from": if args.token.as_deref().is_some_and(|token| !token.is_empty()) { "--token" } else { "file" },
            "config_problems": problems.iter().map(problem_json).collect::<Vec<_>>(),
            "restart_needed": restart.as_ref().and_then(|(_, needed)| *needed),
            "config_note": restart.as_ref().map(|(note, _)| note.as_str()),
        });
        match &reached {
            Ok(reached) => {
                value["protocol_version"] = serde_json::json!(PROTOCOL_VERSION);
                value["providers"] = serde_json::to_value(&reached.snapshot.providers)?;
                value["sessions"] = serde_json::json!(reached.sessions);
                value["active_runs"] = serde_json::json!(reached.running);
                value["sandbox"] = serde_json::to_value(&reached.snapshot.sandbox)?;
                value["mcp_servers"] = serde_json::to_value(&reached.snapshot.mcp_servers)?;
                if let Some(daemon) = &reached.daemon {
                    value["daemon"] = serde_json::to_value(daemon)?;
                }
            }
            Err(error) => value["error"] = serde_json::json!(format!("{error:#}")),
        }
        crate::output::pretty_json(&value)?;
        return Ok(reached.is_err());
    }
    let style = Style::stdout();
    let mut text = String::new();
    let exists = |present: bool| if present { "" } else { " (missing)" };
    match (&reached, failure) {
        (Ok(_), _) => {
            text.push_str(&format!("daemon    {} at {url} (protocol {PROTOCOL_VERSION})\n", style.green("reachable")))
        }
        (Err(_), Some(FailureKind::TokenRefused)) => text.push_str(&format!(
            "daemon    {} at {url}, but it {}\n",
            style.yellow("reachable"),
            style.red("refused the token")
        )),
        (Err(_), Some(FailureKind::SocketPermission)) => {
            text.push_str(&format!("daemon    {} at {url}: no permission on its socket\n", style.red("not reachable")))
        }
        (Err(_), _) => text.push_str(&format!("daemon    {} at {url}\n", style.red("not reachable"))),
    }
    // Labelled as this machine's when the URL is not the data dir's daemon (which reports its own below).
    let (dir_label, token_label, config_label) = if local {
        ("data dir  ", "token     ", "config    ")
    } else {
        ("local data dir  ", "local token  ", "local config  ")
    };
    text.push_str(&format!("{dir_label}{}{}\n", data_dir.root().display(), exists(data_dir.root().is_dir())));
    if args.token.as_deref().is_some_and(|token| !token.is_empty()) {
        text.push_str("token     from --token (TROUPE_TOKEN)\n");
    } else {
        text.push_str(&format!("{token_label}{}{}\n", token_file.display(), exists(token_file.is_file())));
    }
    if let Ok(reached) = &reached {
        text.push_str(&describe_reached(reached, local));
    }
    if problems.is_empty() && !data_dir.config_path().is_file() {
        text.push_str(&format!(
            "{config_label}no {} (every setting has its default)\n",
            data_dir.config_path().display()
        ));
    } else if problems.is_empty() {
        text.push_str(&format!("{config_label}{}: no problems\n", data_dir.config_path().display()));
    } else {
        text.push_str(&format!("{config_label}{} problem(s):\n", problems.len()));
        for line in render_problems(&problems, style).lines() {
            text.push_str(&format!("  {line}\n"));
        }
    }
    if let Some((note, _)) = &restart {
        text.push_str(&format!("          {note}\n"));
    }
    if let Err(error) = &reached {
        // The connection's own explanation, with its hints (`troupe serve`, --url, --data-dir); it can quote the
        // daemon (which may be another machine's): terminal controls removed.
        text.push_str(&format!("{}\n", crate::style::clean(&format!("{error:#}"))));
    }
    crate::output::text(&text);
    Ok(reached.is_err())
}

/// A failure's name in `--json`.
fn failure_name(kind: FailureKind) -> &'static str {
    match kind {
        FailureKind::NoDaemon => "no_daemon",
        FailureKind::TokenRefused => "token_refused",
        FailureKind::SocketPermission => "socket_permission",
        FailureKind::Other => "other",
    }
}

async fn reach(connection: &crate::commands::Connection) -> anyhow::Result<Reached> {
    let connected = connection.open(ClientOptions::default()).await?;
    let client = connected.client;
    let snapshot = client.runtime_snapshot_get(Default::default()).await.map_err(explained)?.snapshot;
    let sessions = client.session_list(SessionListParams::default()).await.map_err(explained)?.sessions;
    let running = sessions.iter().filter(|session| session.status == SessionStatus::Running).count();
    // An older daemon answers -32601; the rest of the report stands without it.
    let daemon = client.daemon_status(Default::default()).await.ok();
    client.close().await;
    Ok(Reached { snapshot, sessions: sessions.len(), running, daemon })
}

/// `local`: the daemon is the local data dir's, whose path is already printed.
fn describe_reached(reached: &Reached, local: bool) -> String {
    let mut text = String::new();
    let connected: Vec<&str> = reached
        .snapshot
        .providers
        .iter()
        .filter(|provider| provider.connected)
        .map(|provider| provider.provider_id.as_str())
        .collect();
    let providers = if connected.is_empty() { "none connected".to_owned() } else { connected.join(", ") };
    text.push_str(&format!("providers {} (`troupe providers` for more)\n", crate::style::clean(&providers)));
    text.push_str(&format!("sessions  {} root session(s), {} with an active run\n", reached.sessions, reached.running));
    if let Some(daemon) = &reached.daemon {
        text.push_str(&describe_daemon(daemon, local));
    }
    match &reached.snapshot.sandbox {
        Some(sandbox) => {
            let enforced = match (&sandbox.tools_refused, sandbox.enforcement) {
                (Some(refusal), _) => format!("tools refused: {}", crate::style::clean(refusal)),
                (None, SandboxEnforcement::Landlock) => {
                    format!("landlock ABI {}", sandbox.landlock_abi.map_or("?".to_owned(), |abi| abi.to_string()))
                }
                (None, SandboxEnforcement::None) => "not enforced".to_owned(),
            };
            let network = if sandbox.network { "network on" } else { "no network" };
            text.push_str(&format!("sandbox   {} ({enforced}, {network})\n", sandbox.mode.as_str()));
        }
        None => text.push_str("sandbox   not reported by this daemon\n"),
    }
    text.extend(crate::mcp_cmd::status_line(&reached.snapshot.mcp_servers, Style::stdout()));
    text
}

/// The `daemon.status` lines: version and uptime (and its own data dir when it is not the local one), then what
/// it is doing now.
fn describe_daemon(daemon: &DaemonStatusResult, local: bool) -> String {
    let uptime = humantime::format_duration(std::time::Duration::from_secs(daemon.uptime_ms / 1000));
    let mut text = format!(
        "running   troupe {} for {uptime} (since {}), listening on {}\n",
        crate::style::clean(&daemon.version),
        crate::style::clean(&daemon.started_at),
        crate::style::clean(&daemon.listen)
    );
    if let Some(data_dir) = daemon.data_dir.as_ref().filter(|_| !local) {
        text.push_str(&format!("          its data dir: {}\n", crate::style::clean(data_dir)));
    }
    text.push_str(&format!(
        "now       {} connection(s), {} live and {} hibernated session(s), {} active run(s), {} pending approval(s)\n",
        daemon.connections,
        daemon.sessions_live,
        daemon.sessions_hibernated,
        daemon.runs_active,
        daemon.approvals_pending
    ));
    if let Some(cluster) = &daemon.cluster {
        let nats = if cluster.nats_connected { "connected to NATS" } else { "NATS unreachable: writes are refused" };
        let nodes = if cluster.live_nodes.is_empty() { "unknown".to_owned() } else { cluster.live_nodes.join(", ") };
        text.push_str(&format!(
            "cluster   node {} ({nats}); live nodes: {}\n",
            crate::style::clean(&cluster.node),
            crate::style::clean(&nodes)
        ));
    }
    text
}
