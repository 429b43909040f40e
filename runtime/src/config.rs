//! `config.toml`: the daemon's settings, read once at start.
//!
//! A missing file means every default. Unknown keys are errors rather than silently ignored, because a
//! misspelled limit that quietly keeps its default is worse than a daemon that refuses to start and names the
//! key. Errors name the file, the position and the key, but never quote the file's text.
//!
//! ```toml
//! listen = "127.0.0.1:7419"           # or "unix:/run/troupe/troupe.sock" for a proxy on the same host
//! allowed_origins = ["https://console.example.com"]
//! trust_proxy = false
//! metrics_public = false              # true: GET /metrics without the bearer token
//! [limits]
//! max_frame_bytes = 16777216
//! max_in_flight = 256
//! outbound_queue = 1024
//! outbound_queue_bytes = 8388608
//! reply_budget_bytes = 4194304
//! replay_stall_secs = 30
//! replay_page_bytes = 1048576
//! session_tail_bytes = 1048576
//! hibernate_after_secs = 60
//! max_input_bytes = 1048576
//! ping_interval_secs = 15
//! artifact_grace_secs = 3600
//! batch_linger_ms = 1                # how long a run's tool events may wait to share an fdatasync
//! [permissions]
//! default_mode = "auto_approve"   # the mode every tree starts in, and returns to at a restart (or "ask", ...)
//! rules = [
//!   { effect = "allow", action = "execute", resource = "cargo test*" },
//!   { effect = "deny", action = "write", resource = "**/.env" },
//! ]
//! [sandbox]
//! mode = "workspace-write"        # or "read-only", or "off" (no kernel sandbox at all)
//! deny_read = ["~/.kube"]         # added to ~/.ssh, ~/.aws, ~/.config/gcloud, ~/.gnupg, ~/.troupe and the data dir
//! writable = ["~/.cargo"]         # written by tool processes besides the cwd and the run's temp dir
//! network = true                  # false: tool processes get a network namespace with loopback only
//! enclosing_git_dir = "read-only"  # "writable": commands may write the git dir of a repository holding the cwd
//! env = ["CARGO_HOME"]            # passed to tool processes besides PATH, HOME, USER, LANG, LC_*, TERM, ...
//! [console]
//! enabled = true                  # the web console at /; false: no console, no sign-in links
//! session_hours = 24              # how long a browser stays signed in
//! [agents.reviewer]
//! models = ["anthropic/claude-sonnet-4-5"]
//! permissions = [{ effect = "deny", action = "write", resource = "**" }]
//! ```
//!
//! Permission rules are explained in [`crate::policy`]; every glob is compiled at load, so a bad one stops the
//! daemon with the rule's position (`permissions.rules[1]`, `agents.reviewer.permissions[0]`), never its text.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;

use serde::Deserialize;
use troupe_protocol::types::approval::PermissionAction;

use crate::error::RuntimeError;
use crate::policy::Effect;

/// The largest `[limits] batch_linger_ms`: longer, a subscriber would see a run's output visibly late.
pub const MAX_BATCH_LINGER_MS: u64 = 100;

/// The smallest `[limits] reply_budget_bytes`: below it a connection could not build even a small reply page
/// without waiting for another.
pub const MIN_REPLY_BUDGET_BYTES: usize = 64 * 1024;

/// The default listen address: loopback only, so a fresh daemon is never reachable from the network.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7419";

