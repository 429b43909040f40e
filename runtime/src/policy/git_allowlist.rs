//! The classifier's `git` allowlist: `status`, `diff`, `log` and `show`, read only, within the cwd.
//!
//! No global option may precede the subcommand (`-c`, `-C`, `--git-dir`, `--work-tree`, `--exec-path`, `-p`,
//! ...). Options are allowlisted per subcommand, so `--output`, `--ext-diff`, `--textconv`, `-O`, `--no-index`,
//! `--show-signature` and every other option not named here are refused. Output that prints file contents or
//! names from the whole repository (`diff`, `show`, `log -p`, `log --stat`, ...) is approved only when the cwd is
//! the repository's top level or an explicit pathspec after `--` keeps it inside the cwd.

use super::ClassifierContext;
use super::command_options::{Argument, Attached, OptionSpec, Parsed, parse_options};
use super::cwd_paths::{Reach, path_is_safe};

const STATUS: OptionSpec = OptionSpec {
    short_flags: "sbz",
    short_optional: "u",
    long_flags: &["short", "branch", "long", "show-stash", "ahead-behind", "no-ahead-behind", "renames", "no-renames"],
    long_optional: &["porcelain", "untracked-files", "ignored", "ignore-submodules", "column", "find-renames"],
    attached: Attached::DigitsOnly,
    ..OptionSpec::EMPTY
};

/// Diff output options, shared by `diff`, `log` and `show`.
const DIFF_FLAGS: &[&str] = &[
    "patch",
    "no-patch",
    "raw",
    "patch-with-raw",
    "patch-with-stat",
    "numstat",
    "shortstat",
    "summary",
    "name-only",
    "name-status",
    "compact-summary",
    "minimal",
    "patience",
    "histogram",
    "ignore-all-space",
    "ignore-space-change",
    "ignore-space-at-eol",
    "ignore-blank-lines",
    "ignore-cr-at-eol",
    "no-color",
    "no-ext-diff",
    "no-textconv",
    "check",
    "full-index",
    "binary",
    "no-renames",
    "text",
    "function-context",
    "no-prefix",
    "quiet",
    "exit-code",
    // Only for `diff`, harmless elsewhere (git refuses them).
    "cached",
    "staged",
    "merge-base",
    // Only for `log` and `show`.
    "oneline",
    "graph",
    "all",
    "reverse",
    "first-parent",
    "no-merges",
    "merges",
    "abbrev-commit",
    "no-abbrev-commit",
    "follow",
    "topo-order",
    "date-order",
    "author-date-order",
    "regexp-ignore-case",
    "left-right",
    "cherry-pick",
    "cherry-mark",
    "source",
    "boundary",
    "full-history",
    "simplify-by-decoration",
    "no-decorate",
    "use-mailmap",
    "mailmap",
    "children",
    "parents",
    "all-match",
    "invert-grep",
    "extended-regexp",
    "fixed-strings",
    "basic-regexp",
    "perl-regexp",
    "no-notes",
    "full-diff",
];

const DIFF_VALUED: &[&str] = &[
    "diff-filter",
    "diff-algorithm",
    "src-prefix",
    "dst-prefix",
    "inter-hunk-context",
    "stat-width",
    "unified",
    "max-count",
    "skip",
    "since",
    "after",
    "until",
    "before",
    "author",
    "committer",
    "grep",
    "format",
    "date",
    "min-parents",
    "max-parents",
];

const DIFF_OPTIONAL: &[&str] = &[
    "stat",
    "dirstat",
    "color",
    "word-diff",
    "color-words",
    "find-renames",
    "find-copies",
    "abbrev",
    "decorate",
    "pretty",
    "color-moved",
    "submodule",
    "branches",
    "tags",
    "remotes",
];

/// `diff`, `log` and `show`.
const HISTORY: OptionSpec = OptionSpec {
    short_flags: "pusRawbWzi",
    short_valued: "nSG",
    short_optional: "UMCBD",
    long_flags: DIFF_FLAGS,
    long_valued: DIFF_VALUED,
    long_optional: DIFF_OPTIONAL,
    numeric: true,
    attached: Attached::DigitsOnly,
};

