//! The real daemon as a child process: `troupe serve --data-dir DIR [--listen ADDR]`, for the tests that need a
//! process boundary (SIGKILL and SIGTERM, restarts on the same port, the log it writes, the CLI against it).
//!
//! [`ServeCommand`] says how to start it (flags, environment, user, where its log goes); [`ServeCommand::spawn`]
//! returns once the daemon printed its `troupe listening on <url>` line, which it prints only after it bound the
//! address, so the returned [`ChildDaemon`] accepts connections at once. Dropping it kills and reaps the child.

use std::ffi::OsString;
use std::io::BufRead;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::wait::{WAIT, eventually_blocking};

/// The config a data directory gets when a test did not write one: automatic titles off, since they would ask
/// the session's model and take the fake vendors' scripted answers meant for the runs.
pub const DEFAULT_CONFIG: &str = "[titles]\nauto = false\n";

/// Where the daemon's stderr (its log) goes.
#[derive(Clone, Debug, Default)]
pub enum DaemonLog {
    /// The test's own stderr, shown when the test fails.
    #[default]
    Inherit,
    /// Appended to this file (kept across restarts): [`ChildDaemon::log_text`].
    File(PathBuf),
    /// Collected line by line in memory: [`ChildDaemon::log_lines`].
    Lines,
    /// Thrown away.
    Discard,
}

/// How to start `troupe serve`.
#[derive(Clone, Debug)]
pub struct ServeCommand {
    program: PathBuf,
    data_dir: PathBuf,
    listen: Option<String>,
    rust_log: Option<String>,
    default_config: bool,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    env_remove: Vec<OsString>,
    log: DaemonLog,
    user: Option<u32>,
    /// How long [`ServeCommand::spawn`] waits for the listening line.
    listen_within: Duration,
}

impl ServeCommand {
    /// `program serve --data-dir data_dir`, logging at `warn` to the test's stderr, `TROUPE_TOKEN` and
    /// `TROUPE_LOG_FORMAT` removed from its environment. Without [`ServeCommand::listen`] it listens where the data
    /// dir's config says.
    pub fn new(program: impl Into<PathBuf>, data_dir: impl Into<PathBuf>) -> ServeCommand {
        ServeCommand {
            program: program.into(),
            data_dir: data_dir.into(),
            listen: None,
            rust_log: Some("warn".to_owned()),
            default_config: true,
            args: Vec::new(),
            env: Vec::new(),
            env_remove: vec!["TROUPE_TOKEN".into(), "TROUPE_LOG_FORMAT".into()],
            log: DaemonLog::Inherit,
            user: None,
            listen_within: WAIT,
        }
    }

    /// `--listen listen`: `127.0.0.1:0` for any port, `unix:/path` for a unix socket.
    pub fn listen(mut self, listen: impl Into<String>) -> ServeCommand {
        self.listen = Some(listen.into());
        self
    }

    /// `RUST_LOG` (default `warn`).
    pub fn rust_log(mut self, filter: impl Into<String>) -> ServeCommand {
        self.rust_log = Some(filter.into());
        self
    }

    /// No `RUST_LOG` at all: the daemon's own default level.
    pub fn default_log_level(mut self) -> ServeCommand {
        self.rust_log = None;
        self
    }

    /// Leaves a data dir without config.toml without one (the daemon's defaults, titles included).
    pub fn no_default_config(mut self) -> ServeCommand {
        self.default_config = false;
        self
    }

    /// More arguments after `serve` (e.g. `--log-format json`).
    pub fn args<S: Into<OsString>>(mut self, args: impl IntoIterator<Item = S>) -> ServeCommand {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// One more environment variable (set after the removals, so it can bring one of them back).
    pub fn env(mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> ServeCommand {
        self.env.push((name.into(), value.into()));
        self
    }

    /// One more variable removed from the test's environment.
    pub fn env_remove(mut self, name: impl Into<OsString>) -> ServeCommand {
        self.env_remove.push(name.into());
        self
    }

    /// Where the log goes (default: the test's stderr).
    pub fn log(mut self, log: DaemonLog) -> ServeCommand {
        self.log = log;
        self
    }

    /// Waits up to `wait` for the daemon to listen, instead of [`WAIT`]: for a start that waits on something of its
    /// own, such as a cluster node whose NATS servers are still electing a leader (`cluster.connect` allows 10 s to
    /// connect and 30 s for JetStream to answer).
    pub fn listen_within(mut self, wait: Duration) -> ServeCommand {
        self.listen_within = wait;
        self
    }

    /// Runs the daemon as this uid and gid (the test runs as root then).
    pub fn user(mut self, id: u32) -> ServeCommand {
        self.user = Some(id);
        self
    }

    /// Starts the daemon (writing [`DEFAULT_CONFIG`] into an existing data dir that has no config.toml) and
    /// returns once it listens; fails the test if it exits first or does not listen within [`WAIT`] (or
    /// [`ServeCommand::listen_within`]).
    pub fn spawn(self) -> ChildDaemon {
        let config = self.data_dir.join("config.toml");
        if self.default_config && self.data_dir.is_dir() && !config.exists() {
            std::fs::write(&config, DEFAULT_CONFIG).expect("write config.toml");
        }
        let mut command = Command::new(&self.program);
        command.arg("serve").arg("--data-dir").arg(&self.data_dir);
        if let Some(listen) = &self.listen {
            command.arg("--listen").arg(listen);
        }
        command.args(&self.args);
        for name in &self.env_remove {
            command.env_remove(name);
        }
        match &self.rust_log {
            Some(filter) => command.env("RUST_LOG", filter),
            None => command.env_remove("RUST_LOG"),
        };
        for (name, value) in &self.env {
            command.env(name, value);
        }
        if let Some(id) = self.user {
            command.uid(id).gid(id);
        }
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stderr = match &self.log {
            DaemonLog::Inherit => Stdio::inherit(),
            DaemonLog::Discard => Stdio::null(),
            DaemonLog::Lines => Stdio::piped(),
            DaemonLog::File(path) => Stdio::from(
                std::fs::OpenOptions::new().create(true).append(true).open(path).expect("open the daemon's log file"),
            ),
        };
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|error| panic!("spawn {} serve: {error}", self.program.display()));
        if let Some(pipe) = child.stderr.take() {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                    lines.lock().unwrap_or_else(PoisonError::into_inner).push(line);
                }
            });
        }
        let url = listening_url(&mut child, self.listen_within);
        let token = match self.env.iter().find(|(name, _)| name == "TROUPE_TOKEN") {
            Some((_, token)) => token.to_string_lossy().into_owned(),
            None => token_of(&self.data_dir),
        };
        ChildDaemon { child, url, token, command: self, lines }
    }
}

