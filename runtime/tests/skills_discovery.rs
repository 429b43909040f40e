//! Skill discovery against real directories: both sources, precedence, problems beside loaded skills, limits and
//! symlinks, and the wire descriptor.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::fs;
use std::path::{Path, PathBuf};

use troupe_runtime::skills::{
    DiscoveredSkill, Discovery, MAX_SKILL_FILE_BYTES, PermissionEffect, Skill, SkillDescriptor, SkillProblem,
    SkillSource, describe, discover,
};

/// A temporary working directory and data directory, each with its skills root.
struct Roots {
    _temp: tempfile::TempDir,
    cwd: PathBuf,
    data_dir: PathBuf,
}

impl Roots {
    fn new() -> Roots {
        let temp = tempfile::tempdir().unwrap();
        let cwd = temp.path().join("project");
        let data_dir = temp.path().join("data");
        fs::create_dir_all(&cwd).unwrap();
        fs::create_dir_all(&data_dir).unwrap();
        Roots { _temp: temp, cwd, data_dir }
    }

    fn root(&self, source: SkillSource) -> PathBuf {
        match source {
            SkillSource::Project => self.cwd.join(".troupe").join("skills"),
            SkillSource::User => self.data_dir.join("skills"),
        }
    }

    /// Writes `<root>/<directory>/SKILL.md` and returns its path.
    fn write(&self, source: SkillSource, directory: &str, text: &str) -> PathBuf {
        let directory = self.root(source).join(directory);
        fs::create_dir_all(&directory).unwrap();
        let path = directory.join("SKILL.md");
        fs::write(&path, text).unwrap();
        path
    }

    fn discover(&self) -> Discovery {
        discover(&self.cwd, &self.data_dir)
    }
}

fn skill_text(name: &str, description: &str, body: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\n---\n{body}\n")
}

fn summary(discovery: &Discovery) -> Vec<(String, SkillSource, bool)> {
    discovery
        .skills
        .iter()
        .map(|discovered| (discovered.skill.name.clone(), discovered.skill.source, discovered.precedence_winner))
        .collect()
}

fn problem_for<'a>(discovery: &'a Discovery, location: &Path) -> &'a SkillProblem {
    discovery
        .problems
        .iter()
        .find(|problem| problem.location == location)
        .unwrap_or_else(|| panic!("no problem for {}: {:?}", location.display(), discovery.problems))
}

#[test]
fn nothing_is_found_and_nothing_is_wrong_without_skills_directories() {
    let roots = Roots::new();
    assert_eq!(roots.discover(), Discovery::default());
}

#[test]
fn skills_are_discovered_from_both_sources_with_every_field() {
    let roots = Roots::new();
    let project_path = roots.write(
        SkillSource::Project,
        "review",
        "---\nname: review\ndescription: Reviews a change.\nwhen-to-use: Before a commit.\nargument-hint: <file>\n\
         user-invocable: false\nallowed-tools: [read, search]\n---\n\n# Review\n\nRead $1 carefully.\n",
    );
    let user_path = roots.write(
        SkillSource::User,
        "commit",
        "---\ndescription: Writes a commit message.\nwhen_to_use: After a change.\nallowed_tools: shell, read\n---\n\
         Summarize the change.\n",
    );

    let discovery = roots.discover();
    assert_eq!(discovery.problems, []);
    assert_eq!(
        discovery.skills,
        [
            DiscoveredSkill {
                skill: Skill {
                    name: "commit".into(),
                    description: "Writes a commit message.".into(),
                    when_to_use: Some("After a change.".into()),
                    argument_hint: None,
                    user_invocable: true,
                    allowed_tools: vec!["shell".into(), "read".into()],
                    body: "Summarize the change.".into(),
                    source: SkillSource::User,
                    location: user_path,
                },
                precedence_winner: true,
            },
            DiscoveredSkill {
                skill: Skill {
                    name: "review".into(),
                    description: "Reviews a change.".into(),
                    when_to_use: Some("Before a commit.".into()),
                    argument_hint: Some("<file>".into()),
                    user_invocable: false,
                    allowed_tools: vec!["read".into(), "search".into()],
                    body: "# Review\n\nRead $1 carefully.".into(),
                    source: SkillSource::Project,
                    location: project_path,
                },
                precedence_winner: true,
            },
        ]
    );
}

