//! The `Origin` policy of the `/ws` upgrade.
//!
//! Browsers let any page open a WebSocket to any address and only tell the server who is asking through
//! `Origin`. The bearer token is the real protection, but a page that obtained it (a pasted link, a leaked
//! console) must still not be able to drive the daemon from a foreign site, so an upgrade that carries an
//! `Origin` must come from the daemon's own origin or from one the operator listed. Requests without `Origin`
//! (CLIs, scripts, server-side clients) are not browsers and pass.
//!
//! The daemon's own origin is read from the request, never from the listen address, so a unix socket listener
//! (which has no host or port) works the same: behind a same-host proxy, the `Host` the proxy passes (nginx's
//! `proxy_set_header Host $host`) or, with `trust_proxy`, `X-Forwarded-Host`/`-Proto` name the public origin.

use actix_web::http::header::{self, HeaderMap};

use crate::error::GatewayError;

/// Which origins may open a WebSocket.
#[derive(Clone, Debug)]
pub(crate) struct OriginPolicy {
    /// Normalized `scheme://host[:port]` values from the configuration.
    allowed: Vec<String>,
    /// Whether `X-Forwarded-Host`/`X-Forwarded-Proto` describe the daemon's public origin. Only a deployment
    /// behind a proxy that overwrites them may turn this on: otherwise a client could claim any origin.
    trust_proxy: bool,
}

impl OriginPolicy {
    pub(crate) fn new(allowed: &[String], trust_proxy: bool) -> Result<Self, GatewayError> {
        let allowed = allowed
            .iter()
            .map(|origin| normalize_origin(origin).ok_or_else(|| GatewayError::InvalidAllowedOrigin(origin.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(OriginPolicy { allowed, trust_proxy })
    }

    /// Whether a request with these headers may upgrade.
    pub(crate) fn allows(&self, headers: &HeaderMap) -> bool {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return true;
        };
        let Some(origin) = origin.to_str().ok().and_then(normalize_origin) else {
            // `null` (sandboxed frames, file pages) and malformed values name no site we could trust.
            return false;
        };
        if self.allowed.contains(&origin) {
            return true;
        }
        self.own_origins(headers).any(|own| own == origin)
    }

    /// Whether the request carries an `Origin` that is the daemon's own (not merely an allowed one): the test for
    /// credentials a browser attaches by itself, the console's cookie, which every port of a host shares.
    pub(crate) fn is_own_origin(&self, headers: &HeaderMap) -> bool {
        let Some(origin) =
            headers.get(header::ORIGIN).and_then(|origin| origin.to_str().ok()).and_then(normalize_origin)
        else {
            return false;
        };
        self.own_origins(headers).any(|own| own == origin)
    }

    /// The daemon's own origin as the client reached it. Without a trusted `X-Forwarded-Proto` both schemes count,
    /// because a TLS-terminating proxy may sit in front of a daemon that itself speaks plain HTTP. With `trust_proxy`
    /// and `X-Forwarded-Proto`, the proxy has said which scheme the public origin has, and only that one counts:
    /// behind nginx's `Host $http_host` + `X-Forwarded-Proto https`, `http://<host>` is another origin (a page
    /// served over plain HTTP on that name), not the daemon's.
    fn own_origins<'a>(&self, headers: &'a HeaderMap) -> impl Iterator<Item = String> + 'a {
        let host = header_text(headers, header::HOST);
        let forwarded_proto = self
            .trust_proxy
            .then(|| header_text(headers, header::HeaderName::from_static("x-forwarded-proto")))
            .flatten();
        let schemes: Vec<&str> = match forwarded_proto {
            Some(proto) => vec![proto],
            None => vec!["http", "https"],
        };
        let forwarded_host = self
            .trust_proxy
            .then(|| header_text(headers, header::HeaderName::from_static("x-forwarded-host")))
            .flatten();
        let hosts = [host, forwarded_host].into_iter().flatten();
        let candidates: Vec<String> =
            hosts.flat_map(|host| schemes.iter().map(move |scheme| format!("{scheme}://{host}"))).collect();
        candidates.into_iter().filter_map(|candidate| normalize_origin(&candidate))
    }
}

