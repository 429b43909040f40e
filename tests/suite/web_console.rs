//! The web console (issue 14): its browser tests, and wire checks of the HTTP surface it stands on.
//!
//! Each browser test is a `web/test/<name>.test.mjs` file run by `node --test`: it starts the real daemon (this
//! build's `troupe` binary), signs in through `troupe open`'s one-time URL and drives Debian's headless chromium
//! through `playwright-core`. Screenshots and the daemon's log go to `target/test-output/web-console/<name>`.
//! `scripts/test` installs chromium and `web/test`'s packages (`npm ci`); when they are missing these tests fail and
//! say so, they never skip.
//!
//! The wire checks below speak raw HTTP/1.1 to an in-process daemon: the CSP and cache headers, content types, the
//! login code's single use, and a sign-in being the cookie plus the page key handed over in the redirect's fragment
//! (`/ws` and `console/session` refuse either alone, and `/ws` refuses a foreign Origin even with both).

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;

use super::support::*;

use super::raw_http::{Response, http};

/// How long one browser test file may take: each test starts a daemon and a browser; most take seconds.
const NODE_TEST_LIMIT: Duration = Duration::from_secs(300);

/// The CSP of every console response, as the contract states it.
const CSP_DIRECTIVES: [&str; 9] = [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "font-src 'self'",
    "connect-src 'self'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
];

/// The header that carries the page key on the page's own requests (`console/session`).
const KEY_HEADER: &str = "X-Troupe-Console-Key";

fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `target/test-output/web-console/<name>`, emptied.
fn output_dir(name: &str) -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("target dir").to_path_buf();
    let dir = target.join("test-output/web-console").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("output dir");
    dir
}

/// One browser test at a time: each runs a daemon and a chromium, and two at once on a small machine (beside the
/// rest of the suite) only make their timing worse.
static ONE_BROWSER_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `node --test web/test/<name>.test.mjs` and fails with node's output unless every test in it passed.
fn browser_test(name: &str) {
    browser_test_with(name, &[]);
}

