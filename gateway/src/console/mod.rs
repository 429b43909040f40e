//! The web console: its page and files (`assets.rs`), its sign-in routes (over `console_book.rs`, which keeps who is
//! signed in) and the pages before it (`pages.rs`).
//!
//! Routes, all relative to where the daemon is reached (a proxy may add a path prefix):
//! - `GET /`: the console for a signed-in browser, else the signed-out page;
//! - `GET /assets/{file}`: the console's hashed files;
//! - `GET /login?code=`: a sign-in button; `POST /login`: uses the code up and sets the session cookie;
//! - `POST /logout`: signs the browser out;
//! - `GET /console/session`: 200 with the session's end, or 401, so the page can tell "signed out" from "offline";
//! - `GET /console/plain.css`: the sign-in pages' stylesheet.
//!
//! The cookie (`troupe_console_<id>`) is `HttpOnly; SameSite=Strict; Path=/`, `Secure` when a trusted proxy says the
//! browser came over HTTPS. The sign-in's redirect also hands the page a key in its fragment (`#console-key=…`,
//! never sent to a server), which the page keeps in `localStorage` and offers at `/ws` as the subprotocol
//! `troupe.console.<key>` and at `console/session` as `X-Troupe-Console-Key`. `/ws` wants the cookie, the key and an
//! `Origin` that is the daemon's own (see `http_routes::upgrade`): every port of a host gets its cookies, but only the
//! console's origin has the key.

mod assets;
mod headers;
pub(crate) use headers::security_headers;
mod pages;

use std::time::SystemTime;

