//! What the figures share: the real daemon (in-process and as a child process), raw WebSockets and protocol
//! helpers (the baseline echo server is `echo.rs`). Everything listens on and talks to 127.0.0.1 only.

use std::io::{BufRead, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail, ensure};
use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};
use troupe::daemon::{self, DaemonOptions};
use troupe_protocol::client::{Client, ClientOptions, Deliveries};
use troupe_protocol::method;
use troupe_protocol::types::common::{ModelSelection, RunSelection, SessionMeta};
use troupe_protocol::types::session::{SessionCreateParams, SessionRenameParams, TitleChange};
use troupe_runtime::data_dir::DataDir;

/// Upper bound of any single wait.
pub const WAIT: Duration = Duration::from_secs(60);

pub async fn within<T>(what: &str, future: impl Future<Output = T>) -> anyhow::Result<T> {
    tokio::time::timeout(WAIT, future).await.map_err(|_| anyhow!("timed out after {WAIT:?} waiting for {what}"))
}

pub fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

pub fn selection(model: &str) -> RunSelection {
    RunSelection { agent: "default".into(), model: ModelSelection { model: model.into(), variant: None }, preset: None }
}

/// The real daemon (engine + gateway) on its own actix System thread, on 127.0.0.1:0.
pub struct InProcessDaemon {
    pub addr: SocketAddr,
    pub token: String,
    pub data_dir: tempfile::TempDir,
    daemon: daemon::DaemonThread,
}

impl InProcessDaemon {
    pub fn start(hibernate_after: Option<Duration>) -> anyhow::Result<InProcessDaemon> {
        let data_dir = tempfile::tempdir_in(bench_tmp_root())?;
        let options = DaemonOptions {
            data_dir: DataDir::new(data_dir.path().to_path_buf()),
            listen: Some(troupe_runtime::config::Listen::Tcp("127.0.0.1:0".parse()?)),
            hibernate_after,
            session_threads: None,
            cluster: Default::default(),
        };
        let daemon = daemon::DaemonThread::spawn(options, WAIT)?;
        let token = std::fs::read_to_string(data_dir.path().join("daemon/token"))?.trim().to_owned();
        Ok(InProcessDaemon { addr: daemon.local_addr, token, data_dir, daemon })
    }

    /// A daemon with `config_toml` in its data dir and the cluster flags `cluster` (a cluster node, figure 11).
    pub fn start_configured(config_toml: &str, cluster: daemon::ClusterFlags) -> anyhow::Result<InProcessDaemon> {
        let data_dir = tempfile::tempdir_in(bench_tmp_root())?;
        std::fs::write(data_dir.path().join("config.toml"), config_toml)?;
        let options = DaemonOptions {
            data_dir: DataDir::new(data_dir.path().to_path_buf()),
            listen: Some(troupe_runtime::config::Listen::Tcp("127.0.0.1:0".parse()?)),
            hibernate_after: None,
            session_threads: None,
            cluster,
        };
        let daemon = daemon::DaemonThread::spawn(options, WAIT)?;
        let token = std::fs::read_to_string(data_dir.path().join("daemon/token"))?.trim().to_owned();
        Ok(InProcessDaemon { addr: daemon.local_addr, token, data_dir, daemon })
    }

    pub fn url(&self) -> String {
        format!("ws://{}/ws", self.addr)
    }

    pub fn path(&self) -> &Path {
        self.data_dir.path()
    }

    pub fn is_live(&self, session_id: &str) -> bool {
        self.daemon.engine().is_live(session_id)
    }

    pub async fn client(&self) -> anyhow::Result<(Client, Deliveries)> {
        connect(&self.url(), &self.token).await
    }
}

pub async fn connect(url: &str, token: &str) -> anyhow::Result<(Client, Deliveries)> {
    let options = ClientOptions { request_timeout: WAIT, ..ClientOptions::default() };
    Ok(within("client connect", Client::connect_websocket(url, token, options)).await??)
}