/// [`browser_test`] with more environment for the test file.
fn browser_test_with(name: &str, env: &[(&str, &std::ffi::OsStr)]) {
    // A test that failed while holding the lock poisons it; the next one runs all the same.
    let _one_at_a_time = ONE_BROWSER_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let chromium =
        std::env::var_os("TROUPE_CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    assert!(chromium.exists(), "{} is missing: scripts/test installs Debian's chromium", chromium.display());
    let mut all = vec![("TROUPE_CHROMIUM", chromium.as_os_str())];
    all.extend_from_slice(env);
    node_test(name, &all);
}

/// `node --test web/test/<name>.test.mjs` with `TROUPE_BIN` and `TROUPE_TEST_OUTPUT` (and `env`), bounded by
/// [`NODE_TEST_LIMIT`]; fails with node's output unless every test in the file passed.
fn node_test(name: &str, env: &[(&str, &std::ffi::OsStr)]) {
    assert!(
        repository().join("web/test/node_modules/playwright-core").is_dir(),
        "web/test/node_modules is missing: scripts/test installs it (`npm ci` in web/test)"
    );
    node_test_files(name, &format!("web/test/{name}.test.mjs"), env);
}

/// `node --test <files>` (a file or a folder of the repository) as [`node_test`] runs it, its log under `name`.
fn node_test_files(name: &str, files: &str, env: &[(&str, &std::ffi::OsStr)]) {
    let output = output_dir(name);
    let log = output.join("node-test.log");
    let log_file = std::fs::File::create(&log).expect("node log");
    let mut command = Command::new("node");
    command
        .arg("--test")
        .arg("--test-reporter=spec")
        .arg(files)
        .current_dir(repository())
        .env("TROUPE_BIN", troupe_binary())
        .env("TROUPE_TEST_OUTPUT", &output)
        .env_remove("TROUPE_TOKEN")
        .env_remove("TROUPE_URL")
        .env_remove("TROUPE_HOME")
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().expect("log"))
        .stderr(log_file)
        // Its own group, so a timeout reaches the daemons node started too.
        .process_group(0);
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().expect("start node (scripts/test installs nodejs)");
    let mut status = None;
    if !holds_within_blocking(NODE_TEST_LIMIT, || {
        status = child.try_wait().expect("wait for node");
        status.is_some()
    }) {
        // SIGTERM first: Playwright closes the browser it launched (in a process group of its own) on SIGTERM;
        // SIGKILL for whatever is left after a grace period.
        signal_group(&child, libc::SIGTERM);
        holds_within_blocking(Duration::from_secs(10), || child.try_wait().expect("wait for node").is_some());
        signal_group(&child, libc::SIGKILL);
        let _ = child.wait();
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    match status {
        // node's runner passes when it finds no test file at all: a moved or renamed file must not pass that way.
        Some(status) if status.success() => assert!(
            tests_run(&text).is_some_and(|count| count > 0),
            "{files} ran no test (node found no test file there?):\n{text}"
        ),
        Some(status) => {
            panic!("{files} failed ({status}); screenshots and logs in {}:\n{text}", output.display())
        }
        None => panic!("{files} took longer than {NODE_TEST_LIMIT:?}; output so far:\n{text}"),
    }
}

/// How many tests node's spec reporter says it ran (its closing `ℹ tests N` line).
fn tests_run(log: &str) -> Option<u64> {
    log.lines().rev().find_map(|line| line.trim().strip_prefix("ℹ tests ")?.trim().parse().ok())
}

fn signal_group(child: &std::process::Child, signal: libc::c_int) {
    // SAFETY: signalling the process group this test started (its id is the child's pid).
    unsafe {
        libc::kill(-(child.id() as libc::pid_t), signal);
    }
}

#[test]
fn browser_sign_in() {
    browser_test("sign_in");
}

#[test]
fn browser_origin() {
    browser_test("origin");
}

#[test]
fn browser_streaming() {
    browser_test("streaming");
}

#[test]
fn browser_approvals() {
    browser_test("approvals");
}

#[test]
fn browser_steer_recall() {
    browser_test("steer_recall");
}

#[test]
fn browser_attachments() {
    browser_test("attachments");
}

#[test]
fn browser_cancel() {
    browser_test("cancel");
}

#[test]
fn browser_stdin() {
    browser_test("stdin");
}

#[test]
fn browser_reconnect() {
    browser_test("reconnect");
}

#[test]
fn browser_session_admin() {
    browser_test("session_admin");
}

#[test]
fn browser_transcript() {
    browser_test("transcript");
}

#[test]
fn browser_diffs() {
    browser_test("diffs");
}

#[test]
fn browser_keyboard() {
    browser_test("keyboard");
}

#[test]
fn browser_changes() {
    browser_test("changes");
}

#[test]
fn browser_mcp() {
    browser_test("mcp");
}

#[test]
fn browser_behind_nginx() {
    use super::proxy_support::{Proxy, TestCa};
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = TestCa::create(dir.path());
    // nginx first, in front of the port the test's daemon will listen on.
    let port = free_port();
    let upstream: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("address");
    let proxy = Proxy::nginx(dir.path(), &ca, upstream, 90);
    let origin = format!("https://localhost:{}", proxy.port);
    let port = port.to_string();
    browser_test_with("proxy", &[("TROUPE_TEST_PORT", port.as_ref()), ("TROUPE_PROXY_ORIGIN", origin.as_ref())]);
    drop(proxy);
}

#[test]
fn web_dist_is_not_stale() {
    node_test("stale_build", &[]);
}

/// The console's unit tests (`web/src/*.test.js`: the markdown renderer, the shown-command escapes, the store, the
/// RPC client, …), which need no browser: Node's test runner over web/src with web/'s packages.
#[test]
fn web_unit_tests() {
    assert!(
        repository().join("web/node_modules/marked").is_dir(),
        "web/node_modules is missing: scripts/test installs it (`npm ci` in web)"
    );
    node_test_files("unit", "web/src/", &[]);
}

/// A login code from `console.login_code`, asked by a token-authenticated client.
async fn login_code(daemon: &TestDaemon) -> String {
    let mut socket = RawSocket::connect(&daemon.url(), &daemon.token).await;
    socket.handshake().await;
    let reply = socket.call(1, "console.login_code", json!({})).await;
    let path = reply["result"]["path"].as_str().unwrap_or_else(|| panic!("console.login_code answered {reply}"));
    assert!(reply["result"]["expires_at"].is_string(), "{reply}");
    path.strip_prefix("login?code=").unwrap_or_else(|| panic!("a relative login path: {path}")).to_owned()
}

/// A browser's sign-in: the cookie pair to send back, and the page key the redirect handed over in its fragment.
struct SignedIn {
    cookie: String,
    key: String,
}

/// The page key of a sign-in's redirect, `./#console-key=KEY`.
fn handed_key(answer: &Response) -> String {
    let location = answer.header("location").unwrap_or_default();
    location
        .strip_prefix("./#console-key=")
        .filter(|key| key.len() >= 16 && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
        .unwrap_or_else(|| panic!("303 to ./ with the page key in the fragment, got {location:?}"))
        .to_owned()
}

/// Signs in over raw HTTP, as the sign-in page's form does.
async fn sign_in(daemon: &TestDaemon) -> SignedIn {
    let code = login_code(daemon).await;
    let own = format!("http://{}", daemon.addr);
    let answer = http(daemon.addr, "POST", "/login", &[("Origin", &own)], &format!("code={code}"));
    assert_eq!(answer.status, 303, "{answer:?}");
    let cookie = answer.console_cookie().unwrap_or_else(|| panic!("no console cookie in {answer:?}"));
    SignedIn { cookie, key: handed_key(&answer) }
}

fn assert_strict_csp(response: &Response, what: &str) {
    let csp = response.header("content-security-policy").unwrap_or_else(|| panic!("{what}: no CSP header"));
    let directives: Vec<&str> = csp.split(';').map(str::trim).filter(|part| !part.is_empty()).collect();
    for expected in CSP_DIRECTIVES {
        assert!(directives.contains(&expected), "{what}: the CSP lacks `{expected}`: {csp}");
    }
    assert!(!csp.contains("unsafe"), "{what}: the CSP allows something unsafe: {csp}");
}

fn content_type(response: &Response) -> &str {
    response.header("content-type").unwrap_or("")
}

#[tokio::test]
async fn signed_out_pages_are_html_under_a_strict_csp() {
    let daemon = TestDaemon::start();
    let root = http(daemon.addr, "GET", "/", &[], "");
    assert_eq!(root.status, 200, "{root:?}");
    assert!(content_type(&root).starts_with("text/html"), "{root:?}");
    assert!(root.text().contains("troupe open"), "the signed-out page says how to sign in: {}", root.text());
    assert_strict_csp(&root, "GET / signed out");

    // A code that is not even shaped like one is refused at once (401); either page carries the CSP.
    let login = http(daemon.addr, "GET", "/login?code=whatever", &[], "");
    assert!(matches!(login.status, 200 | 401), "{login:?}");
    assert!(content_type(&login).starts_with("text/html"));
    assert_strict_csp(&login, "GET /login");
    assert!(!login.text().contains("<script>"), "no inline script on the login page");
    assert!(!login.text().contains("style=\""), "no inline style on the login page");

    let session = http(daemon.addr, "GET", "/console/session", &[], "");
    assert_eq!(session.status, 401, "{session:?}");
}

#[tokio::test]
async fn a_login_code_signs_in_once_and_only_by_post() {
    let daemon = TestDaemon::start();
    let code = login_code(&daemon).await;
    // Opening the link (a link preview would) neither signs in nor uses the code up.
    for _ in 0..2 {
        let page = http(daemon.addr, "GET", &format!("/login?code={code}"), &[], "");
        assert_eq!(page.status, 200);
        assert_eq!(page.console_cookie(), None, "GET /login sets no cookie");
        assert!(page.text().contains(&code), "the form carries the code");
    }
    // A post that does not prove it came from the console's own page is refused and leaves the code unused: no
    // Origin and no Sec-Fetch-Site (a script that read the link off a browser's command line), another site's.
    for headers in [
        vec![],
        vec![("Sec-Fetch-Site", "cross-site")],
        vec![("Sec-Fetch-Site", "none")],
        vec![("Origin", "http://evil.example")],
        vec![("Origin", "null"), ("Sec-Fetch-Site", "same-origin")],
    ] {
        let refused = http(daemon.addr, "POST", "/login", &headers, &format!("code={code}"));
        assert_eq!(refused.status, 403, "{headers:?}: {refused:?}");
        assert!(refused.text().contains("not sent from this console's own sign-in page"), "{}", refused.text());
        assert_eq!(refused.console_cookie(), None, "{headers:?}");
    }
    // A browser that sends no Origin says where the form came from with Sec-Fetch-Site.
    let answer = http(daemon.addr, "POST", "/login", &[("Sec-Fetch-Site", "same-origin")], &format!("code={code}"));
    assert_eq!(answer.status, 303, "{answer:?}");
    let key = handed_key(&answer);
    let set_cookie = answer.header("set-cookie").expect("Set-Cookie");
    let attributes: Vec<String> = set_cookie.split(';').map(|part| part.trim().to_ascii_lowercase()).collect();
    for expected in ["httponly", "samesite=strict", "path=/"] {
        assert!(attributes.iter().any(|attribute| attribute == expected), "{expected} in {set_cookie}");
    }
    assert!(attributes.iter().any(|attribute| attribute.starts_with("max-age=")), "Max-Age in {set_cookie}");
    assert!(!attributes.iter().any(|attribute| attribute == "secure"), "no Secure on plain http: {set_cookie}");

    let own = [("Origin", format!("http://{}", daemon.addr))];
    let own: Vec<(&str, &str)> = own.iter().map(|(name, value)| (*name, value.as_str())).collect();
    let again = http(daemon.addr, "POST", "/login", &own, &format!("code={code}"));
    assert_eq!(again.status, 401, "{again:?}");
    assert!(again.text().contains("already used"), "{}", again.text());
    assert_eq!(again.console_cookie(), None);
    let unknown = http(daemon.addr, "POST", "/login", &own, "code=nonsense");
    assert_eq!(unknown.status, 401);

    let cookie = answer.console_cookie().expect("cookie");
    let session = http(daemon.addr, "GET", "/console/session", &[("Cookie", &cookie), (KEY_HEADER, &key)], "");
    assert_eq!(session.status, 200, "{session:?}");
    assert_eq!(session.header("cache-control"), Some("no-store"));
    let without_key = http(daemon.addr, "GET", "/console/session", &[("Cookie", &cookie)], "");
    assert_eq!(without_key.status, 401, "the cookie alone is not a sign-in (every port of the host receives it)");
    let expires: serde_json::Value = serde_json::from_slice(&session.body).expect("JSON");
    assert!(expires["expires_at"].is_string(), "{expires}");

    let logout = http(
        daemon.addr,
        "POST",
        "/logout",
        &[("Cookie", &cookie), ("Origin", &format!("http://{}", daemon.addr))],
        "",
    );
    assert_eq!(logout.status, 303, "{logout:?}");
    let cleared = logout.header("set-cookie").unwrap_or_default().to_ascii_lowercase();
    let name = cookie.split_once('=').expect("NAME=VALUE").0.to_ascii_lowercase();
    assert!(
        cleared.starts_with(&format!("{name}=;")) && cleared.contains("max-age=0"),
        "the cookie is cleared: {cleared}"
    );
    let after = http(daemon.addr, "GET", "/console/session", &[("Cookie", &cookie), (KEY_HEADER, &key)], "");
    assert_eq!(after.status, 401, "the cookie no longer works after sign-out");
}

#[tokio::test]
async fn the_console_and_its_assets_have_types_cache_headers_and_the_csp() {
    let daemon = TestDaemon::start();
    let SignedIn { cookie, .. } = sign_in(&daemon).await;
    let index = http(daemon.addr, "GET", "/", &[("Cookie", &cookie)], "");
    assert_eq!(index.status, 200, "{index:?}");
    assert!(content_type(&index).starts_with("text/html"), "{index:?}");
    assert_eq!(index.header("cache-control"), Some("no-cache"));
    assert_strict_csp(&index, "GET / signed in");
    let html = index.text();
    assert!(!html.contains("style=\""), "no inline style attribute in index.html");

    // Every asset index.html names, by relative URL (so the console works under a proxy prefix).
    let assets: Vec<String> = html
        .split(['"', '\''])
        .filter(|part| part.starts_with("assets/") || part.starts_with("./assets/"))
        .map(|part| part.trim_start_matches("./").to_owned())
        .collect();
    assert!(!assets.is_empty(), "index.html loads its script and style from assets/: {html}");
    assert!(!html.contains("\"/assets/"), "asset URLs are relative, not rooted: {html}");
    for asset in &assets {
        let response = http(daemon.addr, "GET", &format!("/{asset}"), &[], "");
        assert_eq!(response.status, 200, "{asset}: {response:?}");
        assert_eq!(response.header("cache-control"), Some("public, max-age=31536000, immutable"), "{asset}");
        assert_strict_csp(&response, asset);
        let expected = match asset.rsplit('.').next() {
            Some("js" | "mjs") => "javascript",
            Some("css") => "text/css",
            Some("svg") => "image/svg+xml",
            Some("woff2") => "font/woff2",
            _ => "",
        };
        assert!(content_type(&response).contains(expected), "{asset}: content type {}", content_type(&response));
    }
    let missing = http(daemon.addr, "GET", "/assets/no-such-file.js", &[], "");
    assert_eq!(missing.status, 404, "{missing:?}");
}

#[tokio::test]
async fn the_websocket_takes_the_cookie_only_from_the_daemons_own_origin() {
    let daemon = TestDaemon::start();
    let SignedIn { cookie, key } = sign_in(&daemon).await;
    let own = format!("http://{}", daemon.addr);
    let keyed = format!("troupe, troupe.console.{key}");
    let upgrade = |headers: &[(&str, &str)]| {
        let mut all = vec![
            ("Connection", "Upgrade"),
            ("Upgrade", "websocket"),
            ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ];
        all.extend_from_slice(headers);
        http(daemon.addr, "GET", "/ws", &all, "").status
    };
    let protocol = "Sec-WebSocket-Protocol";
    assert_eq!(upgrade(&[("Cookie", &cookie), (protocol, &keyed), ("Origin", &own)]), 101);
    assert_eq!(upgrade(&[("Cookie", &cookie), (protocol, &keyed), ("Origin", "http://evil.example")]), 403);
    // A server on another port of the host receives the cookie but never the key.
    assert_eq!(upgrade(&[("Cookie", &cookie), ("Origin", &own)]), 401);
    assert_eq!(upgrade(&[(protocol, &keyed), ("Origin", &own)]), 401);
    let forged = format!("{}=forged", cookie.split_once('=').expect("NAME=VALUE").0);
    assert_eq!(upgrade(&[("Cookie", &forged), (protocol, &keyed), ("Origin", &own)]), 401);
    // A cookie is a browser's credential: without an Origin (browsers always send one) it is not enough.
    let without_origin = upgrade(&[("Cookie", &cookie), (protocol, &keyed)]);
    assert!(matches!(without_origin, 401 | 403), "a cookie without an Origin is refused, got {without_origin}");
}

#[tokio::test]
async fn a_console_connection_cannot_mint_sign_in_codes() {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    let daemon = TestDaemon::start();
    let SignedIn { cookie, key } = sign_in(&daemon).await;
    let mut request = daemon.url().into_client_request().expect("request");
    let headers = request.headers_mut();
    headers.insert("Cookie", cookie.parse().expect("cookie header"));
    headers.insert("Origin", format!("http://{}", daemon.addr).parse().expect("origin header"));
    headers.insert("Sec-WebSocket-Protocol", format!("troupe, troupe.console.{key}").parse().expect("protocols"));
    let (stream, _) = within("console connect", tokio_tungstenite::connect_async(request)).await.expect("upgrade");
    let mut socket = RawSocket { stream };
    socket.handshake().await;
    // A page's script (or one injected into it) must not turn one sign-in into more.
    let reply = socket.call(1, "console.login_code", json!({})).await;
    assert!(reply.get("error").is_some(), "a console connection minted a code: {reply}");
    // It is a client like any other otherwise.
    let sessions = socket.call(2, "session.list", json!({})).await;
    assert!(sessions.get("result").is_some(), "{sessions}");
}

#[tokio::test]
async fn a_disabled_console_serves_nothing_and_mints_no_code() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[console]\nenabled = false\n".to_owned()),
        ..DaemonSetup::default()
    });
    assert_eq!(http(daemon.addr, "GET", "/", &[], "").status, 404);
    assert_eq!(http(daemon.addr, "GET", "/console/session", &[], "").status, 404);
    assert_eq!(http(daemon.addr, "POST", "/login", &[], "code=whatever").status, 404);
    let mut socket = RawSocket::connect(&daemon.url(), &daemon.token).await;
    socket.handshake().await;
    let reply = socket.call(1, "console.login_code", json!({})).await;
    assert!(reply.get("error").is_some(), "a disabled console minted a code: {reply}");
    assert!(reply.to_string().contains("console_disabled"), "{reply}");
}
