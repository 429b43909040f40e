//! A node's connection to NATS: the settings it was started with, the client, the JetStream context, and the small
//! tokio runtime every NATS call runs on. Connecting also makes sure the stream and the buckets exist, with the
//! replicas the settings ask for.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use troupe_runtime::config::ClusterConfig;

use crate::error::ClusterError;
use crate::names;

/// How long one NATS request (a publish's acknowledgement, a get, a bucket update) may take before it fails.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the first connection may take at start before `troupe serve` gives up and says why.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a starting node waits for JetStream to create or find the stream and the buckets.
const PROVISION_WITHIN: Duration = Duration::from_secs(30);
/// How far back JetStream recognises a repeated publish by its message id, so that a retried append whose first
/// acknowledgement was lost is stored once.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// How the node proves who it is to NATS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NatsAuth {
    None,
    /// A credentials file (user JWT and nkey seed), as `nats --creds` takes.
    CredentialsFile(PathBuf),
    /// An nkey seed file.
    NkeyFile(PathBuf),
    UserPassword {
        user: String,
        password: String,
    },
    Token(String),
}

/// Everything a node needs to join the cluster, resolved from `[cluster]` and the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSettings {
    /// NATS server URLs (`nats://`, `tls://`).
    pub urls: Vec<String>,
    /// This node's name, unique in the cluster.
    pub node: String,
    /// Replicas of the event stream and the buckets.
    pub replicas: usize,
    pub auth: NatsAuth,
    pub tls_ca: Option<PathBuf>,
    /// A client certificate and its key.
    pub tls_client: Option<(PathBuf, PathBuf)>,
    /// How long a lease lives without a heartbeat.
    pub lease_ttl: Duration,
}

impl ClusterSettings {
    /// The settings of `config` (`None` when it configures no cluster), with the node's name defaulting to the
    /// host's. Reads the password or token from the environment variable the configuration names.
    pub fn from_config(config: &ClusterConfig) -> Result<Option<ClusterSettings>, ClusterError> {
        let Some(nats) = &config.nats else { return Ok(None) };
        let urls: Vec<String> = nats.split(',').map(|url| url.trim().to_owned()).collect();
        let node = match &config.node {
            Some(node) => node.clone(),
            None => host_name()?,
        };
        troupe_runtime::config::cluster::validate_node_name(&node).map_err(ClusterError::Settings)?;
        let secret = |variable: &str| {
            std::env::var(variable).map_err(|_| {
                ClusterError::Settings(format!("the environment variable {variable} named in [cluster] is not set"))
            })
        };
        let auth = match (&config.credentials, &config.nkey, &config.user, &config.token_env) {
            (Some(path), _, _, _) => NatsAuth::CredentialsFile(path.clone()),
            (_, Some(path), _, _) => NatsAuth::NkeyFile(path.clone()),
            (_, _, Some(user), _) => {
                let password = match &config.password_env {
                    Some(variable) => secret(variable)?,
                    None => String::new(),
                };
                NatsAuth::UserPassword { user: user.clone(), password }
            }
            (_, _, _, Some(variable)) => NatsAuth::Token(secret(variable)?),
            _ => NatsAuth::None,
        };
        let tls_client = match (&config.tls_cert, &config.tls_key) {
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            _ => None,
        };
        Ok(Some(ClusterSettings {
            urls,
            node,
            replicas: config.replicas(),
            auth,
            tls_ca: config.tls_ca.clone(),
            tls_client,
            lease_ttl: config.lease_ttl(),
        }))
    }

    /// Settings for a node named `node` on the servers at `urls` with no credentials (tests, loopback).
    pub fn plain(urls: &str, node: &str) -> ClusterSettings {
        ClusterSettings {
            urls: urls.split(',').map(str::to_owned).collect(),
            node: node.to_owned(),
            replicas: 1,
            auth: NatsAuth::None,
            tls_ca: None,
            tls_client: None,
            lease_ttl: Duration::from_secs(10),
        }
    }
}