/// The daemon's settings.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where the WebSocket server listens: a TCP address or a unix socket (`listen.rs`).
    pub listen: Listen,
    /// Browser origins allowed besides the daemon's own, normalized to lowercase `scheme://host[:port]` without a
    /// default port or trailing slash, so they compare equal to what browsers send in `Origin`.
    pub allowed_origins: Vec<String>,
    /// Whether `X-Forwarded-Host` and `X-Forwarded-Proto` describe the daemon's own origin (behind a proxy).
    pub trust_proxy: bool,
    /// Whether `GET /metrics` is served without the bearer token (for a scraper on a trusted network).
    pub metrics_public: bool,
    pub limits: Limits,
    /// Agents by name, in addition to (or replacing) the built-in `default`.
    pub agents: std::collections::BTreeMap<String, AgentConfig>,
    pub tools: ToolSettings,
    /// Permission rules for every agent; see [`crate::policy`].
    pub permissions: PermissionsConfig,
    /// The kernel sandbox of tool processes; see [`crate::sandbox`].
    pub sandbox: SandboxConfig,
    /// Automatic runs of session goals; see [`GoalsConfig`].
    pub goals: GoalsConfig,
    /// The `delegate` tool's depth and concurrency bounds; see [`DelegationConfig`].
    pub delegation: DelegationConfig,
    /// What the daemon knows of models beyond its catalog (context window, prices); see [`models`].
    pub models: ModelsConfig,
    /// Automatic compaction of a run's history; see [`CompactionConfig`].
    pub compaction: CompactionConfig,
    /// Automatic session titles; see [`TitlesConfig`].
    pub titles: TitlesConfig,
    /// Plugin subprocesses by name; see [`plugins`].
    pub plugins: std::collections::BTreeMap<String, PluginConfig>,
    /// MCP servers by name, whose tools runs offer the model; see [`mcp`].
    pub mcp_servers: std::collections::BTreeMap<String, McpServerConfig>,
    /// The web console at `/`; see [`ConsoleConfig`].
    pub console: ConsoleConfig,
    /// A cluster on NATS JetStream; see [`ClusterConfig`]. Absent: a single node on its file store.
    pub cluster: ClusterConfig,
}

mod listen;
pub use listen::{Listen, UNIX_PREFIX};

mod plugins;
pub use plugins::{MAX_PLUGIN_NAME_CHARS, PluginConfig, validate_plugin_name};

pub mod mcp;
pub use mcp::{McpServerConfig, validate_mcp_server_name};

mod goals;
pub use goals::GoalsConfig;

mod delegation;
pub use delegation::DelegationConfig;

mod titles;
pub use titles::TitlesConfig;

pub mod cluster;
pub use cluster::ClusterConfig;

mod console;
pub use console::{ConsoleConfig, MAX_CONSOLE_SESSION_HOURS};

pub mod models;
pub use models::{CompactionConfig, ModelsConfig};

mod check;
pub use check::{ConfigProblem, ProblemSeverity, check_config, config_warnings};

pub use troupe_protocol::types::runtime::{EnclosingGitDir, SandboxMode};

/// `[sandbox]`: the kernel's bounds on every process a tool starts.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    pub mode: SandboxMode,
    /// Paths (a leading `~/` is the daemon user's home) that tool processes may neither read nor write, in
    /// addition to the built-in list and the data directory, which cannot be removed.
    pub deny_read: Vec<String>,
    /// Paths tool processes may write besides the session's cwd and the run's temp dir (`workspace-write` only).
    pub writable: Vec<String>,
    /// Whether tool processes reach the network. `false` runs them in a new network namespace (loopback only).
    pub network: bool,
    /// Whether commands may write the git directory of the repository holding the session's directory when it
    /// lies outside it (a subfolder of a repository, a worktree); see [`EnclosingGitDir`].
    pub enclosing_git_dir: EnclosingGitDir,
    /// Names of the daemon's environment variables that tool processes get besides the built-in allowlist
    /// ([`crate::sandbox::environment`]); every other variable of the daemon stays out of their reach.
    pub env: Vec<String>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            mode: SandboxMode::default(),
            deny_read: Vec::new(),
            writable: Vec::new(),
            network: true,
            enclosing_git_dir: EnclosingGitDir::default(),
            env: Vec::new(),
        }
    }
}

/// An agent: a description and its fallback chain of models, first choice first.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    #[serde(default)]
    pub description: String,
    /// `<provider>/<model id>` entries; at least one.
    pub models: Vec<String>,
    /// Permission rules of this agent; they override `[permissions] rules` (see [`crate::policy`]).
    #[serde(default)]
    pub permissions: Vec<PermissionRuleConfig>,
}

/// `[permissions]`: rules that apply to every agent, and the mode a tree starts in.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PermissionsConfig {
    /// In order; when several match a call, the last one wins.
    pub rules: Vec<PermissionRuleConfig>,
    /// The permission mode of every session tree until a client sets another with `session.set_permission_mode`.
    /// The reference makes a tree's mode runtime-only, so a restart puts every tree back in this mode: an operator
    /// who wants `ask` after every restart says so here rather than trusting a mode a client set before it.
    pub default_mode: troupe_protocol::types::session::PermissionMode,
}