/// A running `troupe serve`; killed and reaped on drop.
pub struct ChildDaemon {
    pub child: Child,
    /// The URL its listening line printed (`ws://127.0.0.1:<port>/ws`, or the unix socket's).
    pub url: String,
    /// The token it wrote into its data dir.
    pub token: String,
    command: ServeCommand,
    lines: Arc<Mutex<Vec<String>>>,
}

impl ChildDaemon {
    /// The TCP address it listens on (fails the test for a unix socket).
    pub fn addr(&self) -> SocketAddr {
        self.tcp_listen().and_then(|listen| listen.parse().ok()).unwrap_or_else(|| panic!("not TCP: {}", self.url))
    }

    pub fn port(&self) -> u16 {
        self.addr().port()
    }

    /// SIGKILL, then reaps the child.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits (at most [`WAIT`]) for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        // SAFETY: sending a signal to our own, not yet reaped, child process.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        exit_status_within(&mut self.child, "the daemon to exit after SIGTERM", WAIT)
    }

    /// Kills the daemon and starts it again with the same command on the same data dir and address (for a TCP port
    /// chosen at the first start, that port). Its log file, if it has one, is appended to.
    pub fn restart(&mut self) {
        self.kill();
        let mut command = self.command.clone();
        if let Some(listen) = self.tcp_listen() {
            command.listen = Some(listen.to_owned());
        }
        *self = command.spawn();
    }

    /// The lines the daemon logged so far ([`DaemonLog::Lines`] or [`DaemonLog::File`]).
    pub fn log_lines(&self) -> Vec<String> {
        match &self.command.log {
            DaemonLog::Lines => self.lines.lock().unwrap_or_else(PoisonError::into_inner).clone(),
            DaemonLog::File(_) => self.log_text().lines().map(str::to_owned).collect(),
            DaemonLog::Inherit | DaemonLog::Discard => {
                panic!("the daemon's log is not captured; start it with DaemonLog::Lines or DaemonLog::File")
            }
        }
    }

    /// The daemon's log so far, as one text.
    pub fn log_text(&self) -> String {
        match &self.command.log {
            DaemonLog::File(path) => std::fs::read_to_string(path).unwrap_or_default(),
            _ => self.log_lines().join("\n"),
        }
    }

    /// `host:port` of a TCP listener.
    fn tcp_listen(&self) -> Option<&str> {
        self.url.strip_prefix("ws://").map(|rest| rest.trim_end_matches("/ws"))
    }
}

impl Drop for ChildDaemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Polls `child` for its exit status until `timeout`; past it, kills and reaps the child and fails the test with
/// `what`.
pub fn exit_status_within(child: &mut Child, what: &str, timeout: Duration) -> ExitStatus {
    let mut status = None;
    let deadline = std::time::Instant::now() + timeout;
    eventually_blocking(what, timeout + POLL_GRACE, || {
        status = child.try_wait().expect("wait for the child");
        if status.is_none() && std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        status.is_some()
    });
    status.expect("an exit status")
}

/// Slack past a deadline that [`exit_status_within`] enforces itself, so that it (which kills the child) fails
/// first.
const POLL_GRACE: Duration = Duration::from_secs(1);

/// The token a daemon wrote in `data_dir`.
pub fn token_of(data_dir: &Path) -> String {
    std::fs::read_to_string(data_dir.join("daemon/token")).expect("the daemon's token").trim().to_owned()
}

/// The URL a spawned `troupe serve` (stdout piped) prints on its first line, waited for at most `wait`; the rest of
/// its stdout is drained so the daemon never blocks on a full pipe.
fn listening_url(child: &mut Child, wait: Duration) -> String {
    let stdout = child.stdout.take().expect("the daemon's stdout is piped");
    let (line_sender, line_receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = std::io::BufReader::new(stdout).lines();
        if let Some(Ok(line)) = lines.next() {
            let _ = line_sender.send(line);
        }
        for _ in lines {}
    });
    let line = match line_receiver.recv_timeout(wait) {
        Ok(line) => line,
        Err(_) => match child.try_wait() {
            Ok(Some(status)) => panic!("the daemon exited ({status}) before it listened"),
            _ => panic!("the daemon printed no listening line within {wait:?}"),
        },
    };
    line.strip_prefix("troupe listening on ")
        .unwrap_or_else(|| panic!("not a listening line: {line}"))
        .trim()
        .to_owned()
}
