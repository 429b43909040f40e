//! The `delegate` tool as the model sees it: its description (with the agents it may name), its arguments, and
//! the result a child's end becomes.

use serde::Deserialize;
use serde_json::json;
use troupe_protocol::types::events::DelegateStatus;
use troupe_protocol::types::run::ToolResultStatus;
use troupe_protocol::types::runtime::AgentInfo;
use troupe_runtime::model::{ToolCallRequest, ToolSpec};

use crate::run_registry::RunEnd;

/// The tool's name.
pub const DELEGATE_TOOL: &str = "delegate";

/// The most of a child's final text a parent's tool result carries; beyond it the text is cut (at a character
/// boundary) and a note says where the whole answer is.
pub const SUMMARY_MAX_BYTES: usize = 16 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DelegateArguments {
    pub(super) agent: String,
    pub(super) task: String,
}

/// Agents named in the tool's description, and the characters of each agent's description shown there.
const LISTED_AGENTS: usize = 32;

const LISTED_DESCRIPTION_CHARS: usize = 200;

/// What the model is told about the tool, with the agents it may name (from the runtime snapshot).
pub(super) fn spec(agents: &[AgentInfo]) -> ToolSpec {
    let mut description = "Hand a self-contained task to an agent, which works on it in a child session with its \
                           own history and tools and answers with its final text, returned here. The agent does not \
                           see this conversation: say everything it needs in `task`. Several delegate calls in one \
                           turn run at the same time. The agents:"
        .to_owned();
    for agent in agents.iter().take(LISTED_AGENTS) {
        let about: String = agent.description.chars().take(LISTED_DESCRIPTION_CHARS).collect();
        match about.trim() {
            "" => description.push_str(&format!(" `{}`;", agent.agent)),
            about => description.push_str(&format!(" `{}` ({about});", agent.agent)),
        }
    }
    if agents.len() > LISTED_AGENTS {
        description.push_str(&format!(" and {} more.", agents.len() - LISTED_AGENTS));
    }
    ToolSpec {
        name: DELEGATE_TOOL.into(),
        description,
        parameters: json!({
            "type": "object",
            "properties": {
                "agent": {"type": "string", "description": "The agent's name."},
                "task": {"type": "string", "description": "What the agent should do, with all the context it needs."}
            },
            "required": ["agent", "task"],
            "additionalProperties": false
        }),
    }
}

/// Whether a call is a `delegate` call (the calls of one turn that may run concurrently).
pub(in crate::run_actor) fn is_delegate(call: &ToolCallRequest) -> bool {
    call.tool == DELEGATE_TOOL
}

/// How the child's run ended, for the parent's log and tool result.
pub(super) fn finished(end: RunEnd, child_session_id: &str) -> (DelegateStatus, ToolResultStatus, String) {
    match end {
        RunEnd::Completed { final_text } => {
            (DelegateStatus::Completed, ToolResultStatus::Ok, bounded(final_text, child_session_id))
        }
        RunEnd::Failed { error } => (
            DelegateStatus::Failed,
            ToolResultStatus::Error,
            bounded(format!("the agent's run failed: {error}"), child_session_id),
        ),
        RunEnd::Cancelled => {
            (DelegateStatus::Cancelled, ToolResultStatus::Cancelled, "the agent's run was cancelled".to_owned())
        }
        RunEnd::Interrupted => (
            DelegateStatus::Interrupted,
            ToolResultStatus::Error,
            "the agent's run was interrupted (its session or the daemon stopped)".to_owned(),
        ),
    }
}

/// `text` cut to [`SUMMARY_MAX_BYTES`] at a character boundary, with a note when it was cut.
pub(super) fn bounded(mut text: String, child_session_id: &str) -> String {
    if text.len() <= SUMMARY_MAX_BYTES {
        return text;
    }
    let total = text.len();
    let mut end = SUMMARY_MAX_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(&format!(
        "\n\n[truncated: the first {end} of {total} bytes; the whole answer is in session {child_session_id}]"
    ));
    text
}

#[cfg(test)]
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_answer_is_cut_at_a_character_boundary_with_a_note() {
        assert_eq!(bounded("short".into(), "c"), "short");
        let long = "é".repeat(SUMMARY_MAX_BYTES); // two bytes each
        let cut = bounded(long, "child-1");
        let (kept, note) = cut.split_once("\n\n[truncated").expect("a note");
        assert!(kept.len() <= SUMMARY_MAX_BYTES && kept.chars().all(|c| c == 'é'));
        assert!(note.contains(&format!("of {} bytes", 2 * SUMMARY_MAX_BYTES)) && note.contains("child-1"), "{note}");
    }

    #[test]
    fn consecutive_delegate_calls_form_one_batch_and_other_calls_run_alone() {
        let call = |tool: &str| ToolCallRequest { tool_call_id: tool.into(), tool: tool.into(), arguments: json!({}) };
        let calls = [call("delegate"), call("delegate"), call("shell"), call("read_file"), call("delegate")];
        let sizes: Vec<usize> = crate::run_actor::call_batches(&calls).iter().map(|batch| batch.len()).collect();
        assert_eq!(sizes, [2, 1, 1, 1]);
        assert!(crate::run_actor::call_batches(&[]).is_empty());
    }

    #[test]
    fn the_description_lists_the_agents_within_bounds() {
        let agent = |name: String, description: &str| AgentInfo {
            agent: name,
            description: description.into(),
            mode: troupe_protocol::types::runtime::AgentMode::Primary,
            models: Vec::new(),
        };
        let listed = spec(&[agent("default".into(), ""), agent("helper".into(), "reads code")]).description;
        assert!(listed.ends_with("The agents: `default`; `helper` (reads code);"), "{listed}");
        let many: Vec<AgentInfo> = (0..40).map(|index| agent(format!("a{index}"), &"d".repeat(500))).collect();
        let listed = spec(&many).description;
        assert!(listed.ends_with("and 8 more.") && !listed.contains(&"d".repeat(201)), "{listed}");
    }

    #[test]
    fn each_end_maps_to_a_delegate_status_and_a_tool_status() {
        let completed = finished(RunEnd::Completed { final_text: "42".into() }, "c");
        assert_eq!(completed, (DelegateStatus::Completed, ToolResultStatus::Ok, "42".to_owned()));
        let failed = finished(RunEnd::Failed { error: "boom".into() }, "c");
        assert_eq!((failed.0, failed.1), (DelegateStatus::Failed, ToolResultStatus::Error));
        assert!(failed.2.contains("boom"));
        assert_eq!(finished(RunEnd::Cancelled, "c").0, DelegateStatus::Cancelled);
        assert_eq!(finished(RunEnd::Interrupted, "c").0, DelegateStatus::Interrupted);
    }
}
