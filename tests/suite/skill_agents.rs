//! Skill visibility and effect follow the agent that will run, plus the session overlay (the tree's permission
//! mode and grants), not the agent the session was created with.

use troupe_protocol::client::{Client, ClientError};
use troupe_protocol::method;
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::run::RunStartParams;
use troupe_protocol::types::session::PermissionMode;
use troupe_protocol::types::skills::PermissionEffect;

use super::support::*;

const CONFIG: &str = "\
[permissions]
rules = [{ effect = \"ask\", tool = \"skill\", resource = \"skill:review\" }]

[agents.reviewer]
models = [\"local/echo\"]
permissions = [{ effect = \"deny\", tool = \"skill\", resource = \"skill:deploy\" }]
";

fn write_skill(root: &std::path::Path, name: &str) {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), format!("---\ndescription: {name}\n---\nDo {name}.\n")).unwrap();
}

/// `(visible, permission_effect)` of the skill `name` in `skills.list`.
async fn listed(client: &Client, session_id: &str, name: &str) -> (bool, PermissionEffect) {
    let listed =
        within("skills.list", client.call::<method::SkillsList>(SessionIdParams { session_id: session_id.into() }))
            .await
            .expect("skills.list");
    let skill = listed.skills.into_iter().find(|skill| skill.name == name).expect("the skill is listed");
    (skill.visible, skill.permission_effect)
}

async fn start(client: &Client, session_id: &str, agent: &str, input: &str) -> Result<String, ClientError> {
    within(
        "run.start",
        client.call::<method::RunStart>(RunStartParams {
            session_id: session_id.into(),
            client_run_id: troupe_runtime::clock::new_id(),
            selection: selection_of(agent, "local/echo"),
            input: input.into(),
            reset_fallback: false,
            attachments: Vec::new(),
        }),
    )
    .await
    .map(|result| result.run_id)
}

#[tokio::test]
async fn the_running_agents_policy_and_the_trees_mode_decide_a_skills_effect() {
    let daemon = TestDaemon::start_with(DaemonSetup { config_toml: Some(CONFIG.into()), ..DaemonSetup::default() });
    let user_skills = daemon.data_path().join("skills");
    write_skill(&user_skills, "deploy");
    write_skill(&user_skills, "review");
    let (client, mut deliveries) = daemon.client().await;
    // Created with the default agent, which may use `deploy`.
    let session = daemon.create_session(&client).await;
    let id = session.session_id.as_str();
    client.subscribe(id, None).await.unwrap();
    assert_eq!(listed(&client, id, "deploy").await, (true, PermissionEffect::Allow));

    // A run of the reviewer agent is governed by the reviewer's rules, whoever created the session.
    let refused = start(&client, id, "reviewer", "/deploy now").await.unwrap_err();
    assert!(matches!(&refused, ClientError::Rpc(e) if e.typed_code() == Some("skill_not_allowed")), "{refused:?}");
    let run_id = start(&client, id, "reviewer", "plain input").await.unwrap();
    events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    // Without a selection, the listing follows the agent of the session's latest run.
    assert_eq!(listed(&client, id, "deploy").await, (false, PermissionEffect::Deny));
    // And the default agent may still invoke it in a run of its own.
    let run_id = start(&client, id, "default", "/deploy now").await.unwrap();
    events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    assert_eq!(listed(&client, id, "deploy").await, (true, PermissionEffect::Allow));

    // The tree's mode is the session overlay: an `ask` skill is allowed in yolo and refused in auto_approve_n.
    set_mode(&client, id, PermissionMode::Ask).await;
    assert_eq!(listed(&client, id, "review").await, (true, PermissionEffect::Ask));
    set_mode(&client, id, PermissionMode::Yolo).await;
    assert_eq!(listed(&client, id, "review").await, (true, PermissionEffect::Allow));
    set_mode(&client, id, PermissionMode::AutoApproveN).await;
    assert_eq!(listed(&client, id, "review").await, (false, PermissionEffect::Deny));
}
