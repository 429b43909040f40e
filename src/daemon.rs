//! Starting and stopping the daemon: data directory, token, config, engine, gateway.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail};
use troupe_actors::{Engine, EngineConfig, SessionLimits, StoredOutputLimits};
use troupe_gateway::{ConsoleBook, GatewayConfig, Listener, RunningGateway, Token};
use troupe_protocol::server::ServerLimits;
use troupe_runtime::config::SandboxMode;
use troupe_runtime::config::{self, Config, Listen};
use troupe_runtime::data_dir::{Consequence, DataDir, LayoutFile};
use troupe_runtime::provider_store::PROVIDERS_FILE_NAME;
use troupe_runtime::redact::Secrets;
use troupe_runtime::sandbox::Sandbox;
use troupe_runtime::sandbox::process_groups::Leftover;
use troupe_runtime::token::{TOKEN_ENV, load_or_create_token};

/// How a masked daemon token is labelled in tool output.
const DAEMON_TOKEN_SECRET: &str = "daemon token";

/// What `troupe serve` was asked for.
#[derive(Clone, Debug)]
pub struct DaemonOptions {
    pub data_dir: DataDir,
    /// Overrides `listen` from `config.toml`.
    pub listen: Option<Listen>,
    /// Overrides `limits.hibernate_after_secs` (tests use short values).
    pub hibernate_after: Option<Duration>,
    /// Threads that run session actors; by default the CPU count, from 1 to 8 (tests pin sessions to one).
    pub session_threads: Option<usize>,
    /// `--cluster` and `--node`, over `[cluster]` in config.toml.
    pub cluster: ClusterFlags,
}

/// The command line's cluster settings (`troupe serve --cluster URLS --node NAME`).
#[derive(Clone, Debug, Default)]
pub struct ClusterFlags {
    pub nats: Option<String>,
    pub node: Option<String>,
}

/// A running daemon. Dropping it does not stop it: call [`RunningDaemon::shutdown`].
pub struct RunningDaemon {
    /// Where it listens: the TCP address bound (the real port when port 0 was asked for), or the unix socket.
    pub listening: Listen,
    pub token_path: PathBuf,
    /// Its `daemon/url` is removed at a clean stop.
    data_dir: DataDir,
    engine: Arc<Engine>,
    gateway: RunningGateway,
    /// The web console's sign-ins, when `[console] enabled`.
    console: Option<Arc<ConsoleBook>>,
    /// In a cluster, this node's heartbeat and the answering of requests other nodes forward here; stop when dropped.
    forwarded: Option<ClusterServing>,
    _lock: DataDirLock,
}

