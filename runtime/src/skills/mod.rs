//! Skills: reusable instructions a user or a project keeps as `SKILL.md` files, discovered from disk and rendered
//! with arguments for `skills.list` and `skills.get`.
//!
//! A skill lives in a directory of its own, `<name>/SKILL.md`, under one of two roots:
//!
//! - the project's, `<cwd>/.troupe/skills/` ([`SkillSource::Project`]);
//! - the user's, `<data_dir>/skills/` ([`SkillSource::User`]).
//!
//! The file opens with YAML front matter between two `---` lines and continues with a Markdown body (see
//! [`front_matter`] for the keys). When both roots hold a skill of the same name, both are listed and the project
//! copy is the [`DiscoveredSkill::precedence_winner`], because a repository's own instructions are more specific
//! than a user's general ones.
//!
//! Everything here is pure and blocking: [`discover`] reads the file system and never fails as a whole. A broken
//! skill becomes a [`SkillProblem`] beside the skills that did load, so one malformed file never hides the others.
//! Problem reasons name paths, line and column, and at most the offending key or name, never file contents: a
//! `SKILL.md` may be a symlink an attacker planted, and its target is none of the client's business.
//!
//! Permissions are the caller's: the engine decides from the session's run policy what invoking a skill would
//! do (`allow`, `ask` or `deny`) and passes that to [`describe`], which turns a discovered skill into the wire's
//! [`SkillDescriptor`]. [`render`] substitutes arguments into the body for `skills.get`'s preview and for the
//! model.
//!
//! *Architecture Invariant*: nothing in this module follows a symlink out of its skills root, and nothing reads
//! more than [`MAX_SKILL_FILE_BYTES`] of a skill file.

mod discovery;
pub mod front_matter;
mod render;

use std::path::{Path, PathBuf};

pub use troupe_protocol::types::skills::{PermissionEffect, SkillDescriptor, SkillSource};

pub use discovery::discover;
pub use render::{render, split_arguments};

/// The file that makes a directory a skill.
pub const SKILL_FILE_NAME: &str = "SKILL.md";

/// The largest `SKILL.md` that is read. A skill is a page of instructions; anything bigger is a mistake (or an
/// attempt to flood the model's context), and is reported rather than loaded.
pub const MAX_SKILL_FILE_BYTES: u64 = 256 * 1024;

/// The longest skill name, in characters.
pub const MAX_SKILL_NAME_CHARS: usize = 64;

/// The project's skills root: `<cwd>/.troupe/skills`.
pub fn project_skills_root(cwd: &Path) -> PathBuf {
    cwd.join(".troupe").join("skills")
}

/// The user's skills root: `<data_dir>/skills`.
pub fn user_skills_root(data_dir: &Path) -> PathBuf {
    data_dir.join("skills")
}

/// One skill, parsed from its `SKILL.md`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skill {
    /// Equal to the name of the skill's directory: 1 to 64 characters of `a-z`, `0-9` and `-`.
    pub name: String,
    /// What the skill does; never empty.
    pub description: String,
    /// When the model should use the skill.
    pub when_to_use: Option<String>,
    /// A hint for the arguments a user may pass, e.g. `<file>`.
    pub argument_hint: Option<String>,
    /// Whether a user may invoke the skill directly (as a slash command). True unless the front matter says no.
    pub user_invocable: bool,
    /// The tools the skill says it needs, in the order given.
    pub allowed_tools: Vec<String>,
    /// The Markdown after the front matter, without leading blank lines or trailing whitespace.
    pub body: String,
    pub source: SkillSource,
    /// The path of the `SKILL.md`, under its skills root as found (not canonicalized).
    pub location: PathBuf,
}

/// A skill directory (or skills root) that could not be loaded, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillProblem {
    pub source: SkillSource,
    /// The `SKILL.md`, or the directory or root the problem is about.
    pub location: PathBuf,
    /// A sentence for a human. It holds no file content beyond an offending key or name and a line and column.
    pub reason: String,
}

