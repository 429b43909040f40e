//! A refused WebSocket upgrade in words: what the HTTP status means for someone reaching a troupe daemon, directly
//! or through a reverse proxy, and what to change.
//!
//! The daemon itself answers an upgrade on `/ws` with 101, 401 (token), 403 (origin) or 503 (shutting down, with a
//! plain-text reason). Anything else comes from something in between or from a wrong URL: a proxy that cannot
//! reach its upstream (502/504), a TLS port spoken to in plain `ws://` (400), a path nobody serves (404), a
//! redirect (3xx). The `Server` header, when sent, names who answered (nginx, Caddy).

use tokio_tungstenite::tungstenite::http::{Response, StatusCode, header};

/// Where the upgrade went, as the URL gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Target {
    /// `host:port`, without user info.
    pub address: String,
    /// How the upgrade was carried.
    pub scheme: Scheme,
    /// The URL's path, e.g. `/ws`.
    pub path: String,
}

/// The URL's kind, which decides whether "use wss://" can be the fix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Scheme {
    /// `ws://`: plain TCP.
    Ws,
    /// `wss://`: TLS.
    Wss,
    /// `unix:/path`: a socket file, only ever the daemon itself.
    Unix,
}

/// The largest part of a plain-text body quoted in an error: the daemon's reasons are one short line.
const MAX_QUOTED_BODY: usize = 200;

/// What a refused upgrade (any status but 101) means.
pub(super) fn describe_refusal(target: &Target, response: &Response<Option<Vec<u8>>>) -> String {
    let Target { address, scheme, path } = target;
    let status = response.status();
    let server = server_name(response);
    // "the server at localhost:8443 (nginx)": who answered, as far as it says.
    let who = match &server {
        Some(name) => format!("the server at {address} ({name})"),
        None => format!("the server at {address}"),
    };
    let wss_url = format!("wss://{address}{path}");
    match status {
        StatusCode::UNAUTHORIZED => format!(
            "the daemon at {address} refused the connection: unauthorized (check the token; `troupe token` prints it)"
        ),
        StatusCode::FORBIDDEN => format!(
            "the daemon at {address} refused the connection: forbidden origin (the Origin header is not allowed by \
             its `allowed_origins`)"
        ),
        StatusCode::BAD_GATEWAY | StatusCode::GATEWAY_TIMEOUT => format!(
            "{who} answered HTTP {status}: it is a proxy, and it could not reach the daemon behind it; check that \
             the daemon is running there (`troupe serve`) and that the proxy's upstream is the daemon's listen \
             address"
        ),
        StatusCode::SERVICE_UNAVAILABLE => match plain_text_body(response) {
            // The daemon's own 503 carries its reason ("the daemon is shutting down").
            Some(reason) => format!("the daemon at {address} is not taking connections: {reason}; try again shortly"),
            None => format!(
                "{who} answered HTTP {status}: the daemon behind it is not available (stopped, or starting); check \
                 that it is running (`troupe serve`)"
            ),
        },
        StatusCode::NOT_FOUND => format!(
            "{who} has no WebSocket endpoint at {path} (HTTP {status}); the daemon's path is /ws, or behind a \
             proxy the path the proxy forwards to it (such as /agent/ws for a prefix)"
        ),
        StatusCode::BAD_REQUEST if *scheme == Scheme::Ws => format!(
            "{who} refused the WebSocket upgrade with HTTP {status}{}; if that port serves TLS (an HTTPS proxy), \
             use {wss_url}; a proxy in front of the daemon must also pass the upgrade (HTTP/1.1 with the \
             Upgrade and Connection headers)",
            quoted_body(response)
        ),
        StatusCode::BAD_REQUEST => format!(
            "{who} refused the WebSocket upgrade with HTTP {status}{}; a proxy in front of the daemon must pass the \
             upgrade (HTTP/1.1 with the Upgrade and Connection headers)",
            quoted_body(response)
        ),
        status if status.is_redirection() => {
            let location = response
                .headers()
                .get(header::LOCATION)
                .and_then(|value| value.to_str().ok())
                .filter(|location| location.chars().all(|c| c.is_ascii_graphic()));
            match location {
                Some(location) => format!(
                    "{who} redirects to {location} (HTTP {status}); a WebSocket client does not follow redirects: \
                     use that address (wss:// for https://, ws:// for http://)"
                ),
                None => format!("{who} answered the WebSocket upgrade with a redirect (HTTP {status})"),
            }
        }
        status => format!("{who} refused the WebSocket upgrade with HTTP {status}{}", quoted_body(response)),
    }
}

/// An answer in HTTP/1.0, which a WebSocket upgrade cannot get from a daemon or a proxy passing it on. Go's HTTPS
/// servers (Caddy) answer plain HTTP on their TLS port that way (`400`, "Client sent an HTTP request to an HTTPS
/// server"), so for `ws://` the likely fix is `wss://`.
pub(super) fn describe_http_1_0(target: &Target) -> String {
    let Target { address, scheme, path } = target;
    let head = format!("the server at {address} answered in HTTP/1.0, not with a WebSocket upgrade");
    match scheme {
        Scheme::Ws => format!("{head}; if that port serves TLS (an HTTPS proxy), use wss://{address}{path}"),
        Scheme::Wss | Scheme::Unix => {
            format!("{head}; it is not a troupe daemon, nor a proxy that passes the upgrade on to one")
        }
    }
}

/// The product in the `Server` header (`nginx/1.22.1` → `nginx`), when it is plain text.
fn server_name<B>(response: &Response<B>) -> Option<String> {
    let value = response.headers().get(header::SERVER)?.to_str().ok()?;
    let product = value.split(['/', ' ']).next()?.trim();
    let printable = !product.is_empty() && product.len() <= 40 && product.chars().all(|c| c.is_ascii_graphic());
    printable.then(|| product.to_owned())
}