/// Where the bench puts its temporary directories: `TROUPE_BENCH_TMP`, else the system temp dir.
pub fn bench_tmp_root() -> PathBuf {
    std::env::var_os("TROUPE_BENCH_TMP").map_or_else(std::env::temp_dir, PathBuf::from)
}

/// The program that serves as a child daemon: the real `troupe` binary when one is found (`--troupe-bin`,
/// `TROUPE_BIN`, or next to this executable), else this executable's hidden `serve-child` command, which runs
/// the same `troupe::daemon::start` as `troupe serve`.
#[derive(Clone, Debug)]
pub struct DaemonProgram {
    pub program: PathBuf,
    pub real_binary: bool,
    /// The binary is older than the benchmark: it may not be the code being measured.
    pub stale: bool,
}

impl DaemonProgram {
    pub fn find(explicit: Option<PathBuf>) -> anyhow::Result<DaemonProgram> {
        if let Some(path) = explicit.or_else(|| std::env::var_os("TROUPE_BIN").map(PathBuf::from)) {
            ensure!(path.is_file(), "no troupe binary at {}", path.display());
            return Ok(DaemonProgram { program: path, real_binary: true, stale: false });
        }
        let me = std::env::current_exe()?;
        for dir in me.ancestors().skip(1).take(2) {
            let candidate = dir.join("troupe");
            if candidate.is_file() {
                // A `troupe` left from an earlier build would measure old code: `cargo run -p troupe-bench` builds
                // the daemon's crates into the benchmark, not the `troupe` binary. The binary is current when it was
                // linked after every workspace library it is made of was last built.
                let stale = linked_before_its_libraries(&candidate, &dir.join("deps"));
                if stale {
                    eprintln!(
                        "warning: {} is older than this benchmark and may measure old code; build both first \
                         (`cargo build --release -p troupe -p troupe-bench`) or name a binary with TROUPE_BIN",
                        candidate.display()
                    );
                }
                return Ok(DaemonProgram { program: candidate, real_binary: true, stale });
            }
        }
        Ok(DaemonProgram { program: me, real_binary: false, stale: false })
    }

    pub fn describe(&self) -> String {
        if self.real_binary && self.stale {
            format!("{} serve (OLDER THAN THIS BENCHMARK: rebuild it)", self.program.display())
        } else if self.real_binary {
            format!("{} serve", self.program.display())
        } else {
            format!("{} serve-child (no troupe binary found; same daemon::start)", self.program.display())
        }
    }

    fn serve_command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command.arg(if self.real_binary { "serve" } else { "serve-child" });
        command
    }

    /// Asks the kernel to drop the executable's pages from the page cache (`POSIX_FADV_DONTNEED`; pages mapped by a
    /// running process stay), so that the next start reads it as after a fresh build or boot. How much of the
    /// executable a start maps, and so its RSS, depends on the page-cache folios its last reader or writer left
    /// (docs/performance.md, finding 8); dropping them first makes every run measure the same state.
    pub fn drop_cached_pages(&self) -> anyhow::Result<()> {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open(&self.program)
            .with_context(|| format!("open {} to drop its cached pages", self.program.display()))?;
        // SAFETY: a valid descriptor of an open file, the whole file's range; the call reads and writes no memory.
        let error = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        ensure!(
            error == 0,
            "posix_fadvise of {}: {}",
            self.program.display(),
            std::io::Error::from_raw_os_error(error)
        );
        Ok(())
    }

    /// A short-lived run of the same executable that exits at once (`--version`): the cost of spawning it.
    pub fn spawn_exit_time(&self) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let status = Command::new(&self.program)
            .arg("--version")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        ensure!(status.success(), "{} --version failed", self.program.display());
        Ok(started.elapsed())
    }
}

/// The daemon as a child process, for RSS, CPU time and start time.
pub struct ChildDaemon {
    pub child: Child,
    pub url: String,
    pub token: String,
    /// Spawn → first successful `GET /readyz`.
    pub time_to_ready: Duration,
}

