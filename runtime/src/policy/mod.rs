//! The permission policy: whether a tool call may run, must be refused, or needs a user's approval.
//!
//! Pure: no actors, no I/O, no clock. The engine asks [`Policy::evaluate`] about each call's action (`read`,
//! `write`, `execute`) and resource (a resolved absolute path, a shell command line, or a pseudo-resource such as
//! `goal:current`), then [`decide`]s with the tree's tree grants and permission mode.
//!
//! # How a call is evaluated
//!
//! The first step that has something to say wins:
//!
//! 1. **Hard denies** (every mode, not overridable by rules, grants or `yolo`):
//!    - writing anything inside the daemon's data directory (`<data_dir>/**`, which includes `config.toml`, so a
//!      model can never change its own permissions), and reading the bearer token (`<data_dir>/daemon/**`) or the
//!      provider credentials (`<data_dir>/providers.json`);
//!    - shell commands that, in any of their simple commands, recursively remove (`rm` with `-r`, `-R` or
//!      `--recursive`, with or without `-f`) `/`, `/*`, `~`, `~/*` or `$HOME` (in any spelling made of `/`, `.`,
//!      `..`, `*` and components that are only a `$` expansion); run `mkfs` or `mkfs.*`; run `dd` with
//!      `of=/dev/...` other than `/dev/null`, `/dev/zero`, `/dev/full`, `/dev/stdout`, `/dev/stderr`, `/dev/tty`,
//!      `/dev/random`, `/dev/urandom` and `/dev/fd/*`; redirect output onto a disk device (`> /dev/sd*`, `nvme*`,
//!      `hd*`, `vd*`, `xvd*`, `mmcblk*`, `disk*`, `dm-*`, `md*`, `mapper/*`); or define a fork bomb (a function
//!      that calls itself in a pipeline or in the background, such as `:(){ :|:& };:`). The line is parsed with a
//!      shell grammar and every simple command counts: inside `{ }`, `if`/`elif`/`else`, `while`, `until`, `for`,
//!      `case`, `!`, subshells, function bodies, `$( )`, backticks and process substitutions; after wrappers
//!      (`sudo`, `doas`, `env`, `nice`, `timeout`, `nohup`, `command`, `exec`, `time`, `stdbuf`, `ionice`, `xargs`
//!      with its piped input, `builtin`, `busybox`, `find -exec`, ..., whatever their options); and inside scripts
//!      given to `sh`/`bash`/`dash`/... (`-c`, a here-document, a here-string, an `echo ... |`) or `eval`, three
//!      levels deep. Text the grammar rejects is read with a word lexer instead, and the whole line always is too.
//!
//!    This is a seatbelt, not a sandbox: it reads the text of a call. A script file, a variable, another
//!    interpreter or a deeper nesting reaches the same effects unrecognized. The kernel sandbox is the boundary.
//! 2. **Agent rules** (`permissions` of the run's agent), then **config rules** (`[permissions] rules`): within
//!    each list the *last* matching rule wins, and any matching agent rule beats every config rule. A rule
//!    matches when its `action` (if given) and `tool` (if given) are the call's, and its `resource` glob matches:
//!    - for reads and writes the resource is the resolved absolute path (symlinks and `..` followed), and the glob
//!      is a path glob: `*` and `?` stay within one component, `**` crosses `/`. Write `**/.env` or
//!      `/home/me/project/**`, not `.env` or `src/**`: a relative glob never matches an absolute path;
//!    - for `execute` the resource is the command line and `*` matches anything, `/` included. An `allow` rule
//!      only applies to a single simple command without `;`, `&&`, `||`, `|`, `&`, redirection, parentheses,
//!      `$` or backticks, so `allow "cargo test*"` never approves `cargo test && curl ... | sh` (that one asks).
//!      `ask` and `deny` rules apply when they match the whole line or any one of its simple commands (words
//!      joined by single spaces after quote removal), so `deny "git push*"` also refuses `cargo fmt && git push`.
//! 3. **Built-ins:** the goal tools (`goal_get`, `goal_update`) are allowed; reads inside the session's cwd are
//!    allowed; reads outside the cwd ask; writes (inside or outside the cwd) ask; shell commands ask.
//!
//! # What happens then: permission modes
//!
//! An `allow` runs and a `deny` is refused in every mode. An `ask` runs at once when a tree grant (an earlier
//! `approve_tree` answer for the same action on exactly the same resource) covers it. Otherwise the tree's mode
//! decides:
//!
//! | mode | low-risk (classifier) | other asks |
//! |---|---|---|
//! | `auto_approve` (default) | run | ask the user |
//! | `auto_approve_n` | run | refused, "rejected by auto_approve_n" |
//! | `auto_approve_y` | run | run, recorded as approved once by the mode (no tree grant) |
//! | `ask` | ask the user | ask the user |
//! | `yolo` | run | run |
//!
//! # The classifier (`auto_approve`, `auto_approve_n`, `auto_approve_y`)
//!
//! [`is_low_risk`] approves exactly these, and nothing else, given a [`ClassifierContext`] (the canonical cwd,
//! the canonical paths no tool may read, and whether the cwd is the top level of a git work tree):
//!
//! - reads by a file tool (`read_file`, `list_dir`, `search`, ...) whose resolved path is inside the session's cwd
//!   and is neither inside a denied path nor a directory that holds one;
//! - `shell` commands that the shell grammar reads as exactly one simple command (a trailing `;` aside): no list,
//!   `&&`, `||`, pipeline, `&`, `!`, `time`, compound command, function, comment, redirection of any kind (`>`,
//!   `>|`, `>>`, `<`, `<<`, `<<<`, `&>`), assignment (`A=b cmd`), and no word with an expansion or substitution
//!   (`$x`, `${x}`, `$( )`, backticks, `$(( ))`, `<( )`, a leading `~`, `$'…'`, `$"…"`) or an unquoted brace. The
//!   program is named exactly (after quote removal) as one of the allowlist, and every option is one that program
//!   accepts in the allowlist after normalisation (clusters split, `-ao` is `-a -o`; attached values, `-n5`;
//!   `--name=value`; `--` ends options; unknown or abbreviated options are refused):
//!   `ls`, `cat`, `head`, `tail` (no `-f`/`-F`/`--follow`), `wc`, `stat`, `file` (no `-C`, `-m`, `-f`, `-z`,
//!   `-p`), `df`, `du`, `tree` (no `-o`, `-R`, `-H`, `-T`, `--output`, `--fromfile`), `grep` (no `-d`/`-D`),
//!   `rg` (no `--pre`, `--pre-glob`, `-z`, `--ignore-file`, `--type-add`), `find` (only tests and `-print`,
//!   `-print0`, `-printf`, `-ls`, `-prune`: no `-exec`, `-execdir`, `-ok`, `-okdir`, `-delete`, `-fls`,
//!   `-fprint*`), `pwd`, `echo`, `which`, and `git status`, `git diff`, `git log`, `git show` with no option
//!   before the subcommand (no `-c`, `-C`, `--git-dir`, `--work-tree`, `-p`, ...) and none of `--output`,
//!   `--ext-diff`, `--textconv`, `-O`, `--no-index`, `--show-signature`, or a `%G` format;
//! - where every path (operands, `grep -f`, `find -newer`, ...) resolves by its text inside the cwd: no `..`
//!   component, no absolute path elsewhere, no `~`, no glob whose component starts with `.` or holds `[`, no glob
//!   before `--` that starts with a pattern character (it could expand to an option); and no path is inside a
//!   denied path, nor, for a recursive read (`grep -r`, `rg`, `find`, `tree`, `du`, `ls -R`, which read `.` by
//!   default), a directory that holds one;
//! - and for `git`: a revision with a path part (`HEAD:path`, `:path`) only when the cwd is the repository's top
//!   level and the path stays inside it; `diff`, `show` and `log` with anything beyond commit metadata (`-p`,
//!   `--stat`, `--name-only`, ...) only at the top level or with a pathspec after `--` inside the cwd (no `:`
//!   magic).
//!
//! Writes are never low risk. The classifier judges text, not the file system, and it is not the boundary: the
//! kernel sandbox is. A symlink inside the cwd that points elsewhere is followed by `cat` and friends, and `git`
//! reads the repository's own configuration (which can name programs, such as `core.fsmonitor`, `diff.external`
//! or a textconv driver). Users who do not trust a repository should use `ask`.