/// A short `text/plain` body, trimmed, when it is one printable line (HTML error pages are not quoted).
fn plain_text_body(response: &Response<Option<Vec<u8>>>) -> Option<String> {
    let content_type = response.headers().get(header::CONTENT_TYPE)?.to_str().ok()?;
    if !content_type.starts_with("text/plain") {
        return None;
    }
    let body = std::str::from_utf8(response.body().as_deref()?).ok()?.trim();
    // Whatever answered is untrusted and the words reach a terminal: no controls, no bidi overrides.
    let printable = !body.is_empty()
        && body.len() <= MAX_QUOTED_BODY
        && body.chars().all(|c| !c.is_control() && !crate::diagnostic::is_format_control(c));
    printable.then(|| body.to_owned())
}

/// `: <body>` for a short plain-text body, else nothing.
fn quoted_body(response: &Response<Option<Vec<u8>>>) -> String {
    plain_text_body(response).map(|body| format!(" ({body})")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(tls: bool, path: &str) -> Target {
        let scheme = if tls { Scheme::Wss } else { Scheme::Ws };
        Target { address: "localhost:18444".into(), scheme, path: path.into() }
    }

    fn response(status: u16, headers: &[(&str, &str)], body: &str) -> Response<Option<Vec<u8>>> {
        let mut builder = Response::builder().status(status);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(Some(body.as_bytes().to_vec())).unwrap()
    }

    #[test]
    fn a_bad_gateway_names_the_proxy_and_the_daemon_behind_it() {
        let said = describe_refusal(&target(true, "/ws"), &response(502, &[("server", "nginx/1.22.1")], "<html>"));
        assert!(said.starts_with("the server at localhost:18444 (nginx) answered HTTP 502 Bad Gateway"), "{said}");
        assert!(said.contains("could not reach the daemon behind it") && said.contains("upstream"), "{said}");
        assert!(!said.contains("<html>"), "{said}");
        let said = describe_refusal(&target(true, "/ws"), &response(504, &[], ""));
        assert!(said.contains("504 Gateway Timeout: it is a proxy"), "{said}");
    }

    #[test]
    fn plain_ws_to_a_tls_port_suggests_wss_and_a_wrong_path_names_the_right_one() {
        let body = "The plain HTTP request was sent to HTTPS port";
        let said = describe_refusal(
            &target(false, "/agent/ws"),
            &response(400, &[("server", "nginx"), ("content-type", "text/html")], body),
        );
        assert!(said.contains("HTTP 400 Bad Request; if that port serves TLS"), "{said}");
        assert!(said.contains("use wss://localhost:18444/agent/ws"), "{said}");
        let said = describe_refusal(&target(true, "/ws"), &response(400, &[], ""));
        assert!(!said.contains("wss://") && said.contains("Upgrade and Connection"), "{said}");
        let socket = Target { address: "unix:/run/troupe.sock".into(), scheme: Scheme::Unix, path: "/ws".into() };
        let said = describe_refusal(&socket, &response(400, &[], ""));
        assert!(!said.contains("wss://"), "a socket file has no TLS port: {said}");
        let said = describe_refusal(&target(true, "/wrong"), &response(404, &[("server", "Caddy")], ""));
        assert!(
            said.starts_with("the server at localhost:18444 (Caddy) has no WebSocket endpoint at /wrong"),
            "{said}"
        );
        assert!(said.contains("/ws") && said.contains("/agent/ws"), "{said}");
    }

    #[test]
    fn an_http_1_0_answer_to_plain_ws_suggests_wss() {
        let said = describe_http_1_0(&target(false, "/agent/ws"));
        assert!(said.contains("HTTP/1.0") && said.contains("use wss://localhost:18444/agent/ws"), "{said}");
        let said = describe_http_1_0(&target(true, "/ws"));
        assert!(!said.contains("wss://"), "{said}");
    }

    #[test]
    fn the_daemons_own_refusals_keep_their_words() {
        let said = describe_refusal(&target(false, "/ws"), &response(401, &[], "unauthorized"));
        assert!(said.contains("unauthorized (check the token"), "{said}");
        let said = describe_refusal(&target(false, "/ws"), &response(403, &[], ""));
        assert!(said.contains("forbidden origin"), "{said}");
        let stopping = response(503, &[("content-type", "text/plain; charset=utf-8")], "the daemon is shutting down");
        let said = describe_refusal(&target(false, "/ws"), &stopping);
        assert!(said.contains("not taking connections: the daemon is shutting down"), "{said}");
        let said = describe_refusal(&target(false, "/ws"), &response(503, &[("content-type", "text/html")], "<p>"));
        assert!(said.contains("the daemon behind it is not available"), "{said}");
    }

    #[test]
    fn redirects_and_other_statuses_say_what_answered() {
        let moved = response(301, &[("location", "https://troupe.example.com/ws")], "");
        let said = describe_refusal(&target(false, "/ws"), &moved);
        assert!(said.contains("redirects to https://troupe.example.com/ws (HTTP 301 Moved Permanently)"), "{said}");
        let teapot = response(418, &[("server", "evil\u{e9}"), ("content-type", "text/plain")], "short\u{1b}[2J");
        let said = describe_refusal(&target(false, "/ws"), &teapot);
        assert_eq!(said, "the server at localhost:18444 refused the WebSocket upgrade with HTTP 418 I'm a teapot");
        let reversed = response(418, &[("content-type", "text/plain")], "fine \u{202e}txt.exe");
        let said = describe_refusal(&target(false, "/ws"), &reversed);
        assert_eq!(said, "the server at localhost:18444 refused the WebSocket upgrade with HTTP 418 I'm a teapot");
    }
}
