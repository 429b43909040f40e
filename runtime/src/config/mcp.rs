//! `[mcp_servers.<name>]`: MCP servers whose tools runs offer the model as `mcp__<name>__<tool>`, spelled as Codex
//! CLI spells them, so a section can be copied between the two.
//!
//! ```toml
//! [mcp_servers.docs]                      # stdio: a child process of the daemon, sandboxed like a tool process
//! command = "npx"                         # looked up in the PATH the server gets (the tool environment's)
//! args = ["-y", "@acme/docs-mcp"]
//! env = { DOCS_MODE = "fast" }            # added to the tool environment ([sandbox] env and its allowlist)
//! env_vars = ["DOCS_TOKEN"]               # the daemon's own variables passed on by name
//! cwd = "/home/me/docs"                   # absolute; written in workspace-write mode. Unset: a private temp dir
//! enabled = true
//! startup_timeout_sec = 10                # to start, answer `initialize` and list its tools
//! tool_timeout_sec = 60                   # for each tools/call
//! enabled_tools = ["search"]              # only these (all when unset)
//! disabled_tools = ["delete"]             # never these
//!
//! [mcp_servers.tracker]                   # streamable HTTP
//! url = "https://mcp.example.com/mcp"
//! bearer_token_env_var = "TRACKER_TOKEN"  # `Authorization: Bearer <the variable's value>`
//! http_headers = { "X-Region" = "eu" }    # fixed values
//! env_http_headers = { "X-Org" = "TRACKER_ORG" }   # header = the daemon's variable holding its value
//! ```
//!
//! Secrets stay in the daemon's environment: a header's value is named by its variable, never written here, and no
//! error quotes a value.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

/// One MCP server's settings; its name is its key.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// stdio: the program. A bare name is looked up in the server's own `PATH` (the tool environment's, or `env`'s).
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// stdio: variables added to the tool environment the server gets.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// stdio: the daemon's variables passed on by name (when the daemon has them).
    #[serde(default)]
    pub env_vars: Vec<String>,
    /// stdio: the working directory (absolute). Unset: the server's private temp dir.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Streamable HTTP: the endpoint (`http://` or `https://`).
    #[serde(default)]
    pub url: Option<String>,
    /// HTTP: the daemon's variable holding a bearer token sent as `Authorization: Bearer …`.
    #[serde(default)]
    pub bearer_token_env_var: Option<String>,
    /// HTTP: headers with fixed values.
    #[serde(default)]
    pub http_headers: BTreeMap<String, String>,
    /// HTTP: headers whose values are the daemon's variables named here.
    #[serde(default)]
    pub env_http_headers: BTreeMap<String, String>,
    #[serde(default = "enabled")]
    pub enabled: bool,
    #[serde(default)]
    pub startup_timeout_sec: Option<f64>,
    #[serde(default)]
    pub tool_timeout_sec: Option<f64>,
    /// Only these tools are offered (every tool when unset).
    #[serde(default)]
    pub enabled_tools: Option<Vec<String>>,
    /// These tools are never offered.
    #[serde(default)]
    pub disabled_tools: Vec<String>,
}

/// The timeouts are the only floats, and a NaN or an infinity never passes [`validate`]: a loaded configuration
/// compares equal to itself, as `Config`'s `Eq` promises.
impl Eq for McpServerConfig {}

fn enabled() -> bool {
    true
}

/// Codex CLI's defaults.
const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest timeout either setting takes.
const MAX_TIMEOUT_SECS: f64 = 3600.0;

/// The longest server name: `mcp__<name>__<tool>` must leave room for the tool within a model API's 64 characters.
pub const MAX_MCP_SERVER_NAME_CHARS: usize = 24;

impl McpServerConfig {
    pub fn startup_timeout(&self) -> Duration {
        self.startup_timeout_sec.map_or(DEFAULT_STARTUP_TIMEOUT, Duration::from_secs_f64)
    }

    pub fn tool_timeout(&self) -> Duration {
        self.tool_timeout_sec.map_or(DEFAULT_TOOL_TIMEOUT, Duration::from_secs_f64)
    }

    /// Whether the server is reached over HTTP (`url`) rather than started (`command`).
    pub fn is_http(&self) -> bool {
        self.url.is_some()
    }

    /// Whether the tool `name` is offered, by `enabled_tools` and `disabled_tools`.
    pub fn offers(&self, name: &str) -> bool {
        self.enabled_tools.as_ref().is_none_or(|enabled| enabled.iter().any(|tool| tool == name))
            && !self.disabled_tools.iter().any(|tool| tool == name)
    }
}

