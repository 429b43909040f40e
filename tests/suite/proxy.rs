//! The daemon behind a real reverse proxy (Debian's nginx and Caddy), run from the files in `deploy/`, with TLS
//! terminated by the proxy on a certificate from a CA made in the test: the `troupe` CLI and the shared `Client`
//! over `wss://` with `--ca-cert`, browser-style connections (token in the subprotocol, an `Origin`), the origin
//! policy, the client address the daemon logs, keepalive through the proxy's read timeout, `watch` across a daemon
//! restart, and the `/agent/ws` path-prefix variant.

use std::net::Ipv4Addr;
use std::process::Output;
use std::sync::mpsc;
use std::time::Duration;

use tokio::io::AsyncBufReadExt;
use troupe_protocol::client::{Client, ClientDelivery, ClientOptions, Deliveries};
use troupe_protocol::method;
use troupe_protocol::types::session::SessionListParams;

use super::cli_support::troupe_bare;
use super::proxy_support::*;
use super::support::*;

/// An address of the loopback network that is not the proxy's (`127.0.0.1`), so the daemon's log shows which one
/// it took for the client.
const CLIENT_SOURCE: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 9);

/// Everything one test needs: a CA, a daemon, a proxy in front of it (dropped first).
struct Stack {
    kind: ProxyKind,
    proxy: Proxy,
    daemon: ChildDaemon,
    ca: TestCa,
    _data_dir: tempfile::TempDir,
    _proxy_dir: tempfile::TempDir,
}

impl Stack {
    fn start(kind: ProxyKind, knobs: DaemonKnobs, read_timeout_secs: u64) -> Stack {
        let data_dir = tempfile::tempdir().unwrap();
        let proxy_dir = tempfile::tempdir().unwrap();
        let ca = TestCa::create(proxy_dir.path());
        let daemon = deployed_daemon(data_dir.path(), knobs, "127.0.0.1:0");
        let proxy = match kind {
            ProxyKind::Nginx => Proxy::nginx(proxy_dir.path(), &ca, daemon.addr(), read_timeout_secs),
            ProxyKind::Caddy => Proxy::caddy(proxy_dir.path(), &ca, daemon.addr()),
        };
        Stack { kind, proxy, daemon, ca, _data_dir: data_dir, _proxy_dir: proxy_dir }
    }

    /// `troupe <args>` at `url`, the daemon's token in the environment (and no CA from it), logging off.
    fn command_at(&self, url: &str, args: &[&str]) -> tokio::process::Command {
        let mut command = troupe_bare(args);
        command.env("TROUPE_URL", url).env("TROUPE_TOKEN", &self.daemon.token);
        command.env_remove("TROUPE_CA_CERT").env("NO_COLOR", "1");
        command
    }

    /// `troupe <args>` through the proxy at `path`, the token in the environment; `ca_cert`: pass `--ca-cert`.
    async fn troupe(&self, path: &str, ca_cert: bool, args: &[&str]) -> Output {
        let mut command = self.command_at(&self.proxy.url(path), args);
        if ca_cert {
            command.arg("--ca-cert").arg(&self.ca.ca_pem);
        }
        within("troupe through the proxy", command.output()).await.expect("run troupe")
    }

    /// Like [`Stack::troupe`], failing the test unless it succeeds; its stdout.
    async fn troupe_ok(&self, path: &str, args: &[&str]) -> String {
        let output = self.troupe(path, true, args).await;
        assert!(
            output.status.success(),
            "troupe {args:?} via {path} failed: {}\nproxy:\n{}",
            String::from_utf8_lossy(&output.stderr),
            self.proxy.logs()
        );
        String::from_utf8(output.stdout).expect("utf-8")
    }

    /// The shared client through the proxy at `path`.
    async fn client(&self, path: &str) -> (Client, Deliveries) {
        let options = ClientOptions { ca_cert: Some(self.ca.ca_pem.clone()), ..ClientOptions::default() };
        within(
            "client through the proxy",
            Client::connect_websocket(&self.proxy.url(path), &self.daemon.token, options),
        )
        .await
        .unwrap_or_else(|error| panic!("the shared client did not connect through the proxy: {error}"))
    }

    fn browser<'a>(&'a self, origin: &'a str) -> BrowserUpgrade<'a> {
        BrowserUpgrade {
            token: &self.daemon.token,
            origin,
            source: CLIENT_SOURCE,
            spoofed_forwarded_for: None,
            console: None,
        }
    }
}