fn host_name() -> Result<String, ClusterError> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_err(|error| ClusterError::Settings(format!("read the host name for cluster.node: {error}")))?;
    // A node name is a subject token: a dotted host name keeps its first label.
    let name = name.trim().split('.').next().unwrap_or_default().to_owned();
    if name.is_empty() {
        return Err(ClusterError::Settings("the host has no name: set cluster.node (or --node)".to_owned()));
    }
    Ok(name)
}

/// A node's live connection to the cluster. Cheap to clone; every clone shares one client and one runtime.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

struct Inner {
    /// `Some` until dropped: a runtime must be shut down without blocking, since the last clone may be dropped on
    /// an arbiter.
    runtime: Option<tokio::runtime::Runtime>,
    client: async_nats::Client,
    jetstream: jetstream::Context,
    settings: ClusterSettings,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Cluster").field("node", &self.inner.settings.node).finish_non_exhaustive()
    }
}

impl Cluster {
    /// Connects to NATS, and creates the event stream and the buckets where they do not exist yet. Blocks the
    /// calling thread (not an async one) until connected, or fails after a few seconds saying why.
    pub fn connect(settings: ClusterSettings) -> Result<Cluster, ClusterError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("troupe-nats")
            .enable_all()
            .build()
            .map_err(|error| ClusterError::Settings(format!("start the NATS runtime: {error}")))?;
        let (client, jetstream) = runtime.block_on(async {
            let client = tokio::time::timeout(CONNECT_TIMEOUT, connect_client(&settings)).await.map_err(|_| {
                ClusterError::Unreachable {
                    what: "connect",
                    detail: format!(
                        "no NATS server of {} answered within {CONNECT_TIMEOUT:?}",
                        settings.urls.join(", ")
                    ),
                }
            })??;
            let mut jetstream = jetstream::new(client.clone());
            jetstream.set_timeout(REQUEST_TIMEOUT);
            provision_patiently(&jetstream, settings.replicas).await?;
            Ok::<_, ClusterError>((client, jetstream))
        })?;
        Ok(Cluster { inner: Arc::new(Inner { runtime: Some(runtime), client, jetstream, settings }) })
    }

    pub fn node(&self) -> &str {
        &self.inner.settings.node
    }

    pub fn settings(&self) -> &ClusterSettings {
        &self.inner.settings
    }

    pub fn client(&self) -> &async_nats::Client {
        &self.inner.client
    }

    pub fn jetstream(&self) -> &jetstream::Context {
        &self.inner.jetstream
    }

    /// The runtime the NATS client runs on, to spawn work on or to enter.
    pub fn handle(&self) -> tokio::runtime::Handle {
        match &self.inner.runtime {
            Some(runtime) => runtime.handle().clone(),
            // Unreachable: the runtime is taken only when the last clone is dropped.
            None => tokio::runtime::Handle::current(),
        }
    }

    /// Runs `future` on the cluster's runtime and blocks the calling thread until it ends. For synchronous callers
    /// (log writer threads, blocking tasks): it must not be called on an async thread.
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.handle().block_on(future)
    }

    /// Whether the client is connected to a server right now.
    pub fn is_connected(&self) -> bool {
        self.inner.client.connection_state() == async_nats::connection::State::Connected
    }
}

