//! A tree's permission mode is runtime-only (the reference's `session.set_permission_mode`), so a restart puts every
//! tree in `[permissions] default_mode`: the operator decides what a restart means, and every client reads the mode
//! the restart left (`session.tree`'s `permission_mode`, `troupe mode SESSION`), never the one set before it.

use std::process::Stdio;
use std::time::Duration;

use troupe_protocol::client::{Client, ClientProtocol};
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::session::PermissionMode;

use super::support::*;

async fn tree_mode(client: &Client, session_id: &str) -> Option<PermissionMode> {
    let tree = within("session.tree", client.session_tree(SessionIdParams { session_id: session_id.to_owned() })).await;
    tree.expect("session.tree").permission_mode
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_puts_every_tree_in_the_configured_default_mode_and_clients_say_so() {
    let data_dir = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::write(data_dir.path().join("config.toml"), "[permissions]\ndefault_mode = \"ask\"\n").unwrap();
    let mut daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let (client, _deliveries) = daemon.client().await;
    let session = create_session_in(&client, project.path()).await;
    assert_eq!(tree_mode(&client, &session.session_id).await, Some(PermissionMode::Ask), "a new tree starts in ask");
    set_mode(&client, &session.session_id, PermissionMode::Yolo).await;
    assert_eq!(tree_mode(&client, &session.session_id).await, Some(PermissionMode::Yolo));
    client.close().await;
    assert!(daemon.terminate().success());

    let daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let (client, _deliveries) = daemon.client().await;
    assert_eq!(
        tree_mode(&client, &session.session_id).await,
        Some(PermissionMode::Ask),
        "after a restart the tree is in the configured default, not in the yolo a client set before"
    );
    client.close().await;

    let shown = tokio::process::Command::new(troupe_binary())
        .args(["mode", &session.session_id, "--url", &daemon.url])
        .env("TROUPE_TOKEN", &daemon.token)
        .env("TROUPE_HOME", data_dir.path())
        .stdin(Stdio::null())
        .output();
    let shown = tokio::time::timeout(Duration::from_secs(30), shown).await.expect("troupe mode in time").unwrap();
    let stdout = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.status.success(), "troupe mode: {stdout} {}", String::from_utf8_lossy(&shown.stderr));
    assert_eq!(stdout.trim(), format!("mode ask (the tree of session {})", session.session_id));
}

#[test]
fn an_unknown_default_mode_is_a_config_problem() {
    let data_dir = tempfile::tempdir().unwrap();
    std::fs::write(data_dir.path().join("config.toml"), "[permissions]\ndefault_mode = \"sometimes\"\n").unwrap();
    let checked = std::process::Command::new(troupe_binary())
        .args(["config", "check"])
        .env("TROUPE_HOME", data_dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&checked.stdout), String::from_utf8_lossy(&checked.stderr));
    assert!(!checked.status.success(), "{said}");
    assert!(said.contains("default_mode") || said.contains("sometimes"), "names the bad setting: {said}");
}
