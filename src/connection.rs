//! How a client command finds and reaches the daemon: the URL (`--url`, `TROUPE_URL`, else the URL the daemon
//! running on the data dir recorded in `daemon/url`, else the data dir's configured `listen`), the token (`--token`,
//! `TROUPE_TOKEN`, `--token-file`, `TROUPE_TOKEN_FILE`, else the data dir's token file, read only), and
//! what it says when that fails. A client command never creates a data directory or a token: a token it created
//! could only be wrong, and would hide the real mistake (a mistyped `--data-dir`).

use std::path::PathBuf;

use troupe_protocol::client::{Client, ClientError, ClientOptions, ClientProtocol};
use troupe_protocol::transport::OpenFailure;
use troupe_runtime::data_dir::DataDir;

/// The URL of a daemon listening on the default address.
pub const DEFAULT_URL: &str = "ws://127.0.0.1:7419/ws";

/// Where a client command connects, and with which token.
#[derive(Clone, Debug)]
pub struct Connection {
    /// `--url` or `TROUPE_URL`; `None`: the data dir's configured `listen`.
    pub url: Option<String>,
    /// The token given on the command line or in `TROUPE_TOKEN`; otherwise read from `token_file`, else from the
    /// data directory.
    pub token: Option<String>,
    /// `--token-file` or `TROUPE_TOKEN_FILE`: a file holding the token.
    pub token_file: Option<PathBuf>,
    /// `--data-dir` or `TROUPE_HOME`, as given.
    pub data_dir: Option<PathBuf>,
    /// `--ca-cert` or `TROUPE_CA_CERT`: more certificate authorities to trust for a `wss://` URL.
    pub ca_cert: Option<PathBuf>,
}

