//! Skills: `skills.list` and `skills.get`. Both are session-aware, because which skills are visible and what
//! their permission effect is depends on the session's run policy.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SkillSource {
    /// From the user's skills directory.
    User,
    /// From the session's working directory.
    Project,
}

/// What a session's permission rules decide for loading a skill (`skills.list`, `skills.get`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PermissionEffect {
    /// Loaded without asking.
    Allow,
    /// Loaded after a user approves.
    Ask,
    /// Never loaded: the skill is hidden from the model and refused to the user.
    Deny,
}

/// One discovered skill.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SkillDescriptor {
    pub name: String,
    pub description: String,
    pub source: SkillSource,
    /// Path of the skill's file.
    pub location: String,
    /// False when another skill with the same name takes precedence (project over user).
    pub precedence_winner: bool,
    /// Whether the session's policy lets the model see this skill.
    pub visible: bool,
    /// What the session's permission rules decide for loading this skill.
    pub permission_effect: PermissionEffect,
    /// Whether a user may invoke the skill directly (as a slash command).
    pub user_invocable: bool,
    /// A hint for the arguments a user may pass, e.g. `<file>`. Required, may be null.
    pub argument_hint: Option<String>,
    /// When the model should use the skill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_to_use: Option<String>,
}

/// `skills.list` result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SkillsListResult {
    /// Sorted by name; shadowed skills are included with `precedence_winner: false`.
    pub skills: Vec<SkillDescriptor>,
    /// SKILL.md files that could not be read, each with a safe reason. The other skills are still listed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<SkillProblemInfo>,
}

/// A skill file that could not be used.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SkillProblemInfo {
    pub source: SkillSource,
    pub location: String,
    pub reason: String,
}

/// A skill a user invoked by naming it at the start of a run's input (`/name arguments`), as recorded in
/// `run_started`. The rendered text is what the model receives, kept so that replays need not read the file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SkillInvocation {
    pub name: String,
    pub arguments: String,
    pub source: SkillSource,
    pub rendered: String,
}

/// `skills.get` params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SkillsGetParams {
    pub session_id: String,
    pub name: String,
    /// The argument text substituted into the skill; empty when absent.
    #[serde(default)]
    pub arguments: String,
}

/// `skills.get` result: a permission-checked preview.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SkillsGetResult {
    pub skill: SkillDescriptor,
    /// The skill's body with `arguments` substituted, as the model would receive it.
    pub rendered: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn arguments_default_to_empty_and_unknown_fields_are_rejected() {
        let params: SkillsGetParams = serde_json::from_value(json!({"session_id": "s", "name": "review"})).unwrap();
        assert_eq!(params.arguments, "");
        let error =
            serde_json::from_value::<SkillsGetParams>(json!({"session_id": "s", "name": "review", "args": "x"}))
                .unwrap_err();
        assert!(error.to_string().contains("unknown field `args`"), "{error}");
    }
}
