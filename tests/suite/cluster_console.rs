//! The web console in a cluster, through two real `troupe serve --cluster … --node …` processes sharing one token
//! on a real nats-server, as operators run them behind a round-robin proxy: a code minted on one node signs a
//! browser in on the other, once cluster-wide; the browser's cookie and page key work on both nodes (HTTP and
//! `/ws`); a sign-out on one node is refused on the other within seconds and closes its sockets; and with NATS
//! gone, a sign-in is refused with a page that says why while a browser already signed in keeps working.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde_json::json;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use troupe_test_support::{ChildDaemon, NatsServer};

use super::raw_http::{Response, http};
use super::support::*;

/// Every node of a cluster has the same bearer token (deploy/cluster.md).
const SHARED_TOKEN: &str = "cluster-console-token-0123456789abcdef";
/// The header that carries the page key on the page's own requests.
const KEY_HEADER: &str = "X-Troupe-Console-Key";
/// How soon a sign-out on one node must be refused on another.
const SIGN_OUT_REACHES_EVERY_NODE: Duration = Duration::from_secs(3);

/// `troupe serve` as node `name` of the cluster on `nats`, the console on, with the shared token.
fn console_node(nats_url: &str, name: &str, data_dir: &Path) -> ChildDaemon {
    std::fs::create_dir_all(data_dir).expect("data dir");
    let config =
        "[titles]\nauto = false\n[console]\nenabled = true\nsession_hours = 2\n[cluster]\nlease_ttl_secs = 3\n";
    std::fs::write(data_dir.join("config.toml"), config).expect("config.toml");
    troupe_serve(data_dir)
        .listen("127.0.0.1:0")
        .env("TROUPE_TOKEN", SHARED_TOKEN)
        .args(["--cluster", nats_url, "--node", name])
        .spawn()
}

/// `console.login_code` over a token-authenticated WebSocket to `node`: the code, or the whole reply as an error.
async fn login_code(node: &ChildDaemon) -> Result<String, serde_json::Value> {
    let mut socket = RawSocket::connect(&node.url, &node.token).await;
    socket.handshake().await;
    let reply = socket.call(1, "console.login_code", json!({})).await;
    let Some(path) = reply["result"]["path"].as_str() else { return Err(reply) };
    Ok(path.strip_prefix("login?code=").unwrap_or_else(|| panic!("a relative login path: {path}")).to_owned())
}

/// `POST /login` on `node`, as the sign-in page's form sends it.
fn post_login(node: &ChildDaemon, code: &str) -> Response {
    let own = format!("http://{}", node.addr());
    http(node.addr(), "POST", "/login", &[("Origin", &own)], &format!("code={code}"))
}

/// A browser's sign-in: the cookie pair to send back, and the page key of the redirect's fragment.
struct SignedIn {
    cookie: String,
    key: String,
}

fn signed_in(answer: &Response) -> SignedIn {
    assert_eq!(answer.status, 303, "{answer:?}");
    let cookie = answer.console_cookie().unwrap_or_else(|| panic!("no console cookie in {answer:?}"));
    let location = answer.header("location").unwrap_or_default();
    let key = location.strip_prefix("./#console-key=").unwrap_or_else(|| panic!("no page key in {location:?}"));
    SignedIn { cookie, key: key.to_owned() }
}

/// `GET /console/session`'s status on `addr` for this browser.
fn session_status(addr: SocketAddr, browser: &SignedIn) -> u16 {
    http(addr, "GET", "/console/session", &[("Cookie", &browser.cookie), (KEY_HEADER, &browser.key)], "").status
}

