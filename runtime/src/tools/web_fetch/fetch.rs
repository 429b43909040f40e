//! The HTTP side of `web_fetch`: one GET, redirects followed by hand so each is judged, the body read up to a cap.
//!
//! It uses reqwest on rustls, the stack the model providers use (`model/http.rs`), with reqwest's own redirect
//! handling turned off: a redirect is followed only while it stays on the host the call was allowed for (the
//! permission's resource is the host), at most [`MAX_REDIRECTS`] times. A redirect to another host ends the call
//! with the new URL, so the model can ask for it and that host is judged by the permission check like any other.

use std::time::Duration;

use reqwest::Url;
use reqwest::header::{CONTENT_TYPE, LOCATION};

/// The most redirects followed for one call.
pub const MAX_REDIRECTS: usize = 5;

/// How long one call may take, redirects and body included.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// The most bytes of a body read; the rest is left unread.
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// A response, its body read up to the cap.
#[derive(Debug)]
pub struct Fetched {
    /// Where the body came from, after the redirects followed.
    pub url: Url,
    pub status: reqwest::StatusCode,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
    /// The body was longer than [`MAX_BODY_BYTES`] and was cut there.
    pub cut: bool,
}

/// Why a fetch produced no response to show.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{url} redirects to {location}, on another host ({host}); call web_fetch with that URL to fetch it")]
    OtherHost { url: Url, location: Url, host: String },
    #[error("{url} redirects to {location}, which is not an http or https URL")]
    NotHttp { url: Url, location: String },
    #[error("{url} answered a redirect ({status}) without a usable Location header")]
    BadRedirect { url: Url, status: reqwest::StatusCode },
    #[error("more than {} redirects, the last to {url}", MAX_REDIRECTS)]
    TooManyRedirects { url: Url },
    #[error("fetching {url} failed: {reason}")]
    Transport { url: Url, reason: String },
}

/// Builds the client of `web_fetch`: no automatic redirects, a connect timeout, and a user agent that says who asks;
/// a resolver that refuses local addresses unless `local` (`address.rs`).
pub fn client(local: bool) -> Result<reqwest::Client, String> {
    let builder = reqwest::Client::builder();
    let builder = if local { builder } else { builder.dns_resolver(std::sync::Arc::new(super::address::PublicOnly)) };
    builder
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(10))
        .user_agent(concat!("troupe/", env!("CARGO_PKG_VERSION"), " (web_fetch)"))
        .build()
        .map_err(|error| crate::model::http::error_chain_text(&error))
}

/// GETs `url`, following redirects on the same host. The caller bounds the whole call in time.
pub async fn fetch(client: &reqwest::Client, url: Url) -> Result<Fetched, FetchError> {
    let host = url.host_str().map(str::to_owned);
    let mut url = url;
    for _ in 0..=MAX_REDIRECTS {
        let response = client
            .get(url.clone())
            .header(reqwest::header::ACCEPT, "text/html, text/plain;q=0.9, text/*;q=0.8, */*;q=0.5")
            .send()
            .await
            .map_err(|error| FetchError::Transport {
                url: url.clone(),
                reason: crate::model::http::error_chain_text(&error),
            })?;
        let status = response.status();
        if status.is_redirection() && status != reqwest::StatusCode::NOT_MODIFIED {
            let location = response.headers().get(LOCATION).and_then(|value| value.to_str().ok());
            let Some(location) = location.and_then(|location| url.join(location).ok()) else {
                return Err(FetchError::BadRedirect { url, status });
            };
            if !matches!(location.scheme(), "http" | "https") {
                return Err(FetchError::NotHttp { url, location: location.to_string() });
            }
            if location.host_str().map(str::to_owned) != host {
                let host = location.host_str().unwrap_or_default().to_owned();
                return Err(FetchError::OtherHost { url, location, host });
            }
            url = location;
            continue;
        }
        let content_type =
            response.headers().get(CONTENT_TYPE).and_then(|value| value.to_str().ok()).map(str::to_owned);
        let (body, cut) = read_body(response, &url).await?;
        return Ok(Fetched { url, status, content_type, body, cut });
    }
    Err(FetchError::TooManyRedirects { url })
}

/// The body up to [`MAX_BODY_BYTES`], and whether there was more.
async fn read_body(mut response: reqwest::Response, url: &Url) -> Result<(Vec<u8>, bool), FetchError> {
    let mut body = Vec::new();
    loop {
        let chunk = response.chunk().await.map_err(|error| FetchError::Transport {
            url: url.clone(),
            reason: crate::model::http::error_chain_text(&error),
        })?;
        let Some(chunk) = chunk else {
            return Ok((body, false));
        };
        let room = MAX_BODY_BYTES - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
}