/// The first value of a header, trimmed. Proxies chain `X-Forwarded-*` values with commas, nearest last; the
/// first one is what the client originally sent to the outermost proxy.
fn header_text(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    let value = headers.get(name)?.to_str().ok()?;
    let first = value.split(',').next()?.trim();
    (!first.is_empty()).then_some(first)
}

/// Normalizes an origin to `scheme://host[:port]`: scheme and host lowercased, the scheme's default port
/// dropped, one trailing slash tolerated. `None` when the value is not an origin (paths, credentials, `null`).
pub fn normalize_origin(raw: &str) -> Option<String> {
    let raw = raw.trim();
    let raw = raw.strip_suffix('/').unwrap_or(raw);
    let (scheme, authority) = raw.split_once("://")?;
    let scheme_is_valid = scheme.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !scheme_is_valid
        || authority.is_empty()
        || authority.chars().any(|c| matches!(c, '/' | '?' | '#' | '@') || c.is_whitespace())
    {
        return None;
    }
    let scheme = scheme.to_ascii_lowercase();
    let authority = authority.to_ascii_lowercase();
    let (host, port) = split_host_port(&authority)?;
    let default_port = match scheme.as_str() {
        "http" | "ws" => Some(80),
        "https" | "wss" => Some(443),
        _ => None,
    };
    match port {
        Some(port) if Some(port) != default_port => Some(format!("{scheme}://{host}:{port}")),
        _ => Some(format!("{scheme}://{host}")),
    }
}

