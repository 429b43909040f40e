//! The permission policy: whether a tool call may run, must be refused, or needs a user's approval.
//!
//! Pure: no actors, no clock, and no I/O of its own (the classifier asks a path resolver its caller supplies). The engine asks [`Policy::evaluate`] about each call's action (`read`,
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
//!      `--recursive`, with or without `-f`), or `find ... -delete` / `-exec rm` starting at: `/`; a pattern,
//!      brace or expansion directly under `/` (`/*`, `/[a-z]*`, `/{usr,etc,bin}`); a top-level system directory
//!      or everything in it (`/usr`, `/etc`, `/bin`, `/sbin`, `/lib*`, `/boot`, `/var`, `/home`, `/root`, `/opt`,
//!      `/srv`, `/dev`, `/proc`, `/sys`, ...); a home directory or everything in it, in any spelling (`~`,
//!      `~user`, `$HOME`, `${HOME}`, `${HOME:?}`, `${HOME:-x}`, `/home/me`, `~/..`); or a directory above the cwd
//!      (`$PWD/../..`, `../*`), all after lexical normalisation (`//`, `/./` and `..` applied: `/usr/../*` is
//!      `/*`); run `mkfs` or `mkfs.*`; run `mke2fs`, `mkswap`, `wipefs`, `mkdosfs`, `mkntfs`, `fdisk`, `sfdisk`,
//!      `cfdisk`, `parted`, `sgdisk`, `gdisk` or `blkdiscard` on a device (`/dev/...`); run `dd` with `of=/dev/...`
//!      other than `null`, `zero`, `full`, `stdout`, `stderr`, `tty`, `random`, `urandom` and `fd/*`; name a disk
//!      device (`/dev/sd*`, `nvme*`, `hd*`, `vd*`, `xvd*`, `mmcblk*`, `disk*`, `rdisk*`, `dm-*`, `md*`,
//!      `mapper/*`, `disk/by-*/...`, `loop*`, `nbd*`, in any spelling that normalises to it: `//dev/sda`) as an
//!      argument, an `of=` value or an output redirection (`cp /dev/zero /dev/sda`, `tee /dev/sda`,
//!      `> //dev/sda`; `ls`, `lsblk`, `stat`, `echo`, ... may name one); or are a fork bomb: a function that
//!      calls itself, directly or through other functions, with a call of the cycle in a pipeline or in the
//!      background (`:(){ :|:& };:`, `a(){ b|b& }; b(){ a|a& }; a`), or a loop that never ends (`while :`,
//!      `while true`, `until false`, `for ((;;))`) whose body starts a background job and never `wait`s. The
//!      line is parsed with a shell grammar and every simple command counts: inside `{ }`,
//!      `if`/`elif`/`else`, `while`, `until`, `for`, `case`, `!`, subshells, function bodies, `$( )`, backticks
//!      and process substitutions. In each simple command every later word is tried as the start of the real
//!      command, so any wrapper counts whatever its options (`sudo`, `timeout 5`, `taskset 1`, `setpriv`,
//!      `unshare`, `chrt`, `nsenter`, `runuser`, `systemd-run`, `xargs` with its piped input, `find -exec`, ...),
//!      and every word that looks like a script (a space, `;`, `&`, `|` or newline in it: `su -c 'rm -rf /'`,
//!      `script -qc "..."`) is read as a nested command line, like the scripts given to `sh`/`bash`/`dash`/...
//!      (`-c`, a here-document, a here-string, an `echo ... |`) or `eval`, three levels deep. The words of
//!      programs that only print or search text (`echo`, `printf`, `grep`, `rg`, `git`, `test`, ...) are not read
//!      as commands, so `git commit -m 'fix rm -rf /'` runs. Text the grammar rejects is read with a word lexer
//!      instead, and the whole line always is too.
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
//!      joined by single spaces after quote removal), so `deny "git push*"` also refuses `cargo fmt && git push`;
//!    - for `network` (`web_fetch`) the resource is the URL's host, lowercase, without scheme or port
//!      (`example.com`, `127.0.0.1`, `[::1]`), and the glob is a path glob: `*.example.com` matches every
//!      subdomain, not `example.com` itself.
//! 3. **Built-ins:** the goal tools (`goal_get`, `goal_update`) are allowed; reads inside the session's cwd are
//!    allowed; reads outside the cwd ask; writes (inside or outside the cwd) ask; shell commands ask; network
//!    requests ask (and are never low risk).
//!
//! # What happens then: permission modes
//!
//! An `allow` runs and a `deny` is refused in every mode. An `ask` runs at once when a tree grant (an earlier
//! `approve_tree` answer for the same action on exactly the same resource) covers it. Otherwise the tree's mode
//! decides:
//!
//! | mode | low-risk (classifier) | other asks | file-tool write outside the cwd |
//! |---|---|---|---|
//! | `auto_approve` (default) | run | ask the user | ask the user |
//! | `auto_approve_n` | run | refused, "rejected by auto_approve_n" | refused |
//! | `auto_approve_y` | run | run, recorded as approved once by the mode (no tree grant) | ask the user |
//! | `ask` | ask the user | ask the user | ask the user |
//! | `yolo` | run | run | ask the user |
//!
//! A write outside the session's cwd (`inside_cwd == false`, which only a file tool reports: the shell's own
//! writes are confined by the kernel sandbox) is never approved by a mode or the classifier, because such a file
//! (`~/.bashrc`, `~/.profile`, a git hook elsewhere) runs unsandboxed later. An explicit `allow` rule or a tree
//! grant still runs it: both are the user's own intent.
//!
//! # The classifier (`auto_approve`, `auto_approve_n`, `auto_approve_y`)
//!
//! [`is_low_risk`] approves exactly these, and nothing else, given a [`ClassifierContext`] (the canonical cwd,
//! the canonical paths no tool may read, and a resolver, supplied by the caller, that gives the physical path of
//! a path with every symlink followed):
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
//!   `ls` (no `-L`, `-H`, `--dereference*`), `cat`, `head`, `tail` (no `-f`/`-F`/`--follow`), `wc` (no
//!   `--files0-from`), `stat` (no `-L`), `file` (no `-C`, `-m`, `-f`, `-z`, `-p`, `-L`), `df`, `du` (no `-L`,
//!   `-H`, `-D`, `--dereference*`), `tree` (no `-o`, `-R`, `-H`, `-T`, `-l`, `--output`, `--fromfile`), `grep`
//!   (no `-R`, `--dereference-recursive`, `-d`, `-D`), `rg` (no `--pre`, `--pre-glob`, `-z`, `--ignore-file`,
//!   `--type-add`, `-L`, `--follow`), `find` (no `-H`/`-L`/`-follow`; only tests and `-print`, `-print0`,
//!   `-printf`, `-ls`, `-prune`: no `-exec`, `-execdir`, `-ok`, `-okdir`, `-delete`, `-fls`, `-fprint*`), `pwd`,
//!   `echo`, `which`. No option that follows symlinks is on the list;
//! - where every path (operands, `grep -f`, `find -newer`, ..., and the `.` that recursive readers read by
//!   default) stays inside the cwd twice over: by its text (no `..` component, no absolute path elsewhere, no
//!   `~`) and physically (the resolver's answer, every symlink followed, is inside the cwd; no answer means not
//!   low risk), and no path, by either reading, is inside a denied path, nor, for a recursive read (`grep -r`,
//!   `rg`, `find`, `tree`, `du`, `ls -R`), a directory that holds one. A glob's matches are unknown until it runs,
//!   so a glob is accepted only as the last component (no trailing `/`), not starting with `.` and without `[`,
//!   after `--` or not starting with a pattern character, below a directory that resolves inside, and only for
//!   programs that never follow the symlinks they are given (`stat`, `du`, `find`, and `ls` with `-l`, `-g`,
//!   `-n`, `-o` or `-d`): `cat *` or `wc -l src/*.rs` could read through a symlink and ask.
//!
//! `git` is not low risk at all: a repository's own configuration can make almost any git command run a program
//! (`core.fsmonitor` on `git status`, `diff.external` and textconv drivers on `git diff`/`log -p`/`show`, clean
//! and smudge filters), so git commands ask in `auto_approve` and are refused in `auto_approve_n`. Users who trust
//! their repositories can add a rule such as `{ effect = "allow", action = "execute", resource = "git status" }`.
//!
//! Writes are never low risk. The classifier does no I/O itself (only the injected resolver does), and it is not
//! the boundary: the kernel sandbox is.