impl Connection {
    /// Where the environment says the daemon is (`TROUPE_URL`, `TROUPE_TOKEN`, `TROUPE_TOKEN_FILE`, `TROUPE_HOME`,
    /// `TROUPE_CA_CERT`), as a client command without flags reaches it: for the shell's completion, which is
    /// not given the flags of the line being typed.
    pub fn from_environment() -> Connection {
        let text = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        let path = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty()).map(PathBuf::from);
        Connection {
            url: text("TROUPE_URL"),
            token: text("TROUPE_TOKEN"),
            token_file: path("TROUPE_TOKEN_FILE"),
            data_dir: path("TROUPE_HOME"),
            ca_cert: path("TROUPE_CA_CERT"),
        }
    }

    /// The daemon's URL: the one given, else the one the data dir's running daemon recorded (it may have been
    /// started with `--listen`), else `ws://<listen>/ws` from the data dir's `config.toml` (a wildcard address
    /// reached on loopback; `unix:/path` for a unix socket), else [`DEFAULT_URL`].
    pub fn url(&self) -> String {
        if let Some(url) = self.given_url() {
            return url.to_owned();
        }
        self.data_dir_url()
    }

    /// `--url` or `TROUPE_URL`, when given.
    fn given_url(&self) -> Option<&str> {
        self.url.as_deref().filter(|url| !url.is_empty())
    }

    /// Whether the URL is the local data dir's daemon: none was given, or the one given is where that daemon
    /// listens (or is configured to). When not, the local data dir's files say nothing about the daemon reached.
    pub fn targets_local_data_dir(&self) -> bool {
        self.given_url().is_none_or(|given| given.trim_end_matches('/') == self.data_dir_url())
    }

    /// Where the data dir's daemon listens: recorded by the running daemon, else configured, else the default.
    fn data_dir_url(&self) -> String {
        let Ok(data_dir) = DataDir::resolve(self.data_dir.clone()) else {
            return DEFAULT_URL.to_owned();
        };
        if let Some(url) = crate::daemon_url::recorded(&data_dir) {
            return url;
        }
        match troupe_runtime::config::load(&data_dir.config_path()) {
            Ok(config) => crate::daemon_url::client_url(&config.listen),
            Err(_) => DEFAULT_URL.to_owned(),
        }
    }

    /// `--data-dir D` as a person would retype it, for hints; empty when none was given.
    fn data_dir_flag(&self) -> String {
        match &self.data_dir {
            Some(dir) if !dir.as_os_str().is_empty() => format!(" --data-dir {}", dir.display()),
            _ => String::new(),
        }
    }

    /// The token and the file it came from (`None`: given on the command line or in the environment).
    fn token(&self) -> anyhow::Result<(String, Option<PathBuf>)> {
        if let Some(token) = self.token.as_ref().filter(|token| !token.is_empty()) {
            return Ok((token.trim().to_owned(), None));
        }
        if let Some(path) = &self.token_file {
            return match std::fs::read_to_string(path) {
                Ok(text) if !text.trim().is_empty() => Ok((text.trim().to_owned(), Some(path.clone()))),
                Ok(_) => anyhow::bail!("the token file {} given with --token-file is empty", path.display()),
                Err(error) => {
                    anyhow::bail!("cannot read the token file {} given with --token-file: {error}", path.display())
                }
            };
        }
        let data_dir = DataDir::resolve(self.data_dir.clone())?;
        let path = data_dir.token_path();
        match std::fs::read_to_string(&path) {
            Ok(text) if !text.trim().is_empty() => Ok((text.trim().to_owned(), Some(path))),
            Ok(_) => anyhow::bail!(
                "the token file {} is empty\n  hint: restart the daemon with `troupe serve{}` to write a new one",
                path.display(),
                self.data_dir_flag()
            ),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let mut message = format!(
                    "no daemon has run with data dir {} (there is no token at {})",
                    data_dir.root().display(),
                    path.display()
                );
                if let Some(other) = self.other_data_dir(&data_dir) {
                    message.push_str(&format!("\n  hint: did you mean --data-dir {}?", other.display()));
                }
                message.push_str(&format!(
                    "\n  hint: start the daemon with `troupe serve{}`, or give the token with TROUPE_TOKEN or --token-file",
                    self.data_dir_flag()
                ));
                anyhow::bail!(message)
            }
            Err(error) => anyhow::bail!("cannot read the token file {}: {error}", path.display()),
        }
    }

    /// A data dir with a token that the person may have meant instead of `tried`: a sibling whose name is a
    /// typo away, else the default one.
    fn other_data_dir(&self, tried: &DataDir) -> Option<PathBuf> {
        let has_token = |dir: &std::path::Path| DataDir::new(dir.to_path_buf()).token_path().is_file();
        let name = tried.root().file_name()?.to_string_lossy().into_owned();
        let sibling = tried.root().parent().and_then(|parent| std::fs::read_dir(parent).ok()).and_then(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|path| path != tried.root() && has_token(path))
                .filter_map(|path| {
                    let distance = edit_distance(&name, &path.file_name()?.to_string_lossy());
                    (distance <= 2).then_some((distance, path))
                })
                .min()
                .map(|(_, path)| path)
        });
        sibling.or_else(|| {
            let default = DataDir::resolve(None).ok()?.root().to_path_buf();
            (default != tried.root() && has_token(&default)).then_some(default)
        })
    }

    pub(crate) async fn connect(
        &self,
        mut options: ClientOptions,
    ) -> anyhow::Result<(Client, troupe_protocol::client::Deliveries)> {
        let url = self.url();
        if options.ca_cert.is_none() {
            options.ca_cert = self.ca_cert.clone();
        }
        if options.client_info.is_none() {
            // How other clients' presence lists name this one; the TUI names itself.
            options.client_info = Some(troupe_protocol::types::runtime::ClientInfo::named("troupe cli"));
        }
        if let Some(rest) = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://")) {
            let scheme = if url.starts_with("https") { "wss" } else { "ws" };
            let path = if rest.ends_with("/ws") { "" } else { "/ws" };
            anyhow::bail!(
                "{url} is a web address, not the daemon's WebSocket\n  hint: use --url (TROUPE_URL) \
                 {scheme}://{}{path}",
                rest.trim_end_matches('/')
            );
        }
        if !url.contains("://") && !url.starts_with("unix:") {
            // `host:port` alone: the scheme and the path are part of the address.
            let host = url.trim_end_matches('/');
            anyhow::bail!(
                "{url} is not a daemon URL: it needs a scheme and the WebSocket's path\n  hint: use --url (TROUPE_URL) \
                 ws://{host}/ws (wss:// through a TLS proxy, unix:/PATH for a unix socket)"
            );
        }
        let (token, token_file) = self.token()?;
        Client::connect_websocket(&url, &token, options).await.map_err(|error| {
            let failure = match &error {
                ClientError::Transport(_, failure) => *failure,
                _ => None,
            };
            let said = crate::style::clean(&error.to_string());
            anyhow::Error::new(self.explain_failure(&url, &said, failure, token_file.as_deref()))
        })
    }

    /// What a failed connection means: why the transport could not open it, with what it said.
    fn explain_failure(
        &self,
        url: &str,
        said: &str,
        failure: Option<OpenFailure>,
        token_file: Option<&std::path::Path>,
    ) -> ConnectFailure {
        let (kind, message) = match failure {
            Some(OpenFailure::Unauthorized) => {
                let source = match token_file {
                    Some(path) => format!("the token read from {}", path.display()),
                    None => "the token given with --token (TROUPE_TOKEN)".to_owned(),
                };
                // A daemon on this machine (loopback, unix socket) has its data dir here; a remote one has not.
                let hint = if self.targets_local_data_dir() || is_on_this_machine(url) {
                    "use the token of the data dir that daemon was started with: `troupe token --data-dir DIR` prints \
                 it, or pass the same --data-dir here"
                        .to_owned()
                } else {
                    "get that daemon's token on its own machine: `troupe token` there prints it (deploy/README.md, \
                 step 2); pass it here with TROUPE_TOKEN or --token-file"
                        .to_owned()
                };
                (
                    FailureKind::TokenRefused,
                    format!("the daemon at {url} is reachable, but it refused {source}: unauthorized\n  hint: {hint}"),
                )
            }
            Some(OpenFailure::PermissionDenied) => {
                // EACCES on a unix socket: the socket is there (mode 0660), this user is not in its group.
                let socket = url.strip_prefix("unix:").unwrap_or(url);
                (
                    FailureKind::SocketPermission,
                    format!(
                        "no permission to connect to the daemon's socket {socket} ({said})\n  hint: the socket is \
                         mode 0660: join its group (`ls -l {socket}` shows it; e.g. `sudo usermod -aG troupe $USER`, \
                         then log in again), or run the command as the daemon's user"
                    ),
                )
            }
            Some(OpenFailure::Unreachable) => {
                (FailureKind::NoDaemon, format!("no daemon at {url} ({said})\n  hint: {}", self.no_daemon_hint()))
            }
            None => {
                let mut message = format!("cannot connect to the daemon at {url}: {said}");
                if let Some(suggested) = websocket_path_hint(url) {
                    message.push_str(&format!(
                        "\n  hint: the daemon's WebSocket is at the path /ws: use --url (TROUPE_URL) {suggested}"
                    ));
                }
                (FailureKind::Other, message)
            }
        };
        ConnectFailure { kind, message }
    }

    /// What to do when nothing answers: start the daemon, unless one already runs on the data dir (then it
    /// listens elsewhere, and "start it" would only be refused).
    fn no_daemon_hint(&self) -> String {
        use crate::config_check_cmd::{LocalDaemon, local_daemon};
        let running = DataDir::resolve(self.data_dir.clone()).ok().and_then(|data_dir| match local_daemon(&data_dir) {
            LocalDaemon::Running(daemon) => Some((daemon.pid, data_dir)),
            LocalDaemon::NotRunning | LocalDaemon::Unknown => None,
        });
        match running {
            Some((pid, data_dir)) => format!(
                "a daemon (pid {pid}) is running on the data dir {}, but not there: give its address with --url \
                 (TROUPE_URL), the one its `troupe listening on …` line printed at start",
                data_dir.root().display()
            ),
            None => format!(
                "start it with `troupe serve{}`, or set --url (TROUPE_URL) to where it listens",
                self.data_dir_flag()
            ),
        }
    }

    /// Connects and hands the client out as a [`ClientProtocol`], which is all a command may use.
    pub(crate) async fn open(&self, options: ClientOptions) -> anyhow::Result<Connected<impl ClientProtocol>> {
        let (client, deliveries) = self.connect(options).await?;
        Ok(Connected { client, deliveries })
    }
}

