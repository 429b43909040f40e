//! A daemon listening on a unix socket (`--listen unix:/path`, `listen = "unix:/path"`): the socket's mode, the
//! shared client and the CLI over it, a second daemon refused, a stale socket replaced, the file removed at a
//! clean stop.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use troupe_protocol::client::{Client, ClientProtocol};

use super::cli_support::troupe_bare;
use super::support::*;

/// `troupe serve` on a unix socket; `listen: None` leaves it to the data dir's config.toml.
fn spawn_on(data_dir: &Path, listen: Option<&Path>) -> ChildDaemon {
    std::fs::create_dir_all(data_dir).expect("data dir");
    let command = troupe_serve(data_dir);
    match listen {
        Some(path) => command.listen(format!("unix:{}", path.display())).spawn(),
        None => command.spawn(),
    }
}

/// `troupe args…` with the environment cleared of a daemon's address and token.
async fn troupe_cli(args: &[&str]) -> std::process::Output {
    within("troupe", troupe_bare(args).output()).await.expect("run troupe")
}

fn socket_in(dir: &Path) -> PathBuf {
    dir.join("troupe.sock")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_client_and_the_cli_reach_a_daemon_on_a_unix_socket_with_mode_0660() {
    let data_dir = tempfile::tempdir().expect("data dir");
    let sockets = tempfile::tempdir().expect("socket dir");
    let socket = socket_in(sockets.path());
    let mut daemon = spawn_on(data_dir.path(), Some(&socket));
    let url = daemon.url.clone();
    assert_eq!(url, format!("unix:{}", socket.display()));
    let metadata = std::fs::metadata(&socket).expect("the socket exists");
    assert!(metadata.file_type().is_socket());
    assert_eq!(metadata.permissions().mode() & 0o777, 0o660);

    let token = daemon.token.clone();
    let (client, _deliveries) =
        within("connect", Client::connect_websocket(&url, &token, Default::default())).await.expect("connects");
    let status = within("daemon.status", client.daemon_status(Default::default())).await.expect("status");
    assert_eq!(status.listen, url);
    assert_eq!(status.connections, 1);

    // The CLI with --url, and with nothing but the data dir once config.toml names the socket.
    let output = troupe_cli(&["sessions", "--json", "--url", &url, "--token", &token]).await;
    assert!(output.status.success(), "{output:?}");
    let output = troupe_cli(&["status", "--url", &url, "--token", &token]).await;
    assert!(output.status.success(), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stdout).contains(&format!("listening on {url}")), "{output:?}");
    client.close().await;

    assert!(daemon.terminate().success(), "a clean stop");
    assert!(!socket.exists(), "a clean stop removes the socket");
    std::fs::write(
        data_dir.path().join("config.toml"),
        format!("listen = \"unix:{}\"\n[titles]\nauto = false\n", socket.display()),
    )
    .expect("config");
    let daemon = spawn_on(data_dir.path(), None);
    let url = &daemon.url;
    assert_eq!(*url, format!("unix:{}", socket.display()));
    let data_dir_arg = data_dir.path().to_str().expect("utf-8");
    let output = troupe_cli(&["status", "--json", "--data-dir", data_dir_arg]).await;
    assert!(output.status.success(), "{output:?}");
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(json["url"], serde_json::json!(url));
    assert_eq!(json["daemon"]["listen"], serde_json::json!(url));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_socket_is_refused_and_a_stale_one_replaced() {
    let sockets = tempfile::tempdir().expect("socket dir");
    let socket = socket_in(sockets.path());
    let first_dir = tempfile::tempdir().expect("data dir");
    let mut first = spawn_on(first_dir.path(), Some(&socket));

    let second_dir = tempfile::tempdir().expect("data dir");
    let listen = format!("unix:{}", socket.display());
    let output = troupe_cli(&["serve", "--data-dir", second_dir.path().to_str().unwrap(), "--listen", &listen]).await;
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("another program (another troupe daemon?) is listening"), "{stderr}");
    assert!(socket.exists(), "the live daemon's socket is left alone");

    // SIGKILL leaves the socket file behind; the next daemon finds nobody listening and replaces it.
    first.kill();
    assert!(std::fs::symlink_metadata(&socket).is_ok_and(|metadata| metadata.file_type().is_socket()));
    let second = spawn_on(second_dir.path(), Some(&socket));
    let (client, _deliveries) =
        within("connect", Client::connect_websocket(&second.url, &second.token, Default::default()))
            .await
            .expect("the new daemon answers on the replaced socket");
    let status = within("daemon.status", client.daemon_status(Default::default())).await.expect("status");
    assert_eq!(status.data_dir.as_deref(), second_dir.path().to_str());
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relative_socket_path_is_refused_in_words() {
    let data_dir = tempfile::tempdir().expect("data dir");
    let output =
        troupe_cli(&["serve", "--data-dir", data_dir.path().to_str().unwrap(), "--listen", "unix:troupe.sock"]).await;
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("absolute"), "{output:?}");
}

/// The same-host deployment the unix socket is for: Debian's nginx, run from `deploy/nginx/troupe.conf` with the
/// upstream `server unix:/path;`, terminating TLS in front of the daemon's socket. The shared client goes through
/// it over `wss://`; a browser-style upgrade from the proxy's public origin is let in on the `Host` nginx passes
/// (no `trust_proxy` needed), and a foreign origin is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_on_the_same_host_reaches_the_daemon_through_its_socket() {
    use super::proxy_support::{BrowserUpgrade, Proxy, TestCa, browser_connect};

    let data_dir = tempfile::tempdir().expect("data dir");
    let sockets = tempfile::tempdir().expect("socket dir");
    let proxy_dir = tempfile::tempdir().expect("proxy dir");
    let socket = socket_in(sockets.path());
    let daemon = spawn_on(data_dir.path(), Some(&socket));
    let (url, token) = (daemon.url.clone(), daemon.token.clone());
    let ca = TestCa::create(proxy_dir.path());
    let proxy = Proxy::nginx_to(proxy_dir.path(), &ca, &url, 90);

    let options = troupe_protocol::client::ClientOptions { ca_cert: Some(ca.ca_pem.clone()), ..Default::default() };
    let (client, _deliveries) =
        within("connect through nginx", Client::connect_websocket(&proxy.url("/ws"), &token, options))
            .await
            .unwrap_or_else(|error| panic!("{error}\n{}", proxy.logs()));
    let status = within("daemon.status", client.daemon_status(Default::default())).await.expect("status");
    assert_eq!(status.listen, url);
    client.close().await;

    let own_origin = format!("https://localhost:{}", proxy.port);
    let browser = |origin| BrowserUpgrade {
        token: &token,
        origin,
        source: std::net::Ipv4Addr::LOCALHOST,
        spoofed_forwarded_for: None,
        console: None,
    };
    let (mut socket, _response) = browser_connect(&proxy, &ca, "/ws", browser(&own_origin))
        .await
        .unwrap_or_else(|status| panic!("the proxy's own origin refused with HTTP {status}"));
    socket.handshake().await;
    let listed = socket.call(1, "session.list", serde_json::json!({})).await;
    assert!(listed["result"]["sessions"].is_array(), "{listed}");
    let refused = browser_connect(&proxy, &ca, "/ws", browser("https://evil.example")).await;
    assert_eq!(refused.err(), Some(403), "a foreign origin");
}
