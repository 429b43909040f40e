//! The plain responses every route answers with (its own errors, 401s), so that routes need not import each other
//! for them.

use actix_web::HttpResponse;
use actix_web::http::header::{self, ContentType};

pub(crate) fn plain_text(mut builder: actix_web::HttpResponseBuilder, body: &str) -> HttpResponse {
    builder.content_type(ContentType::plaintext()).body(body.to_owned())
}

/// 401 with `WWW-Authenticate: Bearer`, for `/ws` and `/metrics` alike.
pub(crate) fn unauthorized(body: &str) -> HttpResponse {
    let mut response = HttpResponse::Unauthorized();
    response.insert_header((header::WWW_AUTHENTICATE, "Bearer"));
    plain_text(response, body)
}
