//! The HTTP routes: `/ws` (the upgrade, with its origin and auth checks), `/healthz`, `/readyz` and `/metrics`
//! (`metrics_route.rs`).
//!
//! Every check of the upgrade happens here, before a single WebSocket frame exists, so a refused client gets a
//! plain HTTP status it can show: 403 for a foreign origin, 401 (with `WWW-Authenticate: Bearer`) for a missing
//! or wrong token, 503 while the daemon is stopping.

use std::pin::Pin;

use actix_web::dev::Payload as RawPayload;
use actix_web::error::PayloadError;
use actix_web::http::header::{self, HeaderValue};
use actix_web::web::Bytes;
use actix_web::{FromRequest, HttpRequest, HttpResponse, web};
use futures::Stream;
use tracing::info;
use troupe_protocol::server::ServerProtocol;

use crate::auth::{self, AuthRejection, Credential, SUBPROTOCOL};
use crate::connection_actor::{ConnectionActor, ConnectionSetup, ConsoleGrant};
use crate::frame_size_guard::FrameSizeGuard;
use crate::gateway_state::GatewayState;
use crate::responses::{plain_text, unauthorized};

pub(crate) fn configure<S: ServerProtocol>(config: &mut web::ServiceConfig) {
    config
        .route("/ws", web::get().to(upgrade::<S>))
        .route("/healthz", web::get().to(healthz))
        .route("/readyz", web::get().to(readyz::<S>))
        .route("/metrics", web::get().to(crate::metrics_route::metrics::<S>))
        .configure(crate::console::configure::<S>);
}

async fn healthz() -> HttpResponse {
    plain_text(HttpResponse::Ok(), "ok")
}

async fn readyz<S: ServerProtocol>(state: web::Data<GatewayState<S>>) -> HttpResponse {
    if (state.readiness)() {
        plain_text(HttpResponse::Ok(), "ready")
    } else {
        plain_text(HttpResponse::ServiceUnavailable(), "not ready")
    }
}

async fn upgrade<S: ServerProtocol>(
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<GatewayState<S>>,
) -> actix_web::Result<HttpResponse> {
    let peer = peer_description(&request, state.trust_proxy);
    if state.registry.is_stopping() {
        return Ok(plain_text(HttpResponse::ServiceUnavailable(), "the daemon is shutting down"));
    }
    if !state.origins.allows(request.headers()) {
        info!(%peer, "refused a WebSocket upgrade: origin not allowed (see allowed_origins in config.toml)");
        return Ok(plain_text(HttpResponse::Forbidden(), "origin not allowed"));
    }
    // A browser page of the console brings no token: its cookie and page key count, only from the daemon's own origin.
    let console = match (state.console.as_ref(), auth::console_key(request.headers())) {
        (Some(book), Some(key)) => crate::console::session_of(book, request.headers(), Some(key))
            .await
            .map(|(session, expires_at)| ConsoleGrant { session, expires_at }),
        _ => None,
    };
    let credential = match auth::authenticate(request.headers(), &state.token) {
        Ok(credential) => credential,
        Err(AuthRejection::Missing) if console.is_some() => {
            if !state.origins.is_own_origin(request.headers()) {
                info!(%peer, "refused a WebSocket upgrade: the console's cookie came from another origin");
                return Ok(plain_text(HttpResponse::Forbidden(), "origin not allowed"));
            }
            Credential::ConsoleCookie
        }
        Err(rejection) => {
            info!(%peer, reason = %rejection, "refused a WebSocket upgrade: not authenticated");
            return Ok(unauthorized(&rejection.to_string()));
        }
    };
    tracing::debug!(%peer, ?credential, "WebSocket upgrade authenticated");

    // The size check must see the raw bytes before actix-ws buffers them, so the payload is wrapped and put
    // back into an extractor-shaped `web::Payload`.
    let guarded: Pin<Box<dyn Stream<Item = Result<Bytes, PayloadError>>>> =
        Box::pin(FrameSizeGuard::new(payload.into_inner(), state.max_frame_bytes));
    let payload = web::Payload::from_request(&request, &mut RawPayload::Stream { payload: guarded }).await?;
    // actix-ws answers the handshake and reads the frames; the socket is written by the gateway's own body.
    let (mut response, _writes_nowhere, inbound) = actix_ws::handle(&request, payload)?;
    if auth::selects_subprotocol(request.headers()) {
        response.headers_mut().insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(SUBPROTOCOL));
    }
    let inbound = inbound
        .max_frame_size(state.max_frame_bytes)
        .aggregate_continuations()
        .max_continuation_size(state.max_frame_bytes);
    let body = ConnectionActor::launch(ConnectionSetup {
        engine: state.engine.clone(),
        limits: state.limits,
        max_frame_bytes: state.max_frame_bytes,
        inbound,
        peer,
        keepalive: state.keepalive,
        registry: state.registry.clone(),
        observer: state.observer.clone(),
        console: if credential == Credential::ConsoleCookie { console } else { None },
    });
    Ok(response.set_body(actix_web::body::BoxBody::new(actix_web::body::BodyStream::new(body))))
}

/// The client's address for logs: the socket peer, or the forwarded client when a trusted proxy says so. A unix
/// socket's peer has no address: `unix`.
fn peer_description(request: &HttpRequest, trust_proxy: bool) -> String {
    if trust_proxy && let Some(forwarded) = request.connection_info().realip_remote_addr() {
        return forwarded.to_owned();
    }
    request.peer_addr().map(|address| address.to_string()).unwrap_or_else(|| "unix".to_owned())
}
