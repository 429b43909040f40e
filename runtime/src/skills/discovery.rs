//! Walking the two skills roots and loading every `<name>/SKILL.md` found there.
//!
//! A root that does not exist holds no skills and is no problem: most projects have none. Entries of a root are
//! visited by name, so problems come out in a stable order. Plain files and names starting with `.` are skipped
//! (a README beside the skills, an editor's or version control's directory). A symlinked skill directory or
//! `SKILL.md` is followed only while its target stays inside the root's canonical path: a cloned repository
//! must not be able to point a "skill" at `~/.ssh` and have it read and served.

use std::collections::HashSet;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use super::front_matter::parse_skill_file;
use super::{
    DiscoveredSkill, Discovery, MAX_SKILL_FILE_BYTES, SKILL_FILE_NAME, SkillProblem, SkillSource, project_skills_root,
    user_skills_root,
};

/// Discovers the project's skills under `<cwd>/.troupe/skills` and the user's under `<data_dir>/skills`. Both
/// copies of a name are listed, the project copy first and marked as the precedence winner. Never fails: what
/// cannot be loaded is a [`SkillProblem`].
pub fn discover(cwd: &Path, data_dir: &Path) -> Discovery {
    let mut discovery = Discovery::default();
    // The project's root is text a model can write: reached through a symlink (`.troupe -> ~/.ssh`), it would have
    // the daemon read a denied folder for it. So it must be where it says it is.
    let project_root = project_skills_root(cwd);
    // The session's cwd is recorded canonical and must still be that folder (the tools' own check, no symlink
    // followed): one replaced by a symlink since would have its skills read from another folder.
    match crate::tools::check_session_cwd(cwd) {
        Ok(()) => scan_root(&project_root, Some(&project_root), SkillSource::Project, &mut discovery),
        // A cwd that is gone has no project skills to read.
        Err(crate::tools::CwdProblem::Inaccessible { .. }) => {}
        Err(problem) => discovery.problems.push(SkillProblem {
            source: SkillSource::Project,
            location: project_root.clone(),
            reason: format!("{problem}; its project skills are not read"),
        }),
    }
    scan_root(&user_skills_root(data_dir), None, SkillSource::User, &mut discovery);

    let project_names: HashSet<String> = discovery
        .skills
        .iter()
        .filter(|discovered| discovered.skill.source == SkillSource::Project)
        .map(|discovered| discovered.skill.name.clone())
        .collect();
    for discovered in &mut discovery.skills {
        discovered.precedence_winner =
            discovered.skill.source == SkillSource::Project || !project_names.contains(&discovered.skill.name);
    }
    discovery.skills.sort_by(|left, right| {
        let rank = |discovered: &DiscoveredSkill| discovered.skill.source != SkillSource::Project;
        left.skill.name.cmp(&right.skill.name).then(rank(left).cmp(&rank(right)))
    });
    discovery
}

/// Loads the skills of `root`; with `expected`, only when the root's canonical path is exactly that (no symlink on
/// the way).
fn scan_root(root: &Path, expected: Option<&Path>, source: SkillSource, discovery: &mut Discovery) {
    let mut problem = |location: PathBuf, reason: String| {
        discovery.problems.push(SkillProblem { source, location, reason });
    };
    let canonical_root = match fs::canonicalize(root) {
        Ok(canonical_root) => canonical_root,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return,
        Err(error) => return problem(root.to_path_buf(), format!("cannot resolve the skills directory: {error}")),
    };
    if expected.is_some_and(|expected| expected != canonical_root) {
        return problem(
            root.to_path_buf(),
            "the skills directory is reached through a symbolic link, so it is not read".to_owned(),
        );
    }
    if !canonical_root.is_dir() {
        return problem(root.to_path_buf(), "the skills directory is not a directory".to_owned());
    }
    let mut entries = match fs::read_dir(root).and_then(|entries| entries.collect::<io::Result<Vec<_>>>()) {
        Ok(entries) => entries,
        Err(error) => return problem(root.to_path_buf(), format!("cannot read the skills directory: {error}")),
    };
    entries.sort_by_key(|entry| entry.file_name());

    for entry in entries {
        let path = entry.path();
        let file_name = entry.file_name();
        if file_name.as_encoded_bytes().starts_with(b".") {
            continue;
        }
        match load_entry(&entry, &canonical_root, source) {
            Ok(Some(skill)) => discovery.skills.push(DiscoveredSkill { skill, precedence_winner: false }),
            Ok(None) => {}
            Err((location, reason)) => problem(location.unwrap_or(path), reason),
        }
    }
}