impl ChildDaemon {
    pub fn spawn(program: &DaemonProgram, data_dir: &Path, hibernate_after_ms: Option<u64>) -> anyhow::Result<Self> {
        let mut command = program.serve_command();
        command.args(["--listen", "127.0.0.1:0", "--data-dir"]).arg(data_dir);
        if let Some(ms) = hibernate_after_ms {
            command.arg("--hibernate-after-ms").arg(ms.to_string());
        }
        let started = Instant::now();
        let mut child = command
            .env("RUST_LOG", "warn")
            .env_remove("TROUPE_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("spawn {}", program.describe()))?;
        let stdout = child.stdout.take().context("stdout")?;
        let (line_sender, line_receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = std::io::BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = line_sender.send(line);
            }
            for _ in lines {}
        });
        let line = match line_receiver.recv_timeout(WAIT) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                bail!("the child daemon printed no address");
            }
        };
        let url = line.strip_prefix("troupe listening on ").context("listening line")?.trim().to_owned();
        let addr: SocketAddr = url.trim_start_matches("ws://").trim_end_matches("/ws").parse()?;
        let deadline = Instant::now() + WAIT;
        while !readyz(addr) {
            ensure!(Instant::now() < deadline, "the child daemon never became ready");
            std::thread::sleep(Duration::from_micros(200));
        }
        let time_to_ready = started.elapsed();
        let token = std::fs::read_to_string(data_dir.join("daemon/token"))?.trim().to_owned();
        Ok(ChildDaemon { child, url, token, time_to_ready })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// VmRSS in KiB.
    pub fn rss_kib(&self) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))?;
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .context("VmRSS in /proc/<pid>/status")
    }

    /// `RssAnon` and `RssFile` in KiB: the process's own memory (heap, stacks) and the mapped file pages it has
    /// touched (mostly the `troupe` binary's code and read-only data, shared with the page cache). VmRSS is their
    /// sum plus `RssShmem`.
    pub fn rss_anon_file_kib(&self) -> anyhow::Result<(u64, u64)> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
                .with_context(|| format!("{name} in /proc/<pid>/status"))
        };
        Ok((field("RssAnon:")?, field("RssFile:")?))
    }

    /// User + system CPU time of the whole process.
    pub fn cpu_time(&self) -> anyhow::Result<Duration> {
        process_cpu_time(self.pid())
    }

    /// Stops the daemon as a service manager does (SIGTERM) and waits for it to exit, at most `limit`: how long its
    /// graceful stop took.
    pub fn terminate(&mut self, limit: Duration) -> anyhow::Result<Duration> {
        let started = Instant::now();
        // SAFETY: kill(2) with a child's pid, which `wait` has not reaped yet, and a valid signal.
        ensure!(unsafe { libc::kill(self.pid() as libc::pid_t, libc::SIGTERM) } == 0, "SIGTERM to the daemon");
        while started.elapsed() < limit {
            if let Some(status) = self.child.try_wait()? {
                ensure!(status.success(), "the daemon's graceful stop failed: {status}");
                return Ok(started.elapsed());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.kill();
        bail!("the daemon did not stop within {limit:?} of SIGTERM")
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildDaemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// User + system CPU time of process `pid` (all its threads, ended ones included) so far, in nanoseconds: the
/// process's CPU clock (`clock_getcpuclockid`), the scheduler's own count. `/proc/<pid>/stat` is the fallback
/// (clock ticks, 10 ms each: too coarse for a run of 100 short turns).
pub fn process_cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let mut clock: libc::clockid_t = 0;
    let pid_t = libc::pid_t::try_from(pid).context("pid")?;
    // SAFETY: clock_getcpuclockid writes one clockid_t into `clock`, which lives for the call.
    if unsafe { libc::clock_getcpuclockid(pid_t, &mut clock) } == 0 {
        let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes one timespec into `now`, which lives for the call.
        if unsafe { libc::clock_gettime(clock, &mut now) } == 0 {
            return Ok(Duration::new(u64::try_from(now.tv_sec)?, u32::try_from(now.tv_nsec)?));
        }
    }
    process_cpu_ticks(pid)
}

fn process_cpu_ticks(pid: u32) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')').context("stat")? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Ok(Duration::from_nanos(ticks * 1_000_000_000 / hz))
}