impl RunningDaemon {
    /// The URL clients connect to: `ws://host:port/ws` (loopback for a wildcard address), or `unix:/path` for a
    /// unix socket (the form `--url` and the shared client accept).
    pub fn url(&self) -> String {
        crate::daemon_url::client_url(&self.listening)
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Whether the web console is on. A fresh one-time sign-in URL for it on this machine comes from
    /// [`RunningDaemon::console_sign_in_url`], when the daemon listens on TCP (a unix socket has no URL a browser
    /// can open).
    pub fn has_console(&self) -> bool {
        self.console.is_some()
    }

    /// A fresh one-time sign-in URL; see [`RunningDaemon::has_console`].
    /// In a cluster the code is recorded there first; `None` (logged) when it could not be.
    pub async fn console_sign_in_url(&self) -> Option<String> {
        let book = self.console.as_ref()?;
        let base = crate::daemon_url::http_base(&self.url())?;
        match book.mint_code().await {
            Ok(code) => Some(format!("{base}login?code={}", code.code)),
            Err(error) => {
                tracing::warn!(%error, "no console sign-in link: the cluster could not record one");
                None
            }
        }
    }

    /// Graceful stop: sockets are closed with 1001, then every accepted operation is made durable.
    pub async fn shutdown(self) {
        crate::daemon_url::forget(&self.data_dir);
        // Other nodes' requests first: from now on they find no node here and tell their clients so.
        drop(self.forwarded);
        self.gateway.stop().await;
        self.engine.shutdown().await;
        // Every session's cache is current now: the next start reads them from one file.
        let data_dir = self.data_dir.clone();
        match tokio::task::spawn_blocking(move || troupe_runtime::session_index::write(&data_dir)).await {
            Ok(Ok(sessions)) => tracing::info!(sessions, "session index written"),
            Ok(Err(error)) => tracing::warn!(%error, "could not write the session index; the next start scans"),
            Err(error) => tracing::warn!(%error, "the session index's writer thread failed"),
        }
        tracing::info!("daemon stopped");
    }
}

/// Starts the daemon on the current actix System and returns once it is listening.
pub async fn start(options: DaemonOptions) -> anyhow::Result<RunningDaemon> {
    let data_dir = options.data_dir;
    data_dir.ensure_layout().with_context(|| format!("preparing the data directory {}", data_dir.root().display()))?;
    let runs_without = check_layout_files(&data_dir)?;
    let lock = DataDirLock::acquire(&data_dir)?;
    // A killed daemon's URL: with the lock held again it would look current until the new one is written.
    crate::daemon_url::forget(&data_dir);
    // A config.toml that is a directory holds no settings, as a missing one: the defaults, with the problem logged.
    let config = if runs_without.contains(&LayoutFile::Config) {
        Config::default()
    } else {
        config::load(&data_dir.config_path())?
    };
    crate::logging::log_config(&data_dir, &config);
    let token = load_or_create_token(&data_dir)?;
    let listen = options.listen.unwrap_or_else(|| config.listen.clone());
    match &listen {
        Listen::Tcp(address) => check_address_free(*address)?,
        Listen::Unix(path) => crate::unix_listen::clear_stale_socket(path)?,
    }
    let hibernate_after = options.hibernate_after.unwrap_or(Duration::from_secs(config.limits.hibernate_after_secs));
    let session_threads = options
        .session_threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |count| count.get()).clamp(1, 8))
        .max(1);
    let default_cwd = std::env::current_dir().context("reading the current directory")?;
    let sandbox = Arc::new(start_sandbox(&config, &data_dir));
    let cluster = join_cluster(&config, options.cluster).await?;
    let secrets = Secrets::new();
    secrets.set(DAEMON_TOKEN_SECRET, token.as_str().to_owned());
    sandbox.mask_other_data_dirs_in(secrets.clone());

    let engine = Arc::new(
        Engine::start(EngineConfig {
            data_dir: data_dir.clone(),
            agents: config.agents.clone(),
            tools: config.tools.clone(),
            permissions: config.permissions.clone(),
            sessions: SessionLimits {
                hibernate_after,
                replay_page_bytes: config.limits.page_bytes(),
                tail_bytes: config.limits.session_tail_bytes,
                stored_output: StoredOutputLimits {
                    store_after_bytes: config.tools.max_output_bytes as u64,
                    max_stored_bytes: config.tools.max_stored_output_bytes,
                },
                batch_linger: Duration::from_millis(config.limits.batch_linger_ms),
            },
            session_threads,
            artifact_grace: Duration::from_secs(config.limits.artifact_grace_secs),
            default_cwd,
            max_input_bytes: config.limits.input_bytes(),
            sandbox,
            secrets,
            plugins: config.plugins.clone(),
            mcp_servers: config.mcp_servers.clone(),
            goals: config.goals.clone(),
            delegation: config.delegation,
            models: config.models.clone(),
            compaction: config.compaction.clone(),
            titles: config.titles.clone(),
            log_replica: cluster.as_ref().map(|cluster| cluster.replica.clone()),
            live_output: cluster.as_ref().map(|cluster| cluster.live_output.clone()),
            session_directory: cluster.as_ref().map(|cluster| cluster.directory.clone()),
            takeover: config.cluster.takeover,
            presence_share: cluster.as_ref().map(|cluster| cluster.presence.clone()),
            provider_share: cluster.as_ref().map(|cluster| cluster.providers.clone()),
        })
        .context("starting the engine")?,
    );
    let forwarded = match &cluster {
        Some(node) => match serve_cluster_requests(&engine, &node.cluster).await {
            Ok(serving) => Some(serving),
            Err(error) => {
                // As below: the engine's actors stop while the actix System still runs.
                engine.shutdown().await;
                return Err(error);
            }
        },
        None => None,
    };
    let ready = Arc::new(AtomicBool::new(false));
    let readiness: troupe_gateway::Readiness = {
        let ready = ready.clone();
        Arc::new(move || ready.load(Ordering::Acquire))
    };
    let console = config.console.enabled.then(|| {
        let (console_token, session_ttl) =
            (Token::new(token.as_str()), Duration::from_secs(config.console.session_hours * 3600));
        // A cluster node keeps its sign-ins in the cluster, so that a browser signs in on any node (no file).
        let book = Arc::new(match &cluster {
            Some(node) => ConsoleBook::shared(
                &console_token,
                Arc::new(troupe_cluster::NatsConsoleShare::new(node.cluster.clone())),
                session_ttl,
            ),
            None => ConsoleBook::open(&console_token, Some(data_dir.console_sessions_path()), session_ttl),
        });
        engine.set_console_minter(console_minter(book.clone()));
        book
    });
    let mut gateway_config = gateway_config(&config, &listen, Token::new(token.as_str()));
    gateway_config.metrics = Some(metrics_endpoint(&engine, config.metrics_public));
    gateway_config.console = console.clone();
    let (gateway, server) = match troupe_gateway::start(engine.clone(), gateway_config, readiness) {
        Ok(started) => started,
        Err(error) => {
            // The engine's actors must stop while the actix System still runs: left for the System's teardown,
            // an actor that never got polled starts (and asks for a timer) after the reactor is gone, and panics.
            engine.shutdown().await;
            // The gateway's message already ends with the io error: no `{:#}` chain, which would repeat it.
            bail!("{error}");
        }
    };
    actix_web::rt::spawn(server);
    let listening = match &gateway.listening {
        Listener::Tcp(address) => Listen::Tcp(*address),
        Listener::Unix(path) => Listen::Unix(path.clone()),
    };
    engine.set_listen(listening.to_string());
    if let Err(error) = crate::daemon_url::record(&data_dir, &listening) {
        // Clients given --url (or the config's listen) still find the daemon: a warning, not a refusal.
        let path = data_dir.url_path();
        tracing::warn!(path = %path.display(), %error, "could not record the daemon's URL for local clients");
    }
    ready.store(true, Ordering::Release);
    tracing::info!(url = %crate::daemon_url::client_url(&listening), "troupe is listening");
    Ok(RunningDaemon {
        listening,
        token_path: data_dir.token_path(),
        data_dir,
        engine,
        gateway,
        console,
        forwarded,
        _lock: lock,
    })
}

