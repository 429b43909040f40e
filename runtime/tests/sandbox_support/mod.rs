//! What the sandbox tests share: a home that is also the cwd and holds the data directory, and running the real
//! `shell` tool in it.

#![allow(dead_code)]

pub mod mounts;
pub mod processes;
pub mod unavailable;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tempfile::TempDir;
use troupe_protocol::types::run::{PersistedToolResult, ToolResultStatus};
use troupe_runtime::config::{SandboxConfig, SandboxMode};
use troupe_runtime::sandbox::{Sandbox, Support};
use troupe_runtime::tools::{Tool, ToolContext, ToolRegistry};

pub const STEP: Duration = Duration::from_secs(20);
pub const TOKEN: &str = "troupe-token-0123456789abcdef";
pub const API_KEY: &str = "sk-live-SECRETKEY42";
pub const CONFIG: &str = "[sandbox]\nmode = \"workspace-write\"\n";

pub fn shell() -> &'static dyn Tool {
    static REGISTRY: std::sync::OnceLock<ToolRegistry> = std::sync::OnceLock::new();
    REGISTRY.get_or_init(ToolRegistry::builtin).get("shell").expect("shell is built in")
}

/// A home that is also the cwd, holding the data directory `.troupe` with a token, API keys and a config, and a
/// `work` folder.
pub struct Workspace {
    pub home: TempDir,
    pub data_dir: PathBuf,
}

impl Workspace {
    pub fn new() -> Workspace {
        let home = tempfile::tempdir().unwrap();
        let data_dir = home.path().join(".troupe");
        std::fs::create_dir_all(data_dir.join("daemon")).unwrap();
        std::fs::write(data_dir.join("daemon").join("token"), TOKEN).unwrap();
        std::fs::write(data_dir.join("providers.json"), format!("{{\"openai\":{{\"api_key\":\"{API_KEY}\"}}}}"))
            .unwrap();
        std::fs::write(data_dir.join("config.toml"), CONFIG).unwrap();
        std::fs::create_dir(home.path().join("work")).unwrap();
        Workspace { home, data_dir }
    }

    pub fn cwd(&self) -> &Path {
        self.home.path()
    }

    pub fn sandbox(&self, config: SandboxConfig) -> Arc<Sandbox> {
        Arc::new(Sandbox::new(&config, &self.data_dir, Some(self.home.path())))
    }

    pub fn context(&self, sandbox: &Arc<Sandbox>) -> ToolContext {
        let mut context = ToolContext::new(self.cwd());
        context.sandbox = Arc::clone(sandbox);
        context
    }

    pub async fn run(&self, sandbox: &Arc<Sandbox>, command: &str) -> PersistedToolResult {
        self.run_in(sandbox, self.cwd(), command).await
    }

    /// Runs each of `commands` as [`Workspace::run`] does, and asserts that each ends in an error (refused).
    pub async fn assert_each_refused<C: AsRef<str>>(
        &self,
        sandbox: &Arc<Sandbox>,
        commands: impl IntoIterator<Item = C>,
    ) {
        for command in commands {
            let command = command.as_ref();
            let result = self.run(sandbox, command).await;
            assert_eq!(result.status, ToolResultStatus::Error, "{command}: {}", result.output);
        }
    }

    /// Runs `command` through the shell tool as [`Workspace::run`] does, in the session folder `cwd`.
    pub async fn run_in(&self, sandbox: &Arc<Sandbox>, cwd: &Path, command: &str) -> PersistedToolResult {
        let mut context = self.context(sandbox);
        context.cwd = cwd.to_path_buf();
        tokio::time::timeout(STEP, shell().execute(json!({"command": command}), context))
            .await
            .expect("the shell call ends in time")
    }
}

pub fn config(mode: SandboxMode) -> SandboxConfig {
    SandboxConfig { mode, ..SandboxConfig::default() }
}

/// Whether this kernel enforces Landlock; when not, the test is skipped (see [`unavailable::skip`]) and checks
/// nothing.
#[track_caller]
pub fn landlock(sandbox: &Sandbox) -> bool {
    match sandbox.support() {
        Support::Landlock { .. } => true,
        Support::Unavailable { reason } => {
            unavailable::skip(unavailable::Missing::Landlock { reason: reason.clone() });
            false
        }
    }
}

/// Whether this kernel enforces Landlock at ABI `needed` or later; when not, the test is skipped.
#[track_caller]
pub fn landlock_abi(sandbox: &Sandbox, needed: u32) -> bool {
    match sandbox.support() {
        Support::Landlock { abi } if *abi >= needed => true,
        Support::Landlock { abi } => {
            unavailable::skip(unavailable::Missing::LandlockAbi { needed, found: *abi });
            false
        }
        Support::Unavailable { reason } => {
            unavailable::skip(unavailable::Missing::Landlock { reason: reason.clone() });
            false
        }
    }
}

/// Whether commands get a PID namespace (and Landlock); when not, the test is skipped.
#[track_caller]
pub fn pid_namespace(sandbox: &Sandbox) -> bool {
    if !landlock(sandbox) {
        return false;
    }
    match sandbox.no_pid_namespace() {
        None => true,
        Some(reason) => {
            unavailable::skip(unavailable::Missing::PidNamespace { reason: reason.to_owned() });
            false
        }
    }
}

/// Whether this process is root (and the kernel enforces Landlock); when not, the test is skipped.
#[track_caller]
pub fn landlock_as_root(sandbox: &Sandbox) -> bool {
    if !landlock(sandbox) {
        return false;
    }
    if !unavailable::is_root() {
        unavailable::skip(unavailable::Missing::Root);
        return false;
    }
    true
}

pub fn assert_status(result: &PersistedToolResult, status: ToolResultStatus) {
    assert_eq!(result.status, status, "{}", result.output);
}

pub fn assert_no_secret(result: &PersistedToolResult) {
    assert!(!result.output.contains(TOKEN), "the token leaked: {}", result.output);
    assert!(!result.output.contains("SECRETKEY"), "the API key leaked: {}", result.output);
}