/// One `GET /readyz` over a fresh TCP connection; true on `200`.
pub fn readyz(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.ends_with(b"200")
}

/// A raw WebSocket (tokio-tungstenite, TCP_NODELAY), used the same way against the daemon and the echo server.
pub struct RawWs {
    pub stream: tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
}

impl RawWs {
    pub async fn connect(url: &str, token: &str) -> anyhow::Result<RawWs> {
        let mut request = url.into_client_request()?;
        request.headers_mut().insert("Authorization", format!("Bearer {token}").parse()?);
        let (stream, _) =
            within("raw connect", tokio_tungstenite::connect_async_with_config(request, None, true)).await??;
        Ok(RawWs { stream })
    }

    /// [`connect`](Self::connect) with a 16 KiB read buffer instead of tungstenite's 128 KiB, which it zeroes on
    /// every read: for the many sockets of a fan-out that each read a few small frames per wake-up, that memset
    /// would be the client's largest cost.
    pub async fn connect_small_reads(url: &str, token: &str) -> anyhow::Result<RawWs> {
        let mut request = url.into_client_request()?;
        request.headers_mut().insert("Authorization", format!("Bearer {token}").parse()?);
        let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default().read_buffer_size(16 * 1024);
        let (stream, _) =
            within("raw connect", tokio_tungstenite::connect_async_with_config(request, Some(config), true)).await??;
        Ok(RawWs { stream })
    }

    pub async fn send(&mut self, text: Utf8Bytes) -> anyhow::Result<()> {
        self.stream.send(Message::Text(text)).await?;
        Ok(())
    }

    /// The next text frame that is a reply (has `"result"` or `"error"`), skipping notifications.
    pub async fn reply(&mut self) -> anyhow::Result<Utf8Bytes> {
        loop {
            match self.stream.next().await {
                Some(Ok(Message::Text(text))) if is_reply(&text) => return Ok(text),
                Some(Ok(Message::Text(_) | Message::Ping(_) | Message::Pong(_))) => continue,
                Some(Ok(other)) => bail!("unexpected frame {other:?}"),
                Some(Err(error)) => return Err(error.into()),
                None => bail!("the socket closed"),
            }
        }
    }

    pub async fn handshake(&mut self) -> anyhow::Result<()> {
        self.send(r#"{"jsonrpc":"2.0","id":0,"method":"handshake","params":{"protocol_version":20}}"#.into()).await?;
        let reply = within("handshake", self.reply()).await??;
        ensure!(reply.contains("\"protocol_version\":20"), "handshake failed: {}", reply.as_str());
        Ok(())
    }
}

pub fn is_reply(text: &str) -> bool {
    text.contains("\"result\"") || text.contains("\"error\"")
}

/// The request id of a reply frame (`"id":<digits>`).
pub fn reply_id(text: &str) -> Option<u64> {
    let start = text.find("\"id\":")? + 5;
    let digits: &str = &text[start..];
    let end = digits.find(|c: char| !c.is_ascii_digit()).unwrap_or(digits.len());
    digits[..end].parse().ok()
}

/// A fresh session subscribed from its start, with the subscribe's replay (its creation) read, so a timed part
/// that follows sees only new events.
pub async fn subscribed_session(
    client: &Client,
    deliveries: &mut Deliveries,
    cwd: &Path,
) -> anyhow::Result<SessionMeta> {
    let session = create_session(client, cwd).await?;
    client.subscribe(&session.session_id, None).await?;
    within("replay end", async {
        loop {
            match deliveries.next().await {
                Some(troupe_protocol::client::ClientDelivery::ReplayEnd { session_id, .. })
                    if session_id == session.session_id =>
                {
                    break Ok(());
                }
                Some(_) => continue,
                None => break Err(anyhow!("the deliveries ended")),
            }
        }
    })
    .await??;
    Ok(session)
}

/// The text of a child daemon's `GET /metrics` (behind its bearer token), over a plain HTTP/1.1 request.
pub fn scrape_metrics(daemon: &ChildDaemon) -> anyhow::Result<String> {
    let addr: SocketAddr =
        daemon.url.trim_start_matches("ws://").trim_end_matches("/ws").parse().context("the daemon's address")?;
    scrape_metrics_at(addr, &daemon.token)
}

/// The text of `GET /metrics` of the daemon listening on `addr`, behind `token`.
pub fn scrape_metrics_at(addr: SocketAddr, token: &str) -> anyhow::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    ensure!(response.starts_with("HTTP/1.1 200"), "GET /metrics: {}", response.lines().next().unwrap_or_default());
    Ok(response)
}