mod classifier;
mod command_allowlist;
mod command_options;
mod cwd_paths;
mod decision;
mod fingerprint;
mod git_allowlist;
mod hard_deny;
mod rules;
mod shell_ast;
mod shell_words;

use std::fmt;
use std::path::{Path, PathBuf};

use troupe_protocol::types::approval::PermissionAction;

pub use classifier::{ClassifierContext, is_low_risk};
pub use decision::{Decision, TreeGrantKey, decide};
pub use fingerprint::operation_fingerprint;
pub use rules::{Effect, PermissionRule, validate_rule};

use crate::config::PermissionsConfig;
use crate::tools::PermissionRequest;
use rules::CompiledRule;

/// The longest resource quoted in a reason.
const DESCRIBED_RESOURCE_CHARS: usize = 200;

/// The shell tool's name: its resource is a command line.
pub const SHELL_TOOL: &str = "shell";

/// The goal tools, allowed by the built-ins (`goal_get` reads and `goal_update` writes `goal:current`).
pub const GOAL_TOOLS: [&str; 2] = ["goal_get", "goal_update"];

/// Which step of the evaluation decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RuleSource {
    HardDeny,
    /// The index in `[permissions] rules`.
    Config(usize),
    /// The index in the agent's `permissions`.
    Agent(usize),
    BuiltIn,
}