/// One permission rule as written in `config.toml`: `{ effect, action?, resource, tool? }`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermissionRuleConfig {
    /// `allow`, `ask` or `deny`.
    pub effect: Effect,
    /// `read`, `write`, `execute` or `network`; every action when absent.
    #[serde(default)]
    pub action: Option<PermissionAction>,
    /// A glob over the resource (a resolved absolute path, the command line for `execute`, the host for `network`).
    pub resource: String,
    /// A tool name such as `shell` or `write_file`; every tool when absent.
    #[serde(default)]
    pub tool: Option<String>,
}

/// The largest `[tools] max_stored_output_bytes`: a bound on what one call's stream may add to the data dir.
pub const MAX_STORED_OUTPUT_BYTES: u64 = 1024 * 1024 * 1024;

/// Limits of the tools runs use.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolSettings {
    /// A shell command is killed (with its whole process group) after this many seconds.
    pub shell_timeout_secs: u64,
    /// Output kept per stream in a tool's result; the live stream is not capped.
    pub max_output_bytes: usize,
    /// When a call's output is longer than `max_output_bytes`, the whole of it is stored for `tool_output.read`
    /// (the result's `output_ref`): at most this many bytes of each stream.
    pub max_stored_output_bytes: u64,
    /// `web_fetch` may reach addresses of this machine and its local network (loopback, private, link-local): a
    /// docs server on localhost or the LAN. Off by default: the daemon fetches from where it runs, and a page of the
    /// model's choosing must not reach its port, other local services or a cloud's metadata endpoint.
    pub web_fetch_local: bool,
    /// In a git repository, snapshot the work tree around shell commands so `troupe diff` shows what they changed
    /// (a few `git` processes per command; turn off for a very large work tree).
    pub shell_snapshots: bool,
}

impl Default for ToolSettings {
    fn default() -> Self {
        ToolSettings {
            shell_timeout_secs: 120,
            max_output_bytes: 64 * 1024,
            max_stored_output_bytes: 8 * 1024 * 1024,
            web_fetch_local: false,
            shell_snapshots: true,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            // The same address as `DEFAULT_LISTEN`; a unit test keeps the two in agreement.
            listen: Listen::Tcp(SocketAddr::from((Ipv4Addr::LOCALHOST, 7419))),
            allowed_origins: Vec::new(),
            trust_proxy: false,
            metrics_public: false,
            limits: Limits::default(),
            agents: std::collections::BTreeMap::new(),
            tools: ToolSettings::default(),
            permissions: PermissionsConfig::default(),
            sandbox: SandboxConfig::default(),
            goals: GoalsConfig::default(),
            delegation: DelegationConfig::default(),
            models: ModelsConfig::default(),
            compaction: CompactionConfig::default(),
            titles: TitlesConfig::default(),
            plugins: std::collections::BTreeMap::new(),
            mcp_servers: std::collections::BTreeMap::new(),
            console: ConsoleConfig::default(),
            cluster: ClusterConfig::default(),
        }
    }
}

/// Bounds that keep memory use predictable whatever clients do.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// A larger frame closes the connection with 1009.
    pub max_frame_bytes: usize,
    /// Requests in flight per connection; beyond it a request is answered `overloaded`.
    pub max_in_flight: usize,
    /// Frames queued per connection before a subscriber gets a gap.
    pub outbound_queue: usize,
    /// Bytes queued per connection (frames not yet written to the socket) before a subscriber gets a gap. A frame
    /// always fits an empty queue, so this may be smaller than `max_frame_bytes`.
    pub outbound_queue_bytes: usize,
    /// Bytes of replies being built and of stored events being read for replays, per connection. A client that
    /// pipelines many `events.subscribe` requests gets a few replies built at a time. At least 64 KiB.
    pub reply_budget_bytes: usize,
    /// Seconds a replayed event may wait for room in a connection's outbound queue before the subscriber is sent
    /// a gap (it must resubscribe from its cursor).
    pub replay_stall_secs: u64,
    /// Bytes of events in one `events.subscribe` reply (a reply holds at least one event, whatever its size); the
    /// rest follow as notifications. Capped at `reply_budget_bytes`: read it with [`Limits::page_bytes`].
    pub replay_page_bytes: usize,
    /// Bytes of recent events a live session keeps in memory; replays of older events read the log.
    pub session_tail_bytes: usize,
    /// An idle session with no subscribers stops after this many seconds.
    pub hibernate_after_secs: u64,
    /// The largest input of `run.start` or `run.steer`, in bytes (UTF-8). A larger one is refused (-32602
    /// `input_too_large`) before anything is written. At most a quarter of `max_frame_bytes`, so that the events
    /// and replies holding it fit a frame with room; unset, 1 MiB or that quarter, whichever is smaller. Read it
    /// with [`Limits::input_bytes`].
    pub max_input_bytes: Option<usize>,
    /// Seconds between the keepalive pings the daemon sends on every connection; a connection that has not
    /// answered for three intervals is closed. A reverse proxy's read timeout must be longer than this interval
    /// (deploy/nginx/troupe.conf). Tests set it short to prove that an idle connection survives a proxy.
    pub ping_interval_secs: u64,
    /// Seconds an artifact (`<data_dir>/artifacts/`) that no session names is kept after it was written, before
    /// it is collected: a file is stored before the event naming it is appended. Tests set it to 0.
    pub artifact_grace_secs: u64,
    /// Milliseconds a run's events that nothing waits for (a model attempt's start, a tool call's start, progress and
    /// result; not text deltas)
    /// may wait for company before their batch is written, when none is being written: a quick tool turn and the
    /// next turn's commit then share one `fdatasync`. Subscribers see those events up to this much later. 0 writes
    /// each at once; at most [`MAX_BATCH_LINGER_MS`].
    pub batch_linger_ms: u64,
}

