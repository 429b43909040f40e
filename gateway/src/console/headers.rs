//! The headers every response of the daemon carries (the console's pages, its files, and every other route).
//!
//! The Content-Security-Policy allows only the daemon's own scripts, styles and WebSocket: no inline script or
//! style, no eval, no framing, no form posting elsewhere. `Referrer-Policy: same-origin` keeps a sign-in URL's code
//! out of any request to another site (not `no-referrer`: with it Chromium sends `Origin: null` on the pages' form
//! posts, and the daemon could no longer tell its own forms from a foreign site's); `nosniff` keeps a file from
//! being run as something it was not served as.

use actix_web::http::header::{self, HeaderName};
use actix_web::middleware::DefaultHeaders;

pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; font-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

/// The security headers, added to every response that does not set its own.
pub(crate) fn security_headers() -> DefaultHeaders {
    DefaultHeaders::new()
        .add((header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY))
        .add((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .add((header::REFERRER_POLICY, "same-origin"))
        .add((header::X_FRAME_OPTIONS, "DENY"))
        .add((HeaderName::from_static("cross-origin-opener-policy"), "same-origin"))
}