#[test]
fn the_project_copy_wins_and_both_copies_are_listed() {
    let roots = Roots::new();
    roots.write(SkillSource::User, "deploy", &skill_text("deploy", "User deploy.", "user"));
    roots.write(SkillSource::Project, "deploy", &skill_text("deploy", "Project deploy.", "project"));
    roots.write(SkillSource::User, "alpha", &skill_text("alpha", "Only the user's.", "a"));
    roots.write(SkillSource::Project, "zulu", &skill_text("zulu", "Only the project's.", "z"));

    let discovery = roots.discover();
    assert_eq!(discovery.problems, []);
    assert_eq!(
        summary(&discovery),
        [
            ("alpha".to_owned(), SkillSource::User, true),
            ("deploy".to_owned(), SkillSource::Project, true),
            ("deploy".to_owned(), SkillSource::User, false),
            ("zulu".to_owned(), SkillSource::Project, true),
        ]
    );
    let winner = discovery.winner("deploy").unwrap();
    assert_eq!(winner.skill.description, "Project deploy.");
    assert_eq!(winner.skill.body, "project");
}

#[test]
fn malformed_skills_are_reported_and_the_others_still_load() {
    let roots = Roots::new();
    roots.write(SkillSource::Project, "good", &skill_text("good", "Fine.", "body"));
    let bad_yaml = roots.write(SkillSource::Project, "bad-yaml", "---\ndescription: [unclosed\nname: bad-yaml\n---\n");
    let no_description = roots.write(SkillSource::Project, "no-description", "---\nname: no-description\n---\nBody\n");
    let mismatch = roots.write(SkillSource::Project, "mismatch", &skill_text("other-name", "Named wrongly.", "b"));
    let unknown_key =
        roots.write(SkillSource::User, "unknown-key", "---\ndescription: x\ndesciption: typo\n---\nBody\n");
    let no_front_matter = roots.write(SkillSource::User, "plain", "# Just Markdown\n");
    roots.write(SkillSource::User, "also-good", &skill_text("also-good", "Fine too.", "body"));
    fs::create_dir_all(roots.root(SkillSource::User).join("empty")).unwrap();

    let discovery = roots.discover();
    assert_eq!(
        summary(&discovery),
        [("also-good".to_owned(), SkillSource::User, true), ("good".to_owned(), SkillSource::Project, true)]
    );
    assert_eq!(discovery.problems.len(), 6, "{:?}", discovery.problems);

    let reason = &problem_for(&discovery, &bad_yaml).reason;
    assert!(reason.starts_with("invalid front matter at line "), "{reason}");
    assert!(!reason.contains("unclosed"), "{reason}");
    assert_eq!(problem_for(&discovery, &bad_yaml).source, SkillSource::Project);

    assert_eq!(
        problem_for(&discovery, &no_description).reason,
        "front matter is missing the required key `description`"
    );
    assert_eq!(problem_for(&discovery, &mismatch).reason, "name `other-name` does not match its directory `mismatch`");

    let unknown = problem_for(&discovery, &unknown_key);
    assert_eq!(unknown.source, SkillSource::User);
    assert!(
        unknown.reason.starts_with("invalid front matter at line 3 column 1: unknown key `desciption`"),
        "{}",
        unknown.reason
    );
    assert!(!unknown.reason.contains("typo"), "{}", unknown.reason);

    assert_eq!(problem_for(&discovery, &no_front_matter).reason, "does not start with a `---` front matter line");
    let empty = roots.root(SkillSource::User).join("empty").join("SKILL.md");
    assert_eq!(problem_for(&discovery, &empty).reason, "missing SKILL.md");
}

#[test]
fn a_wrongly_typed_value_is_reported_without_echoing_it() {
    let roots = Roots::new();
    let path = roots.write(
        SkillSource::Project,
        "typed",
        "---\nname: typed\ndescription: ok\nuser_invocable: \"hunter2 is my password\"\n---\n",
    );
    let plain = roots.write(
        SkillSource::Project,
        "plain",
        "---\nname: plain\ndescription: ok\nuser-invocable: maybe-secret\n---\n",
    );
    let discovery = roots.discover();
    assert_eq!(
        problem_for(&discovery, &path).reason,
        "invalid front matter at line 4 column 17: invalid type: string for key `user_invocable`, expected a boolean"
    );
    assert_eq!(
        problem_for(&discovery, &plain).reason,
        "invalid front matter at line 4 column 17: invalid type: string for key `user-invocable`, expected a boolean"
    );
}

#[test]
fn plain_files_and_hidden_entries_in_a_skills_root_are_ignored() {
    let roots = Roots::new();
    let root = roots.root(SkillSource::Project);
    fs::create_dir_all(root.join(".git")).unwrap();
    fs::write(root.join("README.md"), "Skills for this repository.\n").unwrap();
    roots.write(SkillSource::Project, "real", &skill_text("real", "Real.", "body"));

    let discovery = roots.discover();
    assert_eq!(discovery.problems, []);
    assert_eq!(summary(&discovery), [("real".to_owned(), SkillSource::Project, true)]);
}

