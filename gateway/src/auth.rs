//! Who may upgrade: the bearer token, from a header or from the subprotocol list.
//!
//! CLIs and scripts send `Authorization: Bearer <token>`. Browsers cannot set headers on a WebSocket, so they
//! offer the subprotocol `troupe.bearer.<token>` instead (with `troupe` next to it, which the server then selects;
//! it never echoes the entry that carries the token, and selects nothing the client did not offer). A request must use exactly one of the two ways, so that a proxy that
//! injects one credential can never be confused with a client that brought another.
//!
//! Nothing here logs or returns a header value: rejections name the reason, never the token.

use actix_web::http::header::{self, HeaderMap};

use crate::token::Token;

/// The subprotocol the server selects when a browser authenticated through the subprotocol list.
pub(crate) const SUBPROTOCOL: &str = "troupe";

/// The prefix of the subprotocol entry that carries the token.
const BEARER_SUBPROTOCOL_PREFIX: &str = "troupe.bearer.";

/// How an accepted request proved itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Credential {
    /// `Authorization: Bearer`.
    AuthorizationHeader,
    /// `troupe.bearer.<token>` in `Sec-WebSocket-Protocol`; the response must select [`SUBPROTOCOL`].
    Subprotocol,
    /// The web console's session cookie, from a page of the daemon's own origin (`console/`).
    ConsoleCookie,
}

/// Why a request was refused. Each reason is safe to log and to send back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AuthRejection {
    #[error("a bearer token is required")]
    Missing,
    #[error("the Authorization header is not `Bearer <token>`")]
    NotBearer,
    #[error("the token is wrong")]
    Wrong,
    #[error("send the token one way only: the Authorization header or one troupe.bearer subprotocol")]
    Ambiguous,
}

/// Checks the request's credential against `token`.
pub(crate) fn authenticate(headers: &HeaderMap, token: &Token) -> Result<Credential, AuthRejection> {
    let authorization = headers.get(header::AUTHORIZATION);
    let mut offered =
        offered_subprotocols(headers).filter_map(|protocol| protocol.strip_prefix(BEARER_SUBPROTOCOL_PREFIX));
    let from_subprotocol = offered.next();
    if offered.next().is_some() {
        return Err(AuthRejection::Ambiguous);
    }
    match (authorization, from_subprotocol) {
        (Some(_), Some(_)) => Err(AuthRejection::Ambiguous),
        (None, None) => Err(AuthRejection::Missing),
        (Some(value), None) => {
            let presented = value.to_str().ok().and_then(bearer_token).ok_or(AuthRejection::NotBearer)?;
            if token.matches(presented) { Ok(Credential::AuthorizationHeader) } else { Err(AuthRejection::Wrong) }
        }
        (None, Some(presented)) => {
            if token.matches(presented) {
                Ok(Credential::Subprotocol)
            } else {
                Err(AuthRejection::Wrong)
            }
        }
    }
}

/// Whether the response selects [`SUBPROTOCOL`]: exactly when the client offered `troupe`. RFC 6455 lets a server
/// select only a subprotocol the client offered, and strict clients (browsers, Python's `websockets`) abort
/// otherwise; so a client that offered only `troupe.bearer.<token>` gets none selected (the token entry is never
/// echoed), and one that offered `troupe` next to it gets `troupe`.
pub(crate) fn selects_subprotocol(headers: &HeaderMap) -> bool {
    offered_subprotocols(headers).any(|protocol| protocol == SUBPROTOCOL)
}

/// The prefix of the subprotocol entry that carries the web console's page key (`console/book.rs`).
const CONSOLE_KEY_SUBPROTOCOL_PREFIX: &str = "troupe.console.";

/// The console page key the client offered as `troupe.console.<key>`, when it offered exactly one.
pub(crate) fn console_key(headers: &HeaderMap) -> Option<&str> {
    let mut keys =
        offered_subprotocols(headers).filter_map(|protocol| protocol.strip_prefix(CONSOLE_KEY_SUBPROTOCOL_PREFIX));
    let key = keys.next()?;
    keys.next().is_none().then_some(key)
}

/// The token of an `Authorization` value whose scheme is `Bearer` (case-insensitive, as RFC 7235 says).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, rest) = value.trim().split_once(' ')?;
    let presented = rest.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !presented.is_empty()).then_some(presented)
}

/// Every subprotocol the client offered, across repeated headers and comma-separated lists.
fn offered_subprotocols(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .filter_map(|value| value.to_str().ok())
        .flat_map(|list| list.split(','))
        .map(str::trim)
        .filter(|protocol| !protocol.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::headers;

    #[test]
    fn accepts_the_header_and_the_subprotocol() {
        let token = Token::new("abc");
        assert_eq!(
            authenticate(&headers(&[("authorization", "Bearer abc")]), &token),
            Ok(Credential::AuthorizationHeader)
        );
        assert_eq!(
            authenticate(&headers(&[("authorization", "bearer   abc ")]), &token),
            Ok(Credential::AuthorizationHeader)
        );
        assert_eq!(
            authenticate(&headers(&[("sec-websocket-protocol", "troupe, troupe.bearer.abc")]), &token),
            Ok(Credential::Subprotocol)
        );
    }

    #[test]
    fn refuses_missing_wrong_and_ambiguous_credentials() {
        let token = Token::new("abc");
        assert_eq!(authenticate(&headers(&[]), &token), Err(AuthRejection::Missing));
        assert_eq!(
            authenticate(&headers(&[("sec-websocket-protocol", "troupe")]), &token),
            Err(AuthRejection::Missing)
        );
        assert_eq!(authenticate(&headers(&[("authorization", "Bearer abd")]), &token), Err(AuthRejection::Wrong));
        assert_eq!(authenticate(&headers(&[("authorization", "Basic abc")]), &token), Err(AuthRejection::NotBearer));
        assert_eq!(
            authenticate(&headers(&[("sec-websocket-protocol", "troupe.bearer.abd")]), &token),
            Err(AuthRejection::Wrong)
        );
        assert_eq!(
            authenticate(
                &headers(&[("authorization", "Bearer abc"), ("sec-websocket-protocol", "troupe.bearer.abc")]),
                &token
            ),
            Err(AuthRejection::Ambiguous)
        );
        assert_eq!(
            authenticate(
                &headers(&[
                    ("sec-websocket-protocol", "troupe.bearer.abc"),
                    ("sec-websocket-protocol", "troupe.bearer.xyz")
                ]),
                &token
            ),
            Err(AuthRejection::Ambiguous)
        );
    }
}
