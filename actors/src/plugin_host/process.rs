//! The plugin's process and its stdio framing: one JSON-RPC message per line on stdin and stdout, stderr copied
//! line by line to the daemon's log.
//!
//! The process is started with an empty environment apart from the configured `env`, so nothing of the daemon's
//! (its token, provider keys, `HOME`, `TROUPE_*`) reaches it; it is not put under the tools' kernel sandbox (it is
//! operator-configured code, trusted like the daemon itself; see `docs/plugins.md`). `kill_on_drop` makes sure a
//! process whose host is gone does not linger, and `PR_SET_PDEATHSIG` that it dies with a daemon that was killed.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use troupe_runtime::config::PluginConfig;

/// The longest line a plugin may write on stdout: a maximal `plugin/emit` payload with room for its envelope.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

/// One line read from the plugin's stdout.
#[derive(Debug)]
pub enum Line {
    Text(String),
    /// A line longer than [`MAX_LINE_BYTES`] or not UTF-8 (its content is never logged).
    Garbage(&'static str),
}

/// A started plugin process with its stdio taken apart.
pub struct Spawned {
    pub child: Child,
    /// Lines to write to stdin; the writer task ends when every sender is dropped (closing stdin).
    pub stdin: mpsc::Sender<String>,
    /// Lines from stdout; closed at end of file.
    pub stdout: mpsc::Receiver<Line>,
}

/// Starts the plugin `name` as configured. The error is the OS error with the command, never the environment.
pub fn spawn(name: &str, config: &PluginConfig) -> Result<Spawned, String> {
    let mut command = Command::new(&config.command);
    command
        .args(&config.args)
        .env_clear()
        .envs(&config.env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // Its own session, and SIGKILL when the daemon dies, even by SIGKILL (when `kill_on_drop` never runs).
    troupe_runtime::sandbox::PreparedSandbox::install_death_signal(&mut command);
    if let Some(cwd) = &config.cwd {
        command.current_dir(cwd);
    }
    let mut child = command.spawn().map_err(|error| format!("could not start `{}`: {error}", config.command))?;
    let (Some(stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err("the plugin's stdio was not piped".into());
    };
    let (line_sender, lines) = mpsc::channel(64);
    tokio::spawn(read_lines(stdout, line_sender));
    let (stdin_sender, stdin_lines) = mpsc::channel(64);
    tokio::spawn(write_lines(stdin, stdin_lines));
    tokio::spawn(log_stderr(name.to_owned(), stderr));
    Ok(Spawned { child, stdin: stdin_sender, stdout: lines })
}

/// Reads newline-terminated lines, bounded in length. Waits for room in the channel, so a plugin that writes
/// faster than the host handles its messages is slowed at its pipe.
async fn read_lines(stdout: impl AsyncRead + Unpin, lines: mpsc::Sender<Line>) {
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    let mut buffer = Vec::new();
    loop {
        buffer.clear();
        let line = match read_bounded_line(&mut reader, &mut buffer).await {
            Ok(None) => return,
            Ok(Some(true)) => match String::from_utf8(std::mem::take(&mut buffer)) {
                Ok(text) => Line::Text(text),
                Err(_) => Line::Garbage("a line that is not UTF-8"),
            },
            Ok(Some(false)) => Line::Garbage("a line longer than 1 MiB"),
            Err(_) => return,
        };
        if lines.send(line).await.is_err() {
            return;
        }
    }
}

/// Reads one line into `buffer` (without its newline). `Some(false)` when it was longer than the bound: the rest
/// of it is skipped. `None` at end of file.
async fn read_bounded_line(
    reader: &mut BufReader<impl AsyncRead + Unpin>,
    buffer: &mut Vec<u8>,
) -> std::io::Result<Option<bool>> {
    let mut too_long = false;
    let mut read_any = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(if read_any { Some(!too_long) } else { None });
        }
        read_any = true;
        let (chunk, found) = match available.iter().position(|&byte| byte == b'\n') {
            Some(end) => (&available[..end], Some(end + 1)),
            None => (available, None),
        };
        if !too_long {
            if buffer.len() + chunk.len() > MAX_LINE_BYTES {
                too_long = true;
                buffer.clear();
            } else {
                buffer.extend_from_slice(chunk);
            }
        }
        let consumed = found.unwrap_or(available.len());
        reader.consume(consumed);
        if found.is_some() {
            if buffer.last() == Some(&b'\r') {
                buffer.pop();
            }
            return Ok(Some(!too_long));
        }
    }
}

async fn write_lines(mut stdin: ChildStdin, mut lines: mpsc::Receiver<String>) {
    while let Some(mut line) = lines.recv().await {
        line.push('\n');
        if stdin.write_all(line.as_bytes()).await.is_err() || stdin.flush().await.is_err() {
            return;
        }
    }
    // Every sender is gone: closing stdin tells the plugin to exit.
}

/// Copies stderr to the log, one bounded line at a time.
async fn log_stderr(name: String, stderr: impl AsyncRead + Unpin) {
    let mut reader = BufReader::new(stderr);
    let mut buffer = Vec::new();
    loop {
        buffer.clear();
        match read_bounded_line(&mut reader, &mut buffer).await {
            Ok(Some(_)) => {
                let text = String::from_utf8_lossy(&buffer);
                let text: String = text.chars().take(2000).collect();
                tracing::info!(plugin = %name, "plugin stderr: {text}");
            }
            Ok(None) | Err(_) => return,
        }
    }
}