#[test]
fn a_skill_file_over_the_size_limit_is_a_problem() {
    let roots = Roots::new();
    let padding = "x".repeat(usize::try_from(MAX_SKILL_FILE_BYTES).unwrap());
    let path = roots.write(SkillSource::User, "huge", &skill_text("huge", "Too big.", &padding));
    let discovery = roots.discover();
    assert_eq!(discovery.skills, []);
    assert_eq!(problem_for(&discovery, &path).reason, "SKILL.md is larger than the limit of 262144 bytes");
}

#[test]
fn a_skill_file_that_is_not_utf8_is_a_problem() {
    let roots = Roots::new();
    let path = roots.write(SkillSource::User, "binary", "");
    fs::write(&path, b"---\ndescription: \xff\n---\n").unwrap();
    let discovery = roots.discover();
    assert_eq!(problem_for(&discovery, &path).reason, "SKILL.md is not valid UTF-8 (at byte 17)");
}

#[test]
fn a_skills_root_that_is_a_file_is_a_problem() {
    let roots = Roots::new();
    fs::write(roots.data_dir.join("skills"), "not a directory").unwrap();
    let discovery = roots.discover();
    assert_eq!(
        discovery.problems,
        [SkillProblem {
            source: SkillSource::User,
            location: roots.root(SkillSource::User),
            reason: "the skills directory is not a directory".into(),
        }]
    );
}

#[cfg(unix)]
#[test]
fn symlinks_are_followed_only_inside_their_skills_root() {
    use std::os::unix::fs::symlink;

    let roots = Roots::new();
    let root = roots.root(SkillSource::Project);
    roots.write(SkillSource::Project, "shared-target", &skill_text("shared-target", "Target.", "t"));

    // A directory elsewhere, holding a perfectly good skill: still not followed.
    let outside = roots.cwd.join("elsewhere").join("escape");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("SKILL.md"), skill_text("escape", "Outside.", "o")).unwrap();
    symlink(&outside, root.join("escape")).unwrap();

    // A skill directory whose SKILL.md points at a file outside the root.
    fs::create_dir_all(root.join("leaky")).unwrap();
    let secret = roots.cwd.join("secret.md");
    fs::write(&secret, skill_text("leaky", "Looks fine.", "secret body")).unwrap();
    symlink(&secret, root.join("leaky").join("SKILL.md")).unwrap();

    // A SKILL.md linked to another one inside the root is fine (its name must still match its directory).
    fs::create_dir_all(root.join("alias")).unwrap();
    fs::write(root.join("alias-source.md"), skill_text("alias", "Linked inside.", "a")).unwrap();
    symlink(root.join("alias-source.md"), root.join("alias").join("SKILL.md")).unwrap();

    let discovery = roots.discover();
    assert_eq!(
        summary(&discovery),
        [("alias".to_owned(), SkillSource::Project, true), ("shared-target".to_owned(), SkillSource::Project, true)]
    );
    assert_eq!(
        problem_for(&discovery, &root.join("escape")).reason,
        "the skill directory is a symlink to outside its skills directory; not followed"
    );
    assert_eq!(
        problem_for(&discovery, &root.join("leaky").join("SKILL.md")).reason,
        "SKILL.md is a symlink to outside its skills directory; not followed"
    );
    assert_eq!(discovery.problems.len(), 2, "{:?}", discovery.problems);
}

#[test]
fn describe_maps_the_permission_effect_to_visibility() {
    let roots = Roots::new();
    let path = roots.write(
        SkillSource::User,
        "lint",
        "---\ndescription: Lints.\nargument-hint: <path>\nwhen_to_use: After edits.\n---\nRun the linter.\n",
    );
    let discovery = roots.discover();
    let discovered = &discovery.skills[0];

    let expected = |effect: PermissionEffect, visible: bool| SkillDescriptor {
        name: "lint".into(),
        description: "Lints.".into(),
        source: SkillSource::User,
        location: path.to_string_lossy().into_owned(),
        precedence_winner: true,
        visible,
        permission_effect: effect,
        user_invocable: true,
        argument_hint: Some("<path>".into()),
        when_to_use: Some("After edits.".into()),
    };
    assert_eq!(describe(discovered, PermissionEffect::Allow), expected(PermissionEffect::Allow, true));
    assert_eq!(describe(discovered, PermissionEffect::Ask), expected(PermissionEffect::Ask, true));
    assert_eq!(describe(discovered, PermissionEffect::Deny), expected(PermissionEffect::Deny, false));

    let wire = serde_json::to_value(describe(discovered, PermissionEffect::Deny)).unwrap();
    assert_eq!(wire["visible"], false);
    assert_eq!(wire["source"], "user");
    assert_eq!(wire["permission_effect"], "deny");
}