impl Limits {
    /// Bytes of events in one `events.subscribe` reply: `replay_page_bytes`, within the reply budget.
    pub fn page_bytes(&self) -> usize {
        self.replay_page_bytes.min(self.reply_budget_bytes)
    }

    /// The largest input of `run.start` or `run.steer`, in bytes.
    pub fn input_bytes(&self) -> usize {
        self.max_input_bytes.unwrap_or((1024 * 1024).min(self.max_frame_bytes / 4))
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame_bytes: 16 * 1024 * 1024,
            max_in_flight: 256,
            outbound_queue: 1024,
            outbound_queue_bytes: 8 * 1024 * 1024,
            reply_budget_bytes: 4 * 1024 * 1024,
            replay_stall_secs: 30,
            replay_page_bytes: 1024 * 1024,
            session_tail_bytes: 1024 * 1024,
            hibernate_after_secs: 60,
            max_input_bytes: None,
            ping_interval_secs: 15,
            artifact_grace_secs: 3600,
            batch_linger_ms: 1,
        }
    }
}

/// Reads and validates the configuration at `path`; a missing file gives [`Config::default`].
pub fn load(path: &Path) -> Result<Config, RuntimeError> {
    match read_text(path)? {
        Some(text) => parse(&text, path),
        None => Ok(Config::default()),
    }
}

/// The text of the configuration file at `path`, `None` when there is none.
fn read_text(path: &Path) -> Result<Option<String>, RuntimeError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(RuntimeError::io("read the configuration file", path, error)),
    }
}

/// Parses and validates configuration text; `path` is only used in error messages.
fn parse(text: &str, path: &Path) -> Result<Config, RuntimeError> {
    let mut config: Config = toml::from_str(text).map_err(|error| syntax_error(text, path, &error))?;
    validate(&mut config).map_err(|detail| RuntimeError::ConfigInvalid { path: path.to_path_buf(), detail })?;
    Ok(config)
}

/// The error of a TOML error in `text`, at its position.
fn syntax_error(text: &str, path: &Path, error: &toml::de::Error) -> RuntimeError {
    let (line, column) = error_position(text, error);
    // `message()` is the parser's description alone ("unknown field `x`, expected one of ..."); the error's
    // `Display` would also quote the offending source line, which this crate never puts in an error.
    RuntimeError::ConfigSyntax { path: path.to_path_buf(), line, column, message: error.message().to_owned() }
}

/// The 1-based line and column where a TOML error in `text` starts (1:1 when it has no position).
fn error_position(text: &str, error: &toml::de::Error) -> (usize, usize) {
    error.span().map_or((1, 1), |span| line_and_column(text, span.start))
}

/// The 1-based line and column (in characters) of a byte offset.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

/// Checks ranges and normalizes origins in place. The error describes the first problem by key and index only.
fn validate(config: &mut Config) -> Result<(), String> {
    validation_problems(config).into_iter().next().map_or(Ok(()), Err)
}

