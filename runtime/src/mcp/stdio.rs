//! A stdio MCP server's process: a tool process like a shell command's, started by the daemon itself so that it is
//! confined the same way. It gets the kernel sandbox of `[sandbox]` (Landlock: read everything but the denied paths,
//! write only its working directory, its own temp dir and `[sandbox] writable`; no network when `network = false`;
//! its own session, PID namespace and `/proc` where the system allows), the tool environment (the allowlist and
//! `[sandbox] env`) with its `env` and `env_vars`, `TMPDIR` set to a private temp dir of its own, dies with the
//! daemon (`PR_SET_PDEATHSIG`) and has its process group recorded durably, so that a daemon killed with SIGKILL
//! kills what it left at its next start. Its stderr goes to the daemon's log, line by line, with the server's name.
//!
//! The MCP protocol itself is rmcp's, over the child's stdin and stdout.

use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::net::unix::pipe;

use crate::config::{McpServerConfig, SandboxMode};
use crate::sandbox::process_groups::GroupRecord;
use crate::sandbox::{PreparedSandbox, Sandbox, ToolCommand, ToolProcess};

/// A started server process. Dropping it kills its whole process group.
pub(super) struct ServerProcess {
    pub child: ToolProcess,
    pgid: libc::pid_t,
    /// The durable record of the group, removed once the group is known gone.
    record: Option<GroupRecord>,
    killed: bool,
}

impl ServerProcess {
    /// Kills the process group and reaps the leader (within a few seconds); the record goes once it is gone.
    pub async fn kill(mut self) {
        self.kill_group();
        let reaped = matches!(tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await, Ok(Ok(_)));
        if reaped {
            let record = self.record.take();
            let _ = tokio::task::spawn_blocking(move || drop(record)).await;
        }
    }

    fn kill_group(&mut self) {
        if self.killed {
            return;
        }
        self.killed = true;
        // SAFETY: killpg has no memory-safety preconditions; pgid is the group our child leads, reaped only after.
        unsafe { libc::killpg(self.pgid, libc::SIGKILL) };
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill_group();
        // A record of a group that may still be there stays on disk for the next start (as for a shell command).
        if let Some(record) = self.record.take() {
            std::mem::forget(record);
        }
    }
}

/// The process and its protocol pipes.
pub(super) struct Started {
    pub process: ServerProcess,
    pub stdout: pipe::Receiver,
    pub stdin: pipe::Sender,
}

