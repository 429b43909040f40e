//! Session lifecycle over the wire: create, get, list, resume, rename, children, tree, permission mode.

use serde_json::json;
use troupe_protocol::client::ClientError;
use troupe_protocol::method;
use troupe_protocol::types::common::{SessionIdParams, SessionOrigin, SessionStatus};
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::session::{
    PermissionMode, SessionCreateParams, SessionListParams, SessionRenameParams, SetPermissionModeParams, TitleChange,
};

use super::support::*;

fn rpc_code(error: ClientError) -> (i64, Option<String>) {
    match error {
        ClientError::Rpc(error) => (error.code, error.typed_code().map(str::to_owned)),
        other => panic!("expected an RPC error, got {other:?}"),
    }
}

#[tokio::test]
async fn create_get_resume_and_list_agree() {
    let daemon = TestDaemon::start();
    let (client, _deliveries) = daemon.client().await;
    let project = tempfile::tempdir().unwrap();
    let project_path = project.path().canonicalize().unwrap().to_string_lossy().into_owned();

    let created = within(
        "create",
        client.call::<method::SessionCreate>(SessionCreateParams {
            selection: echo_selection(),
            cwd: Some(project_path.clone()),
        }),
    )
    .await
    .unwrap()
    .session;
    assert_eq!(created.origin, SessionOrigin::Root);
    assert_eq!(created.cwd, project_path);
    assert_eq!(created.title, None);
    assert_eq!(created.status, SessionStatus::Idle);
    assert_eq!(created.last_event_seq, 1);
    assert_eq!(created.creation_selection, echo_selection());
    assert!(created.skipped_events.is_empty());
    assert_eq!(created.session_id.len(), 36, "a UUID: {}", created.session_id);

    let other = daemon.create_session(&client).await;
    let id = SessionIdParams { session_id: created.session_id.clone() };
    assert_eq!(within("get", client.call::<method::SessionGet>(id.clone())).await.unwrap().session, created);
    assert_eq!(within("resume", client.call::<method::SessionResume>(id)).await.unwrap().session, created);

    let all = within("list", client.call::<method::SessionList>(SessionListParams::default())).await.unwrap();
    let mut ids: Vec<_> = all.sessions.iter().map(|s| s.session_id.clone()).collect();
    ids.sort();
    let mut expected = vec![created.session_id.clone(), other.session_id.clone()];
    expected.sort();
    assert_eq!(ids, expected);

    // The cwd filter matches the canonical path, however it is spelled.
    let spelled_differently = format!("{}/./", project_path);
    let filtered = within(
        "list cwd",
        client.call::<method::SessionList>(SessionListParams { cwd: Some(spelled_differently), ..Default::default() }),
    )
    .await
    .unwrap();
    assert_eq!(filtered.sessions, vec![created]);
}

#[tokio::test]
async fn create_rejects_bad_selections_and_paths_clearly() {
    let daemon = TestDaemon::start();
    let (client, _deliveries) = daemon.client().await;
    let mut selection = echo_selection();
    selection.agent = "nobody".into();
    let error = client.call::<method::SessionCreate>(SessionCreateParams { selection, cwd: None }).await.unwrap_err();
    assert_eq!(rpc_code(error), (-32602, Some("agent_not_found".into())));

    let mut selection = echo_selection();
    selection.model.model = "local/unknown".into();
    let error = client.call::<method::SessionCreate>(SessionCreateParams { selection, cwd: None }).await.unwrap_err();
    assert_eq!(rpc_code(error), (-32602, Some("model_not_found".into())));

    for cwd in ["relative/path", "/definitely/not/here"] {
        let error = client
            .call::<method::SessionCreate>(SessionCreateParams { selection: echo_selection(), cwd: Some(cwd.into()) })
            .await
            .unwrap_err();
        assert_eq!(rpc_code(error), (-32602, Some("invalid_cwd".into())), "{cwd}");
    }
}