/// Every problem [`validate`] finds, not only the first (`troupe config check` lists them all at once): one per
/// limit, agent, rule, path and origin, and the first of each of the plugins, goals, delegation and models
/// sections. Origins are normalized in place.
fn validation_problems(config: &mut Config) -> Vec<String> {
    let mut problems = Vec::new();
    let limits = &config.limits;
    for (key, value) in [
        ("limits.max_frame_bytes", limits.max_frame_bytes as u64),
        ("limits.max_in_flight", limits.max_in_flight as u64),
        ("limits.outbound_queue", limits.outbound_queue as u64),
        ("limits.outbound_queue_bytes", limits.outbound_queue_bytes as u64),
        ("limits.replay_stall_secs", limits.replay_stall_secs),
        ("limits.replay_page_bytes", limits.replay_page_bytes as u64),
        ("limits.hibernate_after_secs", limits.hibernate_after_secs),
        ("limits.ping_interval_secs", limits.ping_interval_secs),
    ] {
        if value == 0 {
            problems.push(format!("{key} must be greater than 0"));
        }
    }
    if limits.batch_linger_ms > MAX_BATCH_LINGER_MS {
        problems.push(format!("limits.batch_linger_ms must be at most {MAX_BATCH_LINGER_MS}"));
    }
    if limits.reply_budget_bytes < MIN_REPLY_BUDGET_BYTES {
        problems.push(format!("limits.reply_budget_bytes must be at least {MIN_REPLY_BUDGET_BYTES} (64 KiB)"));
    }
    if let Some(input) = config.limits.max_input_bytes
        && (input == 0 || input > config.limits.max_frame_bytes / 4)
    {
        problems.push(
            "limits.max_input_bytes must be greater than 0 and at most a quarter of limits.max_frame_bytes".to_owned(),
        );
    }
    if config.tools.shell_timeout_secs == 0 || config.tools.max_output_bytes == 0 {
        problems.push("tools.shell_timeout_secs and tools.max_output_bytes must be greater than 0".to_owned());
    }
    if config.tools.max_stored_output_bytes > MAX_STORED_OUTPUT_BYTES {
        problems.push(format!(
            "tools.max_stored_output_bytes must be at most {MAX_STORED_OUTPUT_BYTES} (1 GiB); 0 stores no whole outputs"
        ));
    }
    for (name, agent) in &config.agents {
        if agent.models.is_empty() {
            problems.push(format!("agents.{name}.models must name at least one model"));
        }
        if let Some(model) = agent.models.iter().find(|model| !model.contains('/')) {
            problems.push(format!("agents.{name}.models: `{model}` is not of the form <provider>/<model id>"));
        }
        for (index, rule) in agent.permissions.iter().enumerate() {
            if let Err(problem) = crate::policy::validate_rule(rule) {
                problems.push(format!("agents.{name}.permissions[{index}]: {problem}"));
            }
        }
    }
    for (index, rule) in config.permissions.rules.iter().enumerate() {
        if let Err(problem) = crate::policy::validate_rule(rule) {
            problems.push(format!("permissions.rules[{index}]: {problem}"));
        }
    }
    for (key, paths) in
        [("sandbox.deny_read", &config.sandbox.deny_read), ("sandbox.writable", &config.sandbox.writable)]
    {
        for (index, path) in paths.iter().enumerate() {
            if !(path.starts_with('/') || path.starts_with("~/") || path == "~") {
                problems.push(format!("{key}[{index}] must be an absolute path, ~ or start with ~/"));
            }
        }
    }
    for (index, name) in config.sandbox.env.iter().enumerate() {
        if let Err(problem) = crate::sandbox::environment::check_listed_name(name) {
            problems.push(format!("sandbox.env[{index}] {problem}"));
        }
    }
    for section in [
        plugins::validate(&config.plugins),
        goals::validate(&config.goals),
        delegation::validate(&config.delegation),
        models::validate(&config.models, &config.compaction),
        console::validate(&config.console),
        cluster::validate(&config.cluster),
    ] {
        problems.extend(section.err());
    }
    problems.extend(mcp::validate(&config.mcp_servers));
    for (index, origin) in config.allowed_origins.iter_mut().enumerate() {
        match normalize_origin(origin) {
            Ok(normalized) => *origin = normalized,
            Err(problem) => problems
                .push(format!("allowed_origins[{index}] is not an origin of the form scheme://host[:port]: {problem}")),
        }
    }
    problems
}

