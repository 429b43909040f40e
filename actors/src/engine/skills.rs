//! Skills as the engine sees them for one session: which skills it has, the permission effect of invoking each
//! (as the run that would use it decides), and a user's `/<name>` input turned into the invocation to record or a
//! clear refusal.

use std::path::PathBuf;

use troupe_protocol::RpcError;
use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::session::PermissionMode;
use troupe_protocol::types::skills::{
    PermissionEffect, SkillInvocation, SkillProblemInfo, SkillsGetParams, SkillsGetResult, SkillsListResult,
};
use troupe_runtime::policy::{Decision, decide};
use troupe_runtime::tools::{PermissionRequest, skill_resource};

use super::Engine;
use crate::error::EngineError;
use crate::ports::approval::{PermissionView, TreePermissions};
use crate::session_supervisor::{ApprovalsFor, IndexedMeta};

impl Engine {
    /// `skills.list`: the session's skills with their effects, and the problems found discovering them.
    pub(super) async fn list_skills(&self, params: SessionIdParams) -> Result<SkillsListResult, RpcError> {
        let SessionSkills { discovery, effects } = self.session_skills(&params.session_id, None).await?;
        let skills = discovery
            .skills
            .iter()
            .zip(&effects)
            .map(|(found, effect)| troupe_runtime::skills::describe(found, *effect))
            .collect();
        let problems = discovery
            .problems
            .iter()
            .map(|problem| SkillProblemInfo {
                source: problem.source,
                location: problem.location.to_string_lossy().into_owned(),
                reason: problem.reason.clone(),
            })
            .collect();
        Ok(SkillsListResult { skills, problems })
    }

    /// `skills.get`: one skill, rendered with the arguments, unless the session's policy denies invoking it.
    pub(super) async fn get_skill(&self, params: SkillsGetParams) -> Result<SkillsGetResult, RpcError> {
        let skills = self.session_skills(&params.session_id, None).await?;
        let Some((found, effect)) = skills.winner(&params.name) else {
            return Err(EngineError::SkillNotFound { name: params.name }.into());
        };
        if effect == PermissionEffect::Deny {
            return Err(EngineError::SkillNotAllowed { name: params.name }.into());
        }
        Ok(SkillsGetResult {
            skill: troupe_runtime::skills::describe(found, effect),
            rendered: troupe_runtime::skills::render(&found.skill, &params.arguments),
        })
    }
}

impl Engine {
    /// The skills a session sees, each with the permission effect of invoking it in the run that will use it:
    /// under the policy of that run's agent (`selection`'s; without one, the agent of the session's latest run,
    /// else of its creation selection), with the session's overlay applied as a run applies it (the tree's
    /// permission mode and grants). Reads the skill files on a blocking thread.
    pub(super) async fn session_skills(
        &self,
        session_id: &str,
        selection: Option<&troupe_protocol::types::common::RunSelection>,
    ) -> Result<SessionSkills, EngineError> {
        let meta = self.supervisor_ask(IndexedMeta { session_id: session_id.to_owned() }).await??;
        let agent = match selection {
            Some(selection) => selection.agent.clone(),
            None => self.ask_session(session_id, || crate::session_actor::NextRunSelection).await?.agent,
        };
        let policy = self.services.policy_for(&agent)?;
        let approvals = self.supervisor_ask(ApprovalsFor { session_id: session_id.to_owned() }).await??;
        let cwd = PathBuf::from(&meta.cwd);
        let data_dir = self.services.data_dir.clone();
        let discovery = tokio::task::spawn_blocking(move || troupe_runtime::skills::discover(&cwd, &data_dir))
            .await
            .map_err(|error| EngineError::Internal { detail: format!("skill discovery failed: {error}") })?;
        troupe_runtime::skills::warn_once(&discovery.problems);
        // Fails closed as a run does: without the tree's answer the mode is `ask` and nothing is granted.
        let view = approvals
            .send(TreePermissions)
            .await
            .unwrap_or_else(|_| PermissionView::without_grants(PermissionMode::Ask));
        let mut effects = Vec::with_capacity(discovery.skills.len());
        for found in &discovery.skills {
            let request = skill_request(&found.skill.name);
            let granted = view.granted(request.action, &request.resource);
            let evaluation = policy.evaluate("skill", &request);
            // The low-risk classifier approves reads of paths inside the cwd; `skill:<name>` is not a path, so it
            // never approves a skill, in a run or here.
            let low_risk = false;
            effects.push(match decide(view.mode, &evaluation, &request, granted, low_risk) {
                Decision::Allow { .. } | Decision::AllowOnceByMode => PermissionEffect::Allow,
                Decision::AskUser { .. } => PermissionEffect::Ask,
                Decision::Deny { .. } => PermissionEffect::Deny,
            });
        }
        Ok(SessionSkills { discovery, effects })
    }

