//! Real NATS servers with JetStream for the cluster tests: Debian's `nats-server` (installed by `scripts/test`),
//! started on loopback with free ports and a store in a temporary directory, killed and reaped on drop.
//!
//! - [`NatsServer::start`]: one server (JetStream streams can only have one replica on it).
//! - [`NatsCluster::start`]: `n` servers routed into one cluster, each with its own `server_name` and store, so
//!   streams and buckets can have up to `n` replicas; [`NatsCluster::kill`] and [`NatsCluster::restart`] take one
//!   down and bring it back on the same ports and store.
//!
//! A server is ready when its monitoring endpoint's `/healthz` answers `ok`, which for JetStream means that it
//! reached the meta leader: a stream can then be created.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to become healthy (a cluster elects its meta leader first).
const READY_WITHIN: Duration = Duration::from_secs(30);
/// How many times a server (or a cluster) is started on fresh ports before the test fails.
const START_ATTEMPTS: usize = 5;

/// The `nats-server` program: `$TROUPE_NATS_SERVER`, else Debian's `/usr/sbin/nats-server`, else from `PATH`.
pub fn nats_server_program() -> PathBuf {
    if let Some(program) = std::env::var_os("TROUPE_NATS_SERVER") {
        return PathBuf::from(program);
    }
    let debian = Path::new("/usr/sbin/nats-server");
    if debian.exists() { debian.to_path_buf() } else { PathBuf::from("nats-server") }
}

/// One `nats-server` process and what it needs to start again.
pub struct NatsServer {
    child: Option<Child>,
    /// The server's configuration file (it holds the ports and the store directory).
    config: PathBuf,
    client_port: u16,
    monitor_port: u16,
    /// The store and the configuration; removed on drop (unless the server was handed a directory to keep).
    _dir: Option<tempfile::TempDir>,
    log: PathBuf,
}