/// Splits `host[:port]`, where host may be a bracketed IPv6 literal.
fn split_host_port(authority: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = if authority.starts_with('[') {
        let end = authority.find(']')?;
        let (host, rest) = authority.split_at(end + 1);
        match rest {
            "" => (host, None),
            rest => (host, Some(rest.strip_prefix(':')?)),
        }
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() || (!host.starts_with('[') && host.contains(':')) {
        return None;
    }
    let port = match port {
        None => None,
        Some(port) if !port.is_empty() && port.chars().all(|c| c.is_ascii_digit()) => Some(port.parse::<u16>().ok()?),
        Some(_) => return None,
    };
    Some((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::headers;
    use actix_web::http::header::HeaderValue;

    #[test]
    fn normalizes_case_default_ports_and_trailing_slash() {
        assert_eq!(normalize_origin("HTTP://LocalHost:80/").as_deref(), Some("http://localhost"));
        assert_eq!(normalize_origin("https://example.com:443").as_deref(), Some("https://example.com"));
        assert_eq!(normalize_origin("https://example.com:8443").as_deref(), Some("https://example.com:8443"));
        assert_eq!(normalize_origin("http://[::1]:7419").as_deref(), Some("http://[::1]:7419"));
        assert_eq!(normalize_origin("http://[::1]:80").as_deref(), Some("http://[::1]"));
    }

    #[test]
    fn rejects_values_that_are_not_origins() {
        for raw in [
            "null",
            "example.com",
            "http://",
            "http://example.com/path",
            "http://user@example.com",
            "http://example.com:99999",
            "http://example.com:",
            "http://::1",
            "1http://example.com",
        ] {
            assert_eq!(normalize_origin(raw), None, "{raw}");
        }
    }

    #[test]
    fn requests_without_origin_pass() {
        let policy = OriginPolicy::new(&[], false).unwrap();
        assert!(policy.allows(&headers(&[("host", "127.0.0.1:7419")])));
    }

    #[test]
    fn own_origin_through_host_passes_with_either_scheme() {
        let policy = OriginPolicy::new(&[], false).unwrap();
        for origin in ["http://127.0.0.1:7419", "https://127.0.0.1:7419"] {
            let mut map = headers(&[("host", "127.0.0.1:7419")]);
            map.insert(header::ORIGIN, HeaderValue::from_static(origin));
            assert!(policy.allows(&map), "{origin}");
        }
        let map = headers(&[("host", "127.0.0.1:7419"), ("origin", "http://127.0.0.1:7420")]);
        assert!(!policy.allows(&map));
    }

    #[test]
    fn listed_origins_pass_and_others_do_not() {
        let policy = OriginPolicy::new(&["https://Console.Example.com:443/".to_owned()], false).unwrap();
        let map = headers(&[("host", "127.0.0.1:7419"), ("origin", "https://console.example.com")]);
        assert!(policy.allows(&map));
        let map = headers(&[("host", "127.0.0.1:7419"), ("origin", "https://evil.example.com")]);
        assert!(!policy.allows(&map));
        let map = headers(&[("host", "127.0.0.1:7419"), ("origin", "null")]);
        assert!(!policy.allows(&map));
    }

    #[test]
    fn forwarded_headers_count_only_when_trusted() {
        let pairs = [
            ("host", "127.0.0.1:7419"),
            ("x-forwarded-host", "troupe.example.com, 10.0.0.2"),
            ("x-forwarded-proto", "https"),
            ("origin", "https://troupe.example.com"),
        ];
        assert!(!OriginPolicy::new(&[], false).unwrap().allows(&headers(&pairs)));
        assert!(OriginPolicy::new(&[], true).unwrap().allows(&headers(&pairs)));
    }

    #[test]
    fn a_trusted_forwarded_proto_fixes_the_scheme_of_the_own_origin() {
        // nginx with `proxy_set_header Host $http_host` and `X-Forwarded-Proto $scheme` in front of a plain daemon.
        let public = [("host", "troupe.example.com"), ("x-forwarded-proto", "https")];
        let with_origin = |origin: &'static str| {
            let mut map = headers(&public);
            map.insert(header::ORIGIN, HeaderValue::from_static(origin));
            map
        };
        let trusting = OriginPolicy::new(&[], true).unwrap();
        assert!(trusting.allows(&with_origin("https://troupe.example.com")));
        assert!(!trusting.allows(&with_origin("http://troupe.example.com")), "the public origin is https");
        assert!(!trusting.allows(&with_origin("https://troupe.example.com:8443")));
        // Also when the forwarded host differs from Host: neither name counts with the other scheme.
        let mut map = headers(&[
            ("host", "127.0.0.1:7419"),
            ("x-forwarded-host", "troupe.example.com"),
            ("x-forwarded-proto", "https"),
            ("origin", "http://127.0.0.1:7419"),
        ]);
        assert!(!trusting.allows(&map));
        map.insert(header::ORIGIN, HeaderValue::from_static("http://troupe.example.com"));
        assert!(!trusting.allows(&map));
        // Not trusted, the header is a client's claim and changes nothing: both schemes of Host count.
        let untrusting = OriginPolicy::new(&[], false).unwrap();
        assert!(untrusting.allows(&with_origin("http://troupe.example.com")));
        assert!(untrusting.allows(&with_origin("https://troupe.example.com")));
        // Trusted but absent: both schemes, as without a proxy.
        let map = headers(&[("host", "troupe.example.com"), ("origin", "http://troupe.example.com")]);
        assert!(trusting.allows(&map));
        // A listed origin passes whatever the proxy says.
        let listed = OriginPolicy::new(&["http://troupe.example.com".to_owned()], true).unwrap();
        assert!(listed.allows(&with_origin("http://troupe.example.com")));
    }

    #[test]
    fn a_unix_socket_behind_a_same_host_proxy_is_judged_by_the_forwarded_host() {
        // The proxy passes the public Host: the browser's origin is the daemon's own.
        let pairs = [("host", "troupe.example.com"), ("origin", "https://troupe.example.com")];
        assert!(OriginPolicy::new(&[], false).unwrap().allows(&headers(&pairs)));
        // The proxy's default Host for a unix upstream names no public site; only trusted forwarded headers do.
        let pairs = [
            ("host", "localhost"),
            ("x-forwarded-host", "troupe.example.com"),
            ("x-forwarded-proto", "https"),
            ("origin", "https://troupe.example.com"),
        ];
        assert!(!OriginPolicy::new(&[], false).unwrap().allows(&headers(&pairs)));
        assert!(OriginPolicy::new(&[], true).unwrap().allows(&headers(&pairs)));
        let foreign =
            [("host", "localhost"), ("x-forwarded-host", "troupe.example.com"), ("origin", "https://evil.test")];
        assert!(!OriginPolicy::new(&[], true).unwrap().allows(&headers(&foreign)));
    }

    #[test]
    fn invalid_configured_origins_are_refused() {
        assert!(OriginPolicy::new(&["example.com".to_owned()], false).is_err());
    }
}