use actix_web::http::header::{self, HeaderMap, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use troupe_protocol::server::ServerProtocol;

use crate::connection_registry::GoingAway;
use crate::console_book::{ConsoleBook, SessionKey};
use crate::gateway_state::GatewayState;
use crate::responses::plain_text;

pub(crate) fn configure<S: ServerProtocol>(config: &mut web::ServiceConfig) {
    config
        .route("/", web::get().to(index::<S>))
        .route("/assets/{file:.+}", web::get().to(asset))
        .route("/login", web::get().to(sign_in_page::<S>))
        .route("/login", web::post().to(sign_in::<S>))
        .route("/logout", web::post().to(sign_out::<S>))
        .route("/console/session", web::get().to(session_state::<S>))
        .route("/console/plain.css", web::get().to(plain_css));
}

/// The header that carries the page key on the page's own requests.
const KEY_HEADER: &str = "x-troupe-console-key";

/// The live console session a request's cookie names, if any, and when it ends; with `key`, only one whose page key
/// it is. Every cookie of that name counts: a page on another port of the host can set a decoy of the same name (with
/// a narrower path, sent first), which must not hide the real one.
/// In a cluster, a cookie this node has not heard of yet is looked up in the cluster (`ConsoleBook::check_anywhere`).
pub(crate) async fn session_of(
    book: &ConsoleBook,
    headers: &HeaderMap,
    key: Option<&str>,
) -> Option<(SessionKey, SystemTime)> {
    for value in cookie_values(headers, book.cookie_name()) {
        if let Some(found) = book.check_anywhere(value, key).await {
            return Some(found);
        }
    }
    None
}

async fn index<S: ServerProtocol>(request: HttpRequest, state: web::Data<GatewayState<S>>) -> HttpResponse {
    let Some(book) = &state.console else {
        return not_found();
    };
    // The page itself is no secret; the cookie only decides between it and the signed-out page.
    if session_of(book, request.headers(), None).await.is_none() {
        return pages::signed_out();
    }
    assets::response("index.html", assets::Caching::Revalidate).unwrap_or_else(|| {
        tracing::error!("the console's index.html is not in this build (run scripts/build-web and rebuild)");
        HttpResponse::InternalServerError().body("the console is missing from this build")
    })
}

async fn asset(path: web::Path<String>) -> HttpResponse {
    let file = path.into_inner();
    if file.split('/').any(|part| part.is_empty() || part == "..") {
        return not_found();
    }
    assets::response(&format!("assets/{file}"), assets::Caching::Immutable).unwrap_or_else(not_found)
}

#[derive(Deserialize)]
struct CodeForm {
    code: Option<String>,
}

async fn sign_in_page<S: ServerProtocol>(
    request: HttpRequest,
    query: web::Query<CodeForm>,
    state: web::Data<GatewayState<S>>,
) -> HttpResponse {
    if state.console.is_none() {
        return not_found();
    }
    match query.into_inner().code.filter(|code| is_code_shaped(code)) {
        Some(code) => pages::sign_in(&code, &shown_host(&request)),
        None => pages::code_refused(),
    }
}

async fn sign_in<S: ServerProtocol>(
    request: HttpRequest,
    form: web::Form<CodeForm>,
    state: web::Data<GatewayState<S>>,
) -> HttpResponse {
    let Some(book) = state.console.clone() else {
        return not_found();
    };
    if !posted_from_here(&request, &state) {
        return pages::foreign_origin();
    }
    let redeemed = match form.into_inner().code.filter(|code| is_code_shaped(code)) {
        Some(code) => book.redeem(&code).await,
        None => Ok(None),
    };
    let session = match redeemed {
        Ok(Some(session)) => session,
        Ok(None) => {
            tracing::info!("refused a console sign-in: the code is unknown, used or expired");
            return pages::code_refused();
        }
        Err(error) => {
            tracing::warn!(%error, "refused a console sign-in: the cluster could not record it");
            return pages::cluster_unreachable();
        }
    };
    // Signing in again replaces the browser's previous session rather than leaving it alive beside the new one.
    if let Some((previous, _)) = session_of(&book, request.headers(), None).await {
        end_session(&book, &state, previous).await;
    }
    persist(book.clone()).await;
    tracing::info!("a browser signed in to the console");
    let cookie = session_cookie(&book, &request, &state, &session.value, session.max_age.as_secs());
    // The fragment is never sent to a server: only the page, on the console's own origin, reads it.
    see_other(&format!("./#console-key={}", session.key), &cookie)
}

async fn sign_out<S: ServerProtocol>(request: HttpRequest, state: web::Data<GatewayState<S>>) -> HttpResponse {
    let Some(book) = state.console.clone() else {
        return not_found();
    };
    if !posted_from_here(&request, &state) {
        return pages::foreign_origin();
    }
    if let Some((session, _)) = session_of(&book, request.headers(), None).await {
        end_session(&book, &state, session).await;
        persist(book.clone()).await;
        tracing::info!("a browser signed out of the console");
    }
    let cookie = session_cookie(&book, &request, &state, "", 0);
    see_other("./", &cookie)
}

/// Ends a session and every WebSocket it opened on this node (the browser's other tabs); in a cluster, the other
/// nodes refuse it and close theirs once they hear of it (`ConsoleBook::shared`).
async fn end_session<S>(book: &ConsoleBook, state: &GatewayState<S>, session: SessionKey) {
    for connection in state.registry.of_console_session(&session) {
        connection.do_send(GoingAway::SignedOut);
    }
    if let Err(error) = book.end(&session).await {
        tracing::warn!(%error, "a console sign-out is not known to the other cluster nodes yet; still trying");
    }
}

async fn session_state<S: ServerProtocol>(request: HttpRequest, state: web::Data<GatewayState<S>>) -> HttpResponse {
    let Some(book) = &state.console else {
        return not_found();
    };
    let key = request.headers().get(KEY_HEADER).and_then(|value| value.to_str().ok());
    let session = match key {
        Some(key) => session_of(book, request.headers(), Some(key)).await,
        None => None,
    };
    let mut builder = match session {
        Some((_, expires)) => {
            let mut builder = HttpResponse::Ok();
            builder.content_type("application/json");
            builder.insert_header((header::CACHE_CONTROL, "no-store"));
            return builder.body(format!("{{\"expires_at\":\"{}\"}}", rfc3339(expires)));
        }
        None => HttpResponse::Unauthorized(),
    };
    builder.insert_header((header::CACHE_CONTROL, "no-store"));
    builder.content_type("application/json").body("{\"error\":\"signed out\"}")
}

async fn plain_css() -> HttpResponse {
    let mut builder = HttpResponse::Ok();
    builder.content_type("text/css; charset=utf-8");
    builder.insert_header((header::CACHE_CONTROL, "no-cache"));
    builder.body(pages::PLAIN_CSS)
}

/// Writes the sessions on a blocking thread. A failure is logged: the browser stays signed in until a restart.
async fn persist(book: std::sync::Arc<ConsoleBook>) {
    match web::block(move || book.persist()).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::warn!(%error, "could not save the console's sessions; they end at the next restart"),
        Err(error) => tracing::warn!(%error, "could not save the console's sessions"),
    }
}

