//! `GET /metrics`: whatever the daemon's metrics encode, behind the bearer token unless the operator made it
//! public (`metrics_public = true`).
//!
//! The gateway knows nothing of what is counted: the daemon gives it a [`MetricsEndpoint`], whose observer each
//! connection's protocol session reports to and whose renderer produces the scrape.

use std::sync::Arc;

use actix_web::{HttpRequest, HttpResponse, web};
use futures::future::LocalBoxFuture;
use tracing::info;
use troupe_protocol::server::{ServerProtocol, SharedObserver};

use crate::auth::{self, Credential};
use crate::http_routes::{GatewayState, plain_text, unauthorized};

/// Produces the body of one scrape (refreshing whatever it reads from its owners first).
pub type MetricsRender = Arc<dyn Fn() -> LocalBoxFuture<'static, String> + Send + Sync>;

/// What `GET /metrics` serves and where connections report. Without one the route answers 404.
#[derive(Clone)]
pub struct MetricsEndpoint {
    /// Told about every connection's handshakes, requests, drops and gaps.
    pub observer: SharedObserver,
    pub render: MetricsRender,
    /// The content type of what `render` produces.
    pub content_type: &'static str,
    /// Serve without the bearer token (`metrics_public = true`: a scraper on a trusted network).
    pub public: bool,
}

impl std::fmt::Debug for MetricsEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsEndpoint").field("public", &self.public).finish_non_exhaustive()
    }
}

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
