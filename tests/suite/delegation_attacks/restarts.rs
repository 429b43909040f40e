//! Delegation attacks across a stop of the daemon binary (killed or stopped cleanly): children stay out of
//! `session.list`, a parent is interrupted rather than going on, and no approval of a dead run stays pending.

use serde_json::json;
use troupe_protocol::method;
use troupe_protocol::types::common::{SessionIdParams, SessionStatus};
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::session::{PermissionMode, SessionListParams};

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_stay_out_of_session_list_with_or_without_a_cwd_and_in_the_tree_across_a_restart() {
    let data_dir = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::write(data_dir.path().join("config.toml"), config(3, 4, "")).unwrap();
    let mut daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let (client, mut deliveries) = daemon.client().await;
    let script = json!({
        "turns": [{"tool_calls": [delegate("helper", "quick task")]}, {"text": "parent done"}],
        "by_input": {"quick task": {"turns": [{"text": "quick answer"}]}}
    });
    connect_script(&client, data_dir.path(), script).await;
    let root = create_session_in(&client, project.path()).await.session_id;
    set_mode(&client, &root, PermissionMode::Yolo).await;
    client.subscribe(&root, None).await.unwrap();
    start_run(&client, &root, selection_of("default", "local/scripted"), "go").await;
    let events = events_until(&mut deliveries, is_terminal).await;
    assert_eq!(tool_results(&events)[0].output, "quick answer");
    let child = children(&client, &root).await[0].session_id.clone();

    let check = |client: Client, root: String, child: String, cwd: String| async move {
        for filter in [None, Some(cwd)] {
            let params = SessionListParams { cwd: filter.clone(), ..Default::default() };
            let listed = within("session.list", client.call::<method::SessionList>(params)).await.unwrap().sessions;
            assert!(listed.iter().any(|meta| meta.session_id == root), "the root is listed (cwd {filter:?})");
            assert!(listed.iter().all(|meta| meta.session_id != child), "a child is listed (cwd {filter:?})");
        }
        let listed = children(&client, &root).await;
        assert_eq!(listed.iter().map(|child| child.session_id.as_str()).collect::<Vec<_>>(), [child.as_str()]);
    };
    let cwd = project.path().to_string_lossy().into_owned();
    check(client.clone(), root.clone(), child.clone(), cwd.clone()).await;
    daemon.kill();

    let daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let (client, _deliveries) = daemon.client().await;
    check(client.clone(), root.clone(), child.clone(), cwd).await;
    let params = SessionIdParams { session_id: root.clone() };
    let tree = within("session.tree", client.call::<method::SessionTree>(params)).await.unwrap().tree;
    assert_eq!(tree.children.len(), 1);
    assert_eq!(tree.children[0].session.session_id, child);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_mid_delegation_interrupts_the_parent_instead_of_letting_it_go_on() {
    let data_dir = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let MidDelegation { mut daemon, client, deliveries, root, .. } =
        mid_delegation(data_dir.path(), project.path(), "parent went on").await;
    drop(client);
    drop(deliveries);
    assert!(daemon.terminate().success(), "a clean stop");

    let daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let (client, mut deliveries) = daemon.client().await;
    client.subscribe(&root, None).await.unwrap();
    let events = events_until(&mut deliveries, is_terminal).await;
    assert!(
        matches!(events.last().unwrap().payload, EventPayload::RunInterrupted { .. }),
        "the parent's run went on while the daemon stopped: {:?}",
        kinds(&events)
    );
    assert!(
        !events.iter().any(|event| matches!(&event.payload, EventPayload::RunCompleted { .. })),
        "{:?}",
        kinds(&events)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_while_a_child_waits_for_an_approval_leaves_nothing_pending_in_the_tree() {
    let data_dir = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::write(data_dir.path().join("config.toml"), config(3, 4, ALLOW_DELEGATE)).unwrap();
    let mut daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let (client, _deliveries) = daemon.client().await;
    let script = json!({
        "turns": [{"tool_calls": [delegate("helper", "make a file")]}, {"text": "parent done"}],
        "by_input": {"make a file": {"turns": [
            {"tool_calls": [{"tool": "shell", "arguments": {"command": "touch never-made.txt"}}]},
            {"text": "made it"}
        ]}}
    });
    connect_script(&client, data_dir.path(), script).await;
    let root = create_session_in(&client, project.path()).await.session_id;
    set_mode(&client, &root, PermissionMode::Ask).await;
    start_run(&client, &root, selection_of("default", "local/scripted"), "go").await;
    let asked = first_pending_approval(&client, &root, "the child's approval").await;
    daemon.kill();

    let daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let (client, _deliveries) = daemon.client().await;
    eventually_some("the tree to settle", WAIT, || async {
        let child = status(&client, &asked.session_id).await;
        let root_status = status(&client, &root).await;
        (child != SessionStatus::Running && root_status != SessionStatus::Running).then_some(())
    })
    .await;
    assert!(pending_approvals(&client, &root).await.is_empty(), "an approval of a dead run is still pending");
    assert_eq!(status(&client, &asked.session_id).await, SessionStatus::Interrupted);
    assert_eq!(status(&client, &root).await, SessionStatus::Interrupted);
    assert!(!project.path().join("never-made.txt").exists());
}