/// What a cluster node gives its engine: where session logs are replicated, the cluster's session directory, and
/// where presence lists and provider connections are shared.
struct ClusterNode {
    cluster: troupe_cluster::Cluster,
    replica: Arc<dyn troupe_runtime::event_log::LogReplica>,
    live_output: Arc<dyn troupe_runtime::live_output_share::LiveOutputShare>,
    directory: Arc<dyn troupe_runtime::session_directory::SessionDirectory>,
    presence: Arc<dyn troupe_runtime::presence_share::PresenceShare>,
    providers: Arc<dyn troupe_runtime::provider_share::ProviderShare>,
}

/// Connects to the cluster's NATS when `[cluster]` or `--cluster` asks for one (on a blocking thread: the client
/// runs on its own runtime). `None` on a single node.
async fn join_cluster(config: &Config, flags: ClusterFlags) -> anyhow::Result<Option<ClusterNode>> {
    let mut settings = config.cluster.clone();
    if flags.nats.is_some() {
        settings.nats = flags.nats;
    }
    if flags.node.is_some() {
        settings.node = flags.node;
    }
    let Some(settings) = troupe_cluster::ClusterSettings::from_config(&settings)? else { return Ok(None) };
    let node = settings.node.clone();
    let urls = settings.urls.join(",");
    let cluster = tokio::task::spawn_blocking(move || troupe_cluster::Cluster::connect(settings))
        .await
        .context("joining the cluster")?
        .with_context(|| format!("joining the cluster on {urls} as node {node}"))?;
    tracing::info!(node = %node, nats = %urls, "joined the cluster");
    Ok(Some(ClusterNode {
        cluster: cluster.clone(),
        replica: Arc::new(troupe_cluster::JetStreamReplica::new(cluster.clone())),
        live_output: Arc::new(troupe_cluster::NatsLiveOutput::start(cluster.clone())),
        directory: Arc::new(troupe_cluster::NatsDirectory::start(cluster.clone())),
        presence: Arc::new(troupe_cluster::NatsPresence::start(cluster.clone())),
        providers: Arc::new(troupe_cluster::NatsProviderShare::new(cluster)),
    }))
}