/// Counters of a daemon's `GET /metrics`: group commits (`fdatasync`s of session logs), their total seconds, and
/// events appended. Two readings, before and after some work, give that work's commits.
#[derive(Clone, Copy, Debug, Default)]
pub struct CommitCounters {
    pub fsyncs: f64,
    pub fsync_seconds: f64,
    pub events: f64,
}

impl CommitCounters {
    pub fn parse(metrics: &str) -> anyhow::Result<CommitCounters> {
        Ok(CommitCounters {
            fsyncs: metric_value(metrics, "troupe_event_log_fsync_duration_seconds_count")?,
            fsync_seconds: metric_value(metrics, "troupe_event_log_fsync_duration_seconds_sum")?,
            events: metric_value(metrics, "troupe_events_appended_total")?,
        })
    }

    /// Group commits since `before`.
    pub fn commits_since(&self, before: &CommitCounters) -> f64 {
        self.fsyncs - before.fsyncs
    }

    /// Events appended since `before`.
    pub fn events_since(&self, before: &CommitCounters) -> f64 {
        self.events - before.events
    }

    /// Events appended per group commit since `before`; NaN when there was no commit.
    pub fn events_per_commit_since(&self, before: &CommitCounters) -> f64 {
        let commits = self.commits_since(before);
        if commits > 0.0 { self.events_since(before) / commits } else { f64::NAN }
    }

    /// The daemon's mean `fdatasync` per group commit since `before`, in ms; NaN when there was none.
    pub fn mean_fsync_ms_since(&self, before: &CommitCounters) -> f64 {
        let commits = self.commits_since(before);
        if commits > 0.0 { (self.fsync_seconds - before.fsync_seconds) * 1000.0 / commits } else { f64::NAN }
    }
}

/// The value of the sample `name` (no labels) in a metrics text.
pub fn metric_value(metrics: &str, name: &str) -> anyhow::Result<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .with_context(|| format!("{name} in /metrics"))?
        .trim()
        .parse()
        .with_context(|| format!("{name} is not a number"))
}

/// The next live event of `session_id` and the instant it was held (other deliveries are skipped).
pub async fn next_live_event(
    deliveries: &mut Deliveries,
    session_id: &str,
) -> anyhow::Result<(Instant, troupe_protocol::types::events::StoredEvent)> {
    loop {
        let Some(delivery) = deliveries.next().await else { bail!("the deliveries ended") };
        let at = Instant::now();
        if let troupe_protocol::client::ClientDelivery::Live(event) = delivery
            && event.session_id == session_id
        {
            return Ok((at, event));
        }
    }
}

/// Starts a `local/echo` run of `input` in `session_id`; its id.
pub async fn start_echo_run(client: &Client, session_id: &str, input: &str) -> anyhow::Result<String> {
    let params = troupe_protocol::types::run::RunStartParams {
        session_id: session_id.to_owned(),
        client_run_id: troupe_runtime::clock::new_id(),
        selection: selection("local/echo"),
        input: input.to_owned(),
        reset_fallback: false,
        attachments: Vec::new(),
    };
    Ok(within("run.start", client.call::<method::RunStart>(params)).await??.run_id)
}

