//! The few pages the daemon writes itself, before anyone is signed in: signed out, sign in, a refused code, and a
//! sign-in a cluster could not record.
//! They need no script; their one stylesheet is `console/plain.css`. Every link is relative, so they work under a
//! proxy's path prefix too.

use actix_web::http::StatusCode;
use actix_web::http::header::{self, ContentType};
use actix_web::{HttpResponse, HttpResponseBuilder};

pub(crate) const PLAIN_CSS: &str = "\
:root{color-scheme:light dark;--fg:#1b1f24;--bg:#f6f7f9;--card:#fff;--accent:#0b57d0;--muted:#57606a}\
@media (prefers-color-scheme:dark){:root{--fg:#e6edf3;--bg:#0d1117;--card:#161b22;--accent:#6ea8fe;--muted:#9da7b3}}\
body{margin:0;font:16px/1.5 system-ui,sans-serif;color:var(--fg);background:var(--bg);display:grid;place-items:center;min-height:100vh}\
main{background:var(--card);padding:2rem;border-radius:12px;max-width:32rem;margin:1rem;box-shadow:0 1px 4px #0003}\
h1{font-size:1.4rem;margin-top:0}code{font:0.95em ui-monospace,monospace;background:#8882;padding:0 .3em;border-radius:4px}\
p.muted{color:var(--muted)}\
button{font:inherit;padding:.6rem 1.2rem;border-radius:8px;border:0;background:var(--accent);color:#fff;cursor:pointer}\
button:focus-visible{outline:3px solid var(--fg);outline-offset:2px}";

/// Shown at `/` to a browser that is not signed in.
pub(crate) fn signed_out() -> HttpResponse {
    page(
        StatusCode::OK,
        "troupe: signed out",
        "<h1>troupe console</h1>\
         <p data-testid=\"signed-out\">You are not signed in.</p>\
         <p>On the machine the daemon runs on, run <code>troupe open</code>. It prints a one-time sign-in link; open \
         it in this browser.</p>\
         <p class=\"muted\">A link works once and for five minutes. Signing in keeps this browser signed in until \
         you sign out or the session expires.</p>",
    )
}

/// `GET /login?code=…`: a button that posts the code. Following the link signs nothing in, so a link preview
/// that fetches it cannot use the code up or take the session.
pub(crate) fn sign_in(code: &str, host: &str) -> HttpResponse {
    page(
        StatusCode::OK,
        "troupe: sign in",
        &format!(
            "<h1>Sign in to troupe</h1>\
             <p>This signs this browser in to the troupe daemon at <code>{host}</code>.</p>\
             <form method=\"post\" action=\"login\">\
             <input type=\"hidden\" name=\"code\" value=\"{code}\">\
             <button type=\"submit\" data-testid=\"sign-in\" autofocus>Sign in</button>\
             </form>\
             <p class=\"muted\">Only continue if you asked for this link with <code>troupe open</code>.</p>",
            host = escape(host),
            code = escape(code),
        ),
    )
}

/// A code that is unknown, used or expired; or a sign-in link without a code.
pub(crate) fn code_refused() -> HttpResponse {
    page(
        StatusCode::UNAUTHORIZED,
        "troupe: sign-in link not valid",
        "<h1>This sign-in link cannot be used</h1>\
         <p data-testid=\"code-refused\">It was already used, has expired, or is not a troupe sign-in link.</p>\
         <p>Run <code>troupe open</code> on the daemon's machine for a new one.</p>",
    )
}

/// A sign-in a cluster node could not record, because NATS cannot be reached: nobody was signed in.
pub(crate) fn cluster_unreachable() -> HttpResponse {
    page(
        StatusCode::SERVICE_UNAVAILABLE,
        "troupe: sign-in not recorded",
        "<h1>The sign-in could not be recorded</h1>\
         <p data-testid=\"cluster-unreachable\">This troupe node cannot reach its cluster right now, so it cannot \
         record a sign-in that every node would accept. Nobody was signed in.</p>\
         <p>Try again in a moment; if the link was used up meanwhile, run <code>troupe open</code> for a new one.</p>",
    )
}

/// A form posted from another site, or by something that does not say where from.
pub(crate) fn foreign_origin() -> HttpResponse {
    page(
        StatusCode::FORBIDDEN,
        "troupe: refused",
        "<h1>Refused</h1><p>This form was not sent from this console's own sign-in page (it came from another site, \
         or did not say where from). Open the sign-in link in a browser and press its button.</p>",
    )
}

fn page(status: StatusCode, title: &str, body: &str) -> HttpResponse {
    let mut builder = HttpResponseBuilder::new(status);
    builder.insert_header((header::CACHE_CONTROL, "no-store"));
    builder.content_type(ContentType::html()).body(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title}</title><link rel=\"icon\" href=\"data:,\"><link rel=\"stylesheet\" href=\"console/plain.css\"></head>\
         <body><main>{body}</main></body></html>",
        title = escape(title),
    ))
}

/// Escapes text for HTML content and double-quoted attributes.
fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            other => escaped.push(other),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    #[test]
    fn escapes_markup() {
        assert_eq!(super::escape("<a href=\"x\">'&'</a>"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
    }
}
