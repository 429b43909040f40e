//! The proxy tests' harness: a CA and a server certificate made in the test, a `troupe serve` child configured from
//! `deploy/config.toml` and logging to a file, and a real nginx or Caddy rendered from `deploy/` in front of it.
//!
//! The deployed files are the tested files: each is read from `deploy/` and only the values a test must change (the
//! port, the certificate, the upstream address, the read timeout) are substituted, each substitution checked to
//! have matched so that a renamed value in `deploy/` fails here instead of silently testing something else.

#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use tokio_tungstenite::Connector;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{HeaderValue, Response};

use super::support::*;

/// The repository's `deploy/` directory.
fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy").join(file)
}

/// `text` with `from` replaced by `to`; fails when `from` is not there.
fn substitute(text: &str, from: &str, to: &str, file: &str) -> String {
    assert!(text.contains(from), "{file} no longer contains `{from}`; update tests/suite/proxy_support.rs with it");
    text.replace(from, to)
}

/// A private CA and a server certificate for `localhost` (only: `127.0.0.1` is a name mismatch) signed by it.
pub struct TestCa {
    pub ca_pem: PathBuf,
    pub cert_pem: PathBuf,
    pub key_pem: PathBuf,
    ca_der: rustls::pki_types::CertificateDer<'static>,
}

impl TestCa {
    pub fn create(dir: &Path) -> TestCa {
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(rcgen::DnType::CommonName, "troupe test CA");
        ca_params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
        let ca_key = rcgen::KeyPair::generate().expect("CA key");
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA certificate");

        let mut server_params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).expect("server params");
        server_params.distinguished_name.push(rcgen::DnType::CommonName, "localhost");
        let server_key = rcgen::KeyPair::generate().expect("server key");
        let server = server_params.signed_by(&server_key, &ca).expect("server certificate");

        let ca_pem = dir.join("ca.pem");
        let cert_pem = dir.join("server.pem");
        let key_pem = dir.join("server.key");
        std::fs::write(&ca_pem, ca.pem()).expect("write CA");
        std::fs::write(&cert_pem, server.pem()).expect("write certificate");
        std::fs::write(&key_pem, server_key.serialize_pem()).expect("write key");
        TestCa { ca_pem, cert_pem, key_pem, ca_der: ca.der().clone() }
    }

    /// A rustls client configuration trusting only this CA.
    pub fn client_config(&self) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_der.clone()).expect("CA as a root");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        Arc::new(
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("TLS versions")
                .with_root_certificates(roots)
                .with_no_client_auth(),
        )
    }
}

/// How the daemon behind the proxy is configured, on top of `deploy/config.toml`.
#[derive(Clone, Copy)]
pub struct DaemonKnobs {
    pub trust_proxy: bool,
    /// `[limits] ping_interval_secs`; `None`: the default (15 s).
    pub ping_interval_secs: Option<u64>,
}

/// `troupe serve` on `listen` as a child process, its data dir's `config.toml` written from `deploy/config.toml`
/// and `knobs`, its log (info level, no colours) appended to `daemon-test.log` in the data dir:
/// [`ChildDaemon::log_text`]; [`ChildDaemon::restart`] keeps the address and the log.
pub fn deployed_daemon(data_dir: &Path, knobs: DaemonKnobs, listen: &str) -> ChildDaemon {
    let file = "deploy/config.toml";
    let mut config = std::fs::read_to_string(deploy("config.toml")).expect("read deploy/config.toml");
    if !knobs.trust_proxy {
        config = substitute(&config, "trust_proxy = true", "trust_proxy = false", file);
    }
    config.push_str("\n[titles]\nauto = false\n");
    if let Some(secs) = knobs.ping_interval_secs {
        config.push_str(&format!("\n[limits]\nping_interval_secs = {secs}\n"));
    }
    std::fs::create_dir_all(data_dir).expect("data dir");
    std::fs::write(data_dir.join("config.toml"), config).expect("write config.toml");
    troupe_serve(data_dir)
        .listen(listen)
        .rust_log("info")
        .env("NO_COLOR", "1")
        .log(DaemonLog::File(data_dir.join("daemon-test.log")))
        .spawn()
}

/// Which reverse proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyKind {
    Nginx,
    Caddy,
}

/// A real reverse proxy as a child process, TLS on `127.0.0.1:port` with the [`TestCa`]'s server certificate,
/// in front of `upstream`. Killed on drop.
pub struct Proxy {
    child: Child,
    pub port: u16,
    dir: PathBuf,
    pub kind: ProxyKind,
}

