//! Handshake and the runtime snapshot (providers, models, agents).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The only protocol version this daemon speaks.
pub const PROTOCOL_VERSION: u32 = 20;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HandshakeParams {
    pub protocol_version: u32,
    /// troupe extension: who is connecting, shown to other clients by `session.presence`. Optional; a strict
    /// protocol-20 client leaves it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_info: Option<ClientInfo>,
}

impl HandshakeParams {
    /// The handshake of protocol 20 with no `client_info`.
    pub fn new() -> Self {
        HandshakeParams { protocol_version: PROTOCOL_VERSION, client_info: None }
    }
}

impl Default for HandshakeParams {
    fn default() -> Self {
        Self::new()
    }
}

/// The longest `client_info.name` and `client_info.version`, in bytes: enough for a product name, short enough
/// that every presence list stays small.
pub const CLIENT_INFO_MAX_BYTES: usize = 128;

/// `handshake`'s `client_info` (troupe extension): the connecting program's own name and version, as it wants
/// other clients to see them. It is a label, not an identity: nothing checks it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientInfo {
    /// 1 to 128 bytes, no control or format characters (e.g. `"troupe cli"`, `"web console"`).
    pub name: String,
    /// At most 128 bytes, no control or format characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

impl ClientInfo {
    /// A `client_info` with a name and no version.
    pub fn named(name: &str) -> Self {
        ClientInfo { name: name.to_owned(), version: None }
    }