/// Creates a session whose tools act in `cwd`.
pub async fn create_session(client: &Client, cwd: &Path) -> anyhow::Result<SessionMeta> {
    let params =
        SessionCreateParams { selection: selection("local/echo"), cwd: Some(cwd.to_string_lossy().into_owned()) };
    Ok(within("session.create", client.call::<method::SessionCreate>(params)).await??.session)
}

/// Creates up to `count` sessions in `cwd`, 64 requests in flight, and stops sending once `deadline` has passed:
/// how many were created.
pub async fn create_sessions(client: &Client, cwd: &Path, count: usize, deadline: Instant) -> anyhow::Result<usize> {
    let mut created = 0;
    let mut creates = futures::stream::iter(0..count).map(|_| create_session(client, cwd)).buffer_unordered(64);
    while let Some(outcome) = creates.next().await {
        outcome?;
        created += 1;
        if Instant::now() > deadline {
            break;
        }
    }
    Ok(created)
}

/// The title of rename `index` of a bench, padded to a fixed size so that every line has the same length.
pub fn bench_title(prefix: &str, index: usize) -> String {
    format!("{prefix} {index:07} {}", "x".repeat(64))
}

/// The index encoded by [`bench_title`].
pub fn title_index(title: &str) -> Option<usize> {
    title.split(' ').nth(1)?.parse().ok()
}

pub async fn rename(client: &Client, session_id: &str, prefix: &str, index: usize) -> anyhow::Result<()> {
    let params = SessionRenameParams {
        session_id: session_id.to_owned(),
        client_rename_id: format!("{prefix}-{index}"),
        change: TitleChange::Set { title: bench_title(prefix, index) },
    };
    client.call::<method::SessionRename>(params).await?;
    Ok(())
}

/// `count` renames pipelined with `window` in flight; `on_send(index)` is called right before each is sent.
pub async fn rename_pipelined(
    client: &Client,
    session_id: &str,
    prefix: &str,
    count: usize,
    window: usize,
    on_send: impl Fn(usize),
) -> anyhow::Result<()> {
    let on_send = &on_send;
    let mut calls = futures::stream::iter(0..count)
        .map(|index| async move {
            on_send(index);
            rename(client, session_id, prefix, index).await
        })
        .buffer_unordered(window);
    while let Some(outcome) = calls.next().await {
        outcome?;
    }
    Ok(())
}

/// Connects the local provider with a `local/scripted` script.
pub async fn connect_script(client: &Client, dir: &Path, script: &serde_json::Value) -> anyhow::Result<()> {
    use troupe_protocol::types::provider::ProviderConnectParams;
    let path = dir.join(format!("script-{}.json", troupe_runtime::clock::new_id()));
    std::fs::write(&path, script.to_string())?;
    let params = ProviderConnectParams {
        provider_id: "local".to_owned(),
        expected_catalog_revision: None,
        setup_values: [("script".to_owned(), path.to_string_lossy().into_owned())].into_iter().collect(),
        auth_method: "none".to_owned(),
        auth_values: Default::default(),
        client_connect_id: troupe_runtime::clock::new_id(),
    };
    within("provider.connect", client.call::<method::ProviderConnect>(params)).await??;
    Ok(())
}

/// Latencies (ms) of `count` appends of `line` to a new file in `dir`, each one `write` + `fdatasync` (the cost of
/// one durable commit), back to back when `pace` is zero, else each after `pace` of idleness.
///
/// The pace matters on a virtual machine's disk: a commit issued after a couple of milliseconds of quiet finds the
/// vCPU and the host's I/O path gone idle and takes longer, median and tail, than the same commit issued right
/// after another (docs/performance.md, finding 6). A baseline for commits that come at a pace must be measured at
/// that pace.
pub fn raw_fdatasync_latency(dir: &Path, line: &[u8], count: usize, pace: Duration) -> anyhow::Result<Vec<f64>> {
    use std::os::fd::AsRawFd;
    let path = dir.join(format!("bench-fsync-{}.jsonl", troupe_runtime::clock::new_id()));
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        if !pace.is_zero() {
            std::thread::sleep(pace);
        }
        let started = Instant::now();
        file.write_all(line)?;
        // SAFETY: a valid open descriptor.
        ensure!(unsafe { libc::fdatasync(file.as_raw_fd()) } == 0, "fdatasync failed");
        samples.push(ms(started.elapsed()));
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
    Ok(samples)
}