/// Makes every method work for every session from this node: requests for sessions other nodes host are sent on
/// to them, and the requests they send here are answered by this engine.
async fn serve_cluster_requests(
    engine: &Arc<Engine>,
    cluster: &troupe_cluster::Cluster,
) -> anyhow::Result<ClusterServing> {
    engine.set_forwarder(Arc::new(troupe_cluster::NatsForwarder::new(cluster.clone())));
    let probed = cluster.clone();
    // Bounded: `daemon.status` (and each `/metrics` scrape, which reads it) must not wait out NATS's timeouts.
    engine.set_cluster_probe(Arc::new(move || {
        let cluster = probed.clone();
        let unknown = troupe_protocol::types::daemon::ClusterStatus {
            node: probed.node().to_owned(),
            nats_connected: probed.is_connected(),
            live_nodes: Vec::new(),
        };
        let status = probed.handle().spawn(async move {
            tokio::time::timeout(Duration::from_secs(1), troupe_cluster::nodes::status(&cluster)).await
        });
        Box::pin(async move { status.await.ok().and_then(Result::ok).unwrap_or(unknown) })
    }));
    let registered = {
        let cluster = cluster.clone();
        cluster
            .handle()
            .spawn(async move { troupe_cluster::nodes::register(&cluster, env!("CARGO_PKG_VERSION")).await })
    };
    let registration = registered
        .await
        .context("registering this node")?
        .with_context(|| format!("registering node {} with the cluster", cluster.node()))?;
    let serving = troupe_cluster::serve_forwarded(cluster, engine.clone())
        .await
        .with_context(|| format!("answering the requests other cluster nodes forward to node {}", cluster.node()))?;
    Ok(ClusterServing { _registration: registration, _forwarded: serving })
}

/// What a cluster node runs beside its engine: its heartbeat in the cluster's list of nodes, and the answering of
/// requests other nodes forward here. Both stop when dropped.
struct ClusterServing {
    _registration: troupe_cluster::nodes::NodeRegistration,
    _forwarded: troupe_cluster::forward::ForwardedServing,
}

/// `console.login_code`'s answers: a code from the gateway's book, as a path relative to the daemon's base URL.
fn console_minter(book: Arc<ConsoleBook>) -> troupe_actors::ConsoleCodeMinter {
    Arc::new(move || {
        let book = book.clone();
        Box::pin(async move {
            let code = book.mint_code().await.map_err(|error| error.to_string())?;
            Ok(troupe_protocol::types::daemon::ConsoleLoginCodeResult {
                path: format!("login?code={}", code.code),
                expires_at: troupe_gateway::rfc3339(code.expires_at),
            })
        })
    })
}