/// The flows every proxy must carry: the CLI (with the CA from `--ca-cert` and from `TROUPE_CA_CERT`, on both
/// paths), the shared client running an agent to its end, browser-style connections with allowed origins, a
/// foreign origin refused with 403, and TLS errors that say what is wrong.
async fn client_flows_through(stack: &Stack) {
    for path in ["/ws", "/agent/ws"] {
        let created = stack.troupe_ok(path, &["create", "--cwd", "/", "--model", "local/echo"]).await;
        let session_id = created.trim().to_owned();
        assert_eq!(session_id.len(), 36, "{created}");
        stack.troupe_ok(path, &["rename", &session_id, &format!("through {path}")]).await;
        let ran =
            stack.troupe_ok(path, &["run", "--session", &session_id, "--model", "local/echo", "hello proxy"]).await;
        assert!(ran.contains("hello proxy"), "the echo answer through {path}: {ran}");
        let listed = stack.troupe_ok(path, &["sessions"]).await;
        assert!(listed.contains(&format!("through {path}")), "{listed}");
    }
    // TROUPE_CA_CERT does what --ca-cert does.
    let mut command = stack.command_at(&stack.proxy.url("/ws"), &["sessions"]);
    command.env("TROUPE_CA_CERT", &stack.ca.ca_pem);
    let output = within("troupe with TROUPE_CA_CERT", command.output()).await.expect("run troupe");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));

    // Without the CA the certificate is not trusted, and the error names the option that fixes it.
    let untrusted = stack.troupe("/ws", false, &["sessions"]).await;
    let said = String::from_utf8_lossy(&untrusted.stderr);
    assert!(!untrusted.status.success());
    assert!(said.contains("not trusted") && said.contains("--ca-cert"), "{said}");
    assert!(!said.contains(&stack.daemon.token), "{said}");
    // The certificate names localhost only: through nginx (which presents it for any name) 127.0.0.1 is a name
    // mismatch, said as such; Caddy has no certificate for a name it does not serve and ends the handshake.
    let mut command = stack.command_at(&format!("wss://127.0.0.1:{}/ws", stack.proxy.port), &["sessions", "--ca-cert"]);
    command.arg(&stack.ca.ca_pem);
    let mismatch = within("troupe with a mismatched name", command.output()).await.expect("run troupe");
    let said = String::from_utf8_lossy(&mismatch.stderr);
    assert!(!mismatch.status.success());
    match stack.kind {
        // The URL's host is an IP address and the certificate has DNS names only: the fix is an IP subjectAltName.
        ProxyKind::Nginx => assert!(
            said.contains("not valid for 127.0.0.1 (it names DNS:localhost")
                && said.contains("subjectAltName=IP:127.0.0.1")
                && !said.contains("DnsName("),
            "{said}"
        ),
        ProxyKind::Caddy => assert!(said.contains("TLS handshake"), "{said}"),
    }

    // The shared client: an agent run from start to end, its events streamed through the proxy.
    let (client, mut deliveries) = stack.client("/agent/ws").await;
    let session = create_session_in(&client, std::path::Path::new("/")).await;
    within("subscribe", client.subscribe(&session.session_id, None)).await.expect("subscribe");
    let events = run_in_subscribed(&client, &mut deliveries, &session.session_id, "local/echo", "ping").await;
    assert_eq!(events.last().and_then(|event| event.payload.kind()), Some("run_completed"), "{:?}", kinds(&events));
    client.close().await;

    // Browser-style: the token in the subprotocol, an allowed Origin (listed in config.toml, or the daemon's own
    // public origin as the proxy reports it).
    let own_origin = format!("https://localhost:{}", stack.proxy.port);
    for origin in ["https://console.example.com", own_origin.as_str()] {
        let (mut socket, response) = browser_connect(&stack.proxy, &stack.ca, "/ws", stack.browser(origin))
            .await
            .unwrap_or_else(|status| panic!("Origin {origin} refused with HTTP {status}"));
        let protocol = response.headers().get("Sec-WebSocket-Protocol").and_then(|value| value.to_str().ok());
        assert_eq!(protocol, Some("troupe"), "the selected subprotocol (never the token entry)");
        socket.handshake().await;
        let listed = socket.call(1, "session.list", serde_json::json!({})).await;
        assert!(listed["result"]["sessions"].is_array(), "{listed}");
    }
    // A foreign Origin is refused before the token is even looked at.
    let refused = browser_connect(&stack.proxy, &stack.ca, "/ws", stack.browser("https://evil.example")).await;
    assert_eq!(refused.err(), Some(403), "a foreign origin");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_carries_the_cli_the_shared_client_and_browsers_and_forwards_the_client_address() {
    let mut stack = Stack::start(ProxyKind::Nginx, DaemonKnobs { trust_proxy: true, ping_interval_secs: None }, 90);
    client_flows_through(&stack).await;
    refused_origin_logs_the_forwarded_address(&stack, true).await;
    wrong_urls_are_explained(&mut stack).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_trust_proxy_the_daemon_logs_nginx_address_not_the_forwarded_one() {
    let stack = Stack::start(ProxyKind::Nginx, DaemonKnobs { trust_proxy: false, ping_interval_secs: None }, 90);
    refused_origin_logs_the_forwarded_address(&stack, false).await;
}

/// `troupe sessions` at `url` (the CA given), which must fail: its stderr.
async fn troupe_fails_at(stack: &Stack, url: &str) -> String {
    let mut command = stack.command_at(url, &["sessions", "--ca-cert"]);
    command.arg(&stack.ca.ca_pem);
    let output = within("troupe at a wrong URL", command.output()).await.expect("run troupe");
    let said = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "troupe at {url} succeeded: {said}");
    assert!(!said.contains(&stack.daemon.token), "{said}");
    said
}

