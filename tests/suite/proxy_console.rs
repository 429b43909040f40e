//! The web console behind the real nginx and Caddy of `deploy/`, over TLS: a sign-in link from `troupe open`
//! through the proxy (at the root and under the `/agent/` prefix), the code used up by `POST login`, a `Secure`
//! cookie (the proxy says the browser came over HTTPS) and the page key in the redirect's fragment, the page and its
//! files served with it, the WebSocket authorized by cookie and key together from the site's own origin only, and nothing else of the daemon reachable through the
//! console's paths.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};

use super::proxy_support::*;
use super::support::*;

/// One HTTP/1.1 exchange over TLS to the proxy (`Connection: close`): status, headers (lowercased names) and body.
fn https(proxy: &Proxy, ca: &TestCa, request: &str) -> (u16, Vec<(String, String)>, String) {
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("server name");
    let connection = rustls::ClientConnection::new(ca.client_config(), name).expect("tls client");
    let tcp = TcpStream::connect((Ipv4Addr::LOCALHOST, proxy.port)).expect("connect to the proxy");
    tcp.set_read_timeout(Some(WAIT)).expect("read timeout");
    let mut stream = rustls::StreamOwned::new(connection, tcp);
    stream.write_all(request.as_bytes()).expect("send the request");
    let mut raw = Vec::new();
    // Some proxies end a `Connection: close` exchange without TLS close_notify; what arrived is the answer.
    let _ = stream.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines.next().and_then(|line| line.split(' ').nth(1)).and_then(|code| code.parse().ok()).unwrap_or(0);
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
}

fn get(proxy: &Proxy, ca: &TestCa, path: &str, cookie: Option<&str>) -> (u16, Vec<(String, String)>, String) {
    let cookie = cookie.map(|cookie| format!("Cookie: {cookie}\r\n")).unwrap_or_default();
    https(
        proxy,
        ca,
        &format!("GET {path} HTTP/1.1\r\nHost: localhost:{}\r\n{cookie}Connection: close\r\n\r\n", proxy.port),
    )
}