/// Whether a form post proves it came from the daemon's own pages: an `Origin` that is the daemon's own, or, from a
/// browser that sent none, `Sec-Fetch-Site: same-origin`. Browsers send one or the other with every form post, so
/// a post with neither is not the sign-in page's button but a script: one that read a sign-in link where it
/// should not have (a browser's command line in `/proc`) must not trade its code for a session.
fn posted_from_here<S>(request: &HttpRequest, state: &GatewayState<S>) -> bool {
    let headers = request.headers();
    if headers.contains_key(header::ORIGIN) {
        return state.origins.is_own_origin(headers);
    }
    headers.get("sec-fetch-site").is_some_and(|site| site.as_bytes().eq_ignore_ascii_case(b"same-origin"))
}

/// The `Set-Cookie` value of the console's session: `value` for `max_age_secs` (an empty value and 0 clear it).
fn session_cookie<S>(
    book: &ConsoleBook,
    request: &HttpRequest,
    state: &GatewayState<S>,
    value: &str,
    max_age_secs: u64,
) -> String {
    let secure = if over_https(request, state) { "; Secure" } else { "" };
    format!("{}={value}; Max-Age={max_age_secs}; Path=/; HttpOnly; SameSite=Strict{secure}", book.cookie_name())
}

/// Whether the browser reached the daemon over HTTPS, as a trusted proxy says (the daemon itself speaks HTTP).
fn over_https<S>(request: &HttpRequest, state: &GatewayState<S>) -> bool {
    state.trust_proxy
        && request
            .headers()
            .get("x-forwarded-proto")
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split(',').next())
            .is_some_and(|proto| proto.trim().eq_ignore_ascii_case("https"))
}

/// The host the sign-in page names, as the browser asked for it.
fn shown_host(request: &HttpRequest) -> String {
    request.headers().get(header::HOST).and_then(|host| host.to_str().ok()).unwrap_or("this machine").to_owned()
}

/// Codes are base64url; anything else is refused before it is hashed or shown.
fn is_code_shaped(code: &str) -> bool {
    (16..=128).contains(&code.len())
        && code.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
}

/// Every value of the cookie `name`, across every `Cookie` header.
fn cookie_values<'a>(headers: &'a HeaderMap, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    headers
        .get_all(header::COOKIE)
        .filter_map(|value| value.to_str().ok())
        .flat_map(|list| list.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(move |(key, _)| *key == name)
        .map(|(_, value)| value.trim_matches('"'))
}

fn see_other(location: &str, cookie: &str) -> HttpResponse {
    let mut builder = HttpResponse::SeeOther();
    if let Ok(location) = HeaderValue::from_str(location) {
        builder.insert_header((header::LOCATION, location));
    }
    builder.insert_header((header::CACHE_CONTROL, "no-store"));
    if let Ok(value) = HeaderValue::from_str(cookie) {
        builder.insert_header((header::SET_COOKIE, value));
    }
    builder.finish()
}

fn not_found() -> HttpResponse {
    plain_text(HttpResponse::NotFound(), "not found")
}

/// RFC 3339 UTC, seconds precision.
pub fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_seconds(time).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::headers;

    #[test]
    fn finds_the_cookie_among_others() {
        let map = headers(&[("cookie", "a=1; troupe_console_x=decoy; b=2"), ("cookie", "c=3; troupe_console_x=v4lue")]);
        assert_eq!(cookie_values(&map, "troupe_console_x").collect::<Vec<_>>(), ["decoy", "v4lue"]);
        assert_eq!(cookie_values(&map, "c").collect::<Vec<_>>(), ["3"]);
        assert_eq!(cookie_values(&map, "troupe_console").count(), 0);
    }

    #[test]
    fn codes_must_be_base64url() {
        assert!(is_code_shaped("abcdefghijklmnop_-0123"));
        assert!(!is_code_shaped("short"));
        assert!(!is_code_shaped("abcdefghijklmnop<script>"));
    }

    #[test]
    fn formats_rfc3339() {
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let later = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_764_547_200);
        assert_eq!(rfc3339(later), "2025-12-01T00:00:00Z");
    }
}