/// The mistakes a first setup makes with a proxy, each said with its fix: plain `ws://` to the TLS port, a path
/// the proxy does not serve, and (last: it stops the daemon) the proxy answering 502 because the daemon behind it
/// is down.
async fn wrong_urls_are_explained(stack: &mut Stack) {
    let port = stack.proxy.port;
    let said = troupe_fails_at(stack, &format!("ws://localhost:{port}/agent/ws")).await;
    assert!(said.contains(&format!("use wss://localhost:{port}/agent/ws")), "plain ws:// to a TLS port: {said}");
    let said = troupe_fails_at(stack, &format!("wss://localhost:{port}/nope")).await;
    assert!(
        said.contains("HTTP 404 Not Found") && said.contains("no WebSocket endpoint at /nope") && said.contains("/ws"),
        "a wrong path: {said}"
    );
    stack.daemon.kill();
    let said = troupe_fails_at(stack, &stack.proxy.url("/ws")).await;
    assert!(
        said.contains("HTTP 502 Bad Gateway: it is a proxy, and it could not reach the daemon behind it")
            && said.contains("troupe serve"),
        "the daemon behind the proxy is down: {said}"
    );
}

/// A refused upgrade from [`CLIENT_SOURCE`], with a forged `X-Forwarded-For`: the daemon's log names the client's
/// real address when it trusts the proxy, the proxy's (with its port) when it does not, and never the forged one.
async fn refused_origin_logs_the_forwarded_address(stack: &Stack, trusted: bool) {
    let upgrade =
        BrowserUpgrade { spoofed_forwarded_for: Some("203.0.113.7"), ..stack.browser("https://evil.example") };
    let refused = browser_connect(&stack.proxy, &stack.ca, "/ws", upgrade).await;
    assert_eq!(refused.err(), Some(403));
    let refusal = |log: &str| {
        log.lines().filter(|line| line.contains("origin not allowed")).map(str::to_owned).collect::<Vec<_>>()
    };
    eventually("the refusal in the daemon's log", || !refusal(&stack.daemon.log_text()).is_empty()).await;
    let lines = refusal(&stack.daemon.log_text());
    let line = lines.last().unwrap();
    assert!(!line.contains("203.0.113.7"), "a client-sent X-Forwarded-For reached the log: {line}");
    if trusted {
        assert!(line.contains("peer=127.0.0.9"), "the forwarded client address: {line}");
        assert!(!line.contains("peer=127.0.0.9:"), "{line}");
    } else {
        assert!(line.contains("peer=127.0.0.1:"), "the proxy's own address and port: {line}");
        assert!(!line.contains("127.0.0.9"), "the forwarded address without trust_proxy: {line}");
    }
}

