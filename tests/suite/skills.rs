//! Skills over the wire: discovery with project-over-user precedence, visibility under the policy, rendering,
//! clear reports of malformed files, and invocation by a user (`/name args`) and by the model (the `skill` tool).

use std::path::Path;

use serde_json::json;
use troupe_protocol::client::ClientError;
use troupe_protocol::method;
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::run::ToolResultStatus;
use troupe_protocol::types::skills::{PermissionEffect, SkillSource, SkillsGetParams};

use super::support::*;

fn write_skill(root: &Path, name: &str, text: &str) {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), text).unwrap();
}

fn daemon_with_skills(config_toml: Option<&str>) -> TestDaemon {
    let daemon =
        TestDaemon::start_with(DaemonSetup { config_toml: config_toml.map(str::to_owned), ..DaemonSetup::default() });
    let user = daemon.data_path().join("skills");
    let project = daemon.project_path().join(".troupe/skills");
    write_skill(
        &project,
        "review",
        "---\ndescription: Review a file (project)\nargument_hint: FILE MODE\n---\nReview $1 in $2 mode.\n",
    );
    write_skill(&user, "review", "---\ndescription: Review a file (user)\n---\nThe user's review of $ARGUMENTS.\n");
    write_skill(&user, "deploy", "---\ndescription: Deploy\n---\nDeploy now.\n");
    write_skill(&user, "broken", "---\ndescription: [unclosed\n---\nbody\n");
    daemon
}

#[tokio::test]
async fn the_project_copy_wins_and_a_malformed_file_is_reported_without_hiding_the_others() {
    let daemon = daemon_with_skills(None);
    let (client, _) = daemon.client().await;
    let session = daemon.create_session(&client).await;
    let listed =
        within("skills.list", client.call::<method::SkillsList>(SessionIdParams { session_id: session.session_id }))
            .await
            .unwrap();
    let summary: Vec<(&str, SkillSource, bool, bool)> = listed
        .skills
        .iter()
        .map(|skill| (skill.name.as_str(), skill.source, skill.precedence_winner, skill.visible))
        .collect();
    assert_eq!(
        summary,
        [
            ("deploy", SkillSource::User, true, true),
            ("review", SkillSource::Project, true, true),
            ("review", SkillSource::User, false, true),
        ]
    );
    let review = &listed.skills[1];
    assert_eq!(review.description, "Review a file (project)");
    assert_eq!(review.argument_hint.as_deref(), Some("FILE MODE"));
    assert_eq!(review.permission_effect, PermissionEffect::Allow);
    assert_eq!(listed.problems.len(), 1, "{:?}", listed.problems);
    assert!(listed.problems[0].location.ends_with("broken/SKILL.md"));
    assert!(listed.problems[0].reason.contains("front matter"), "{}", listed.problems[0].reason);
    assert!(!listed.problems[0].reason.contains("unclosed"), "reasons never echo the file's content");
}

#[tokio::test]
async fn a_restrictive_policy_hides_a_skill_and_rendering_fills_the_arguments() {
    let daemon = daemon_with_skills(Some(
        "[permissions]\nrules = [{ effect = \"deny\", tool = \"skill\", resource = \"skill:deploy\" }]\n",
    ));
    let (client, _) = daemon.client().await;
    let session = daemon.create_session(&client).await;
    let listed =
        client.call::<method::SkillsList>(SessionIdParams { session_id: session.session_id.clone() }).await.unwrap();
    let deploy = listed.skills.iter().find(|skill| skill.name == "deploy").unwrap();
    assert!(!deploy.visible);
    assert_eq!(deploy.permission_effect, PermissionEffect::Deny);
    let get = |name: &str, arguments: &str| {
        client.call::<method::SkillsGet>(SkillsGetParams {
            session_id: session.session_id.clone(),
            name: name.into(),
            arguments: arguments.into(),
        })
    };
    let denied = get("deploy", "").await.unwrap_err();
    assert!(matches!(&denied, ClientError::Rpc(e) if e.typed_code() == Some("skill_not_allowed")), "{denied:?}");
    let missing = get("nope", "").await.unwrap_err();
    assert!(matches!(&missing, ClientError::Rpc(e) if e.typed_code() == Some("skill_not_found")), "{missing:?}");
    let rendered = get("review", "\"src/main rs\" strict").await.unwrap();
    assert_eq!(rendered.rendered.trim(), "Review src/main rs in strict mode.");
    assert_eq!(rendered.skill.source, SkillSource::Project);
}

#[tokio::test]
async fn a_user_invokes_a_skill_by_name_and_the_model_through_the_skill_tool() {
    let daemon = daemon_with_skills(None);
    let (client, mut deliveries) = daemon.client().await;
    let session = daemon.create_session(&client).await;
    client.subscribe(&session.session_id, None).await.unwrap();

    // `/review a.rs quick` reaches the model as the rendered skill; echo answers with what it received.
    start_run(&client, &session.session_id, echo_selection(), "/review a.rs quick").await;
    let events = events_until(&mut deliveries, is_terminal).await;
    let started = events.iter().find_map(|e| match &e.payload {
        EventPayload::RunStarted { input, skill, .. } => Some((input.clone(), skill.clone())),
        _ => None,
    });
    let (input, skill) = started.unwrap();
    assert_eq!(input, "/review a.rs quick");
    let skill = skill.expect("the invocation is recorded");
    assert_eq!(
        (skill.name.as_str(), skill.arguments.as_str(), skill.source),
        ("review", "a.rs quick", SkillSource::Project)
    );
    let EventPayload::RunCompleted { final_text: Some(answer) } = &events.last().unwrap().payload else { panic!() };
    assert_eq!(answer.trim(), "Review a.rs in quick mode.");

    // The model calls the skill tool.
    connect_script(
        &client,
        daemon.data_path(),
        json!({"turns": [
            {"tool_calls": [{"tool": "skill", "arguments": {"name": "deploy"}}]},
            {"text": "deployed"}
        ]}),
    )
    .await;
    let (other_client, mut other) = daemon.client().await;
    let fresh = daemon.create_session(&other_client).await;
    other_client.subscribe(&fresh.session_id, None).await.unwrap();
    start_run(&other_client, &fresh.session_id, selection_of("default", "local/scripted"), "go").await;
    let events = events_until(&mut other, is_terminal).await;
    let result = events.iter().find_map(|e| match &e.payload {
        EventPayload::ToolCallTerminated { result, .. } => Some(result.clone()),
        _ => None,
    });
    let result = result.unwrap();
    assert_eq!(result.status, ToolResultStatus::Ok);
    assert_eq!(result.output.trim(), "Deploy now.");
}