impl Proxy {
    /// nginx with `deploy/nginx/troupe.conf`, its `proxy_read_timeout` set to `read_timeout_secs`.
    pub fn nginx(dir: &Path, ca: &TestCa, upstream: SocketAddr, read_timeout_secs: u64) -> Proxy {
        Proxy::nginx_to(dir, ca, &upstream.to_string(), read_timeout_secs)
    }

    /// [`Proxy::nginx`] in front of any upstream nginx accepts in `server …;`: `host:port`, or `unix:/path` for a
    /// daemon listening on a unix socket.
    pub fn nginx_to(dir: &Path, ca: &TestCa, upstream: &str, read_timeout_secs: u64) -> Proxy {
        let nginx = find_program("nginx", &["/usr/sbin/nginx"]);
        let port = free_port();
        let file = "deploy/nginx/troupe.conf";
        let mut site = std::fs::read_to_string(deploy("nginx/troupe.conf")).expect("read deploy/nginx/troupe.conf");
        site = substitute(&site, "listen 443 ssl;", &format!("listen 127.0.0.1:{port} ssl;"), file);
        site = substitute(
            &site,
            "/etc/letsencrypt/live/troupe.example.com/fullchain.pem",
            &ca.cert_pem.to_string_lossy(),
            file,
        );
        site = substitute(
            &site,
            "/etc/letsencrypt/live/troupe.example.com/privkey.pem",
            &ca.key_pem.to_string_lossy(),
            file,
        );
        site = substitute(&site, "server 127.0.0.1:7419;", &format!("server {upstream};"), file);
        site = substitute(&site, "proxy_read_timeout 90s;", &format!("proxy_read_timeout {read_timeout_secs}s;"), file);
        let site_path = dir.join("troupe.conf");
        std::fs::write(&site_path, site).expect("write site");
        // As root, nginx would switch to a `nobody` user that may not exist; the test's own user is enough.
        // SAFETY: geteuid has no preconditions.
        let user = if unsafe { libc::geteuid() } == 0 { "user root;\n" } else { "" };
        let d = dir.display();
        // One process (master_process off) so that killing it on drop leaves no worker behind holding the port.
        let main = format!(
            "{user}master_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log info;\nevents {{\n    \
             worker_connections 256;\n}}\nhttp {{\n    access_log {d}/access.log;\n    client_body_temp_path \
             {d}/client_body;\n    proxy_temp_path {d}/proxy;\n    fastcgi_temp_path {d}/fastcgi;\n    \
             uwsgi_temp_path {d}/uwsgi;\n    scgi_temp_path {d}/scgi;\n    include {};\n}}\n",
            site_path.display()
        );
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, main).expect("write nginx.conf");
        let mut command = Command::new(nginx);
        command.arg("-c").arg(&conf).arg("-p").arg(dir).args(["-g", "daemon off;"]);
        Proxy::run(command, ProxyKind::Nginx, dir, port)
    }

    /// Caddy with `deploy/caddy/Caddyfile`, the site on `localhost:port` with the [`TestCa`]'s certificate.
    pub fn caddy(dir: &Path, ca: &TestCa, upstream: SocketAddr) -> Proxy {
        let caddy = find_program("caddy", &["/usr/bin/caddy"]);
        let port = free_port();
        let file = "deploy/caddy/Caddyfile";
        let mut site = std::fs::read_to_string(deploy("caddy/Caddyfile")).expect("read deploy/caddy/Caddyfile");
        site = substitute(&site, "troupe.example.com {", &format!("https://localhost:{port} {{"), file);
        site = substitute(
            &site,
            "\ttls internal\n",
            &format!("\ttls {} {}\n", ca.cert_pem.display(), ca.key_pem.display()),
            file,
        );
        site = substitute(&site, "127.0.0.1:7419", &upstream.to_string(), file);
        // Test-only globals: no admin endpoint and no port-80 redirect listener (parallel tests would collide
        // on both), and every file Caddy writes inside the test's directory.
        let global = format!(
            "{{\n\tadmin off\n\tauto_https disable_redirects\n\tstorage file_system {}\n}}\n\n",
            dir.join("storage").display()
        );
        let caddyfile = dir.join("Caddyfile");
        std::fs::write(&caddyfile, global + &site).expect("write Caddyfile");
        let mut command = Command::new(caddy);
        command
            .args(["run", "--adapter", "caddyfile", "--config"])
            .arg(&caddyfile)
            .env("HOME", dir)
            .env("XDG_DATA_HOME", dir.join("data"))
            .env("XDG_CONFIG_HOME", dir.join("config"));
        Proxy::run(command, ProxyKind::Caddy, dir, port)
    }

    /// Starts the proxy `command` (its stderr in `dir/stderr.log`) and waits until it accepts connections on
    /// `port`; fails with its log when it exits or never listens.
    fn run(mut command: Command, kind: ProxyKind, dir: &Path, port: u16) -> Proxy {
        let stderr = std::fs::File::create(dir.join("stderr.log")).expect("stderr log");
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|error| panic!("start {kind:?}: {error}"));
        let mut proxy = Proxy { child, port, dir: dir.to_path_buf(), kind };
        let listening = holds_within_blocking(WAIT, || {
            if let Some(status) = proxy.child.try_wait().expect("wait") {
                panic!("{:?} exited ({status}) before listening:\n{}", proxy.kind, proxy.logs());
            }
            std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, proxy.port)).is_ok()
        });
        assert!(listening, "{:?} did not listen on {}:\n{}", proxy.kind, proxy.port, proxy.logs());
        proxy
    }

    /// The proxy's stderr and error log, for failure messages.
    pub fn logs(&self) -> String {
        ["stderr.log", "error.log"]
            .iter()
            .filter_map(|name| std::fs::read_to_string(self.dir.join(name)).ok())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// nginx's access log (empty for Caddy, which logs no requests unless told to).
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default()
    }

    /// `wss://localhost:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("wss://localhost:{}{path}", self.port)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `name` on the PATH or at one of `usual` places; a missing one fails the test with the command that installs it.