/// Why a connection failed, for commands that say more than the message (`troupe status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// Nothing listens at the URL.
    NoDaemon,
    /// The daemon answered and refused the token.
    TokenRefused,
    /// The unix socket is there but this user may not connect to it.
    SocketPermission,
    Other,
}

/// A failed connection: its kind and the message (with hints) a person reads.
#[derive(Debug)]
pub struct ConnectFailure {
    pub kind: FailureKind,
    message: String,
}

impl std::fmt::Display for ConnectFailure {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.message)
    }
}

impl std::error::Error for ConnectFailure {}

/// A connected client and its delivery stream.
pub(crate) struct Connected<C: ClientProtocol> {
    pub(crate) client: C,
    pub(crate) deliveries: C::Deliveries,
}

/// Whether `url` names this machine: a unix socket, or a loopback host (`localhost`, 127.0.0.0/8, `::1`).
fn is_on_this_machine(url: &str) -> bool {
    if url.starts_with("unix:") {
        return true;
    }
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let host = match host_port.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or_default(),
        None => host_port.split(':').next().unwrap_or_default(),
    };
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// For a `ws://`/`wss://` URL whose path is not the daemon's `/ws` (`ws://host:port/`, `ws://host:port`), the
/// same URL with `/ws` as its path; `None` when the path is already `/ws` or the URL is not a WebSocket one.
fn websocket_path_hint(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    if !matches!(scheme.to_ascii_lowercase().as_str(), "ws" | "wss") {
        return None;
    }
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, path) = rest.split_once('/').map_or((rest, ""), |(authority, path)| (authority, path));
    let path = path.trim_end_matches('/');
    if path == "ws" || path.ends_with("/ws") {
        return None;
    }
    // A proxy's prefix (`wss://host/agent/`) is kept: the daemon is at `/agent/ws` behind it.
    let prefix = if path.is_empty() { String::new() } else { format!("/{path}") };
    Some(format!("{scheme}://{authority}{prefix}/ws"))
}

