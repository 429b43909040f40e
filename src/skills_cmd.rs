//! `troupe skills SESSION`: the skills a session's runs see (`skills.list`), and every `SKILL.md` that could not
//! be used, with the reason, so that a skill that silently vanished (a missing `description`, a bad front matter)
//! is found here.

use troupe_protocol::client::{ClientOptions, ClientProtocol};
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::skills::{PermissionEffect, SkillSource, SkillsListResult};

use crate::cli_errors::explained;
use crate::commands::{Connected, Connection};
use crate::inspect_cmd::{first_line, header_table};
use crate::output::{pretty_json, text};
use crate::session_ref::resolve_session_id;
use crate::style::{Style, clean};

/// `troupe skills SESSION`. Exits 0 even with problems: listing them is what was asked.
pub async fn skills(connection: &Connection, given: &str, json: bool) -> anyhow::Result<()> {
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let session_id = resolve_session_id(&client, given).await?;
    let result = client.skills_list(SessionIdParams { session_id }).await.map_err(explained)?;
    client.close().await;
    if json {
        // Problems are listed even when empty, so scripts can rely on the key.
        return pretty_json(&serde_json::json!({ "skills": result.skills, "problems": result.problems }));
    }
    text(&render_skills(&result, Style::stdout()));
    Ok(())
}

fn source_name(source: SkillSource) -> &'static str {
    match source {
        SkillSource::User => "user",
        SkillSource::Project => "project",
    }
}

/// The skills as a table (name, source, how it may be used, description), then the files that could not be read.
pub fn render_skills(result: &SkillsListResult, style: Style) -> String {
    let mut text = String::new();
    if result.skills.is_empty() {
        text.push_str(
            "no skills (put them in <project>/.troupe/skills/NAME/SKILL.md or <data dir>/skills/NAME/SKILL.md)\n",
        );
    } else {
        let mut rows = vec![["SKILL", "SOURCE", "USE", "DESCRIPTION"].map(str::to_owned).to_vec()];
        for skill in &result.skills {
            let mut use_as = Vec::new();
            if !skill.precedence_winner {
                use_as.push("shadowed".to_owned());
            } else if !skill.visible {
                use_as.push("hidden".to_owned());
            } else {
                if skill.user_invocable {
                    let hint = skill.argument_hint.as_deref().map(clean).map(|hint| format!(" {hint}"));
                    use_as.push(format!("/{}{}", clean(&skill.name), hint.unwrap_or_default()));
                }
                match skill.permission_effect {
                    PermissionEffect::Allow => {}
                    PermissionEffect::Ask => use_as.push("ask".to_owned()),
                    PermissionEffect::Deny => use_as.push("deny".to_owned()),
                }
            }
            rows.push(vec![
                clean(&skill.name),
                source_name(skill.source).to_owned(),
                if use_as.is_empty() { "model".to_owned() } else { use_as.join(", ") },
                first_line(&skill.description, 80),
            ]);
        }
        text.push_str(&header_table(&rows, style));
    }
    if !result.problems.is_empty() {
        text.push_str(&style.yellow(&format!("{} skill file(s) could not be used:", result.problems.len())));
        text.push('\n');
        for problem in &result.problems {
            text.push_str(&format!(
                "  {} ({}): {}\n",
                clean(&problem.location),
                source_name(problem.source),
                first_line(&problem.reason, 200)
            ));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use troupe_protocol::types::skills::{SkillDescriptor, SkillProblemInfo};

    use super::*;

    #[test]
    fn skills_and_unreadable_files_are_both_listed() {
        let result = SkillsListResult {
            skills: vec![SkillDescriptor {
                name: "review".into(),
                description: "Review a file".into(),
                source: SkillSource::Project,
                location: "/p/.troupe/skills/review/SKILL.md".into(),
                precedence_winner: true,
                visible: true,
                permission_effect: PermissionEffect::Allow,
                user_invocable: true,
                argument_hint: Some("FILE".into()),
                when_to_use: None,
            }],
            problems: vec![SkillProblemInfo {
                source: SkillSource::User,
                location: "/d/skills/bare/SKILL.md".into(),
                reason: "front matter is missing the required key `description`".into(),
            }],
        };
        let text = render_skills(&result, Style::plain());
        assert!(text.contains("review  project  /review FILE  Review a file"), "{text}");
        assert!(text.contains("1 skill file(s) could not be used:"), "{text}");
        assert!(
            text.contains("/d/skills/bare/SKILL.md (user): front matter is missing the required key `description`"),
            "{text}"
        );
    }
}