    /// When `input` starts with `/<name>` naming a skill the user may invoke, the invocation to record. The
    /// skill's effect is the one in a run of `selection`'s agent. A `/<name>` that looks like a skill name but
    /// names none is refused (`skill_not_found`, -32602) rather than sent to the model as text; `//text` is the
    /// escape for a literal `/text` (see [`literal_input`]).
    pub(super) async fn skill_invocation(
        &self,
        session_id: &str,
        selection: &troupe_protocol::types::common::RunSelection,
        input: &str,
    ) -> Result<Option<SkillInvocation>, EngineError> {
        let Some(rest) = input.strip_prefix('/') else { return Ok(None) };
        let (name, arguments) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        if !troupe_runtime::skills::front_matter::is_valid_skill_name(name) {
            return Ok(None);
        }
        let skills = self.session_skills(session_id, Some(selection)).await?;
        let Some((found, effect)) = skills.winner(name) else {
            return Err(unknown_skill(name, &skills));
        };
        if !found.skill.user_invocable || effect == PermissionEffect::Deny {
            return Err(EngineError::SkillNotAllowed { name: name.to_owned() });
        }
        Ok(Some(SkillInvocation {
            name: name.to_owned(),
            arguments: arguments.trim().to_owned(),
            source: found.skill.source,
            rendered: troupe_runtime::skills::render(&found.skill, arguments.trim()),
        }))
    }
}

/// The skills a session sees, with the permission effect of invoking each (same order).
pub(super) struct SessionSkills {
    pub(super) discovery: troupe_runtime::skills::Discovery,
    pub(super) effects: Vec<PermissionEffect>,
}

impl SessionSkills {
    /// The skill that wins for `name` (the project copy over the user's), with its effect.
    pub(super) fn winner(&self, name: &str) -> Option<(&troupe_runtime::skills::DiscoveredSkill, PermissionEffect)> {
        self.discovery
            .skills
            .iter()
            .zip(&self.effects)
            .find(|(found, _)| found.precedence_winner && found.skill.name == name)
            .map(|(found, effect)| (found, *effect))
    }
}

/// The refusal of `/<name>` when no skill of that name exists: -32602 `skill_not_found`, naming a few skills the
/// user may invoke, and the `//` escape for a literal slash.
fn unknown_skill(name: &str, skills: &SessionSkills) -> EngineError {
    let invocable: Vec<&str> = skills
        .discovery
        .skills
        .iter()
        .filter(|found| found.precedence_winner && found.skill.user_invocable)
        .map(|found| found.skill.name.as_str())
        .collect();
    let shown = invocable.iter().take(8).map(|name| format!("/{name}")).collect::<Vec<_>>().join(", ");
    let available = match invocable.len() {
        0 => "this session has no skills".to_owned(),
        count if count > 8 => format!("its skills include {shown} ({count} in all)"),
        _ => format!("its skills are {shown}"),
    };
    let detail = match troupe_runtime::skills::problem_of(&skills.discovery.problems, name) {
        Some(problem) => format!(
            "the skill `{name}` cannot be used: {} ({}); {available}",
            problem.reason,
            problem.location.display()
        ),
        None => format!(
            "there is no skill `{name}` for this session; {available}; start the input with `//` to send a \
             literal `/{name}`"
        ),
    };
    EngineError::UnknownSkillInput { name: name.to_owned(), detail }
}

/// The input a run records: `//text` stands for a literal `/text` (not a skill), anything else as given.
pub(super) fn literal_input(input: &str) -> String {
    match input.strip_prefix("//") {
        Some(rest) => format!("/{rest}"),
        None => input.to_owned(),
    }
}

/// What invoking the skill `name` asks of the permission check: a read of `skill:<name>`.
fn skill_request(name: &str) -> PermissionRequest {
    PermissionRequest {
        action: PermissionAction::Read,
        resource: skill_resource(name),
        summary: format!("use the skill {name}"),
        inside_cwd: true,
    }
}