    /// Checks the bounds the schema cannot say. The error names the field and what is wrong with it; the
    /// protocol layer turns it into -32602 `invalid_client_info`. Control characters are refused because the
    /// name ends up in other people's terminals and pages.
    pub fn validate(&self) -> Result<(), String> {
        fn check(field: &str, value: &str, may_be_empty: bool) -> Result<(), String> {
            if value.is_empty() && !may_be_empty {
                return Err(format!("`client_info.{field}` is empty; give the client's name, e.g. \"my tool\""));
            }
            if value.len() > CLIENT_INFO_MAX_BYTES {
                return Err(format!(
                    "`client_info.{field}` is {} bytes; at most {CLIENT_INFO_MAX_BYTES} are accepted",
                    value.len()
                ));
            }
            // Format characters (bidi overrides, zero-width ones) would let a name show as another in presence lists.
            if value.chars().any(|c| c.is_control() || crate::diagnostic::is_format_control(c)) {
                return Err(format!(
                    "`client_info.{field}` contains a control or format character; send printable text only"
                ));
            }
            Ok(())
        }
        check("name", &self.name, false)?;
        if let Some(version) = &self.version {
            check("version", version, true)?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ServerInfo {
    pub name: String,
    pub version: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HandshakeResult {
    pub protocol_version: u32,
    pub server: ServerInfo,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// Built in and offline.
    Local,
    /// Any OpenAI-compatible Chat Completions endpoint.
    Openai,
    /// The Anthropic Messages API.
    Anthropic,
}

impl ProviderKind {
    /// Every kind, in the catalog's order.
    pub const ALL: [ProviderKind; 3] = [ProviderKind::Anthropic, ProviderKind::Local, ProviderKind::Openai];

    /// The `provider_id` of the daemon's one provider of this kind.
    pub const fn provider_id(self) -> &'static str {
        match self {
            ProviderKind::Local => "local",
            ProviderKind::Openai => "openai",
            ProviderKind::Anthropic => "anthropic",
        }
    }

    /// The kind of the provider `provider_id`; `None` for an id the daemon has no provider of.
    pub fn of_provider_id(provider_id: &str) -> Option<ProviderKind> {
        ProviderKind::ALL.into_iter().find(|kind| kind.provider_id() == provider_id)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuthState {
    /// Needs no credentials.
    NotRequired,
    /// Connected with stored credentials.
    Configured,
    /// Not connected.
    Missing,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProviderInfo {
    pub provider_id: String,
    pub name: String,
    pub kind: ProviderKind,
    pub connected: bool,
    pub auth_state: AuthState,
    /// Increases each time the provider's durable connection changes.
    pub generation: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelPricing {
    pub input_per_million_usd: f64,
    pub output_per_million_usd: f64,
    #[serde(default)]
    pub cache_read_per_million_usd: Option<f64>,
    #[serde(default)]
    pub cache_write_per_million_usd: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelInfo {
    /// `<provider_id>/<model id>`.
    pub model: String,
    pub name: String,
    pub provider_id: String,
    pub context_window: Option<u64>,
    pub pricing: Option<ModelPricing>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AgentMode {
    Primary,
    Subagent,
    All,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentInfo {
    pub agent: String,
    pub description: String,
    pub mode: AgentMode,
    /// The fallback chain, first choice first.
    pub models: Vec<crate::types::common::ModelSelection>,
}

/// One coherent view of what the daemon can run. Every list is sorted by its id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RuntimeSnapshot {
    pub revision: u64,
    pub providers: Vec<ProviderInfo>,
    pub models: Vec<ModelInfo>,
    pub agents: Vec<AgentInfo>,
    /// How tool processes are confined (a troupe addition; absent from daemons that do not sandbox).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxStatus>,
    /// The MCP servers of `config.toml` and where each stands (a troupe addition; omitted when none is configured).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<super::mcp::McpServerStatus>,
}

/// `[sandbox] mode` of `config.toml`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Read everything but the denied paths; write only the session's cwd, the run's temp dir and the configured
    /// writable paths.
    #[default]
    WorkspaceWrite,
    /// Read everything but the denied paths; write only the run's temp dir.
    ReadOnly,
    /// No kernel sandbox: tool processes run with the daemon's full rights; only the permission policy stands.
    Off,
}

impl SandboxMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::Off => "off",
        }
    }
}

/// `[sandbox] enclosing_git_dir` of `config.toml`: whether commands may write the git directory of the repository
/// holding the session's directory when it lies outside it (a session in a subfolder of a repository, or in a
/// worktree). git runs what that directory configures (hooks, `core.fsmonitor`) later, outside the sandbox, for
/// every folder of the repository, so writing it is opt-in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum EnclosingGitDir {
    /// Commands read it but change nothing in it: `git commit` in such a session fails.
    #[default]
    ReadOnly,
    /// Commands may write it (so they can commit), unless the repository holds the daemon user's home folder (a
    /// dotfiles repository), whose git directory stays read-only.
    Writable,
}

impl EnclosingGitDir {
    pub fn as_str(self) -> &'static str {
        match self {
            EnclosingGitDir::ReadOnly => "read-only",
            EnclosingGitDir::Writable => "writable",
        }
    }
}

/// What enforces the sandbox of tool processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SandboxEnforcement {
    /// Linux Landlock, set up between fork and exec of every tool process.
    Landlock,
    /// Nothing: the mode is `off`, or the kernel cannot enforce it (then tool processes are refused).
    None,
}

/// The daemon's sandbox as configured and as this kernel enforces it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SandboxStatus {
    pub mode: SandboxMode,
    pub enforcement: SandboxEnforcement,
    /// The Landlock ABI version of the kernel, when it has Landlock.
    pub landlock_abi: Option<u32>,
    /// Whether tool processes reach the network (`false`: a network namespace with loopback only).
    pub network: bool,
    /// Paths tool processes and file tools may neither read nor write; the data directory first.
    pub denied: Vec<String>,
    /// Paths tool processes may write besides the session's cwd and the run's temp dir.
    pub writable: Vec<String>,
    /// Whether commands may write the git directory of a repository holding the session's directory when it lies
    /// outside it (`workspace-write` only).
    #[serde(default)]
    pub enclosing_git_dir: EnclosingGitDir,
    /// `[sandbox] env`: the names of the daemon's environment variables tool processes get besides the built-in
    /// allowlist (`PATH`, `HOME`, `USER`, `LOGNAME`, `SHELL`, `LANG`, `LANGUAGE`, `LC_*`, `TZ`, `TERM`, `COLORTERM`,
    /// `NO_COLOR`); no other variable of the daemon reaches them. `TMPDIR` is the run's own temp dir.
    #[serde(default)]
    pub env: Vec<String>,
    /// Why tool processes are refused, when the mode asks for a sandbox this kernel cannot give.
    pub tools_refused: Option<String>,
    /// Whether each command runs in a PID namespace of its own, so that nothing it starts (`setsid` included)
    /// outlives it. Where the system allows no such namespace, the command's process group is killed instead.
    #[serde(default)]
    pub pid_namespace: bool,
    /// Whether each command gets a `/proc` of its own (a mount namespace with the procfs of its PID namespace), so
    /// that it sees no other process of the machine, nor their command lines and environments.
    #[serde(default)]
    pub private_proc: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RuntimeSnapshotGetResult {
    pub snapshot: RuntimeSnapshot,
}

/// `runtime.changed` notification.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RuntimeChangedParams {
    pub previous_revision: Option<u64>,
    pub snapshot: RuntimeSnapshot,
    /// Sorted.
    pub reasons: Vec<String>,
}