/// A console WebSocket to `addr` with the browser's cookie and page key, handshaken, from the node's own origin.
async fn console_socket(addr: SocketAddr, browser: &SignedIn) -> RawSocket {
    let mut request = format!("ws://{addr}/ws").into_client_request().expect("request");
    let headers = request.headers_mut();
    headers.insert("Cookie", browser.cookie.parse().expect("cookie header"));
    headers.insert("Origin", format!("http://{addr}").parse().expect("origin header"));
    let protocols = format!("troupe, troupe.console.{}", browser.key);
    headers.insert("Sec-WebSocket-Protocol", protocols.parse().expect("protocols"));
    let (stream, _) = within("console connect", tokio_tungstenite::connect_async(request))
        .await
        .unwrap_or_else(|error| panic!("the console's WebSocket on {addr} was refused: {error}"));
    let mut socket = RawSocket { stream };
    socket.handshake().await;
    let sessions = socket.call(2, "session.list", json!({})).await;
    assert!(sessions.get("result").is_some(), "a console connection lists sessions: {sessions}");
    socket
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_sign_in_on_one_node_works_on_every_node_until_it_signs_out_on_any() {
    let nats = NatsServer::start();
    let dirs = tempfile::tempdir().expect("temp dir");
    let a = console_node(&nats.url(), "a", &dirs.path().join("a"));
    let b = console_node(&nats.url(), "b", &dirs.path().join("b"));

    let code = login_code(&a).await.expect("node a mints a code");
    let browser = signed_in(&post_login(&b, &code));
    for node in [&b, &a] {
        assert_eq!(session_status(node.addr(), &browser), 200, "signed in on {}", node.url);
        let index = http(node.addr(), "GET", "/", &[("Cookie", &browser.cookie)], "");
        assert!(!index.text().contains("You are not signed in"), "{} shows the console", node.url);
    }
    let mut on_a = console_socket(a.addr(), &browser).await;
    let _on_b = console_socket(b.addr(), &browser).await;

    let again = post_login(&a, &code);
    assert_eq!(again.status, 401, "a code signs in once, cluster-wide: {again:?}");
    assert!(again.text().contains("already used"), "{}", again.text());
    assert_eq!(again.console_cookie(), None);

    let own_b = format!("http://{}", b.addr());
    let logout = http(b.addr(), "POST", "/logout", &[("Cookie", &browser.cookie), ("Origin", &own_b)], "");
    assert_eq!(logout.status, 303, "{logout:?}");
    assert_eq!(session_status(b.addr(), &browser), 401, "signed out where it signed out");
    eventually_some("node a refuses the signed-out cookie", SIGN_OUT_REACHES_EVERY_NODE, || async {
        (session_status(a.addr(), &browser) == 401).then_some(())
    })
    .await;
    assert_eq!(on_a.close_code().await, Some(1008), "the browser's socket on node a is closed as signed out");
    let mut refused = format!("ws://{}/ws", a.addr()).into_client_request().expect("request");
    let headers = refused.headers_mut();
    headers.insert("Cookie", browser.cookie.parse().expect("cookie header"));
    headers.insert("Origin", format!("http://{}", a.addr()).parse().expect("origin header"));
    headers.insert("Sec-WebSocket-Protocol", format!("troupe.console.{}", browser.key).parse().expect("protocols"));
    let upgrade = within("a refused upgrade", tokio_tungstenite::connect_async(refused)).await;
    assert!(upgrade.is_err(), "node a opens no socket for a signed-out cookie");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_nats_a_sign_in_is_refused_in_words_and_a_signed_in_browser_keeps_working() {
    let mut nats = NatsServer::start();
    let dirs = tempfile::tempdir().expect("temp dir");
    let a = console_node(&nats.url(), "a", &dirs.path().join("a"));
    let b = console_node(&nats.url(), "b", &dirs.path().join("b"));

    let browser = signed_in(&post_login(&a, &login_code(&a).await.expect("a code")));
    // Node b has heard of the sign-in (or read it from the cluster when asked): it is in its mirror now.
    assert_eq!(session_status(b.addr(), &browser), 200);
    let unused = login_code(&b).await.expect("a second code");

    nats.kill();
    let refused = post_login(&a, &unused);
    assert_eq!(refused.status, 503, "{refused:?}");
    assert!(refused.text().contains("could not be recorded"), "the page says why: {}", refused.text());
    assert_eq!(refused.console_cookie(), None);
    let minted = login_code(&a).await.expect_err("no code can be recorded");
    assert!(minted.to_string().contains("cluster_unavailable"), "{minted}");
    for node in [&a, &b] {
        assert_eq!(session_status(node.addr(), &browser), 200, "{} still knows the browser", node.url);
    }
    let _still = console_socket(b.addr(), &browser).await;
}
