//! The console's files, embedded in the binary from `web/dist` at compile time, so a daemon serves its console on a
//! machine without Node.js. `web/dist` is the committed output of `scripts/build-web`; a test fails when it is stale.

use std::borrow::Cow;

use actix_web::HttpResponse;
use actix_web::http::header::{self, ContentType};

#[derive(rust_embed::RustEmbed)]
#[folder = "../web/dist"]
struct Dist;

/// What the browser is told to do with a file it fetched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Caching {
    /// A content-hashed name (`assets/app-<hash>.js`): the bytes under it never change.
    Immutable,
    /// A stable name (`index.html`): ask again every time, so a new build shows at the next load.
    Revalidate,
}

/// The embedded file at `path` (relative to `web/dist`), with its content type and caching headers.
pub(crate) fn response(path: &str, caching: Caching) -> Option<HttpResponse> {
    let file = Dist::get(path)?;
    let mut builder = HttpResponse::Ok();
    builder.insert_header((header::CONTENT_TYPE, content_type(path)));
    builder.insert_header((
        header::CACHE_CONTROL,
        match caching {
            Caching::Immutable => "public, max-age=31536000, immutable",
            Caching::Revalidate => "no-cache",
        },
    ));
    let body: Cow<'static, [u8]> = file.data;
    Some(builder.body(body.into_owned()))
}

fn content_type(path: &str) -> String {
    let extension = path.rsplit_once('.').map(|(_, extension)| extension).unwrap_or("");
    match extension {
        "html" => ContentType::html().to_string(),
        "js" | "mjs" => "text/javascript; charset=utf-8".to_owned(),
        "css" => "text/css; charset=utf-8".to_owned(),
        "json" | "map" => "application/json".to_owned(),
        "svg" => "image/svg+xml".to_owned(),
        "png" => "image/png".to_owned(),
        "ico" => "image/x-icon".to_owned(),
        "woff2" => "font/woff2".to_owned(),
        "txt" => ContentType::plaintext().to_string(),
        _ => "application/octet-stream".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_follow_the_extension() {
        assert_eq!(content_type("assets/app-1.js"), "text/javascript; charset=utf-8");
        assert_eq!(content_type("assets/app-1.css"), "text/css; charset=utf-8");
        assert!(content_type("index.html").starts_with("text/html"));
        assert_eq!(content_type("blob"), "application/octet-stream");
    }

    #[test]
    fn the_build_is_embedded() {
        assert!(Dist::get("index.html").is_some(), "web/dist/index.html is missing: run scripts/build-web");
    }
}
