//! `[plugins.<name>]`: plugin subprocesses the daemon starts and speaks the extension protocol with.
//!
//! ```toml
//! [plugins.file_watch]
//! command = "/usr/bin/python3"           # an absolute path: the plugin's PATH is empty unless `env` sets it
//! args = ["/opt/troupe/file_watch.py"]
//! env = { WATCH_FILE = "/var/log/app.log" }   # the whole environment of the plugin
//! cwd = "/opt/troupe"
//! enabled = true
//! startup_timeout_ms = 10000              # to answer plugin/initialize
//! tool_timeout_ms = 30000                 # for each plugin/tools/call
//! shutdown_grace_ms = 3000                # between plugin/shutdown and SIGKILL
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

/// One plugin's settings. Its name is its key, which the plugin must repeat at `plugin/initialize`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginConfig {
    /// The program: an absolute path, or a bare name (no `/`) when `env` sets `PATH`, which it is looked up in
    /// (the daemon's `PATH` is never used). Anything else is refused at config load.
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    /// The plugin's whole environment: nothing of the daemon's (its token, provider keys, `HOME`) is passed on.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The working directory (absolute); the daemon's when unset.
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default = "enabled")]
    pub enabled: bool,
    #[serde(default = "startup_timeout_ms")]
    pub startup_timeout_ms: u64,
    #[serde(default = "tool_timeout_ms")]
    pub tool_timeout_ms: u64,
    #[serde(default = "shutdown_grace_ms")]
    pub shutdown_grace_ms: u64,
}

fn enabled() -> bool {
    true
}
fn startup_timeout_ms() -> u64 {
    10_000
}
fn tool_timeout_ms() -> u64 {
    30_000
}
fn shutdown_grace_ms() -> u64 {
    3_000
}

impl PluginConfig {
    pub fn startup_timeout(&self) -> Duration {
        Duration::from_millis(self.startup_timeout_ms)
    }
    pub fn tool_timeout(&self) -> Duration {
        Duration::from_millis(self.tool_timeout_ms)
    }
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_millis(self.shutdown_grace_ms)
    }
}

/// The longest plugin name: `plugin__<name>__<tool>` must stay within a model API's 64-character tool names.
pub const MAX_PLUGIN_NAME_CHARS: usize = 20;

/// Checks a plugin name: `[a-z0-9_-]`, starting with a letter, at most [`MAX_PLUGIN_NAME_CHARS`], with no `__` and
/// no trailing `_`, so that `plugin__<name>__<tool>` names exactly one plugin's tool.
pub fn validate_plugin_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name.len() > MAX_PLUGIN_NAME_CHARS {
        return Err("a plugin name has 1 to 20 characters");
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err("a plugin name starts with a lowercase letter");
    }
    if !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-') {
        return Err("a plugin name uses only a-z, 0-9, `_` and `-`");
    }
    if name.contains("__") || name.ends_with('_') {
        return Err("a plugin name has no `__` and does not end with `_`");
    }
    Ok(())
}

/// Validates every `[plugins.<name>]`; the error names the key, never a value (`env` may hold secrets).
pub(super) fn validate(plugins: &BTreeMap<String, PluginConfig>) -> Result<(), String> {
    for (name, plugin) in plugins {
        validate_plugin_name(name).map_err(|problem| format!("plugins.{name}: {problem}"))?;
        if plugin.command.trim().is_empty() {
            return Err(format!("plugins.{name}.command must not be empty"));
        }
        if !plugin.command.starts_with('/') && (plugin.command.contains('/') || !plugin.env.contains_key("PATH")) {
            return Err(format!(
                "plugins.{name}.command must be an absolute path (or a bare name with PATH set in plugins.{name}.env; \
                 the daemon's PATH is not used)"
            ));
        }
        if let Some(cwd) = &plugin.cwd
            && !cwd.starts_with('/')
        {
            return Err(format!("plugins.{name}.cwd must be an absolute path"));
        }
        for (key, value) in [
            ("startup_timeout_ms", plugin.startup_timeout_ms),
            ("tool_timeout_ms", plugin.tool_timeout_ms),
            ("shutdown_grace_ms", plugin.shutdown_grace_ms),
        ] {
            if value == 0 || value > 3_600_000 {
                return Err(format!("plugins.{name}.{key} must be between 1 and 3600000"));
            }
        }
        if plugin.env.keys().any(|key| key.is_empty() || key.contains(['=', '\0'])) {
            return Err(format!("plugins.{name}.env has a key that is empty or holds `=` or NUL"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_would_make_tool_names_ambiguous_are_refused() {
        for good in ["file_watch", "notify", "a-b1"] {
            assert_eq!(validate_plugin_name(good), Ok(()), "{good}");
        }
        for bad in ["", "File", "1x", "a__b", "a_", "a.b", "abcdefghijklmnopqrstu"] {
            assert!(validate_plugin_name(bad).is_err(), "{bad}");
        }
    }

    fn parse(text: &str) -> Result<super::super::Config, String> {
        super::super::parse(text, std::path::Path::new("config.toml")).map_err(|error| error.to_string())
    }

    #[test]
    fn a_plugin_section_reads_with_defaults_and_is_validated() {
        let config = parse("[plugins.watch]\ncommand = \"/usr/bin/python3\"\nenv = { A = \"secret\" }\n").unwrap();
        let plugin = &config.plugins["watch"];
        assert!(plugin.enabled && plugin.args.is_empty() && plugin.cwd.is_none());
        assert_eq!(
            (plugin.startup_timeout_ms, plugin.tool_timeout_ms, plugin.shutdown_grace_ms),
            (10_000, 30_000, 3_000)
        );

        let error = parse("[plugins.Watch]\ncommand = \"/x\"\n").unwrap_err();
        assert!(error.contains("plugins.Watch"), "{error}");
        let error = parse("[plugins.w]\ncommand = \"/x\"\ncwd = \"rel\"\n").unwrap_err();
        assert!(error.contains("plugins.w.cwd"), "{error}");
        let error = parse("[plugins.w]\ncommand = \"/x\"\ntool_timeout_ms = 0\n").unwrap_err();
        assert!(error.contains("plugins.w.tool_timeout_ms"), "{error}");
        let error = parse("[plugins.w]\ncommand = \"/x\"\nenv = { \"\" = \"hidden\" }\n").unwrap_err();
        assert!(error.contains("plugins.w.env") && !error.contains("hidden"), "{error}");
        assert!(parse("[plugins.w]\ncommand = \"/x\"\ncolour = 1\n").unwrap_err().contains("colour"));
        // A relative command is never looked up in the daemon's PATH: refused unless `env` sets PATH.
        for relative in ["python3", "./plugin.py", "bin/plugin"] {
            let error = parse(&format!("[plugins.w]\ncommand = \"{relative}\"\n")).unwrap_err();
            assert!(error.contains("plugins.w.command must be an absolute path"), "{error}");
        }
        let error = parse("[plugins.w]\ncommand = \"./p\"\nenv = { PATH = \"/usr/bin\" }\n").unwrap_err();
        assert!(error.contains("plugins.w.command"), "{error}");
        assert!(parse("[plugins.w]\ncommand = \"python3\"\nenv = { PATH = \"/usr/bin\" }\n").is_ok());
    }
}