/// Checks the files of the data directory's layout before anything reads them: one that is a directory (or
/// anything but a file) stops the start, in one line naming it and what to do, when the daemon cannot run safely
/// without it (its lock; its token, unless `TROUPE_TOKEN` gives one, since a daemon without a token would have
/// nothing to require of clients), and is otherwise logged as an error once, the daemon running as if the file were
/// missing. Returns the files it runs without.
fn check_layout_files(data_dir: &DataDir) -> anyhow::Result<Vec<LayoutFile>> {
    let token_from_environment = std::env::var_os(TOKEN_ENV).is_some_and(|token| !token.is_empty());
    let mut runs_without = Vec::new();
    for misplaced in data_dir.misplaced_files() {
        match misplaced.file.consequence() {
            Consequence::Refuse => bail!("cannot start: {misplaced}"),
            Consequence::RefuseUnlessTokenFromEnvironment if !token_from_environment => {
                bail!("cannot start: {misplaced}")
            }
            Consequence::RefuseUnlessTokenFromEnvironment => tracing::warn!(
                path = %misplaced.path.display(),
                "data directory problem: the token file is a directory; the daemon uses {TOKEN_ENV}, and local \
                 clients cannot read the token from the data directory: {}",
                misplaced.remedy()
            ),
            Consequence::RunWithout(_) => {
                tracing::error!(path = %misplaced.path.display(), "data directory problem: {misplaced}")
            }
        }
        runs_without.push(misplaced.file);
    }
    Ok(runs_without)
}

/// Refuses at once, in words, an address another program holds, before the engine starts: failing the bind
/// after it would leave its actors to be torn down with the runtime. Port 0 (any free port) is always free.
fn check_address_free(listen: SocketAddr) -> anyhow::Result<()> {
    if listen.port() == 0 {
        return Ok(());
    }
    match std::net::TcpListener::bind(listen) {
        Ok(_probe) => Ok(()),
        Err(error) => Err(anyhow::anyhow!(
            "cannot listen on {listen}: {error}\n  hint: another program (another troupe daemon?) holds that address; \
             choose another with `troupe serve --listen ADDRESS` or `listen` in config.toml"
        )),
    }
}

/// Makes this data dir known to every daemon of this user, whose tools must never reach it either: a marker in it
/// (recognised by its layout wherever it is) and a line in the user's registry. A failure is a warning: the other
/// daemons still find the data dir by its marker inside their sessions' folders.
fn announce_data_dir(data_dir: &DataDir, home: Option<&std::path::Path>) {
    use troupe_runtime::sandbox::data_dirs;
    let root = data_dir.root().canonicalize().unwrap_or_else(|_| data_dir.root().to_path_buf());
    if let Err(error) = data_dirs::write_marker(&root) {
        tracing::warn!(path = %root.display(), %error, "could not mark the data directory as troupe's");
    }
    match home {
        Some(home) => {
            if let Err(error) = data_dirs::register(home, &root) {
                tracing::warn!(%error, "could not record the data directory in the registry of troupe data directories");
            }
        }
        None => tracing::warn!(
            "HOME is not set: the data directory is not recorded in the registry of troupe data directories, so \
             other daemons find it only by its layout"
        ),
    }
}

