//! `troupe open`: the sign-in link in words and as JSON, the console turned off,
//! and a daemon on a unix socket, whose link needs `--public-url`.

use super::cli_support::*;
use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn troupe_open_prints_a_one_time_link_to_the_daemon_it_reached() {
    let daemon = TestDaemon::start();
    let human = troupe(&daemon, &["open"]).await;
    assert_eq!(human.code, Some(0), "{}", human.stderr);
    let base = format!("http://{}/login?code=", daemon.addr);
    let link = human.stdout.lines().next().unwrap_or_default();
    assert!(link.starts_with(&base), "{}", human.stdout);
    assert!(human.stdout.contains("works once"), "{}", human.stdout);

    let json = troupe(&daemon, &["open", "--json", "--public-url", "https://troupe.example.com/agent"]).await;
    assert_eq!(json.code, Some(0), "{}", json.stderr);
    let opened: serde_json::Value = serde_json::from_str(&json.stdout).expect("--json");
    let url = opened["url"].as_str().expect("url");
    assert!(url.starts_with("https://troupe.example.com/agent/login?code="), "{url}");
    assert!(opened["expires_at"].as_str().is_some_and(|at| at.ends_with('Z')), "{opened}");
    assert_ne!(url.split_once("code=").map(|(_, code)| code), link.split_once("code=").map(|(_, code)| code));

    let wrong = troupe(&daemon, &["open", "--public-url", "ws://host/ws"]).await;
    assert_eq!(wrong.code, Some(1));
    assert!(wrong.stderr.contains("--public-url must be an http:// or https:// address"), "{}", wrong.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_console_off_there_is_no_page_and_open_says_why() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[console]\nenabled = false\n".to_owned()),
        ..DaemonSetup::default()
    });
    let refused = troupe(&daemon, &["open"]).await;
    assert_eq!(refused.code, Some(1));
    assert!(refused.stderr.contains("the web console is off"), "{}", refused.stderr);
    assert!(refused.stderr.contains("[console] enabled = false"), "{}", refused.stderr);
    assert!(!refused.stderr.contains("console.login_code"), "no method names in CLI errors: {}", refused.stderr);
    let page = raw_get(daemon.addr, "/").await;
    assert!(page.starts_with("HTTP/1.1 404"), "{page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_to_a_daemon_on_a_unix_socket_needs_the_public_url() {
    let data_dir = tempfile::tempdir().expect("data dir");
    let sockets = tempfile::tempdir().expect("socket dir");
    let socket = sockets.path().join("troupe.sock");
    let daemon = spawn_daemon(data_dir.path(), &format!("unix:{}", socket.display()));
    let data_dir_arg = data_dir.path().to_str().expect("utf-8 path");

    let mut command = troupe_bare(&["open", "--data-dir", data_dir_arg]);
    command.env("TROUPE_URL", &daemon.url);
    let refused = finish(command, WAIT).await;
    assert_eq!(refused.code, Some(1));
    assert!(
        refused.stderr.contains("a browser cannot open") && refused.stderr.contains("--public-url"),
        "{}",
        refused.stderr
    );

    let mut command = troupe_bare(&["open", "--data-dir", data_dir_arg, "--public-url", "https://proxy.example/"]);
    command.env("TROUPE_URL", &daemon.url);
    let opened = finish(command, WAIT).await;
    assert_eq!(opened.code, Some(0), "{}", opened.stderr);
    assert!(opened.stdout.starts_with("https://proxy.example/login?code="), "{}", opened.stdout);
}

/// One `GET path` over a plain TCP connection; the whole response as text.
async fn raw_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = within("connect", tokio::net::TcpStream::connect(addr)).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    within("send", stream.write_all(request.as_bytes())).await.expect("send");
    let mut response = Vec::new();
    within("read", stream.read_to_end(&mut response)).await.expect("read");
    String::from_utf8_lossy(&response).into_owned()
}