/// Signs in through the proxy under `prefix` ("" or "/agent") and checks everything a browser then does.
async fn console_through(proxy: &Proxy, ca: &TestCa, daemon: &ChildDaemon, prefix: &str) {
    let url = proxy.url(&format!("{prefix}/ws"));
    let mut open = super::cli_support::troupe_bare(&["open", "--json", "--ca-cert"]);
    open.arg(&ca.ca_pem).env("TROUPE_URL", &url).env("TROUPE_TOKEN", &daemon.token);
    let output = within("troupe open through the proxy", open.output()).await.expect("run troupe open");
    assert!(output.status.success(), "troupe open: {}", String::from_utf8_lossy(&output.stderr));
    let opened: serde_json::Value = serde_json::from_slice(&output.stdout).expect("troupe open --json");
    let link = opened["url"].as_str().expect("url").to_owned();
    let own_origin = format!("https://localhost:{}", proxy.port);
    assert!(link.starts_with(&format!("{own_origin}{prefix}/login?code=")), "{link} for {prefix}/ws");
    let path_and_query = &link[own_origin.len()..];
    let code = link.split_once("code=").expect("code").1;

    // Following the link shows a button; it does not use the code up.
    let (status, _, page) = get(proxy, ca, path_and_query, None);
    assert_eq!(status, 200, "{page}\n{}", proxy.logs());
    assert!(page.contains("action=\"login\"") && page.contains(code), "{page}");

    // A form posted from another site is refused, and does not use the code up either.
    let post = |origin: &str| {
        let body = format!("code={code}");
        https(
            proxy,
            ca,
            &format!(
                "POST {prefix}/login HTTP/1.1\r\nHost: localhost:{}\r\nOrigin: {origin}\r\nContent-Type: \
                 application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                proxy.port,
                body.len()
            ),
        )
    };
    assert_eq!(post("https://evil.example").0, 403);
    let (status, headers, _) = post(&own_origin);
    assert_eq!(status, 303, "{headers:?}");
    let set_cookie = header(&headers, "set-cookie").expect("a session cookie").to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Secure", "Path=/"] {
        assert!(set_cookie.contains(attribute), "{attribute} missing from {set_cookie}");
    }
    assert_eq!(post(&own_origin).0, 401, "the code works once");
    let cookie = set_cookie.split(';').next().expect("name=value").to_owned();
    let location = header(&headers, "location").expect("a redirect");
    let key =
        location.strip_prefix("./#console-key=").unwrap_or_else(|| panic!("the page key in {location}")).to_owned();

    // The page and its files, with the cookie; the signed-out page without it.
    let (status, headers, index) = get(proxy, ca, &format!("{prefix}/"), Some(&cookie));
    assert_eq!(status, 200);
    assert!(header(&headers, "content-security-policy").is_some_and(|csp| csp.contains("script-src 'self'")));
    let script = index.split("src=\"").nth(1).and_then(|rest| rest.split('"').next()).expect("a script in index.html");
    assert!(script.starts_with("assets/"), "relative asset paths work under a prefix: {script}");
    let (status, headers, _) = get(proxy, ca, &format!("{prefix}/{script}"), Some(&cookie));
    assert_eq!(status, 200, "{prefix}/{script}");
    assert_eq!(header(&headers, "content-type"), Some("text/javascript; charset=utf-8"));
    let (status, _, signed_out) = get(proxy, ca, &format!("{prefix}/"), None);
    assert_eq!(status, 200);
    assert!(signed_out.contains("troupe open"), "{signed_out}");
    // `console/session` answers the page (cookie and key), not the cookie alone.
    let session_request = |key: &str| {
        format!(
            "GET {prefix}/console/session HTTP/1.1\r\nHost: localhost:{}\r\nCookie: {cookie}\r\n\
             X-Troupe-Console-Key: {key}\r\nConnection: close\r\n\r\n",
            proxy.port
        )
    };
    let (status, _, session) = https(proxy, ca, &session_request(&key));
    assert_eq!(status, 200, "{session}");
    assert_eq!(https(proxy, ca, &session_request("not-the-key")).0, 401);
    assert_eq!(get(proxy, ca, &format!("{prefix}/console/session"), Some(&cookie)).0, 401);

    // The WebSocket rides the cookie and the page key from the site's own origin, and from nowhere else.
    let upgrade = |origin, key| BrowserUpgrade {
        token: "",
        origin,
        source: Ipv4Addr::LOCALHOST,
        spoofed_forwarded_for: None,
        console: Some(ConsoleSignIn { cookie: &cookie, key }),
    };
    let (mut socket, _) = browser_connect(proxy, ca, &format!("{prefix}/ws"), upgrade(&own_origin, &key))
        .await
        .unwrap_or_else(|status| panic!("the console's cookie was refused at {prefix}/ws with HTTP {status}"));
    socket.handshake().await;
    let listed = socket.call(1, "session.list", serde_json::json!({})).await;
    assert!(listed["result"]["sessions"].is_array(), "{listed}");
    let foreign =
        browser_connect(proxy, ca, &format!("{prefix}/ws"), upgrade("https://console.example.com", &key)).await;
    assert_eq!(foreign.err(), Some(403), "an allowed origin is not the console's own: the cookie does not count there");
    // The cookie alone (what a server on another port of the host receives from the browser) opens nothing.
    let keyless = browser_connect(proxy, ca, &format!("{prefix}/ws"), upgrade(&own_origin, "not-the-key")).await;
    assert_eq!(keyless.err(), Some(401), "the cookie without the page key");

    // Nothing else of the daemon is reachable through the console's paths.
    for path in [format!("{prefix}/metrics"), format!("{prefix}/assets/../metrics"), format!("{prefix}/x")] {
        assert_eq!(get(proxy, ca, &path, Some(&cookie)).0, 404, "{path}");
    }

    // The proxy's access log has the requests but never a sign-in code.
    let access_log = proxy.access_log();
    assert!(!access_log.contains(code), "the sign-in code is in the access log:\n{access_log}");
    if matches!(proxy.kind, ProxyKind::Nginx) {
        assert!(access_log.contains("/console/session"), "nginx logs the console's other requests:\n{access_log}");
    }

    // Signing out ends the session for the WebSocket too.
    let (status, _, _) = https(
        proxy,
        ca,
        &format!(
            "POST {prefix}/logout HTTP/1.1\r\nHost: localhost:{}\r\nOrigin: {own_origin}\r\nCookie: {cookie}\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n",
            proxy.port
        ),
    );
    assert_eq!(status, 303);
    let refused = browser_connect(proxy, ca, &format!("{prefix}/ws"), upgrade(&own_origin, &key)).await;
    assert_eq!(refused.err(), Some(401), "a signed-out cookie");
}

async fn console_behind(kind: ProxyKind) {
    let data_dir = tempfile::tempdir().unwrap();
    let proxy_dir = tempfile::tempdir().unwrap();
    let ca = TestCa::create(proxy_dir.path());
    let daemon =
        deployed_daemon(data_dir.path(), DaemonKnobs { trust_proxy: true, ping_interval_secs: None }, "127.0.0.1:0");
    let proxy = match kind {
        ProxyKind::Nginx => Proxy::nginx(proxy_dir.path(), &ca, daemon.addr(), 90),
        ProxyKind::Caddy => Proxy::caddy(proxy_dir.path(), &ca, daemon.addr()),
    };
    for prefix in ["", "/agent"] {
        console_through(&proxy, &ca, &daemon, prefix).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_signs_in_and_connects_through_nginx_at_the_root_and_under_a_prefix() {
    console_behind(ProxyKind::Nginx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_signs_in_and_connects_through_caddy_at_the_root_and_under_a_prefix() {
    console_behind(ProxyKind::Caddy).await;
}