impl NatsServer {
    /// A single JetStream server on loopback, ready.
    pub fn start() -> NatsServer {
        // Free ports are found a moment before the server binds them: another test may take one meanwhile, and
        // the server then exits at once; it is started again on other ports.
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let dir = tempfile::tempdir().expect("a directory for nats-server");
            let ports = Ports::free();
            let config = format!(
                "server_name: solo\nlisten: 127.0.0.1:{}\nhttp: 127.0.0.1:{}\njetstream {{\n  store_dir: \"{}\"\n}}\n",
                ports.client,
                ports.monitor,
                dir.path().join("store").display(),
            );
            let path = dir.path().to_path_buf();
            let mut server = NatsServer::write_and_spawn(&path, "solo", &config, ports, Some(dir));
            match server.healthy_or_exited() {
                Ok(()) => return server,
                Err(log) => failures.push(log),
            }
        }
        panic!("nats-server did not start in {START_ATTEMPTS} attempts:\n{}", failures.join("\n---\n"));
    }

    fn write_and_spawn(
        dir: &Path,
        name: &str,
        config: &str,
        ports: Ports,
        keep: Option<tempfile::TempDir>,
    ) -> NatsServer {
        let config_path = dir.join(format!("{name}.conf"));
        std::fs::write(&config_path, config).expect("write nats-server.conf");
        let mut server = NatsServer {
            child: None,
            config: config_path,
            client_port: ports.client,
            monitor_port: ports.monitor,
            _dir: keep,
            log: dir.join(format!("{name}.log")),
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).expect("nats-server log file");
        let child = Command::new(nats_server_program())
            .arg("-c")
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|error| {
                panic!(
                    "start {} (scripts/test installs Debian's nats-server): {error}",
                    nats_server_program().display()
                )
            });
        self.child = Some(child);
    }

    /// The URL clients connect to: `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.client_port)
    }

    pub fn client_port(&self) -> u16 {
        self.client_port
    }

    /// The running process's id (for a benchmark's CPU time); `None` while it is stopped.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same ports and store, and waits until it is healthy.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
        self.wait_healthy();
    }

    /// The server's log so far (for a failing test's message).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// How many subscriptions the server holds on exactly `subject` (its monitoring endpoint's `/subsz`), to tell
    /// that a follow let go of its subscription; `None` when the server does not answer.
    pub fn subscriptions_to(&self, subject: &str) -> Option<usize> {
        let body = monitor_get(self.monitor_port, "/subsz?subs=1&limit=1000000")?;
        let answer: serde_json::Value = serde_json::from_str(&body).ok()?;
        let listed = answer["subscriptions_list"].as_array().map(Vec::as_slice).unwrap_or_default();
        Some(listed.iter().filter(|subscription| subscription["subject"] == subject).count())
    }

    /// Waits until `/healthz` answers `ok` (JetStream enabled and in contact with its meta leader).
    pub fn wait_healthy(&mut self) {
        if let Err(log) = self.healthy_or_exited() {
            panic!("nats-server on port {} did not become healthy:\n{log}", self.client_port);
        }
    }

    /// Waits until the server is healthy; its log when it exited first (a port taken meanwhile) or took longer
    /// than [`READY_WITHIN`].
    fn healthy_or_exited(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if healthz_ok(self.monitor_port) {
                return Ok(());
            }
            if !self.is_running() || Instant::now() >= deadline {
                self.kill();
                return Err(self.log_text());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `n` JetStream servers routed into one cluster on loopback.
pub struct NatsCluster {
    pub servers: Vec<NatsServer>,
    _dir: tempfile::TempDir,
}

impl NatsCluster {
    /// Starts `n` servers (named `n1`, `n2`, …) and waits until every one is healthy; on other ports again when one
    /// of them could not bind its own.
    pub fn start(n: usize) -> NatsCluster {
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            match NatsCluster::try_start(n) {
                Ok(cluster) => return cluster,
                Err(log) => failures.push(log),
            }
        }
        panic!(
            "a cluster of {n} nats-servers did not start in {START_ATTEMPTS} attempts:\n{}",
            failures.join("\n---\n")
        );
    }

    fn try_start(n: usize) -> Result<NatsCluster, String> {
        let dir = tempfile::tempdir().expect("a directory for the nats cluster");
        let ports: Vec<Ports> = (0..n).map(|_| Ports::free()).collect();
        let routes: Vec<String> = ports.iter().map(|port| format!("nats-route://127.0.0.1:{}", port.cluster)).collect();
        let mut servers = ports
            .iter()
            .enumerate()
            .map(|(index, port)| {
                let name = format!("n{}", index + 1);
                let config = format!(
                    "server_name: {name}\nlisten: 127.0.0.1:{client}\nhttp: 127.0.0.1:{monitor}\n\
                     jetstream {{\n  store_dir: \"{store}\"\n}}\n\
                     cluster {{\n  name: troupe-test\n  listen: 127.0.0.1:{cluster}\n  routes: [{routes}]\n}}\n",
                    client = port.client,
                    monitor = port.monitor,
                    cluster = port.cluster,
                    store = dir.path().join(&name).display(),
                    routes = routes.join(", "),
                );
                NatsServer::write_and_spawn(dir.path(), &name, &config, *port, None)
            })
            .collect::<Vec<_>>();
        for server in &mut servers {
            server.healthy_or_exited()?;
        }
        Ok(NatsCluster { servers, _dir: dir })
    }

    /// Every server's client URL, comma-separated, as a NATS client takes a server list.
    pub fn urls(&self) -> String {
        self.servers.iter().map(NatsServer::url).collect::<Vec<_>>().join(",")
    }

    pub fn kill(&mut self, index: usize) {
        self.servers[index].kill();
    }

    pub fn restart(&mut self, index: usize) {
        self.servers[index].restart();
    }
}

#[derive(Clone, Copy)]
struct Ports {
    client: u16,
    monitor: u16,
    cluster: u16,
}

impl Ports {
    /// Three ports free now (held at once, so they differ); the server binds them a moment later.
    fn free() -> Ports {
        let listeners: Vec<TcpListener> =
            (0..3).map(|_| TcpListener::bind("127.0.0.1:0").expect("bind a free port")).collect();
        let port = |index: usize| listeners[index].local_addr().expect("a bound port").port();
        Ports { client: port(0), monitor: port(1), cluster: port(2) }
    }
}

fn healthz_ok(monitor_port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&([127, 0, 0, 1], monitor_port).into(), Duration::from_secs(1))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream.write_all(b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200")
}

/// The body of the monitoring endpoint's answer to `GET path`; `None` when it does not answer 200.
fn monitor_get(monitor_port: u16, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&([127, 0, 0, 1], monitor_port).into(), Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    (head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200")).then(|| body.to_owned())
}