impl fmt::Display for RuleSource {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuleSource::HardDeny => formatter.write_str("hard deny"),
            RuleSource::Config(index) => write!(formatter, "permissions.rules[{index}]"),
            RuleSource::Agent(index) => write!(formatter, "agent permissions[{index}]"),
            RuleSource::BuiltIn => formatter.write_str("built-in rule"),
        }
    }
}

/// The policy's verdict on a call, before grants and the permission mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evaluation {
    pub effect: Effect,
    /// One sentence for the user and the model, e.g. why the call needs approval or was refused.
    pub reason: String,
    pub source: RuleSource,
}

/// A rule that cannot be used. The message names the rule by position, never by content.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("{rule} is invalid: {problem}")]
    InvalidRule { rule: RuleSource, problem: String },
}

/// The rules in force for one agent: hard denies, the agent's and the config file's rules, and the built-ins.
#[derive(Clone, Debug)]
pub struct Policy {
    config_rules: Vec<CompiledRule>,
    agent_rules: Vec<CompiledRule>,
    data_dir: PathBuf,
}

impl Policy {
    /// Compiles the rules. `data_dir` is the daemon's data directory as resolved paths will spell it: pass the
    /// canonical path (symlinks resolved), because tools report canonical paths and this module does no I/O.
    pub fn new(
        config_rules: &PermissionsConfig,
        agent_rules: &[PermissionRule],
        data_dir: &Path,
    ) -> Result<Policy, PolicyError> {
        let compile = |rule: &PermissionRule, source: RuleSource| {
            CompiledRule::new(rule).map_err(|problem| PolicyError::InvalidRule { rule: source, problem })
        };
        let config_rules = config_rules
            .rules
            .iter()
            .enumerate()
            .map(|(index, rule)| compile(&PermissionRule::from(rule), RuleSource::Config(index)))
            .collect::<Result<_, _>>()?;
        let agent_rules = agent_rules
            .iter()
            .enumerate()
            .map(|(index, rule)| compile(rule, RuleSource::Agent(index)))
            .collect::<Result<_, _>>()?;
        Ok(Policy { config_rules, agent_rules, data_dir: data_dir.to_path_buf() })
    }

    /// The policy's verdict on `tool` doing `request`: hard denies, then agent rules, then config rules (the last
    /// match in a list wins), then the built-ins. See the module docs.
    pub fn evaluate(&self, tool: &str, request: &PermissionRequest) -> Evaluation {
        if let Some(reason) = hard_deny::check(request, &self.data_dir) {
            return Evaluation { effect: Effect::Deny, reason, source: RuleSource::HardDeny };
        }
        let lists = [
            (&self.agent_rules, RuleSource::Agent as fn(usize) -> RuleSource),
            (&self.config_rules, RuleSource::Config),
        ];
        for (rules, source) in lists {
            if let Some((index, rule)) = rules.iter().enumerate().rev().find(|(_, rule)| rule.matches(tool, request)) {
                let source = source(index);
                let reason = format!(
                    "{source} ({} {} `{}`) applies to {}",
                    rule.rule.effect.as_str(),
                    rule.rule.action.map_or("any action", action_name),
                    rule.rule.resource,
                    describe(request)
                );
                return Evaluation { effect: rule.rule.effect, reason, source };
            }
        }
        built_in(tool, request)
    }
}

fn built_in(tool: &str, request: &PermissionRequest) -> Evaluation {
    let (effect, reason) = if GOAL_TOOLS.contains(&tool) {
        (Effect::Allow, "the goal tools are always allowed".to_owned())
    } else {
        match (request.action, request.inside_cwd) {
            (PermissionAction::Read, true) => {
                (Effect::Allow, "reads inside the session's directory are allowed".to_owned())
            }
            (PermissionAction::Read, false) | (PermissionAction::Write, _) | (PermissionAction::Execute, _) => {
                (Effect::Ask, format!("{} needs approval", describe(request)))
            }
        }
    };
    Evaluation { effect, reason, source: RuleSource::BuiltIn }
}

fn action_name(action: PermissionAction) -> &'static str {
    match action {
        PermissionAction::Read => "read",
        PermissionAction::Write => "write",
        PermissionAction::Execute => "execute",
    }
}

/// "writing `/x/y` (outside the session's directory)", for reasons.
fn describe(request: &PermissionRequest) -> String {
    let verb = match request.action {
        PermissionAction::Read => "reading",
        PermissionAction::Write => "writing",
        PermissionAction::Execute => "running",
    };
    let place = if request.inside_cwd { "" } else { " (outside the session's directory)" };
    // A command line can be long; the approval record carries it whole, the reason only needs to name it.
    let mut shown: String = request.resource.chars().take(DESCRIBED_RESOURCE_CHARS).collect();
    if shown.len() < request.resource.len() {
        shown.push('…');
    }
    format!("{verb} `{shown}`{place}")
}
