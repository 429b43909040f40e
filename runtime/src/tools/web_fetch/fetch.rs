//! The HTTP side of `web_fetch`: one GET, redirects followed by hand so each is judged, the body read up to a cap.
//!
//! It uses reqwest on rustls, the stack the model providers use (`model/http.rs`), with reqwest's own redirect
//! handling turned off: a redirect is followed only while it stays on the host the call was allowed for (the
//! permission's resource is the host), at most [`MAX_REDIRECTS`] times. A redirect to another host ends the call
//! with the new URL, so the model can ask for it and that host is judged by the permission check like any other.
//!
//! Behind a proxy (reqwest follows `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` and `NO_PROXY` of the daemon's
//! environment) the client resolves the proxy's name, not the page's: the proxy does. Then the resolver that refuses
//! local addresses (`address.rs`) would judge the proxy, and nothing would judge the page's host. So with a proxy
//! configured, every URL's host (the first and each redirect's) is resolved and judged before its request is sent;
//! the proxy may still resolve it differently a moment later, which is the proxy's policy to answer for.

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
    /// The host is an address of this machine or its network (judged before a proxied request).
    #[error("{0}")]
    Refused(String),
}

/// The client of `web_fetch`, and whether each URL's host must be judged before its request (a proxy resolves).
#[derive(Clone, Debug)]
pub struct FetchClient {
    client: reqwest::Client,
    judge_hosts: bool,
}

/// Whether the daemon's environment names a proxy reqwest will use for some URL.
fn environment_has_proxy() -> bool {
    ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"]
        .iter()
        .any(|name| std::env::var_os(name).is_some_and(|value| !value.is_empty()))
}

/// Builds the client of `web_fetch`: no automatic redirects, a connect timeout, and a user agent that says who asks;
/// unless `local`, local addresses refused: by its resolver, or, behind a proxy of the environment, by judging each
/// host before its request (see the module doc).
pub fn client(local: bool) -> Result<FetchClient, String> {
    build(local, None)
}

/// [`client`], with `proxy` for every request instead of the environment's (tests).
pub(super) fn build(local: bool, proxy: Option<reqwest::Proxy>) -> Result<FetchClient, String> {
    let proxied = proxy.is_some() || environment_has_proxy();
    let mut builder = reqwest::Client::builder();
    if let Some(proxy) = proxy {
        builder = builder.proxy(proxy);
    }
    if !local && !proxied {
        builder = builder.dns_resolver(std::sync::Arc::new(super::address::PublicOnly));
    }
    let client = builder
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(10))
        .user_agent(concat!("troupe/", env!("CARGO_PKG_VERSION"), " (web_fetch)"))
        .build()
        .map_err(|error| crate::model::http::error_chain_text(&error))?;
    Ok(FetchClient { client, judge_hosts: !local && proxied })
}

/// GETs `url`, following redirects on the same host. The caller bounds the whole call in time.
pub async fn fetch(client: &FetchClient, url: Url) -> Result<Fetched, FetchError> {
    let host = url.host_str().map(str::to_owned);
    let mut url = url;
    for _ in 0..=MAX_REDIRECTS {
        if client.judge_hosts {
            super::address::judge_host(url.host_str().unwrap_or_default()).await.map_err(FetchError::Refused)?;
        }
        let response = client
            .client
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A proxy on loopback answering every request with a page; how many requests reached it.
    async fn proxy() -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let served = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&served);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let mut request = [0u8; 4096];
                let _ = socket.read(&mut request).await;
                let _ = socket
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nConnection: close\r\n\r\nproxy")
                    .await;
            }
        });
        (format!("http://{address}"), served)
    }

    #[tokio::test]
    async fn behind_a_proxy_a_local_host_is_refused_before_anything_is_sent_and_a_public_one_goes_through_it() {
        let (proxy_url, served) = proxy().await;
        let client = build(false, Some(reqwest::Proxy::all(&proxy_url).unwrap())).unwrap();
        for local in ["http://localhost:9/admin", "http://127.0.0.1:9/", "http://[::1]:9/", "http://169.254.169.254/"] {
            let refused = tokio::time::timeout(Duration::from_secs(10), fetch(&client, Url::parse(local).unwrap()))
                .await
                .expect("in time");
            match refused {
                Err(FetchError::Refused(reason)) => assert!(reason.contains("web_fetch_local"), "{reason}"),
                other => panic!("{local} through the proxy: {other:?}"),
            }
        }
        assert_eq!(served.load(Ordering::SeqCst), 0, "nothing reached the proxy");

        let public = Url::parse("http://93.184.216.34/page").unwrap();
        let fetched = tokio::time::timeout(Duration::from_secs(10), fetch(&client, public)).await.expect("in time");
        assert_eq!(fetched.expect("fetched through the proxy").body, b"proxy");
        assert_eq!(served.load(Ordering::SeqCst), 1);
    }
}