/// Idle connections through nginx with `proxy_read_timeout 3s`: with the daemon pinging every second one stays
/// open for three timeouts, while one to a daemon with the default 15 s ping is cut by nginx (so the first half
/// proves something).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_outlives_nginx_read_timeout_thanks_to_the_daemon_pings() {
    let pinging = Stack::start(ProxyKind::Nginx, DaemonKnobs { trust_proxy: true, ping_interval_secs: Some(1) }, 3);
    let quiet = Stack::start(ProxyKind::Nginx, DaemonKnobs { trust_proxy: true, ping_interval_secs: None }, 3);
    let (kept, mut kept_deliveries) = pinging.client("/ws").await;
    let (cut, mut cut_deliveries) = quiet.client("/ws").await;
    // Idle on purpose: nothing is sent by either client for three of nginx's read timeouts (the sleep is the
    // behaviour under test, not a synchronisation).
    tokio::time::sleep(Duration::from_secs(9)).await;
    let listed = within("a call after idling", kept.call::<method::SessionList>(SessionListParams::default())).await;
    assert!(listed.is_ok(), "the pinged connection was closed: {listed:?}\nnginx:\n{}", pinging.proxy.logs());
    assert!(no_disconnect_delivered(&mut kept_deliveries), "the pinged connection dropped meanwhile");
    let after =
        within("a call on the unpinged connection", cut.call::<method::SessionList>(SessionListParams::default()))
            .await;
    assert!(after.is_err(), "nginx kept an idle connection without pings open past proxy_read_timeout");
    assert!(!no_disconnect_delivered(&mut cut_deliveries), "the cut connection's stream did not end");
}

/// Whether the delivery stream is open and has nothing queued that tells of a lost connection.
fn no_disconnect_delivered(deliveries: &mut Deliveries) -> bool {
    use futures::FutureExt;
    loop {
        match deliveries.next().now_or_never() {
            None => return true,
            Some(None | Some(ClientDelivery::Disconnected { .. })) => return false,
            Some(Some(_)) => continue,
        }
    }
}

/// `troupe watch` through nginx's `/agent/ws` follows a session, survives the daemon restarting behind the proxy
/// (nginx answers 502 meanwhile), and resumes from its cursor: every event printed once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_through_nginx_resumes_from_its_cursor_after_a_daemon_restart() {
    let mut stack = Stack::start(ProxyKind::Nginx, DaemonKnobs { trust_proxy: true, ping_interval_secs: None }, 90);
    let session_id = stack.troupe_ok("/agent/ws", &["create", "--cwd", "/"]).await.trim().to_owned();
    let mut watch = stack.command_at(&stack.proxy.url("/agent/ws"), &["watch", &session_id, "--ca-cert"]);
    watch.arg(&stack.ca.ca_pem);
    let mut watcher = watch.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let (sender, lines) = mpsc::channel::<String>();
    let stdout = watcher.stdout.take().unwrap();
    tokio::spawn(async move {
        let mut reader = tokio::io::BufReader::new(stdout).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let mut wait_for = |needle: &str| loop {
        // Blocking here must not starve the task that reads watch's stdout: it moves to another worker.
        let line = tokio::task::block_in_place(|| lines.recv_timeout(WAIT))
            .unwrap_or_else(|_| panic!("watch printed no line containing {needle:?}: {seen:?}"));
        seen.push(line.clone());
        if line.contains(needle) {
            return seen.clone();
        }
    };
    wait_for("session created");
    stack.troupe_ok("/agent/ws", &["rename", &session_id, "Before the restart"]).await;
    wait_for("Before the restart");

    tokio::task::block_in_place(|| stack.daemon.restart());
    stack.troupe_ok("/agent/ws", &["rename", &session_id, "After the restart"]).await;
    let seen = wait_for("After the restart");

    let events: Vec<&String> = seen.iter().filter(|line| line.starts_with('#')).collect();
    assert_eq!(events.len(), 3, "each event printed once: {seen:?}");
    for (index, line) in events.iter().enumerate() {
        assert!(line.starts_with(&format!("#{} ", index + 1)), "in order: {seen:?}");
    }
    let _ = watcher.start_kill();
    let _ = within("watch exits", watcher.wait()).await;
}

/// The same client flows through Caddy, from `deploy/caddy/Caddyfile`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caddy_carries_the_cli_the_shared_client_and_browsers_and_forwards_the_client_address() {
    let mut stack = Stack::start(ProxyKind::Caddy, DaemonKnobs { trust_proxy: true, ping_interval_secs: None }, 0);
    client_flows_through(&stack).await;
    refused_origin_logs_the_forwarded_address(&stack, true).await;
    wrong_urls_are_explained(&mut stack).await;
}
