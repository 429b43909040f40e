//! `GET /metrics`: whatever the daemon's metrics encode, behind the bearer token unless the operator made it
//! public (`metrics_public = true`).
//!
//! The gateway knows nothing of what is counted: the daemon gives it a
//! [`MetricsEndpoint`](crate::metrics_endpoint::MetricsEndpoint), whose observer each connection's protocol session
//! reports to and whose renderer produces the scrape.

use actix_web::{HttpRequest, HttpResponse, web};
use tracing::info;
use troupe_protocol::server::ServerProtocol;

use crate::auth::{self, Credential};
use crate::gateway_state::GatewayState;
use crate::responses::{plain_text, unauthorized};

pub(crate) async fn metrics<S: ServerProtocol>(
    request: HttpRequest,
    state: web::Data<GatewayState<S>>,
) -> HttpResponse {
    let Some(endpoint) = &state.metrics else {
        return plain_text(HttpResponse::NotFound(), "metrics are not enabled");
    };
    if !endpoint.public {
        // A scraper sends `Authorization: Bearer`; the subprotocol form exists for browsers' WebSockets only.
        match auth::authenticate(request.headers(), &state.token) {
            Ok(Credential::AuthorizationHeader) => {}
            Ok(Credential::Subprotocol | Credential::ConsoleCookie) | Err(_) => {
                info!(
                    "refused a metrics scrape: not authenticated (send Authorization: Bearer, or set metrics_public)"
                );
                return unauthorized("a bearer token is required (Authorization: Bearer <token>)");
            }
        }
    }
    let body = (endpoint.render)().await;
    HttpResponse::Ok().content_type(endpoint.content_type).body(body)
}