/// What [`discover`] found: the skills that loaded and the problems with the ones that did not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Discovery {
    /// Sorted by name, then the project copy before the user copy.
    pub skills: Vec<DiscoveredSkill>,
    /// In the order found: the project root first, each root's directories by name.
    pub problems: Vec<SkillProblem>,
}

impl Discovery {
    /// The copy of `name` that takes precedence, if any loaded.
    pub fn winner(&self, name: &str) -> Option<&DiscoveredSkill> {
        self.skills.iter().find(|discovered| discovered.precedence_winner && discovered.skill.name == name)
    }
}

/// A loaded skill and whether it is the copy of its name that counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoveredSkill {
    pub skill: Skill,
    /// False when a project copy of the same name shadows this user copy.
    pub precedence_winner: bool,
}

/// The problem that keeps a skill named `name` from loading, if one does: the one about its directory or its
/// `SKILL.md` in either root.
pub fn problem_of<'a>(problems: &'a [SkillProblem], name: &str) -> Option<&'a SkillProblem> {
    problems.iter().find(|problem| {
        let directory = match problem.location.file_name() {
            Some(file) if file == SKILL_FILE_NAME => problem.location.parent(),
            _ => Some(problem.location.as_path()),
        };
        directory.and_then(Path::file_name).is_some_and(|directory| directory == name)
    })
}

/// Logs each problem at warn the first time this process sees it (its location and reason), so an operator
/// learns of a broken `SKILL.md` once rather than at every listing. At most [`MAX_WARNED_PROBLEMS`] are
/// remembered; past that, nothing more is logged.
pub fn warn_once(problems: &[SkillProblem]) {
    static WARNED: std::sync::Mutex<Vec<(PathBuf, String)>> = std::sync::Mutex::new(Vec::new());
    if problems.is_empty() {
        return;
    }
    let mut warned = WARNED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    for problem in problems {
        let key = (problem.location.clone(), problem.reason.clone());
        if warned.len() >= MAX_WARNED_PROBLEMS || warned.contains(&key) {
            continue;
        }
        tracing::warn!(location = %problem.location.display(), reason = %problem.reason, "a skill cannot be used");
        warned.push(key);
    }
}

/// How many distinct skill problems [`warn_once`] remembers.
pub const MAX_WARNED_PROBLEMS: usize = 1024;

/// Turns a discovered skill into its wire descriptor. `permission_effect` is what the governing run policy
/// decides for invoking this skill. The skill is visible to the model for `allow` and `ask`; for `deny` (and any
/// effect added later, unless listed here) it is listed but not visible: fail closed.
pub fn describe(discovered: &DiscoveredSkill, permission_effect: PermissionEffect) -> SkillDescriptor {
    let skill = &discovered.skill;
    SkillDescriptor {
        name: skill.name.clone(),
        description: skill.description.clone(),
        source: skill.source,
        location: skill.location.to_string_lossy().into_owned(),
        precedence_winner: discovered.precedence_winner,
        visible: matches!(permission_effect, PermissionEffect::Allow | PermissionEffect::Ask),
        permission_effect,
        user_invocable: skill.user_invocable,
        argument_hint: skill.argument_hint.clone(),
        when_to_use: skill.when_to_use.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_is_found_by_the_name_of_its_skill_directory() {
        let problem = |location: &str| SkillProblem {
            source: SkillSource::Project,
            location: PathBuf::from(location),
            reason: "front matter is missing the required key `description`".to_owned(),
        };
        let problems = vec![problem("/p/.troupe/skills/broken/SKILL.md"), problem("/d/skills/odd")];
        assert_eq!(problem_of(&problems, "broken"), Some(&problems[0]));
        assert_eq!(problem_of(&problems, "odd"), Some(&problems[1]));
        assert_eq!(problem_of(&problems, "skills"), None);
        assert_eq!(problem_of(&problems, "other"), None);
    }
}