/// Normalizes `scheme://host[:port]` (a single trailing slash tolerated) to lowercase, dropping the default port
/// of http and https because browsers omit it from `Origin`. The error is a fixed description of the problem.
fn normalize_origin(origin: &str) -> Result<String, &'static str> {
    let lowercase = origin.trim().to_ascii_lowercase();
    let (scheme, rest) = lowercase.split_once("://").ok_or("missing scheme://")?;
    let mut scheme_bytes = scheme.bytes();
    let scheme_is_valid = scheme_bytes.next().is_some_and(|first| first.is_ascii_alphabetic())
        && scheme_bytes.all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'+' | b'-' | b'.'));
    if !scheme_is_valid {
        return Err("invalid scheme");
    }
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains(['/', '?', '#']) {
        return Err("has a path, query or fragment");
    }
    if authority.contains('@') {
        return Err("has user information");
    }
    let (host, port) = split_host_and_port(authority)?;
    if host.is_empty() {
        return Err("missing host");
    }
    let host_is_valid = if host.starts_with('[') {
        host.len() > 2 && host.ends_with(']') && host[1..host.len() - 1].parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        host.bytes().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_'))
    };
    if !host_is_valid {
        return Err("invalid host");
    }
    let port = match port {
        None => None,
        Some(port) => Some(port.parse::<u16>().map_err(|_| "invalid port")?),
    };
    let default_port = match scheme {
        "http" | "ws" => Some(80),
        "https" | "wss" => Some(443),
        _ => None,
    };
    Ok(match port {
        Some(port) if Some(port) != default_port => format!("{scheme}://{host}:{port}"),
        _ => format!("{scheme}://{host}"),
    })
}