/// Writes `<data_dir>/sessions/<session_id>/events.jsonl` directly, in the log's line format (one compact
/// `StoredEvent` per line, each ending in `\n`): `session_created`, `run_started`, `count - 3` text deltas of
/// `text_bytes` bytes each, `run_completed`. Directories 0700 and the file 0600, as the daemon makes them. Writing
/// the file is much faster than making the daemon commit `count` events, and gives a session of any size.
/// Returns the log's size in bytes.
pub fn write_text_delta_log(data_dir: &Path, session_id: &str, count: u64, text_bytes: usize) -> anyhow::Result<u64> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    use troupe_protocol::types::common::SessionOrigin;
    use troupe_protocol::types::events::{EventPayload, StoredEvent};

    ensure!(count >= 3, "a log of {count} events has no room for its run");
    let session_dir = data_dir.join("sessions").join(session_id);
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&session_dir)?;
    let path = session_dir.join("events.jsonl");
    let file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
    let mut out = std::io::BufWriter::with_capacity(1024 * 1024, file);
    let timestamp = troupe_runtime::clock::now_rfc3339();
    let run_id = troupe_runtime::clock::new_id();
    let filler = "x".repeat(text_bytes);
    for seq in 1..=count {
        let payload = match seq {
            1 => EventPayload::SessionCreated {
                origin: SessionOrigin::Root,
                cwd: data_dir.to_string_lossy().into_owned(),
                selection: selection("local/echo"),
            },
            2 => EventPayload::RunStarted {
                client_run_id: "bench-run".to_owned(),
                selection: selection("local/echo"),
                input: "replay".to_owned(),
                fallback_index: 0,
                model_chain: Vec::new(),
                reset_fallback: false,
                skill: None,
                requested_model: None,
                attachments: Vec::new(),
            },
            last if last == count => EventPayload::RunCompleted { final_text: Some("done".to_owned()) },
            _ => {
                // The sequence first, then filler up to exactly `text_bytes`.
                let mut text = format!("{seq:07} ");
                text.push_str(&filler[..text_bytes.saturating_sub(text.len())]);
                EventPayload::TextDelta { attempt_id: "bench-attempt".to_owned(), text }
            }
        };
        let event = StoredEvent {
            session_id: session_id.to_owned(),
            run_id: (seq > 1).then(|| run_id.clone()),
            seq,
            timestamp: timestamp.clone(),
            origin: None,
            payload,
        };
        serde_json::to_writer(&mut out, &event)?;
        out.write_all(b"\n")?;
    }
    let file = out.into_inner().map_err(|error| anyhow!("flush {}: {}", path.display(), error.error()))?;
    file.sync_all()?;
    Ok(file.metadata()?.len())
}

/// Whether `binary` is older than one of the workspace's libraries (`libtroupe[-_]*.rlib`) in `deps`: it was linked
/// before that code last changed.
fn linked_before_its_libraries(binary: &Path, deps: &Path) -> bool {
    let modified = |path: &Path| std::fs::metadata(path).and_then(|meta| meta.modified()).ok();
    let Some(linked) = modified(binary) else { return false };
    let Ok(entries) = std::fs::read_dir(deps) else { return false };
    entries.flatten().any(|entry| {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        (name.starts_with("libtroupe_") || name.starts_with("libtroupe-"))
            && name.ends_with(".rlib")
            && modified(&entry.path()).is_some_and(|built| built > linked)
    })
}
