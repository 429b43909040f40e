//! The plugin's process and its stdio framing: one JSON-RPC message per line on stdin and stdout, stderr copied
//! line by line to the daemon's log.
//!
//! The process is started with an empty environment apart from the configured `env`, so nothing of the daemon's
//! (its token, provider keys, `HOME`, `TROUPE_*`) reaches it; it is not put under the tools' kernel sandbox (it is
//! operator-configured code, trusted like the daemon itself; see `docs/plugins.md`). `kill_on_drop` makes sure a
//! process whose host is gone does not linger, and `PR_SET_PDEATHSIG` that it dies with a daemon that was killed.

use std::process::Stdio;
use std::time::{Duration, Instant};

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
    // Checked first: a missing working directory would otherwise read as a missing command.
    if let Some(cwd) = &config.cwd
        && !std::path::Path::new(cwd).is_dir()
    {
        return Err(format!("the plugin's cwd `{cwd}` does not exist or is not a directory"));
    }
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

/// The longest stderr line logged; the rest of it is cut.
const MAX_STDERR_LINE_BYTES: usize = 4 * 1024;
/// Stderr lines logged per plugin per second; the others are counted, and logged as one "suppressed" record.
const MAX_STDERR_LINES_PER_SECOND: u32 = 50;

/// The rate bound of one plugin's stderr: fixed one-second windows of at most [`MAX_STDERR_LINES_PER_SECOND`].
struct StderrGate {
    window: Instant,
    logged: u32,
    suppressed: u64,
}

impl StderrGate {
    fn new(now: Instant) -> Self {
        StderrGate { window: now, logged: 0, suppressed: 0 }
    }

    /// Whether the line arriving at `now` is logged, and the count of lines suppressed in the windows before it
    /// that is to be reported now (once).
    fn admit(&mut self, now: Instant) -> (bool, Option<u64>) {
        let mut report = None;
        if now.duration_since(self.window) >= Duration::from_secs(1) {
            self.window = now;
            self.logged = 0;
            report = (self.suppressed > 0).then_some(std::mem::take(&mut self.suppressed));
        }
        if self.logged < MAX_STDERR_LINES_PER_SECOND {
            self.logged += 1;
            (true, report)
        } else {
            self.suppressed += 1;
            (false, report)
        }
    }
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Copies stderr to the log, one bounded line at a time, at a bounded rate (a chatty plugin cannot fill the disk).
/// Lines suppressed in a window are reported once it ends, even if the plugin writes nothing more.
async fn log_stderr(name: String, stderr: impl AsyncRead + Unpin) {
    let mut reader = BufReader::new(stderr);
    let mut buffer = Vec::new();
    let mut gate = StderrGate::new(Instant::now());
    loop {
        let read = if gate.suppressed > 0 {
            let window_end = tokio::time::Instant::from_std(gate.window + Duration::from_secs(1));
            match tokio::time::timeout_at(window_end, read_bounded_line(&mut reader, &mut buffer)).await {
                Ok(read) => read,
                Err(_) => {
                    // The line being read (if any) stays in `buffer` and is completed by the next read.
                    report_suppressed(&name, std::mem::take(&mut gate.suppressed));
                    continue;
                }
            }
        } else {
            read_bounded_line(&mut reader, &mut buffer).await
        };
        match read {
            Ok(Some(_)) => {
                let (log, suppressed) = gate.admit(Instant::now());
                if let Some(count) = suppressed {
                    report_suppressed(&name, count);
                }
                if log {
                    let text = String::from_utf8_lossy(&buffer[..buffer.len().min(MAX_STDERR_LINE_BYTES + 4)]);
                    let text = cut(&text, MAX_STDERR_LINE_BYTES);
                    tracing::info!(plugin = %name, "plugin stderr: {text}");
                }
                buffer.clear();
            }
            Ok(None) | Err(_) => break,
        }
    }
    if gate.suppressed > 0 {
        report_suppressed(&name, gate.suppressed);
    }
}

fn report_suppressed(name: &str, count: u64) {
    tracing::warn!(plugin = %name, suppressed = count, "plugin stderr: suppressed {count} lines (at most {MAX_STDERR_LINES_PER_SECOND} a second are logged)");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_is_bounded_in_rate_and_line_length() {
        let start = Instant::now();
        let mut gate = StderrGate::new(start);
        let admitted = (0..200).filter(|_| gate.admit(start).0).count();
        assert_eq!(admitted, MAX_STDERR_LINES_PER_SECOND as usize);
        let next = start + Duration::from_millis(1000);
        assert_eq!(gate.admit(next), (true, Some(150)));
        assert_eq!(gate.admit(next), (true, None));

        assert_eq!(cut("abc", 2), "ab");
        assert_eq!(cut("aé", 2), "a");
        assert_eq!(cut("abc", 10), "abc");
    }

    #[tokio::test]
    async fn a_missing_cwd_is_named_in_the_error() {
        let config: PluginConfig =
            serde_json::from_value(serde_json::json!({"command": "/bin/sh", "cwd": "/nonexistent/troupe-plugin-cwd"}))
                .expect("config");
        let Err(error) = spawn("p", &config) else { panic!("started") };
        assert!(error.contains("cwd `/nonexistent/troupe-plugin-cwd` does not exist"), "{error}");
    }
}