#[test]
fn a_shadowed_copy_is_described_as_not_the_winner() {
    let roots = Roots::new();
    roots.write(SkillSource::User, "fmt", &skill_text("fmt", "User fmt.", "u"));
    roots.write(SkillSource::Project, "fmt", &skill_text("fmt", "Project fmt.", "p"));
    let discovery = roots.discover();
    let descriptors: Vec<_> =
        discovery.skills.iter().map(|discovered| describe(discovered, PermissionEffect::Allow)).collect();
    assert_eq!(
        descriptors.iter().map(|descriptor| (descriptor.source, descriptor.precedence_winner)).collect::<Vec<_>>(),
        [(SkillSource::Project, true), (SkillSource::User, false)]
    );
    assert!(descriptors[0].argument_hint.is_none());
}

#[test]
fn a_project_skills_folder_reached_through_a_symlink_is_not_read() {
    let roots = Roots::new();
    // A folder the model may not read, holding something shaped like a skill.
    let private = roots._temp.path().join("private");
    fs::create_dir_all(private.join("skills/notes")).unwrap();
    fs::write(private.join("skills/notes/SKILL.md"), skill_text("notes", "private notes", "SECRET BODY")).unwrap();
    // A command in the session made `.troupe` a link to it.
    std::os::unix::fs::symlink(&private, roots.cwd.join(".troupe")).unwrap();
    let discovery = roots.discover();
    assert!(summary(&discovery).is_empty(), "{:?}", summary(&discovery));
    let problem = problem_for(&discovery, &roots.root(SkillSource::Project));
    assert!(problem.reason.contains("symbolic link"), "{}", problem.reason);
    // A session's cwd is recorded canonical, so one that leads through a symlink was swapped since: its project
    // skills are not read either (see a_cwd_replaced_by_a_symlink_reads_no_project_skills).
    let linked_cwd = roots._temp.path().join("linked-project");
    fs::remove_file(roots.cwd.join(".troupe")).unwrap();
    roots.write(SkillSource::Project, "review", &skill_text("review", "review code", "body"));
    std::os::unix::fs::symlink(&roots.cwd, &linked_cwd).unwrap();
    assert!(summary(&discover(&linked_cwd, &roots.data_dir)).is_empty());
    assert_eq!(summary(&roots.discover()), [("review".to_owned(), SkillSource::Project, true)]);
}

/// A `SKILL.md` that is a FIFO (as a command can make one) is reported as a problem, beside the skills that load,
/// without discovery ever blocking in its `open` (which would pin the daemon's thread for `skills.list` and every
/// `/skill` run). Discovery runs on a thread of its own so that a regression fails the test instead of hanging it.
#[test]
fn a_fifo_skill_file_is_a_problem_and_never_blocks_discovery() {
    let roots = Roots::new();
    roots.write(SkillSource::Project, "y", &skill_text("y", "d", "body"));
    let fifo_dir = roots.root(SkillSource::Project).join("x");
    fs::create_dir_all(&fifo_dir).unwrap();
    let fifo = fifo_dir.join("SKILL.md");
    let text = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(text.as_ptr(), 0o644) }, 0);

    let (cwd, data_dir) = (roots.cwd.clone(), roots.data_dir.clone());
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || sender.send(discover(&cwd, &data_dir)));
    let discovery = match receiver.recv_timeout(std::time::Duration::from_secs(10)) {
        Ok(discovery) => discovery,
        Err(_) => {
            // Let the blocked open go on (a writer appears), then fail.
            use std::os::unix::fs::OpenOptionsExt;
            let _ = fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(&fifo);
            panic!("skill discovery blocked on a FIFO SKILL.md");
        }
    };
    assert_eq!(summary(&discovery), [("y".to_owned(), SkillSource::Project, true)]);
    assert_eq!(discovery.problems.len(), 1, "{:?}", discovery.problems);
    assert_eq!(discovery.problems[0].location, fifo);
    assert_eq!(discovery.problems[0].reason, "SKILL.md is not a regular file");
}

/// A cwd that leads through a symlink now (the session's folder was swapped) has its project skills unread and
/// reported; the user's skills still load.
#[test]
fn a_cwd_replaced_by_a_symlink_reads_no_project_skills() {
    let roots = Roots::new();
    roots.write(SkillSource::User, "mine", &skill_text("mine", "d", "body"));
    let elsewhere = roots.cwd.parent().unwrap().join("elsewhere");
    let skills = elsewhere.join(".troupe/skills/theirs");
    fs::create_dir_all(&skills).unwrap();
    fs::write(skills.join("SKILL.md"), skill_text("theirs", "d", "body")).unwrap();
    fs::remove_dir(&roots.cwd).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &roots.cwd).unwrap();

    let discovery = roots.discover();
    assert_eq!(summary(&discovery), [("mine".to_owned(), SkillSource::User, true)]);
    assert_eq!(discovery.problems.len(), 1, "{:?}", discovery.problems);
    assert!(discovery.problems[0].reason.contains("replaced by a symbolic link"), "{:?}", discovery.problems);
}
