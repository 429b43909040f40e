//! `@path` in the TUI's prompt under a real terminal (tmux): Tab completes from the session's folder (a folder,
//! then a file), Enter attaches the image the `@path` names, and the transcript lists it.

use serde_json::json;
use troupe_protocol::types::events::EventPayload;

use super::support::*;
use super::terminal_support::Tmux;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";

#[tokio::test]
async fn at_path_completes_with_tab_and_attaches_the_image_on_enter() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[agents.coder]\nmodels = [\"local/scripted\"]\n".to_owned()),
        ..DaemonSetup::default()
    });
    let (client, mut deliveries) = daemon.client().await;
    connect_script(&client, daemon.data_path(), json!({"turns": [{"text": "nice diagram"}]})).await;
    let project = daemon.project_path();
    std::fs::create_dir_all(project.join("docs")).unwrap();
    std::fs::write(project.join("docs/arch.png"), PNG).unwrap();
    std::fs::write(project.join("docs/archive.txt"), "old").unwrap();
    let session = within(
        "session.create",
        client.call::<troupe_protocol::method::SessionCreate>(troupe_protocol::types::session::SessionCreateParams {
            selection: selection_of("coder", "local/scripted"),
            cwd: Some(project.to_string_lossy().into_owned()),
        }),
    )
    .await
    .expect("session.create")
    .session;
    within("subscribe", client.subscribe(&session.session_id, None)).await.expect("subscribe");

    let command = format!("{} tui --url {} --token {}", env!("CARGO_BIN_EXE_troupe"), daemon.url(), daemon.token);
    let tmux = Tmux::start("tui-attach", &command);
    tmux.wait_for(&session.session_id[..8]).await;
    tmux.keys(&["Enter"]);
    tmux.wait_for("prompt (Enter runs)").await;

    tmux.keys(&["-l", "explain @do"]);
    tmux.keys(&["Tab"]);
    tmux.wait_for("explain @docs/").await;
    // Two files start with "arch": Tab goes as far as they agree and lists them.
    tmux.keys(&["Tab"]);
    tmux.wait_for("arch.png  archive.txt").await;
    tmux.keys(&["-l", ".p"]);
    tmux.keys(&["Tab"]);
    tmux.wait_for("explain @docs/arch.png").await;
    tmux.keys(&["Enter"]);
    tmux.wait_for("explain docs/arch.png [attached: arch.png (image/png").await;
    tmux.wait_for("nice diagram").await;

    let events = events_until(&mut deliveries, is_terminal).await;
    let attached = events.iter().find_map(|event| match &event.payload {
        EventPayload::RunStarted { input, attachments, .. } => Some((input.clone(), attachments.clone())),
        _ => None,
    });
    let (input, attachments) = attached.expect("run_started");
    assert_eq!(input, "explain docs/arch.png");
    assert_eq!(attachments.iter().map(|file| file.name.as_str()).collect::<Vec<_>>(), ["arch.png"]);
    assert_eq!(std::fs::read(daemon.data_path().join(&attachments[0].path)).unwrap(), PNG);
}