mod classifier;
mod command_allowlist;
mod command_options;
mod cwd_paths;
mod dangerous_targets;
mod decision;
mod fingerprint;
mod fork_bomb;
mod hard_deny;
mod rules;
mod shell_ast;
mod shell_walk;
mod shell_words;

use std::fmt;
use std::path::{Path, PathBuf};

use troupe_protocol::types::approval::PermissionAction;

pub use classifier::{ClassifierContext, is_low_risk};
pub use decision::{Decision, decide};
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
            (PermissionAction::Read, false)
            | (PermissionAction::Write, _)
            | (PermissionAction::Execute, _)
            | (PermissionAction::Network, _) => (Effect::Ask, format!("{} needs approval", describe(request))),
        }
    };
    Evaluation { effect, reason, source: RuleSource::BuiltIn }
}

fn action_name(action: PermissionAction) -> &'static str {
    match action {
        PermissionAction::Read => "read",
        PermissionAction::Write => "write",
        PermissionAction::Execute => "execute",
        PermissionAction::Network => "network",
    }
}

/// "writing `/x/y` (outside the session's directory)", for reasons.
fn describe(request: &PermissionRequest) -> String {
    let verb = match request.action {
        PermissionAction::Read => "reading",
        PermissionAction::Write => "writing",
        PermissionAction::Execute => "running",
        PermissionAction::Network => "fetching from",
    };
    let place = if request.inside_cwd { "" } else { " (outside the session's directory)" };
    // A command line can be long; the approval record carries it whole, the reason only needs to name it.
    let mut shown: String = request.resource.chars().take(DESCRIBED_RESOURCE_CHARS).collect();
    if shown.len() < request.resource.len() {
        shown.push('…');
    }
    format!("{verb} `{shown}`{place}")
}