/// Checks a server name: `[A-Za-z0-9_-]`, 1 to [`MAX_MCP_SERVER_NAME_CHARS`], with no `__` and neither starting nor
/// ending with `_`, so that `mcp__<name>__<tool>` reads back to one server.
pub fn validate_mcp_server_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name.len() > MAX_MCP_SERVER_NAME_CHARS {
        return Err("a server name has 1 to 24 characters");
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
        return Err("a server name uses only A-Z, a-z, 0-9, `_` and `-`");
    }
    if name.contains("__") || name.starts_with('_') || name.ends_with('_') {
        return Err("a server name has no `__` and neither starts nor ends with `_`");
    }
    Ok(())
}

/// Every problem of the `[mcp_servers]` sections, by key; never a value (`env` and headers may hold secrets).
pub(super) fn validate(servers: &BTreeMap<String, McpServerConfig>) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, server) in servers {
        let key = format!("mcp_servers.{name}");
        if let Err(problem) = validate_mcp_server_name(name) {
            problems.push(format!("{key}: {problem}"));
        }
        match (&server.command, &server.url) {
            (Some(_), Some(_)) => {
                problems.push(format!("{key} has both `command` (stdio) and `url` (HTTP); give one"));
            }
            (None, None) => problems.push(format!("{key} needs `command` (a stdio server) or `url` (an HTTP server)")),
            (Some(command), None) => {
                if command.trim().is_empty() {
                    problems.push(format!("{key}.command must not be empty"));
                }
                let http_only = [
                    ("bearer_token_env_var", server.bearer_token_env_var.is_some()),
                    ("http_headers", !server.http_headers.is_empty()),
                    ("env_http_headers", !server.env_http_headers.is_empty()),
                ];
                for (field, set) in http_only {
                    if set {
                        problems.push(format!("{key}.{field} applies to an HTTP server (`url`), not to `command`"));
                    }
                }
            }
            (None, Some(url)) => {
                let parsed = reqwest::Url::parse(url).ok();
                let usable = parsed.is_some_and(|url| matches!(url.scheme(), "http" | "https") && url.host().is_some());
                if !usable {
                    problems.push(format!("{key}.url must be an http:// or https:// URL"));
                }
                let stdio_only = [
                    ("args", !server.args.is_empty()),
                    ("env", !server.env.is_empty()),
                    ("env_vars", !server.env_vars.is_empty()),
                    ("cwd", server.cwd.is_some()),
                ];
                for (field, set) in stdio_only {
                    if set {
                        problems.push(format!("{key}.{field} applies to a stdio server (`command`), not to `url`"));
                    }
                }
            }
        }
        if let Some(cwd) = &server.cwd
            && !cwd.starts_with('/')
        {
            problems.push(format!("{key}.cwd must be an absolute path"));
        }
        if server.env.keys().any(|variable| variable.is_empty() || variable.contains(['=', '\0'])) {
            problems.push(format!("{key}.env has a name that is empty or holds `=` or NUL"));
        }
        let variables =
            server.env_vars.iter().chain(&server.bearer_token_env_var).chain(server.env_http_headers.values());
        for variable in variables {
            if let Err(problem) = crate::sandbox::environment::check_listed_name(variable) {
                problems.push(format!("{key}: the variable `{}` {problem}", clean_name(variable)));
            }
        }
        let headers = server.http_headers.keys().chain(server.env_http_headers.keys());
        for header in headers {
            if header.is_empty()
                || !header.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
            {
                problems.push(format!("{key}: `{}` is not an HTTP header name", clean_name(header)));
            }
        }
        let reserved = ["accept", "mcp-session-id", "mcp-protocol-version", "last-event-id", "content-type"];
        for header in server.http_headers.keys().chain(server.env_http_headers.keys()) {
            if reserved.contains(&header.to_ascii_lowercase().as_str()) {
                problems.push(format!("{key}: the header `{header}` is set by the MCP transport itself"));
            }
            if header.eq_ignore_ascii_case("authorization") && server.bearer_token_env_var.is_some() {
                problems.push(format!("{key}: give `Authorization` or bearer_token_env_var, not both"));
            }
        }
        if server.http_headers.values().any(|value| value.bytes().any(|b| b < b' ' && b != b'\t' || b == 0x7f)) {
            problems.push(format!("{key}.http_headers has a value with a control character"));
        }
        for (field, value) in
            [("startup_timeout_sec", server.startup_timeout_sec), ("tool_timeout_sec", server.tool_timeout_sec)]
        {
            if let Some(seconds) = value
                && !(seconds > 0.0 && seconds <= MAX_TIMEOUT_SECS)
            {
                problems.push(format!("{key}.{field} must be more than 0 and at most 3600 seconds"));
            }
        }
    }
    problems
}