#[tokio::test]
async fn rename_sets_clears_resets_and_is_idempotent_by_client_rename_id() {
    let daemon = TestDaemon::start();
    let (client, _deliveries) = daemon.client().await;
    let session = daemon.create_session(&client).await;
    let rename = |id: &str, change: TitleChange| SessionRenameParams {
        session_id: session.session_id.clone(),
        client_rename_id: id.into(),
        change,
    };

    let set = within(
        "set",
        client.call::<method::SessionRename>(rename("r1", TitleChange::Set { title: "  Fix the tests  ".into() })),
    )
    .await
    .unwrap();
    assert_eq!(set.client_rename_id, "r1");
    assert_eq!(set.session.title.as_deref(), Some("Fix the tests"));
    assert_eq!(set.session.title_updated_seq, Some(2));

    // The same id and change again: the same answer, and no second event.
    let again = client
        .call::<method::SessionRename>(rename("r1", TitleChange::Set { title: "Fix the tests".into() }))
        .await
        .unwrap();
    assert_eq!(again.session.title_updated_seq, Some(2));
    assert_eq!(again.session.last_event_seq, 2);

    // The same id with different content is a conflict.
    let conflict = client.call::<method::SessionRename>(rename("r1", TitleChange::Clear)).await.unwrap_err();
    assert_eq!(rpc_code(conflict), (-32602, Some("idempotency_conflict".into())));

    let cleared = client.call::<method::SessionRename>(rename("r2", TitleChange::Clear)).await.unwrap();
    assert_eq!((cleared.session.title, cleared.session.title_updated_seq), (None, Some(3)));
    let reset = client.call::<method::SessionRename>(rename("r3", TitleChange::Reset)).await.unwrap();
    assert_eq!((reset.session.title, reset.session.title_updated_seq), (None, Some(4)));

    for (id, title) in [("bad1", "   "), ("bad2", "a\u{1b}[31m"), ("bad3", &"x".repeat(513) as &str)] {
        let error = client
            .call::<method::SessionRename>(rename(id, TitleChange::Set { title: title.into() }))
            .await
            .unwrap_err();
        assert_eq!(rpc_code(error), (-32602, Some("invalid_title".into())), "{title:?}");
    }
    let error = client.call::<method::SessionRename>(rename("", TitleChange::Clear)).await.unwrap_err();
    assert_eq!(rpc_code(error).0, -32602);

    // The log holds exactly the three accepted renames, in order, with their change kinds.
    let mut socket = daemon.raw().await;
    socket.handshake().await;
    let reply = socket.call(1, "events.subscribe", json!({"session_id": session.session_id})).await;
    let types: Vec<_> =
        reply["result"]["events"].as_array().unwrap().iter().map(|e| e["payload"]["change"].clone()).collect();
    assert_eq!(types, [json!(null), json!("set"), json!("clear"), json!("reset")]);
    assert_eq!(reply["result"]["last_seq"], 4);
}

#[tokio::test]
async fn delegated_children_stay_out_of_the_list_but_form_the_tree() {
    // Delegated sessions are created by runs; until runs exist, lay their logs on disk as a run would.
    let data_dir = tempfile::tempdir().unwrap();
    let root = "01900000-0000-7000-8000-000000000001";
    let child = "01900000-0000-7000-8000-000000000002";
    let grandchild = "01900000-0000-7000-8000-000000000003";
    let write = |id: &str, origin: serde_json::Value| {
        write_session_log(data_dir.path(), id, &[format!("{}\n", session_created_line(id, origin))]);
    };
    let delegated = |parent: &str, depth: u32| {
        json!({"type": "delegated", "root_session_id": root, "parent_session_id": parent, "parent_run_id": "r",
            "parent_tool_call_id": "t", "depth": depth})
    };
    write(root, json!({"type": "root"}));
    write(child, delegated(root, 1));
    write(grandchild, delegated(child, 2));

    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..DaemonSetup::default() });
    let (client, _deliveries) = daemon.client().await;
    let list = client.call::<method::SessionList>(SessionListParams::default()).await.unwrap();
    assert_eq!(list.sessions.iter().map(|s| s.session_id.as_str()).collect::<Vec<_>>(), [root]);

    let children = client.call::<method::SessionChildren>(SessionIdParams { session_id: root.into() }).await.unwrap();
    assert_eq!(children.children.len(), 1);
    assert_eq!(children.children[0].session_id, child);
    assert_eq!(children.children[0].agent, "default");

    let tree = client.call::<method::SessionTree>(SessionIdParams { session_id: root.into() }).await.unwrap().tree;
    assert_eq!(tree.session.session_id, root);
    assert_eq!(tree.children[0].session.session_id, child);
    assert_eq!(tree.children[0].children[0].session.session_id, grandchild);
    assert!(tree.children[0].children[0].children.is_empty());

    // A child is still reachable directly.
    let got = client.call::<method::SessionGet>(SessionIdParams { session_id: grandchild.into() }).await.unwrap();
    assert!(matches!(got.session.origin, SessionOrigin::Delegated { depth: 2, .. }));

    // The permission mode is set through any session of the tree.
    client
        .call::<method::SessionSetPermissionMode>(SetPermissionModeParams {
            session_id: grandchild.into(),
            mode: PermissionMode::Ask,
        })
        .await
        .unwrap();
    let unknown = client
        .call::<method::SessionSetPermissionMode>(SetPermissionModeParams {
            session_id: "nope".into(),
            mode: PermissionMode::Yolo,
        })
        .await
        .unwrap_err();
    assert_eq!(rpc_code(unknown), (-32000, Some("session_not_found".into())));
}

