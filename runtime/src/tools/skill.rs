//! `skill`: the model invokes a skill by name and receives its rendered instructions.
//!
//! Skills are the project's (`<cwd>/.troupe/skills`) and the user's (`<data_dir>/skills`), the project copy
//! winning, as `skills.list` shows them. Invoking one is a read of the pseudo-resource `skill:<name>`, so the
//! permission policy governs it like any other call: a rule that denies `skill:<name>` hides the skill from
//! `skills.list` and refuses this tool. The call and its rendered result are recorded in the log as the tool
//! call's events.

use std::path::{Path, PathBuf};

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::json;
use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::run::PersistedToolResult;

use super::error::ToolError;
use super::file_tool::{execute_here, on_blocking_pool};
use super::results::{self, parse_arguments};
use super::{InPlaceTool, PermissionRequest, Tool, ToolContext, ToolDefinition};
use crate::skills;

const NAME: &str = "skill";

/// The resource a skill invocation is checked against.
pub fn skill_resource(name: &str) -> String {
    format!("skill:{name}")
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Arguments {
    name: String,
    #[serde(default)]
    arguments: String,
}

/// Holds the data directory, where user skills live; the cwd comes with each call.
pub struct SkillTool {
    data_dir: PathBuf,
}

impl SkillTool {
    pub fn new(data_dir: PathBuf) -> Self {
        SkillTool { data_dir }
    }
}

impl Tool for SkillTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: NAME.to_owned(),
            description: "Load a skill: named instructions from the project (.troupe/skills) or the user. Returns \
                          the skill's instructions with the arguments filled in; follow them."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "The skill's name."},
                    "arguments": {"type": "string", "description": "Arguments for the skill, as one string. Default: none."}
                },
                "required": ["name"],
                "additionalProperties": false
            }),
        }
    }

    fn permission(&self, arguments: &serde_json::Value, _cwd: &Path) -> Result<PermissionRequest, ToolError> {
        let arguments: Arguments = parse_arguments(NAME, arguments)?;
        Ok(PermissionRequest {
            action: PermissionAction::Read,
            resource: skill_resource(&arguments.name),
            summary: format!("use the skill {}", arguments.name),
            inside_cwd: true,
        })
    }

    fn in_place(&self) -> Option<&dyn InPlaceTool> {
        Some(self)
    }

    fn execute(&self, arguments: serde_json::Value, context: ToolContext) -> BoxFuture<'static, PersistedToolResult> {
        let data_dir = self.data_dir.clone();
        on_blocking_pool(move || load(&data_dir, arguments, context))
    }
}

impl InPlaceTool for SkillTool {
    fn execute_in_place(&self, arguments: serde_json::Value, context: ToolContext) -> PersistedToolResult {
        load(&self.data_dir, arguments, context)
    }
}

/// The whole call, on a thread that may block: the skills discovered now, and the one named rendered.
fn load(data_dir: &Path, arguments: serde_json::Value, context: ToolContext) -> PersistedToolResult {
    let cancelled = Some("cancelled before loading the skill");
    execute_here(NAME, arguments, context, cancelled, |arguments: Arguments, context| {
        let discovery = skills::discover(&context.cwd, data_dir);
        match discovery.winner(&arguments.name) {
            Some(found) => results::ok(skills::render(&found.skill, &arguments.arguments)),
            None => {
                let known: Vec<&str> = discovery
                    .skills
                    .iter()
                    .filter(|found| found.precedence_winner)
                    .map(|found| found.skill.name.as_str())
                    .collect();
                results::error(format!("there is no skill `{}`; the skills are: {}", arguments.name, known.join(", ")))
            }
        }
    })
}