/// Builds the sandbox of tool processes, says at start what it enforces, and kills the process groups a previous
/// daemon of this data directory left behind (it died without cleaning up), before any run is marked interrupted.
fn start_sandbox(config: &Config, data_dir: &DataDir) -> Sandbox {
    let home = std::env::var_os("HOME").filter(|home| !home.is_empty()).map(PathBuf::from);
    announce_data_dir(data_dir, home.as_deref());
    let sandbox = Sandbox::new(&config.sandbox, data_dir.root(), home.as_deref());
    let status = sandbox.status();
    match (&status.tools_refused, status.landlock_abi) {
        (Some(refusal), _) => tracing::error!("{refusal}"),
        (None, _) if status.mode == SandboxMode::Off => tracing::warn!(
            "[sandbox] mode = \"off\": tool processes run with the daemon's full rights, including its data \
             directory; only the permission policy stands between a model and this machine"
        ),
        (None, abi) => tracing::info!(
            mode = status.mode.as_str(),
            landlock_abi = abi.unwrap_or_default(),
            network = status.network,
            pid_namespace = status.pid_namespace,
            private_proc = status.private_proc,
            denied = %status.denied.join(", "),
            writable = %status.writable.join(", "),
            "tool processes run in the sandbox"
        ),
    }
    if status.mode != SandboxMode::Off && status.tools_refused.is_none() {
        if let Some(reason) = sandbox.no_pid_namespace() {
            tracing::warn!(
                %reason,
                "tool processes get no PID namespace here: a process a command detaches from its group (setsid) \
                 can outlive the command"
            );
        }
        if let Some(reason) = sandbox.no_private_proc() {
            tracing::warn!(
                %reason,
                "tool processes get no /proc of their own here: they can read the command line of every process \
                 of this machine (a secret passed as an argument included)"
            );
        }
        let writable = if status.mode == SandboxMode::WorkspaceWrite { sandbox.writable() } else { &[] };
        for path in writable.iter().filter(|path| !path.exists()) {
            tracing::warn!(
                path = %path.display(),
                "[sandbox] writable names a path that does not exist; commands cannot create it (create it first)"
            );
        }
    }
    let guarded = [data_dir.token_path(), data_dir.root().join(PROVIDERS_FILE_NAME), data_dir.config_path()];
    for secret in guarded {
        use std::os::unix::fs::MetadataExt;
        // A directory's link count is 2 and more by nature (its `.` and its subfolders' `..`): only files count.
        if let Ok(metadata) = std::fs::metadata(&secret)
            && metadata.is_file()
            && metadata.nlink() > 1
        {
            tracing::warn!(
                path = %secret.display(),
                links = metadata.nlink(),
                "a file of the data directory has other hard links; a link outside it escapes the sandbox's path \
                 rules (file tools still refuse it by inode): remove the other links"
            );
        }
    }
    match sandbox.clear_temp_root() {
        Ok(0) => {}
        Ok(removed) => tracing::info!(removed, "removed the run temp folders of data directories that are gone"),
        Err(error) => tracing::warn!(%error, "could not clear the temp dirs of runs a previous daemon left"),
    }
    if let Some(groups) = sandbox.groups() {
        for leftover in groups.kill_leftovers() {
            match leftover {
                Leftover::Killed { pgid } => {
                    tracing::warn!(
                        pgid,
                        "killed a tool process group left behind by a daemon that did not stop cleanly"
                    )
                }
                Leftover::Gone { .. } => {}
                Leftover::Failed { record, reason } => {
                    tracing::warn!(record = %record.display(), %reason, "could not clean up a recorded process group")
                }
            }
        }
    }
    sandbox
}

fn gateway_config(config: &Config, listen: &Listen, token: Token) -> GatewayConfig {
    let listen = match listen {
        Listen::Tcp(address) => Listener::Tcp(*address),
        Listen::Unix(path) => Listener::Unix(path.clone()),
    };
    GatewayConfig {
        listen,
        allowed_origins: config.allowed_origins.clone(),
        trust_proxy: config.trust_proxy,
        max_frame_bytes: config.limits.max_frame_bytes,
        limits: ServerLimits {
            max_in_flight: config.limits.max_in_flight,
            outbound_queue: config.limits.outbound_queue,
            outbound_queue_bytes: config.limits.outbound_queue_bytes,
            reply_budget_bytes: config.limits.reply_budget_bytes,
            replay_stall: Duration::from_secs(config.limits.replay_stall_secs),
        },
        ping_interval: Duration::from_secs(config.limits.ping_interval_secs),
        pong_timeout: Duration::from_secs(config.limits.ping_interval_secs.saturating_mul(3)),
        // The TCP placeholder's defaults only: `listen` above is where it listens.
        ..GatewayConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), token)
    }
}

/// `GET /metrics`: the engine's registry (connections report to it), its state gauges read at each scrape.
fn metrics_endpoint(engine: &Arc<Engine>, public: bool) -> troupe_gateway::MetricsEndpoint {
    let scraped = engine.clone();
    troupe_gateway::MetricsEndpoint {
        observer: Arc::new(engine.metrics().clone()),
        render: Arc::new(move || {
            let engine = scraped.clone();
            Box::pin(async move { engine.metrics_text().await })
        }),
        content_type: troupe_runtime::metrics::CONTENT_TYPE,
        public,
    }
}

/// How long a start waits for the data directory's lock before refusing.
const LOCK_PATIENCE: Duration = Duration::from_secs(1);

/// An exclusive lock on `<data_dir>/daemon/lock`, held for the daemon's lifetime: two daemons writing the same
/// session logs would break the one-writer rule, so the second one refuses to start.
struct DataDirLock {
    _file: std::fs::File,
}

