//! Every error a newcomer meets in the first minutes says what failed in words and what to type next: `troupe
//! connect` against a provider that does not answer or refuses the key, a `--url` without the daemon's `/ws` path
//! or without a scheme, a second daemon on a data dir already in use, and an unknown provider (listed once).

use troupe_test_support::{FakeResponse, FakeServer};

use super::cli_support::*;
use super::support::*;

#[tokio::test]
async fn connect_says_whether_nothing_answered_or_the_key_was_refused() {
    let daemon = TestDaemon::start();
    // Nothing listens on the port: the daemon's words, then what to fix.
    let nowhere = format!("http://127.0.0.1:{}/v1", free_port());
    let said = troupe(&daemon, &["connect", "openai", "--base-url", &nowhere]).await.refused();
    assert!(said.contains("hint: nothing answered at the provider's address"), "{said}");
    assert!(said.contains("--base-url"), "{said}");

    // The server answers 401 to the model list: the key, and the variable that holds it.
    let vendor = FakeServer::start(vec![FakeResponse::status(
        401,
        &[("content-type", "application/json")],
        r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}"#,
    )])
    .await;
    let base_url = format!("{}/v1", vendor.base_url);
    let mut command =
        troupe_command(&daemon, &["connect", "openai", "--base-url", &base_url, "--api-key-env", "TEST_VENDOR_KEY"]);
    command.env("TEST_VENDOR_KEY", "sk-wrong");
    let said = finish(command, WAIT).await.refused();
    assert!(said.contains("hint: the server refused the API key"), "{said}");
    assert!(said.contains("--api-key-env"), "{said}");

    // An unknown provider: the providers are listed once.
    let said = troupe(&daemon, &["connect", "bogus"]).await.refused();
    assert_eq!(said.matches("openai").count(), 1, "{said}");
    assert!(said.contains("troupe connect --help"), "{said}");
}

#[tokio::test]
async fn a_url_without_the_websocket_path_or_scheme_is_given_the_whole_url() {
    let daemon = TestDaemon::start();
    let root = format!("ws://{}/", daemon.addr);
    let mut command = troupe_command(&daemon, &["sessions"]);
    command.env("TROUPE_URL", &root);
    let said = finish(command, WAIT).await.refused();
    assert!(
        said.contains(&format!(
            "hint: the daemon's WebSocket is at the path /ws: use --url (TROUPE_URL) ws://{}/ws",
            daemon.addr
        )),
        "{said}"
    );

    let bare_address = daemon.addr.to_string();
    let mut command = troupe_command(&daemon, &["sessions"]);
    command.env("TROUPE_URL", &bare_address);
    let said = finish(command, WAIT).await.refused();
    assert!(said.contains(&format!("use --url (TROUPE_URL) ws://{}/ws", daemon.addr)), "{said}");
}

#[tokio::test]
async fn a_second_daemon_on_a_data_dir_names_the_first_and_the_ways_on() {
    let data_dir = tempfile::tempdir().expect("data dir");
    let port = free_port();
    let _first = spawn_daemon(data_dir.path(), &format!("127.0.0.1:{port}"));
    let second = format!("127.0.0.1:{}", free_port());
    let said = finish(
        troupe_bare(&["serve", "--data-dir", data_dir.path().to_str().expect("utf-8"), "--listen", &second]),
        WAIT,
    )
    .await
    .refused();
    assert!(said.contains("another troupe daemon is already using the data directory"), "{said}");
    assert!(said.contains(&format!("listening on ws://127.0.0.1:{port}/ws")), "{said}");
    assert!(said.contains("hint: ") && said.contains("kill ") && said.contains("--data-dir DIR"), "{said}");
}