fn find_program(name: &str, usual: &[&str]) -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).map(|dir| dir.join(name)).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path.into_iter().chain(usual.iter().map(PathBuf::from)).find(|path| path.is_file()).unwrap_or_else(|| {
        panic!(
            "{name} is not installed, and this test runs the real {name}: install {name}: scripts/test does \
             (apt-get install -y {name})"
        )
    })
}

/// What a browser-style upgrade sends besides the URL.
pub struct BrowserUpgrade<'a> {
    pub token: &'a str,
    pub origin: &'a str,
    /// The client's source address (any 127.0.0.0/8 address works on loopback), to tell it from the proxy's.
    pub source: Ipv4Addr,
    /// An `X-Forwarded-For` the client itself sends, which the proxy must not pass on.
    pub spoofed_forwarded_for: Option<&'a str>,
    /// The web console's sign-in (its cookie and page key) sent instead of the token.
    pub console: Option<ConsoleSignIn<'a>>,
}

/// What a browser holds after signing in to the web console.
#[derive(Clone, Copy)]
pub struct ConsoleSignIn<'a> {
    /// `name=value` of the session cookie, sent as `Cookie`.
    pub cookie: &'a str,
    /// The page key from the sign-in redirect's fragment, offered as the subprotocol `troupe.console.<key>`.
    pub key: &'a str,
}

/// A browser-style WebSocket upgrade through the proxy: subprotocols `troupe` and `troupe.bearer.<token>` (or the
/// console's cookie), an `Origin`, TLS trusting the test CA. Returns the socket, or the refusal's HTTP status.
pub async fn browser_connect(
    proxy: &Proxy,
    ca: &TestCa,
    path: &str,
    upgrade: BrowserUpgrade<'_>,
) -> Result<(RawSocket, Response<Option<Vec<u8>>>), u16> {
    let mut request = proxy.url(path).into_client_request().expect("request");
    let headers = request.headers_mut();
    match upgrade.console {
        Some(console) => {
            headers.insert("Cookie", HeaderValue::from_str(console.cookie).expect("cookie"));
            headers.insert(
                "Sec-WebSocket-Protocol",
                HeaderValue::from_str(&format!("troupe, troupe.console.{}", console.key)).expect("subprotocols"),
            );
        }
        None => {
            headers.insert(
                "Sec-WebSocket-Protocol",
                HeaderValue::from_str(&format!("troupe, troupe.bearer.{}", upgrade.token)).expect("subprotocols"),
            );
        }
    }
    headers.insert("Origin", HeaderValue::from_str(upgrade.origin).expect("origin"));
    if let Some(forwarded) = upgrade.spoofed_forwarded_for {
        headers.insert("X-Forwarded-For", HeaderValue::from_str(forwarded).expect("x-forwarded-for"));
    }
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind(SocketAddr::new(IpAddr::V4(upgrade.source), 0)).expect("bind the source address");
    let tcp = within("tcp connect", socket.connect(SocketAddr::from((Ipv4Addr::LOCALHOST, proxy.port))))
        .await
        .expect("tcp connect to the proxy");
    let connector = Connector::Rustls(ca.client_config());
    let connected =
        within("browser upgrade", tokio_tungstenite::client_async_tls_with_config(request, tcp, None, Some(connector)))
            .await;
    match connected {
        Ok((stream, response)) => Ok((RawSocket { stream }, response)),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => Err(response.status().as_u16()),
        Err(other) => panic!("the browser-style upgrade failed below HTTP: {other}"),
    }
}