/// `log` options that print commit metadata only, never file contents or names.
const LOG_METADATA: &[&str] = &[
    "-N",
    "-n",
    "-i",
    "--oneline",
    "--graph",
    "--all",
    "--reverse",
    "--first-parent",
    "--no-merges",
    "--merges",
    "--abbrev-commit",
    "--no-abbrev-commit",
    "--topo-order",
    "--date-order",
    "--author-date-order",
    "--regexp-ignore-case",
    "--left-right",
    "--cherry-pick",
    "--cherry-mark",
    "--source",
    "--boundary",
    "--full-history",
    "--simplify-by-decoration",
    "--no-decorate",
    "--use-mailmap",
    "--mailmap",
    "--children",
    "--parents",
    "--all-match",
    "--invert-grep",
    "--extended-regexp",
    "--fixed-strings",
    "--basic-regexp",
    "--perl-regexp",
    "--no-notes",
    "--max-count",
    "--skip",
    "--since",
    "--after",
    "--until",
    "--before",
    "--author",
    "--committer",
    "--grep",
    "--format",
    "--date",
    "--min-parents",
    "--max-parents",
    "--abbrev",
    "--decorate",
    "--pretty",
    "--color",
    "--no-color",
    "--no-patch",
    "-s",
    "--branches",
    "--tags",
    "--remotes",
    "--no-ext-diff",
    "--no-textconv",
];

/// Whether `git arguments` is a read-only `status`, `diff`, `log` or `show` whose output stays inside the cwd.
pub(super) fn is_read_only_git(arguments: &[Argument], context: &ClassifierContext<'_>) -> bool {
    let Some((subcommand, rest)) = arguments.split_first() else { return false };
    let spec = match subcommand.text.as_str() {
        "status" => &STATUS,
        "diff" | "log" | "show" => &HISTORY,
        _ => return false,
    };
    let Some(parsed) = parse_options(spec, rest) else { return false };
    let mut pathspecs = 0;
    for item in &parsed {
        match item {
            Parsed::Option { name, value } => {
                // `%G?` and friends verify signatures, which runs `gpg.program`.
                if matches!(name.as_str(), "--format" | "--pretty") && value.is_some_and(|value| value.contains("%G")) {
                    return false;
                }
            }
            Parsed::Operand { argument, after_double_dash: true } => {
                // Pathspec magic (`:(top)`, `:/`) reaches outside the cwd.
                if argument.text.starts_with(':')
                    || !path_is_safe(&argument.text, argument.glob, Reach::Single, context)
                {
                    return false;
                }
                pathspecs += 1;
            }
            Parsed::Operand { argument, after_double_dash: false } => {
                if !is_safe_revision_or_path(argument, context) {
                    return false;
                }
            }
        }
    }
    let prints_repository_content = match subcommand.text.as_str() {
        "diff" | "show" => true,
        "log" => parsed.iter().any(|item| match item {
            Parsed::Option { name, .. } => !LOG_METADATA.contains(&name.as_str()),
            Parsed::Operand { .. } => false,
        }),
        _ => false,
    };
    !prints_repository_content || context.cwd_is_repository_root || pathspecs > 0
}

/// An operand before `--`, which git reads as a revision or, when it names no revision, as a path. A revision
/// with a path part (`HEAD:path`, `:path`, `:0:path`) is allowed only at the repository's top level (where
/// paths in revisions are relative to the cwd) and when that path stays inside the cwd.
fn is_safe_revision_or_path(argument: &Argument, context: &ClassifierContext<'_>) -> bool {
    if argument.glob {
        return false;
    }
    let text = argument.text.as_str();
    match text.split_once(':') {
        Some((_, path)) => {
            let path = path.strip_prefix("0:").or_else(|| path.strip_prefix("1:")).unwrap_or(path);
            let path = path.strip_prefix("2:").or_else(|| path.strip_prefix("3:")).unwrap_or(path);
            context.cwd_is_repository_root
                && !path.starts_with('/')
                && (path.is_empty() || path_is_safe(path, false, Reach::Single, context))
        }
        None => path_is_safe(text, false, Reach::Single, context),
    }
}
