//! Permission rules from `config.toml` and agent definitions, and their compiled globs.

use globset::{GlobBuilder, GlobMatcher};
use serde::Deserialize;
use troupe_protocol::types::approval::PermissionAction;

use super::shell_walk;
use super::shell_words::lex;
use crate::config::PermissionRuleConfig;
use crate::tools::PermissionRequest;

/// What a rule (or the policy) says about an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    Allow,
    Ask,
    Deny,
}

impl Effect {
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Allow => "allow",
            Effect::Ask => "ask",
            Effect::Deny => "deny",
        }
    }
}

/// One rule: `effect` applies to calls whose action, tool and resource all match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PermissionRule {
    pub effect: Effect,
    /// `None` matches every action.
    pub action: Option<PermissionAction>,
    /// A glob over the resource. For reads and writes (absolute, resolved paths) `*` and `?` stay within one path
    /// component and `**` crosses `/`; for `execute` the resource is the command line and `*` matches anything.
    pub resource: String,
    /// The tool's name (`shell`, `write_file`, ...); `None` matches every tool.
    pub tool: Option<String>,
}

impl From<&PermissionRuleConfig> for PermissionRule {
    fn from(rule: &PermissionRuleConfig) -> Self {
        PermissionRule {
            effect: rule.effect,
            action: rule.action,
            resource: rule.resource.clone(),
            tool: rule.tool.clone(),
        }
    }
}

/// A rule with its globs compiled once.
#[derive(Clone, Debug)]
pub(super) struct CompiledRule {
    pub rule: PermissionRule,
    /// `*` does not cross `/`: for paths and pseudo-resources such as `goal:current`.
    path_glob: GlobMatcher,
    /// `*` matches anything, `/` included: for command lines.
    command_glob: GlobMatcher,
}

impl CompiledRule {
    /// Compiles `rule`; the error is a fixed description of the problem that never quotes the glob.
    pub fn new(rule: &PermissionRule) -> Result<CompiledRule, String> {
        if rule.resource.is_empty() {
            return Err("resource must not be empty".to_owned());
        }
        if rule.tool.as_deref() == Some("") {
            return Err("tool must not be empty when given".to_owned());
        }
        Ok(CompiledRule {
            rule: rule.clone(),
            path_glob: compile(&rule.resource, true)?,
            command_glob: compile(&rule.resource, false)?,
        })
    }

    /// Whether the rule applies to `tool` doing `request`.
    ///
    /// For `execute`, an `allow` rule applies only to a single simple command whose words cannot change at run
    /// time (no `;`, `&&`, `||`, `|`, `&`, redirection, subshell, `$` or backtick), so that `cargo test*` never
    /// approves `cargo test && curl ... | sh`. `ask` and `deny` rules apply when they match the whole line or any
    /// one of its simple commands (also inside compound commands and substitutions), so that `deny "git push*"` also
    /// catches `cargo fmt && git push` and `if x; then git push; fi`.
    pub fn matches(&self, tool: &str, request: &PermissionRequest) -> bool {
        if self.rule.action.is_some_and(|action| action != request.action) {
            return false;
        }
        if self.rule.tool.as_deref().is_some_and(|name| name != tool) {
            return false;
        }
        if request.action != PermissionAction::Execute {
            return self.path_glob.is_match(&request.resource);
        }
        let command = request.resource.trim();
        let lexed = lex(command);
        match self.rule.effect {
            Effect::Allow => {
                lexed.complete
                    && !lexed.has_operators()
                    && !lexed.has_comment
                    && !lexed.words().any(|word| word.expands)
                    && self.command_glob.is_match(command)
            }
            // The lexer's simple commands, and the grammar's: those inside `{ }`, `if`, loops, `case`, function
            // bodies and substitutions too.
            Effect::Ask | Effect::Deny => {
                self.command_glob.is_match(command)
                    || lexed.simple_commands().iter().any(|words| {
                        let joined: Vec<&str> = words.iter().map(|word| word.text.as_str()).collect();
                        self.command_glob.is_match(joined.join(" "))
                    })
                    || shell_walk::walk(command).commands.iter().any(|view| {
                        let joined: Vec<&str> = view.words.iter().map(|word| word.text.as_str()).collect();
                        self.command_glob.is_match(joined.join(" "))
                    })
            }
        }
    }
}

fn compile(glob: &str, literal_separator: bool) -> Result<GlobMatcher, String> {
    let compiled = GlobBuilder::new(glob).literal_separator(literal_separator).build().map_err(|error| {
        match error.kind() {
            // The regex engine's message may quote the pattern, which could hold something private.
            globset::ErrorKind::Regex(_) => "the glob is too large or complex".to_owned(),
            kind => format!("invalid glob: {kind}"),
        }
    })?;
    Ok(compiled.compile_matcher())
}

/// Checks a rule from `config.toml` as [`super::Policy::new`] will, so that a bad rule stops the daemon at start.
pub fn validate_rule(rule: &PermissionRuleConfig) -> Result<(), String> {
    CompiledRule::new(&PermissionRule::from(rule)).map(|_| ())
}