impl DataDirLock {
    fn acquire(data_dir: &DataDir) -> anyhow::Result<DataDirLock> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        let path = data_dir.lock_path();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        // A daemon killed a moment ago may still have a tool process between fork and exec, which shares the lock
        // until it execs or exits (within milliseconds: it closes or marks close-on-exec every descriptor, and
        // exits when its parent is gone). So a held lock is tried again for a second before giving up.
        let deadline = std::time::Instant::now() + LOCK_PATIENCE;
        let locked = loop {
            // SAFETY: flock on a file descriptor we own; it has no memory-safety preconditions.
            let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if locked == 0 || std::time::Instant::now() >= deadline {
                break locked;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if locked != 0 {
            bail!(already_running(data_dir, &path));
        }
        // The pid, written now, right before the config is read: the file's mtime (to the nanosecond, unlike a
        // process start from /proc) is what `troupe status` compares config.toml's mtime with.
        let mut file = file;
        let recorded = file.set_len(0).and_then(|()| {
            use std::io::Write as _;
            file.write_all(format!("{}\n", std::process::id()).as_bytes())
        });
        if let Err(error) = recorded {
            tracing::warn!(path = %path.display(), %error, "could not write the daemon's pid into its lock file");
        }
        Ok(DataDirLock { _file: file })
    }
}

/// What a second daemon on a data dir says: which daemon holds it, where that one listens, and the ways on.
fn already_running(data_dir: &DataDir, lock: &std::path::Path) -> String {
    let pid = std::fs::read_to_string(lock).ok().and_then(|text| text.trim().parse::<u32>().ok());
    let url = std::fs::read_to_string(data_dir.url_path()).ok().map(|url| url.trim().to_owned());
    let holder = match (pid, url.filter(|url| !url.is_empty())) {
        (Some(pid), Some(url)) => format!(" (pid {pid}, listening on {url})"),
        (Some(pid), None) => format!(" (pid {pid})"),
        (None, _) => format!(" (lock held on {})", lock.display()),
    };
    let stop = pid.map_or_else(|| "stop it".to_owned(), |pid| format!("stop it (`kill {pid}`)"));
    format!(
        "another troupe daemon is already using the data directory {}{holder}\n  hint: use that one (`troupe status \
         --data-dir {}` shows it), {stop} and start again, or give this one another data dir with --data-dir DIR",
        data_dir.root().display(),
        data_dir.root().display()
    )
}

/// The daemon on its own thread with its own actix System, for tests, benchmarks and programs that embed it.
/// Dropping it stops the daemon gracefully and joins the thread.
pub struct DaemonThread {
    pub local_addr: SocketAddr,
    engine: Arc<Engine>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DaemonThread {
    /// Starts the daemon and returns once it listens, or fails after `timeout`.
    pub fn spawn(options: DaemonOptions, timeout: Duration) -> anyhow::Result<DaemonThread> {
        let (ready_sender, ready_receiver) = std::sync::mpsc::channel();
        let (stop_sender, stop_receiver) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new().name("troupe-daemon".into()).spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                match start(options).await {
                    Ok(running) => {
                        let Some(local_addr) = running.listening.tcp() else {
                            let _ = ready_sender.send(Err("DaemonThread serves TCP only".to_owned()));
                            running.shutdown().await;
                            return;
                        };
                        let _ = ready_sender.send(Ok((local_addr, running.engine().clone())));
                        let _ = stop_receiver.await;
                        running.shutdown().await;
                    }
                    Err(error) => {
                        let _ = ready_sender.send(Err(format!("{error:#}")));
                    }
                }
            });
        })?;
        let (local_addr, engine) = ready_receiver
            .recv_timeout(timeout)
            .context("the daemon did not start in time")?
            .map_err(|error| anyhow::anyhow!("the daemon failed to start: {error}"))?;
        Ok(DaemonThread { local_addr, engine, stop: Some(stop_sender), thread: Some(thread) })
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Stops the daemon gracefully and waits for its thread.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for DaemonThread {
    fn drop(&mut self) {
        self.stop();
    }
}
