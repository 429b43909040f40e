//! Authentication and origin checks at the WebSocket upgrade, before any frame.

use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::StatusCode;

use super::support::*;

async fn upgrade_status(url: &str, headers: &[(&'static str, String)]) -> Result<Option<String>, StatusCode> {
    let mut request = url.into_client_request().expect("request");
    for (name, value) in headers {
        request.headers_mut().insert(*name, value.parse().expect("header value"));
    }
    match within("upgrade", tokio_tungstenite::connect_async(request)).await {
        Ok((_, response)) => {
            Ok(response.headers().get("sec-websocket-protocol").map(|value| value.to_str().expect("ascii").to_owned()))
        }
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => Err(response.status()),
        Err(other) => panic!("unexpected upgrade failure: {other}"),
    }
}

#[tokio::test]
async fn upgrades_without_a_valid_token_get_401() {
    let daemon = TestDaemon::start();
    assert_eq!(upgrade_status(&daemon.url(), &[]).await, Err(StatusCode::UNAUTHORIZED));
    let wrong = [("Authorization", "Bearer not-the-token".to_owned())];
    assert_eq!(upgrade_status(&daemon.url(), &wrong).await, Err(StatusCode::UNAUTHORIZED));
    let not_bearer = [("Authorization", format!("Basic {}", daemon.token))];
    assert_eq!(upgrade_status(&daemon.url(), &not_bearer).await, Err(StatusCode::UNAUTHORIZED));
    let right = [("Authorization", format!("Bearer {}", daemon.token))];
    assert_eq!(upgrade_status(&daemon.url(), &right).await, Ok(None));
}

#[tokio::test]
async fn browsers_authenticate_with_the_subprotocol_and_get_troupe_selected() {
    let daemon = TestDaemon::start();
    let offered = [("Sec-WebSocket-Protocol", format!("troupe, troupe.bearer.{}", daemon.token))];
    assert_eq!(upgrade_status(&daemon.url(), &offered).await, Ok(Some("troupe".to_owned())));
    let wrong = [("Sec-WebSocket-Protocol", "troupe, troupe.bearer.nope".to_owned())];
    assert_eq!(upgrade_status(&daemon.url(), &wrong).await, Err(StatusCode::UNAUTHORIZED));
}

#[tokio::test]
async fn foreign_origins_get_403_and_listed_or_own_origins_pass() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("allowed_origins = [\"https://console.example.com\"]\n".into()),
        ..DaemonSetup::default()
    });
    let auth = ("Authorization", format!("Bearer {}", daemon.token));
    let evil = [auth.clone(), ("Origin", "https://evil.example.com".to_owned())];
    assert_eq!(upgrade_status(&daemon.url(), &evil).await, Err(StatusCode::FORBIDDEN));
    let listed = [auth.clone(), ("Origin", "https://console.example.com".to_owned())];
    assert_eq!(upgrade_status(&daemon.url(), &listed).await, Ok(None));
    let own = [auth.clone(), ("Origin", format!("http://{}", daemon.addr))];
    assert_eq!(upgrade_status(&daemon.url(), &own).await, Ok(None));
    // The origin check comes first: a foreign page learns nothing about the token.
    let evil_without_token = [("Origin", "https://evil.example.com".to_owned())];
    assert_eq!(upgrade_status(&daemon.url(), &evil_without_token).await, Err(StatusCode::FORBIDDEN));
}

#[tokio::test]
async fn health_and_readiness_endpoints_answer_without_a_token() {
    let daemon = TestDaemon::start();
    for (path, body) in [("/healthz", "ok"), ("/readyz", "ready")] {
        let mut stream = tokio::net::TcpStream::connect(daemon.addr).await.expect("connect");
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        within("request", stream.write_all(request.as_bytes())).await.expect("write");
        let mut response = String::new();
        within("response", stream.read_to_string(&mut response)).await.expect("read");
        assert!(response.starts_with("HTTP/1.1 200"), "{path}: {response}");
        assert!(response.ends_with(body), "{path}: {response}");
    }
}