/// Levenshtein distance, by characters: how many edits turn `a` into `b`.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitute = previous[j] + usize::from(ca != *cb);
            current.push(substitute.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use troupe_protocol::transport::OpenFailure;

    use super::{Connection, FailureKind, edit_distance, is_on_this_machine};

    #[test]
    fn loopback_and_unix_urls_are_this_machine() {
        for url in ["unix:/run/troupe/troupe.sock", "ws://127.0.0.1:7419/ws", "ws://localhost:1/ws", "ws://[::1]:9/ws"]
        {
            assert!(is_on_this_machine(url), "{url}");
        }
        for url in ["wss://troupe.example.com/ws", "ws://10.0.0.5:7419/ws", "wss://[2001:db8::1]/ws"] {
            assert!(!is_on_this_machine(url), "{url}");
        }
    }

    fn remote() -> Connection {
        Connection {
            url: Some("wss://troupe.example.com/ws".to_owned()),
            token: Some("t".to_owned()),
            token_file: None,
            data_dir: Some(std::path::PathBuf::from("/nonexistent/troupe-data")),
            ca_cert: None,
        }
    }

    #[test]
    fn a_refused_token_of_a_remote_daemon_points_at_its_machine() {
        let said = "the daemon at troupe.example.com refused the connection: unauthorized";
        let failure =
            remote().explain_failure("wss://troupe.example.com/ws", said, Some(OpenFailure::Unauthorized), None);
        assert_eq!(failure.kind, FailureKind::TokenRefused);
        let message = failure.to_string();
        assert!(message.contains("reachable, but it refused"), "{message}");
        assert!(message.contains("troupe token` there") && !message.contains("--data-dir"), "{message}");
    }

    #[test]
    fn a_socket_without_permission_says_so_and_names_its_group() {
        let said = "cannot connect to /run/troupe/troupe.sock: Permission denied (os error 13)";
        let failure =
            remote().explain_failure("unix:/run/troupe/troupe.sock", said, Some(OpenFailure::PermissionDenied), None);
        assert_eq!(failure.kind, FailureKind::SocketPermission);
        let message = failure.to_string();
        assert!(message.contains("no permission") && message.contains("usermod -aG"), "{message}");
        assert!(!message.contains("troupe serve"), "{message}");
    }

    #[test]
    fn a_url_without_the_websocket_path_is_given_one() {
        use super::websocket_path_hint;
        assert_eq!(websocket_path_hint("ws://127.0.0.1:7419/").as_deref(), Some("ws://127.0.0.1:7419/ws"));
        assert_eq!(websocket_path_hint("ws://127.0.0.1:7419").as_deref(), Some("ws://127.0.0.1:7419/ws"));
        assert_eq!(websocket_path_hint("wss://host/agent/").as_deref(), Some("wss://host/agent/ws"));
        assert_eq!(websocket_path_hint("ws://127.0.0.1:7419/ws"), None);
        assert_eq!(websocket_path_hint("wss://host/agent/ws/"), None);
        assert_eq!(websocket_path_hint("unix:/run/troupe.sock"), None);
    }

    #[test]
    fn typos_are_near_and_other_names_far() {
        assert_eq!(edit_distance("data", "data"), 0);
        assert_eq!(edit_distance("dta", "data"), 1);
        assert_eq!(edit_distance(".troupe", ".troup"), 1);
        assert!(edit_distance("work", ".troupe") > 2);
    }
}