/// Starts the server `name`. Must be called from a thread that lives as long as the daemon (the engine's), since
/// the death signal fires when the spawning thread ends. The error is for the status and the log: it names the
/// command and the OS error, never the environment.
pub(super) async fn spawn(name: &str, config: &McpServerConfig, sandbox: &Arc<Sandbox>) -> Result<Started, String> {
    let Some(program) = config.command.clone() else {
        return Err("the server has no `command`".into());
    };
    let (temp_dir, cwd, prepared) = {
        let (sandbox, name, cwd) = (sandbox.clone(), name.to_owned(), config.cwd.clone());
        tokio::task::spawn_blocking(move || prepare(&sandbox, &name, cwd))
            .await
            .map_err(|error| format!("preparing the server's sandbox failed: {error}"))??
    };
    let mut command = ToolCommand::new(&program);
    command
        .args(&config.args)
        .envs(sandbox.tool_environment())
        .env("TMPDIR", &temp_dir)
        .env("TMP", &temp_dir)
        .env("TEMP", &temp_dir)
        .envs(config.env_vars.iter().filter_map(|variable| Some((variable, std::env::var_os(variable)?))))
        .envs(&config.env)
        .cwd(&cwd)
        .piped_stdin(true);
    let confined = prepared.is_some();
    let mut child = command.spawn(prepared).map_err(|error| {
        let inside = if confined { " inside the sandbox" } else { "" };
        format!("could not start `{program}` in {}{inside}: {error}", cwd.display())
    })?;
    let (Some(stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        let _ = child.start_kill();
        return Err("the server started without its pipes".into());
    };
    // The server leads its session and so its process group.
    let pgid = child.id();
    let record = record_group(sandbox, name, pgid).await;
    tokio::spawn(log_stderr(name.to_owned(), stderr));
    Ok(Started { process: ServerProcess { child, pgid, record, killed: false }, stdout, stdin })
}

/// The server's temp dir (made afresh, 0700, in the sandbox's private temp root), its working directory (`cwd`, or
/// the temp dir) and its kernel rules. Blocking I/O.
fn prepare(
    sandbox: &Sandbox,
    name: &str,
    cwd: Option<String>,
) -> Result<(PathBuf, PathBuf, Option<PreparedSandbox>), String> {
    let root = match sandbox.temp_root() {
        Ok(root) => root,
        // A sandbox of no daemon (tests of the runtime alone): the system's temp dir.
        Err(_) if sandbox.groups().is_none() => std::env::temp_dir(),
        Err(error) => return Err(format!("the temp root of tool processes is unusable: {error}")),
    };
    let temp_dir = root.join(format!("mcp-{name}"));
    match std::fs::remove_dir_all(&temp_dir) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(format!("could not clear the server's temp dir {}: {error}", temp_dir.display())),
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&temp_dir)
        .map_err(|error| format!("could not create the server's temp dir {}: {error}", temp_dir.display()))?;
    let cwd = match cwd {
        Some(cwd) => {
            let cwd = PathBuf::from(cwd);
            if !cwd.is_dir() {
                return Err(format!("its cwd {} does not exist or is not a directory", cwd.display()));
            }
            cwd
        }
        None => temp_dir.clone(),
    };
    let prepared =
        sandbox.prepare(&cwd, &temp_dir, &[]).map_err(|reason| format!("refused by the sandbox: {reason}"))?;
    if prepared.is_none() && sandbox.mode() == SandboxMode::Off {
        tracing::debug!(mcp_server = name, "the sandbox is off: the MCP server runs unconfined");
    }
    Ok((temp_dir, cwd, prepared))
}

async fn record_group(sandbox: &Arc<Sandbox>, name: &str, pgid: libc::pid_t) -> Option<GroupRecord> {
    let sandbox = sandbox.clone();
    match tokio::task::spawn_blocking(move || sandbox.groups().map(|groups| groups.record(pgid))).await {
        Ok(Some(Ok(record))) => Some(record),
        Ok(None) => None,
        Ok(Some(Err(error))) => {
            tracing::warn!(mcp_server = name, pgid, %error, "could not record an MCP server's process group");
            None
        }
        Err(error) => {
            tracing::warn!(mcp_server = name, pgid, %error, "recording an MCP server's process group failed");
            None
        }
    }
}

/// The longest stderr line logged; the rest of it is cut.
const MAX_STDERR_LINE_BYTES: usize = 4 * 1024;
/// Stderr lines logged per server per second; the others are counted and reported as one record.
const MAX_STDERR_LINES_PER_SECOND: u32 = 50;

/// Copies the server's stderr to the daemon's log, each line bounded, at a bounded rate: a chatty server cannot
/// fill the disk.
async fn log_stderr(name: String, stderr: impl AsyncRead + Unpin) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    let mut window = Instant::now();
    let (mut logged, mut suppressed) = (0u32, 0u64);
    loop {
        line.clear();
        match (&mut reader).take(MAX_STDERR_LINE_BYTES as u64 * 4).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if !line.ends_with(b"\n") {
            // A line longer than the bound: skip the rest of it.
            let mut rest = Vec::new();
            let _ = reader.read_until(b'\n', &mut rest).await;
        }
        if window.elapsed() >= Duration::from_secs(1) {
            if suppressed > 0 {
                tracing::warn!(mcp_server = %name, suppressed, "MCP server stderr: suppressed {suppressed} lines");
            }
            (window, logged, suppressed) = (Instant::now(), 0, 0);
        }
        if logged == MAX_STDERR_LINES_PER_SECOND {
            suppressed += 1;
            continue;
        }
        logged += 1;
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        let mut end = text.len().min(MAX_STDERR_LINE_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        tracing::info!(mcp_server = %name, "MCP server stderr: {}", &text[..end]);
    }
    if suppressed > 0 {
        tracing::warn!(mcp_server = %name, suppressed, "MCP server stderr: suppressed {suppressed} lines");
    }
}