#[tokio::test]
async fn idle_sessions_hibernate_and_come_back_with_their_history() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        hibernate_after: Some(std::time::Duration::from_millis(50)),
        ..DaemonSetup::default()
    });
    let (client, _deliveries) = daemon.client().await;
    let session = daemon.create_session(&client).await;
    set_title(&client, &session.session_id, "before", "before").await.unwrap();
    eventually("the session hibernates", || !daemon.engine().is_live(&session.session_id)).await;

    // Metadata is served from the index without waking it.
    let meta =
        client.call::<method::SessionGet>(SessionIdParams { session_id: session.session_id.clone() }).await.unwrap();
    assert_eq!(meta.session.title.as_deref(), Some("before"));
    assert!(!daemon.engine().is_live(&session.session_id));

    // A write wakes it from its log; sequences continue and idempotency survived.
    let again = set_title(&client, &session.session_id, "before", "before").await.unwrap();
    assert_eq!(again.session.last_event_seq, 2);
    let after = set_title(&client, &session.session_id, "after", "after").await.unwrap();
    assert_eq!(after.session.title_updated_seq, Some(3));
    let (_client2, mut deliveries) = daemon.client().await;
    _client2.subscribe(&session.session_id, None).await.unwrap();
    let mut kinds = Vec::new();
    within("replay", async {
        while kinds.len() < 3 {
            if let Some(troupe_protocol::client::ClientDelivery::ReplayEvent(event)) = deliveries.next().await {
                kinds.push(event.payload);
            }
        }
    })
    .await;
    assert!(matches!(kinds[0], EventPayload::SessionCreated { .. }));
    assert!(matches!(&kinds[2], EventPayload::SessionTitleCommitted { title: Some(t), .. } if t == "after"));

    // Hibernated again, it is read from the index as it was last written, not as it was first indexed.
    drop(deliveries);
    drop(_client2);
    eventually("the session hibernates again", || !daemon.engine().is_live(&session.session_id)).await;
    let meta =
        client.call::<method::SessionGet>(SessionIdParams { session_id: session.session_id.clone() }).await.unwrap();
    assert_eq!((meta.session.title.as_deref(), meta.session.title_updated_seq), (Some("after"), Some(3)));
    assert!(!daemon.engine().is_live(&session.session_id));
}

/// `session.get` answers a live session from the metadata it published at its newest durable batch, without asking
/// its actor. A write acknowledged to one client is read back at once by another, every time.
#[tokio::test]
async fn session_get_on_another_connection_reads_every_acknowledged_rename_back() {
    let daemon = TestDaemon::start();
    let (writer, _writer_deliveries) = daemon.client().await;
    let (reader, _reader_deliveries) = daemon.client().await;
    let session = daemon.create_session(&writer).await;
    for index in 0..50 {
        let title = format!("title {index}");
        let params = SessionRenameParams {
            session_id: session.session_id.clone(),
            client_rename_id: format!("read-back-{index}"),
            change: TitleChange::Set { title: title.clone() },
        };
        let renamed = within("rename", writer.call::<method::SessionRename>(params)).await.unwrap().session;
        let id = SessionIdParams { session_id: session.session_id.clone() };
        let got = within("get", reader.call::<method::SessionGet>(id)).await.unwrap().session;
        assert_eq!(got.title.as_deref(), Some(title.as_str()), "rename {index} was acknowledged, then read back");
        assert!(got.last_event_seq >= renamed.last_event_seq, "{} < {}", got.last_event_seq, renamed.last_event_seq);
    }
}

/// A live session tells the supervisor's index of a batch that only moved its progress within 100 ms rather than at
/// once (`actors/src/session_actor/meta.rs`); `session.list`, `session.tree` and `session.get` still show its newest
/// event as soon as a subscriber has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_sessions_newest_event_is_listed_as_soon_as_it_is_delivered() {
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    let script = json!({"turns": [
        {"tool_calls": [{"tool": "shell", "arguments": {"command": "sleep 60"}}]},
        {"text": "done"}
    ]});
    let (session_id, run_id) = scripted_run_in_yolo(&daemon, &client, script).await;
    // The run's start changed the session's status (reported at once); its tool call's start moved only its
    // progress.
    let events =
        events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::ToolCallStarted { .. })).await;
    let newest = events.last().expect("the call's start").seq;

    let listed = within("list", client.call::<method::SessionList>(SessionListParams::default())).await.unwrap();
    let listed = listed.sessions.iter().find(|meta| meta.session_id == session_id).expect("the session is listed");
    assert_eq!(listed.status, SessionStatus::Running);
    assert!(listed.last_event_seq >= newest, "listed at {}, delivered {newest}", listed.last_event_seq);
    let id = SessionIdParams { session_id: session_id.clone() };
    let tree = within("tree", client.call::<method::SessionTree>(id.clone())).await.unwrap().tree;
    assert!(tree.session.last_event_seq >= newest, "tree at {}, delivered {newest}", tree.session.last_event_seq);
    let got = within("get", client.call::<method::SessionGet>(id)).await.unwrap().session;
    assert!(got.last_event_seq >= newest, "got {}, delivered {newest}", got.last_event_seq);

    let params = troupe_protocol::types::run::RunIdParams { run_id };
    assert!(within("cancel", client.call::<method::RunCancel>(params)).await.unwrap().cancelled);
}