/// Loads one entry of a skills root: `Ok(None)` for an entry that is not a skill directory, `Err` with the path
/// the problem is about (the entry itself when `None`) and the reason.
fn load_entry(
    entry: &fs::DirEntry,
    canonical_root: &Path,
    source: SkillSource,
) -> Result<Option<super::Skill>, (Option<PathBuf>, String)> {
    let directory = entry.path();
    let file_type = entry.file_type().map_err(|error| (None, format!("cannot inspect: {error}")))?;
    if file_type.is_symlink() {
        let target =
            resolve_inside(&directory, "the skill directory", canonical_root).map_err(|reason| (None, reason))?;
        if !target.is_dir() {
            return Ok(None);
        }
    } else if !file_type.is_dir() {
        return Ok(None);
    }

    let skill_file = directory.join(SKILL_FILE_NAME);
    let in_file = |reason: String| (Some(skill_file.clone()), reason);
    let Some(directory_name) = entry.file_name().to_str().map(str::to_owned) else {
        return Err(in_file("the directory name is not valid UTF-8".to_owned()));
    };
    let text = read_skill_file(&skill_file, canonical_root).map_err(in_file)?;
    parse_skill_file(&text, &directory_name, source, skill_file.clone()).map(Some).map_err(in_file)
}

/// Reads a `SKILL.md`, refusing one that is missing, not a regular file, a symlink out of the root, too large or
/// not UTF-8.
fn read_skill_file(skill_file: &Path, canonical_root: &Path) -> Result<String, String> {
    let metadata = match fs::symlink_metadata(skill_file) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Err(format!("missing {SKILL_FILE_NAME}")),
        Err(error) => return Err(format!("cannot inspect {SKILL_FILE_NAME}: {error}")),
    };
    if metadata.file_type().is_symlink() {
        resolve_inside(skill_file, SKILL_FILE_NAME, canonical_root)?;
    }
    // Without blocking: a FIFO (or a symlink that became one) would hold the open until a writer came, pinning
    // the daemon's thread and the `skills.list` or `/skill` run that asked. Checked as a regular file once open.
    let file =
        crate::regular_file::open_regular(skill_file, crate::regular_file::Links::Follow).map_err(
            |error| match error.kind() {
                io::ErrorKind::InvalidInput => format!("{SKILL_FILE_NAME} is not a regular file"),
                _ => format!("cannot read {SKILL_FILE_NAME}: {error}"),
            },
        )?;
    let metadata = file.metadata().map_err(|error| format!("cannot inspect {SKILL_FILE_NAME}: {error}"))?;
    let too_large = || format!("{SKILL_FILE_NAME} is larger than the limit of {MAX_SKILL_FILE_BYTES} bytes");
    if metadata.len() > MAX_SKILL_FILE_BYTES {
        return Err(too_large());
    }
    // The length is checked again while reading, since the file may grow after the check above.
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or(0));
    file.take(MAX_SKILL_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| format!("cannot read {SKILL_FILE_NAME}: {error}"))?;
    if bytes.len() as u64 > MAX_SKILL_FILE_BYTES {
        return Err(too_large());
    }
    String::from_utf8(bytes)
        .map_err(|error| format!("{SKILL_FILE_NAME} is not valid UTF-8 (at byte {})", error.utf8_error().valid_up_to()))
}

/// The canonical target of the symlink `path` (described as `what` in reasons), if it lies inside
/// `canonical_root`; otherwise a problem reason.
fn resolve_inside(path: &Path, what: &str, canonical_root: &Path) -> Result<PathBuf, String> {
    let target =
        fs::canonicalize(path).map_err(|error| format!("{what} is a symlink that cannot be resolved: {error}"))?;
    if target.starts_with(canonical_root) {
        Ok(target)
    } else {
        Err(format!("{what} is a symlink to outside its skills directory; not followed"))
    }
}