/// Splits `host[:port]`, where the host may be a bracketed IPv6 address containing colons.
fn split_host_and_port(authority: &str) -> Result<(&str, Option<&str>), &'static str> {
    if authority.starts_with('[') {
        let closing = authority.find(']').ok_or("invalid host")?;
        let (host, after) = authority.split_at(closing + 1);
        return match after {
            "" => Ok((host, None)),
            _ => after.strip_prefix(':').map(|port| (host, Some(port))).ok_or("invalid host"),
        };
    }
    Ok(match authority.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_text(text: &str) -> Result<Config, RuntimeError> {
        parse(text, Path::new("/data/config.toml"))
    }

    #[test]
    fn defaults_match_the_documented_values() {
        let config = Config::default();
        assert_eq!(config.listen, DEFAULT_LISTEN.parse::<Listen>().unwrap());
        assert_eq!(config.limits.max_frame_bytes, 16_777_216);
        assert_eq!(config.limits.max_in_flight, 256);
        assert_eq!(config.limits.outbound_queue, 1024);
        assert_eq!(config.limits.outbound_queue_bytes, 8 * 1024 * 1024);
        assert_eq!(config.limits.reply_budget_bytes, 4 * 1024 * 1024);
        assert_eq!(config.limits.replay_stall_secs, 30);
        assert_eq!(config.limits.hibernate_after_secs, 60);
        assert!(config.allowed_origins.is_empty());
        assert!(!config.trust_proxy);
    }

    #[test]
    fn a_missing_file_gives_defaults() {
        let temp = tempfile::tempdir().unwrap();
        assert_eq!(load(&temp.path().join("config.toml")).unwrap(), Config::default());
    }

    #[test]
    fn a_full_file_is_read_and_origins_are_normalized() {
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("config.toml");
        std::fs::write(
            &path,
            r#"
listen = "0.0.0.0:9000"
allowed_origins = ["HTTPS://Console.Example.com/", "http://localhost:80", "http://[::1]:3000", "tauri://localhost"]
trust_proxy = true
[limits]
max_frame_bytes = 1024
max_in_flight = 8
outbound_queue = 16
outbound_queue_bytes = 4096
reply_budget_bytes = 65536
replay_stall_secs = 2
replay_page_bytes = 32768
session_tail_bytes = 0
hibernate_after_secs = 5
artifact_grace_secs = 0
"#,
        )
        .unwrap();
        let config = load(&path).unwrap();
        assert_eq!(config.listen, "0.0.0.0:9000".parse::<Listen>().unwrap());
        assert_eq!(
            config.allowed_origins,
            ["https://console.example.com", "http://localhost", "http://[::1]:3000", "tauri://localhost"]
        );
        assert!(config.trust_proxy);
        assert_eq!(
            config.limits,
            Limits {
                max_frame_bytes: 1024,
                max_in_flight: 8,
                outbound_queue: 16,
                outbound_queue_bytes: 4096,
                reply_budget_bytes: 65536,
                replay_stall_secs: 2,
                replay_page_bytes: 32768,
                session_tail_bytes: 0,
                hibernate_after_secs: 5,
                max_input_bytes: None,
                ping_interval_secs: 15,
                artifact_grace_secs: 0,
                batch_linger_ms: 1,
            }
        );
    }

    #[test]
    fn the_input_limit_defaults_to_a_mebibyte_within_a_quarter_frame_and_is_checked() {
        assert_eq!(parse_text("").unwrap().limits.input_bytes(), 1024 * 1024);
        assert_eq!(parse_text("[limits]\nmax_frame_bytes = 1024\n").unwrap().limits.input_bytes(), 256);
        assert_eq!(parse_text("[limits]\nmax_input_bytes = 5000\n").unwrap().limits.input_bytes(), 5000);
        for bad in ["[limits]\nmax_input_bytes = 0\n", "[limits]\nmax_frame_bytes = 1024\nmax_input_bytes = 300\n"] {
            let error = parse_text(bad).unwrap_err().to_string();
            assert!(error.contains("limits.max_input_bytes"), "{error}");
        }
    }

    #[test]
    fn the_batch_linger_defaults_to_a_millisecond_and_is_bounded() {
        assert_eq!(parse_text("").unwrap().limits.batch_linger_ms, 1);
        assert_eq!(parse_text("[limits]\nbatch_linger_ms = 0\n").unwrap().limits.batch_linger_ms, 0);
        let error = parse_text("[limits]\nbatch_linger_ms = 101\n").unwrap_err().to_string();
        assert!(error.contains("limits.batch_linger_ms must be at most 100"), "{error}");
    }

    #[test]
    fn a_partial_file_keeps_the_other_defaults() {
        let config = parse_text("[limits]\nmax_in_flight = 4\n").unwrap();
        assert_eq!(config.limits.max_in_flight, 4);
        assert_eq!(config.limits.outbound_queue, 1024);
        assert_eq!(config.listen, Config::default().listen);
    }

    #[test]
    fn unknown_keys_name_the_file_and_the_key_without_quoting_the_text() {
        let error = parse_text("listen = \"127.0.0.1:1\"\nsecret_thing = \"do-not-echo\"\n").unwrap_err();
        let message = error.to_string();
        assert!(message.contains("/data/config.toml"), "{message}");
        assert!(message.contains("secret_thing"), "{message}");
        assert!(message.contains("line 2"), "{message}");
        assert!(!message.contains("do-not-echo"), "{message}");

        let nested = parse_text("[limits]\nmax_frames = 3\n").unwrap_err().to_string();
        assert!(nested.contains("max_frames"), "{nested}");
    }

    #[test]
    fn zero_limits_are_rejected() {
        let message = parse_text("[limits]\noutbound_queue = 0\n").unwrap_err().to_string();
        assert!(message.contains("limits.outbound_queue must be greater than 0"), "{message}");
        for key in ["outbound_queue_bytes", "replay_stall_secs"] {
            let message = parse_text(&format!("[limits]\n{key} = 0\n")).unwrap_err().to_string();
            assert!(message.contains(&format!("limits.{key} must be greater than 0")), "{message}");
        }
    }

    #[test]
    fn the_reply_budget_is_at_least_64_kib() {
        let message = parse_text("[limits]\nreply_budget_bytes = 65535\n").unwrap_err().to_string();
        assert!(message.contains("limits.reply_budget_bytes must be at least 65536"), "{message}");
        assert_eq!(parse_text("[limits]\nreply_budget_bytes = 65536\n").unwrap().limits.reply_budget_bytes, 65536);
        let capped = parse_text("[limits]\nreply_budget_bytes = 65536\n").unwrap().limits;
        assert_eq!(capped.page_bytes(), 65536, "a page fits the reply budget");
        let message = parse_text("[limits]\nreplay_page_bytes = 0\n").unwrap_err().to_string();
        assert!(message.contains("limits.replay_page_bytes must be greater than 0"), "{message}");
    }

    #[test]
    fn a_bad_listen_address_is_rejected() {
        let error = parse_text("listen = \"localhost\"\n").unwrap_err();
        assert!(matches!(error, RuntimeError::ConfigSyntax { line: 1, .. }), "{error:?}");
        let error = parse_text("listen = \"unix:relative.sock\"\n").unwrap_err();
        assert!(matches!(error, RuntimeError::ConfigSyntax { line: 1, .. }), "{error:?}");
    }

    #[test]
    fn a_unix_socket_listen_is_a_path() {
        let config = parse_text("listen = \"unix:/run/troupe/troupe.sock\"\n").unwrap();
        assert_eq!(config.listen, Listen::Unix("/run/troupe/troupe.sock".into()));
    }

    #[test]
    fn permission_rules_are_read_for_the_daemon_and_per_agent() {
        let config = parse_text(
            r#"
[permissions]
rules = [
  { effect = "allow", action = "execute", resource = "cargo test*" },
  { effect = "deny",  action = "write",   resource = "**/.env" },
]
[agents.reviewer]
models = ["local/echo"]
permissions = [{ effect = "ask", resource = "**", tool = "write_file" }]
"#,
        )
        .unwrap();
        assert_eq!(
            config.permissions.rules,
            [
                PermissionRuleConfig {
                    effect: Effect::Allow,
                    action: Some(PermissionAction::Execute),
                    resource: "cargo test*".into(),
                    tool: None,
                },
                PermissionRuleConfig {
                    effect: Effect::Deny,
                    action: Some(PermissionAction::Write),
                    resource: "**/.env".into(),
                    tool: None,
                },
            ]
        );
        assert_eq!(
            config.agents["reviewer"].permissions,
            [PermissionRuleConfig {
                effect: Effect::Ask,
                action: None,
                resource: "**".into(),
                tool: Some("write_file".into()),
            }]
        );
        assert!(Config::default().permissions.rules.is_empty());
    }

    #[test]
    fn unknown_keys_and_values_in_permission_rules_are_rejected() {
        let unknown =
            parse_text("[permissions]\nrules = [{ effect = \"allow\", resource = \"x\", note = \"s3cr3t\" }]\n")
                .unwrap_err()
                .to_string();
        assert!(unknown.contains("note"), "{unknown}");
        assert!(!unknown.contains("s3cr3t"), "{unknown}");
        let effect = parse_text("[permissions]\nrules = [{ effect = \"maybe\", resource = \"x\" }]\n").unwrap_err();
        assert!(matches!(effect, RuntimeError::ConfigSyntax { line: 2, .. }), "{effect:?}");
        let missing = parse_text("[permissions]\nrules = [{ effect = \"deny\" }]\n").unwrap_err().to_string();
        assert!(missing.contains("resource"), "{missing}");
        let section = parse_text("[permissions]\nmode = \"yolo\"\n").unwrap_err().to_string();
        assert!(section.contains("mode"), "{section}");
    }

    #[test]
    fn bad_globs_are_rejected_by_position_without_quoting_the_glob() {
        let message = parse_text(
            "[permissions]\nrules = [{ effect = \"allow\", resource = \"ok/**\" }, { effect = \"deny\", resource = \"[s3cr3t\" }]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(message.contains("permissions.rules[1]"), "{message}");
        assert!(message.contains("invalid glob"), "{message}");
        assert!(!message.contains("s3cr3t"), "{message}");

        let agent = parse_text(
            "[agents.a]\nmodels = [\"local/echo\"]\npermissions = [{ effect = \"deny\", resource = \"{s3cr3t\" }]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(agent.contains("agents.a.permissions[0]"), "{agent}");
        assert!(!agent.contains("s3cr3t"), "{agent}");

        let empty =
            parse_text("[permissions]\nrules = [{ effect = \"deny\", resource = \"\" }]\n").unwrap_err().to_string();
        assert!(empty.contains("permissions.rules[0]: resource must not be empty"), "{empty}");
    }

    #[test]
    fn origins_with_paths_or_without_scheme_are_rejected() {
        for origin in [
            "https://example.com/app",
            "example.com",
            "https://",
            "https://user@example.com",
            "https://example.com:99999",
            "null",
            "*",
        ] {
            let text = format!("allowed_origins = [\"https://fine.example\", \"{origin}\"]\n");
            let message = parse_text(&text).unwrap_err().to_string();
            assert!(message.contains("allowed_origins[1]"), "{origin}: {message}");
        }
    }
}