async fn connect_client(settings: &ClusterSettings) -> Result<async_nats::Client, ClusterError> {
    let settings_error = |what: &str, error: std::io::Error| ClusterError::Settings(format!("{what}: {error}"));
    let mut options = async_nats::ConnectOptions::new()
        .name(format!("troupe node {}", settings.node))
        .request_timeout(Some(REQUEST_TIMEOUT))
        .connection_timeout(CONNECT_TIMEOUT);
    options = match &settings.auth {
        NatsAuth::None => options,
        NatsAuth::CredentialsFile(path) => async_nats::ConnectOptions::with_credentials_file(path.clone())
            .await
            .map_err(|error| settings_error(&format!("read the NATS credentials file {}", path.display()), error))?
            .name(format!("troupe node {}", settings.node))
            .request_timeout(Some(REQUEST_TIMEOUT))
            .connection_timeout(CONNECT_TIMEOUT),
        NatsAuth::NkeyFile(path) => {
            let seed = std::fs::read_to_string(path)
                .map_err(|error| settings_error(&format!("read the NATS nkey seed file {}", path.display()), error))?;
            options.nkey(seed.trim().to_owned())
        }
        NatsAuth::UserPassword { user, password } => options.user_and_password(user.clone(), password.clone()),
        NatsAuth::Token(token) => options.token(token.clone()),
    };
    if let Some(ca) = &settings.tls_ca {
        options = options.add_root_certificates(ca.clone()).require_tls(true);
    }
    if let Some((cert, key)) = &settings.tls_client {
        options = options.add_client_certificate(cert.clone(), key.clone()).require_tls(true);
    }
    if settings.urls.iter().any(|url| url.starts_with("tls://")) {
        options = options.require_tls(true);
    }
    let urls: Vec<async_nats::ServerAddr> = settings
        .urls
        .iter()
        .map(|url| url.parse().map_err(|error| ClusterError::Settings(format!("cluster.nats URL {url:?}: {error}"))))
        .collect::<Result<_, _>>()?;
    options
        .connect(urls)
        .await
        .map_err(|error| ClusterError::Unreachable { what: "connect", detail: error.to_string() })
}

/// [`provision`], tried again for up to [`PROVISION_WITHIN`] while JetStream cannot answer: a node started while the
/// NATS cluster elects a leader (one server just went down) waits for it instead of failing.
async fn provision_patiently(jetstream: &jetstream::Context, replicas: usize) -> Result<(), ClusterError> {
    let deadline = tokio::time::Instant::now() + PROVISION_WITHIN;
    loop {
        match provision(jetstream, replicas).await {
            Ok(()) => return Ok(()),
            Err(error) if tokio::time::Instant::now() < deadline => {
                tracing::info!(%error, "JetStream is not ready yet; trying again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Creates the event stream and the buckets where they do not exist (an existing one is used as it is).
async fn provision(jetstream: &jetstream::Context, replicas: usize) -> Result<(), ClusterError> {
    let failed = |what: &'static str| {
        move |error: &dyn std::fmt::Display| ClusterError::JetStream { what, detail: error.to_string() }
    };
    jetstream
        .get_or_create_stream(jetstream::stream::Config {
            name: names::EVENT_STREAM.to_owned(),
            subjects: vec![names::EVENT_SUBJECTS.to_owned()],
            storage: jetstream::stream::StorageType::File,
            num_replicas: replicas,
            duplicate_window: DUPLICATE_WINDOW,
            allow_direct: true,
            ..Default::default()
        })
        .await
        .map_err(|error| failed("create the event stream")(&error))?;
    // The console's entries expire by themselves once no session can still need them (JetStream 2.9 has no
    // per-message TTL): a code after five minutes, a session after its `[console] session_hours`, at most this.
    let console_max_age = Duration::from_secs(troupe_runtime::config::MAX_CONSOLE_SESSION_HOURS * 3600);
    for (bucket, max_age) in [
        (names::LEASE_BUCKET, Duration::ZERO),
        (names::DIRECTORY_BUCKET, Duration::ZERO),
        (names::NODE_BUCKET, Duration::ZERO),
        (names::PRESENCE_BUCKET, Duration::ZERO),
        (names::CONSOLE_BUCKET, console_max_age),
        (names::PROVIDER_BUCKET, Duration::ZERO),
        (names::PROVIDER_ANSWER_BUCKET, names::PROVIDER_ANSWER_AGE),
    ] {
        if jetstream.get_key_value(bucket).await.is_ok() {
            continue;
        }
        jetstream
            .create_key_value(jetstream::kv::Config {
                bucket: bucket.to_owned(),
                history: 1,
                max_age,
                num_replicas: replicas,
                storage: jetstream::stream::StorageType::File,
                ..Default::default()
            })
            .await
            .map_err(|error| failed("create a key-value bucket")(&error))?;
    }
    Ok(())
}