/// A name from the file as an error shows it: at most 64 characters, controls replaced.
fn clean_name(name: &str) -> String {
    name.chars().take(64).map(|c| if c.is_control() { '?' } else { c }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<super::super::Config, String> {
        super::super::parse(text, std::path::Path::new("config.toml")).map_err(|error| error.to_string())
    }

    #[test]
    fn names_that_would_make_tool_names_ambiguous_are_refused() {
        for good in ["docs", "Docs-2", "a_b"] {
            assert_eq!(validate_mcp_server_name(good), Ok(()), "{good}");
        }
        for bad in ["", "a__b", "_a", "a_", "a.b", "a b", &"x".repeat(25)] {
            assert!(validate_mcp_server_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_stdio_and_an_http_server_read_with_codex_s_defaults() {
        let config = parse(
            "[mcp_servers.docs]\ncommand = \"npx\"\nargs = [\"-y\", \"docs\"]\nenv = { A = \"secret\" }\n\
             [mcp_servers.web]\nurl = \"https://mcp.example.com/mcp\"\nbearer_token_env_var = \"WEB_TOKEN\"\n\
             tool_timeout_sec = 2.5\nenv_http_headers = { \"X-Org\" = \"WEB_ORG\" }\n",
        )
        .unwrap();
        let docs = &config.mcp_servers["docs"];
        assert!(docs.enabled && !docs.is_http() && docs.offers("anything"));
        assert_eq!((docs.startup_timeout(), docs.tool_timeout()), (Duration::from_secs(10), Duration::from_secs(60)));
        let web = &config.mcp_servers["web"];
        assert!(web.is_http());
        assert_eq!(web.tool_timeout(), Duration::from_millis(2500));
    }

    #[test]
    fn every_problem_is_named_by_key_and_never_quotes_a_value() {
        let error = parse("[mcp_servers.a]\nurl = \"https://x\"\ncommand = \"y\"\n").unwrap_err();
        assert!(error.contains("mcp_servers.a has both"), "{error}");
        let error = parse("[mcp_servers.a]\nargs = [\"x\"]\n").unwrap_err();
        assert!(error.contains("mcp_servers.a needs `command`"), "{error}");
        let error = parse("[mcp_servers.a]\nurl = \"ftp://x\"\n").unwrap_err();
        assert!(error.contains("mcp_servers.a.url"), "{error}");
        let error = parse("[mcp_servers.a]\ncommand = \"x\"\ncwd = \"rel\"\n").unwrap_err();
        assert!(error.contains("mcp_servers.a.cwd"), "{error}");
        let error = parse("[mcp_servers.a]\ncommand = \"x\"\nbearer_token_env_var = \"T\"\n").unwrap_err();
        assert!(error.contains("mcp_servers.a.bearer_token_env_var applies to an HTTP server"), "{error}");
        let error = parse("[mcp_servers.a]\nurl = \"http://h\"\nenv = { K = \"hidden\" }\n").unwrap_err();
        assert!(error.contains("mcp_servers.a.env applies to a stdio server") && !error.contains("hidden"), "{error}");
        let error = parse("[mcp_servers.a]\ncommand = \"x\"\ntool_timeout_sec = 0\n").unwrap_err();
        assert!(error.contains("mcp_servers.a.tool_timeout_sec"), "{error}");
        let error =
            parse("[mcp_servers.a]\nurl = \"http://h\"\nbearer_token_env_var = \"TROUPE_TOKEN\"\n").unwrap_err();
        assert!(error.contains("TROUPE_TOKEN") && error.contains("troupe's own settings"), "{error}");
        let error =
            parse("[mcp_servers.a]\nurl = \"http://h\"\nhttp_headers = { \"Bad Header\" = \"v\" }\n").unwrap_err();
        assert!(error.contains("not an HTTP header name"), "{error}");
        let error =
            parse("[mcp_servers.a]\nurl = \"http://h\"\nhttp_headers = { \"Mcp-Session-Id\" = \"v\" }\n").unwrap_err();
        assert!(error.contains("set by the MCP transport itself"), "{error}");
        let error = parse("[mcp_servers.a__b]\ncommand = \"x\"\n").unwrap_err();
        assert!(error.contains("mcp_servers.a__b"), "{error}");
        assert!(parse("[mcp_servers.a]\ncommand = \"x\"\ncolour = 1\n").unwrap_err().contains("colour"));
    }

    #[test]
    fn enabled_and_disabled_tools_filter_what_is_offered() {
        let config =
            parse("[mcp_servers.a]\ncommand = \"x\"\nenabled_tools = [\"one\", \"two\"]\ndisabled_tools = [\"two\"]\n")
                .unwrap();
        let server = &config.mcp_servers["a"];
        assert_eq!((server.offers("one"), server.offers("two"), server.offers("three")), (true, false, false));
    }
}
