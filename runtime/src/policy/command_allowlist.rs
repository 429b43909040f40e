//! The classifier's allowlist: read-only programs, the options each may be given, and which operands are paths.
//!
//! An option not listed makes the command not low risk, so a program's options that write (`tree -o`, `file -C`),
//! run programs (`rg --pre`, `find -exec`), read a file named elsewhere (`wc --files0-from`) or follow symlinks
//! (`grep -R`, `find -L`, `ls -L`, `rg --follow`, `du -L`, `stat -L`, `file -L`, `tree -l`) are refused without
//! being named here. `git` is not on the list at all: a repository's own configuration can make almost any git
//! command run a program (`core.fsmonitor`, `diff.external`, textconv and clean/smudge filters).

use super::ClassifierContext;
use super::command_options::{Argument, Attached, OptionSpec, operands, options, parse_options};
use super::cwd_paths::{Reach, path_is_safe};

/// `ls` without `-L`, `-H`, `--dereference` and `--dereference-command-line`.
const LS: OptionSpec = OptionSpec {
    short_flags: "aAbBcCdfFgGhiklmnNopqQrRsStuUvxX1Z",
    short_valued: "ITw",
    long_flags: &[
        "all",
        "almost-all",
        "escape",
        "ignore-backups",
        "directory",
        "file-type",
        "human-readable",
        "si",
        "inode",
        "literal",
        "numeric-uid-gid",
        "no-group",
        "hide-control-chars",
        "show-control-chars",
        "quote-name",
        "recursive",
        "reverse",
        "size",
        "group-directories-first",
        "full-time",
        "author",
        "context",
        "zero",
    ],
    long_valued: &[
        "sort",
        "time",
        "format",
        "ignore",
        "hide",
        "width",
        "tabsize",
        "block-size",
        "quoting-style",
        "time-style",
        "indicator-style",
    ],
    long_optional: &["color", "hyperlink", "classify"],
    ..OptionSpec::EMPTY
};

const CAT: OptionSpec = OptionSpec {
    short_flags: "AbeEnstTuv",
    long_flags: &[
        "show-all",
        "number-nonblank",
        "show-ends",
        "number",
        "squeeze-blank",
        "show-tabs",
        "show-nonprinting",
    ],
    ..OptionSpec::EMPTY
};

/// `head`; `tail` is the same (no `-f`, `-F`, `--follow`, `--retry`, `-s`, `--pid`).
const HEAD_TAIL: OptionSpec = OptionSpec {
    short_flags: "qvz",
    short_valued: "nc",
    long_flags: &["quiet", "silent", "verbose", "zero-terminated"],
    long_valued: &["lines", "bytes"],
    numeric: true,
    ..OptionSpec::EMPTY
};

const WC: OptionSpec = OptionSpec {
    short_flags: "clmwL",
    long_flags: &["bytes", "chars", "lines", "words", "max-line-length"],
    long_valued: &["total"],
    ..OptionSpec::EMPTY
};

/// `grep` without `-R`/`--dereference-recursive`, `-d` and `-D`.
const GREP: OptionSpec = OptionSpec {
    short_flags: "EFGPiywxvcLlnohsqrHbaIUzZT",
    short_valued: "efmABC",
    long_flags: &[
        "extended-regexp",
        "fixed-strings",
        "basic-regexp",
        "perl-regexp",
        "ignore-case",
        "no-ignore-case",
        "word-regexp",
        "line-regexp",
        "invert-match",
        "count",
        "files-with-matches",
        "files-without-match",
        "line-number",
        "only-matching",
        "no-filename",
        "with-filename",
        "no-messages",
        "quiet",
        "silent",
        "recursive",
        "byte-offset",
        "text",
        "null",
        "null-data",
        "initial-tab",
        "line-buffered",
    ],
    long_valued: &[
        "regexp",
        "file",
        "max-count",
        "after-context",
        "before-context",
        "context",
        "include",
        "exclude",
        "exclude-dir",
        "label",
        "binary-files",
    ],
    long_optional: &["color", "colour"],
    numeric: true,
    ..OptionSpec::EMPTY
};

/// `rg` without `--pre`, `--pre-glob`, `-z`/`--search-zip` (decompressors are programs), `--ignore-file`,
/// `--type-add` and `-L`/`--follow`.
const RG: OptionSpec = OptionSpec {
    short_flags: "iSsnNwxvclFuHIoUqa0p.",
    short_valued: "egtTABCmMjfrE",
    long_flags: &[
        "hidden",
        "no-ignore",
        "no-ignore-vcs",
        "no-ignore-dot",
        "no-ignore-parent",
        "no-ignore-global",
        "no-ignore-exclude",
        "no-ignore-files",
        "files",
        "files-with-matches",
        "files-without-match",
        "count",
        "count-matches",
        "ignore-case",
        "smart-case",
        "case-sensitive",
        "fixed-strings",
        "word-regexp",
        "line-regexp",
        "invert-match",
        "line-number",
        "no-line-number",
        "no-heading",
        "heading",
        "json",
        "multiline",
        "vimgrep",
        "column",
        "trim",
        "only-matching",
        "no-filename",
        "with-filename",
        "null",
        "text",
        "type-list",
        "quiet",
        "no-messages",
        "stats",
        "no-config",
        "unrestricted",
        "pretty",
        "byte-offset",
        "crlf",
        "passthru",
        "one-file-system",
        "max-columns-preview",
        "no-require-git",
        "binary",
        "no-unicode",
        "multiline-dotall",
        "invert-match",
    ],
    long_valued: &[
        "regexp",
        "glob",
        "iglob",
        "type",
        "type-not",
        "after-context",
        "before-context",
        "context",
        "max-count",
        "max-depth",
        "max-filesize",
        "threads",
        "sort",
        "sortr",
        "encoding",
        "replace",
        "color",
        "colors",
        "file",
        "max-columns",
        "path-separator",
        "context-separator",
        "field-match-separator",
        "engine",
    ],
    ..OptionSpec::EMPTY
};

/// `stat` without `-L`/`--dereference`.
const STAT: OptionSpec = OptionSpec {
    short_flags: "ft",
    short_valued: "c",
    long_flags: &["file-system", "terse"],
    long_valued: &["format", "printf"],
    ..OptionSpec::EMPTY
};

/// `file` without `-C`/`--compile`, `-m` (magic files), `-f` (names from a file), `-z`/`-Z` (decompression may
/// run programs), `-p` and `-L`/`--dereference`.
const FILE: OptionSpec = OptionSpec {
    short_flags: "bhiknrsE0lv",
    short_valued: "eFP",
    long_flags: &[
        "brief",
        "mime",
        "mime-type",
        "mime-encoding",
        "no-dereference",
        "keep-going",
        "no-pad",
        "no-buffer",
        "raw",
        "special-files",
        "extension",
        "apple",
        "print0",
    ],
    long_valued: &["exclude", "exclude-quiet", "separator", "parameter"],
    ..OptionSpec::EMPTY
};

/// `du` without `-L`, `-H`, `-D`, `--dereference`, `--dereference-args` and `--files0-from`.
const DU: OptionSpec = OptionSpec {
    short_flags: "abchklmsSxP0",
    short_valued: "dBt",
    long_flags: &[
        "all",
        "apparent-size",
        "bytes",
        "total",
        "human-readable",
        "si",
        "count-links",
        "no-dereference",
        "summarize",
        "separate-dirs",
        "one-file-system",
        "null",
        "inodes",
    ],
    long_valued: &["max-depth", "block-size", "threshold", "exclude", "time-style"],
    long_optional: &["time"],
    ..OptionSpec::EMPTY
};

const DF: OptionSpec = OptionSpec {
    short_flags: "ahHiklPTv",
    short_valued: "tBx",
    long_flags: &["all", "human-readable", "si", "inodes", "local", "portability", "print-type", "total", "no-sync"],
    long_valued: &["block-size", "type", "exclude-type"],
    ..OptionSpec::EMPTY
};

/// `tree` without `-o`/`--output` (writes a file), `-R` and `-H` (write HTML files), `-T`, `--fromfile` and `-l`
/// (follows symlinks to directories).
const TREE: OptionSpec = OptionSpec {
    short_flags: "adfxiqNQpugsDFvtcUrCnAShJX",
    short_valued: "LPI",
    long_flags: &[
        "noreport",
        "dirsfirst",
        "prune",
        "du",
        "si",
        "gitignore",
        "inodes",
        "device",
        "ignore-case",
        "matchdirs",
        "metafirst",
        "filesfirst",
        "nolinks",
        "condense",
    ],
    long_valued: &["filelimit", "charset", "sort", "timefmt"],
    attached: Attached::DigitsOnly,
    ..OptionSpec::EMPTY
};

const PWD: OptionSpec = OptionSpec { short_flags: "LP", ..OptionSpec::EMPTY };
const WHICH: OptionSpec = OptionSpec { short_flags: "as", ..OptionSpec::EMPTY };

/// Whether `program arguments` only reads, and only inside the cwd, by the allowlist.
pub(super) fn is_read_only(program: &str, arguments: &[Argument], context: &ClassifierContext<'_>) -> bool {
    match program {
        "ls" => is_read_only_ls(arguments, context),
        "cat" => paths_command(&CAT, arguments, context, Operands::Followed),
        "head" | "tail" => paths_command(&HEAD_TAIL, arguments, context, Operands::Followed),
        "wc" => paths_command(&WC, arguments, context, Operands::Followed),
        "stat" => paths_command(&STAT, arguments, context, Operands::NotFollowed),
        // `file` follows its operands when `POSIXLY_CORRECT` is set.
        "file" => paths_command(&FILE, arguments, context, Operands::Followed),
        "df" => paths_command(&DF, arguments, context, Operands::Followed),
        "du" => recursive_paths_command(&DU, arguments, context, Operands::NotFollowed),
        "tree" => recursive_paths_command(&TREE, arguments, context, Operands::Followed),
        "grep" => is_read_only_grep(arguments, context),
        "rg" => is_read_only_rg(arguments, context),
        "find" => is_read_only_find(arguments, context),
        "pwd" => parse_options(&PWD, arguments).is_some_and(|parsed| operands(&parsed).next().is_none()),
        // Their operands are text and program names, not files they read.
        "which" => parse_options(&WHICH, arguments).is_some(),
        "echo" => true,
        _ => false,
    }
}

/// Whether a program follows a symlink named on its command line. The matches of a glob are unknown until it
/// runs, so a program that follows its operands is never given a glob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Operands {
    Followed,
    /// Operands are looked at with `lstat` (`stat`, `du -P`, `find -P`, `ls -l`, `ls -d`).
    NotFollowed,
}

/// A program whose operands are all paths it reads, and nothing below them. Given no path, it reads nothing
/// below the cwd.
fn paths_command(
    spec: &OptionSpec,
    arguments: &[Argument],
    context: &ClassifierContext<'_>,
    follows: Operands,
) -> bool {
    parse_options(spec, arguments)
        .is_some_and(|parsed| paths_are_safe(operands(&parsed), Reach::Single, false, follows, context))
}

/// A program that reads everything below its path operands, or below `.` when given none.
fn recursive_paths_command(
    spec: &OptionSpec,
    arguments: &[Argument],
    context: &ClassifierContext<'_>,
    follows: Operands,
) -> bool {
    parse_options(spec, arguments)
        .is_some_and(|parsed| paths_are_safe(operands(&parsed), Reach::Recursive, true, follows, context))
}

/// `ls`, recursive with `-R`; it follows a symlink to a directory named on its command line unless it lists in
/// long format or lists directories themselves (`-l`, `-g`, `-n`, `-o`, `-d`, `--format=long`, ...).
fn is_read_only_ls(arguments: &[Argument], context: &ClassifierContext<'_>) -> bool {
    let Some(parsed) = parse_options(&LS, arguments) else { return false };
    let recursive = options(&parsed).any(|(name, _)| matches!(name, "-R" | "--recursive"));
    let not_followed = options(&parsed).any(|(name, value)| {
        matches!(name, "-l" | "-g" | "-n" | "-o" | "-d" | "--directory" | "--full-time")
            || (name == "--format" && matches!(value, Some("long" | "verbose")))
    });
    let follows = if not_followed { Operands::NotFollowed } else { Operands::Followed };
    let reach = if recursive { Reach::Recursive } else { Reach::Single };
    paths_are_safe(operands(&parsed), reach, recursive, follows, context)
}

fn paths_are_safe<'a>(
    paths: impl Iterator<Item = &'a Argument>,
    reach: Reach,
    defaults_to_cwd: bool,
    follows: Operands,
    context: &ClassifierContext<'_>,
) -> bool {
    let mut any = false;
    for path in paths {
        any = true;
        if path.glob && follows == Operands::Followed {
            return false;
        }
        // `-` is standard input.
        if path.text != "-" && !path_is_safe(&path.text, path.glob, reach, context) {
            return false;
        }
    }
    any || !defaults_to_cwd || path_is_safe(".", false, reach, context)
}

fn is_read_only_grep(arguments: &[Argument], context: &ClassifierContext<'_>) -> bool {
    let Some(parsed) = parse_options(&GREP, arguments) else { return false };
    let recursive = options(&parsed).any(|(name, _)| matches!(name, "-r" | "--recursive"));
    let pattern_given = options(&parsed).any(|(name, _)| matches!(name, "-e" | "-f" | "--regexp" | "--file"));
    // The pattern files of `-f`/`--file` are read too.
    let pattern_files_safe = options(&parsed)
        .filter(|(name, _)| matches!(*name, "-f" | "--file"))
        .all(|(_, value)| value.is_some_and(|file| file == "-" || path_is_safe(file, false, Reach::Single, context)));
    let paths = operands(&parsed).skip(usize::from(!pattern_given));
    let reach = if recursive { Reach::Recursive } else { Reach::Single };
    pattern_files_safe && paths_are_safe(paths, reach, recursive, Operands::Followed, context)
}

fn is_read_only_rg(arguments: &[Argument], context: &ClassifierContext<'_>) -> bool {
    let Some(parsed) = parse_options(&RG, arguments) else { return false };
    let pattern_given = options(&parsed)
        .any(|(name, _)| matches!(name, "-e" | "-f" | "--regexp" | "--file" | "--files" | "--type-list"));
    let pattern_files_safe = options(&parsed)
        .filter(|(name, _)| matches!(*name, "-f" | "--file"))
        .all(|(_, value)| value.is_some_and(|file| file == "-" || path_is_safe(file, false, Reach::Single, context)));
    let paths = operands(&parsed).skip(usize::from(!pattern_given));
    pattern_files_safe && paths_are_safe(paths, Reach::Recursive, true, Operands::Followed, context)
}

/// `find` primaries without an argument.
const FIND_TESTS: [&str; 21] = [
    "-print",
    "-print0",
    "-ls",
    "-prune",
    "-empty",
    "-true",
    "-false",
    "-not",
    "-a",
    "-and",
    "-o",
    "-or",
    "!",
    "(",
    ")",
    "-depth",
    "-xdev",
    "-mount",
    "-readable",
    "-writable",
    "-executable",
];

/// `find` primaries with one argument that is not a path.
const FIND_TESTS_WITH_VALUE: [&str; 27] = [
    "-name",
    "-iname",
    "-path",
    "-ipath",
    "-wholename",
    "-iwholename",
    "-lname",
    "-ilname",
    "-regex",
    "-iregex",
    "-regextype",
    "-type",
    "-xtype",
    "-maxdepth",
    "-mindepth",
    "-size",
    "-mtime",
    "-mmin",
    "-atime",
    "-amin",
    "-ctime",
    "-cmin",
    "-user",
    "-group",
    "-perm",
    "-links",
    "-printf",
];

/// `find` primaries whose argument is a path it reads (the file's times or identity).
const FIND_TESTS_WITH_PATH: [&str; 4] = ["-newer", "-anewer", "-cnewer", "-samefile"];

/// `find [-P] [path...] [expression]` with only the listed primaries: none that follows symlinks (`-H`, `-L`,
/// `-follow`), deletes (`-delete`), runs (`-exec`, `-execdir`, `-ok`, `-okdir`) or writes (`-fls`, `-fprint`,
/// `-fprint0`, `-fprintf`).
fn is_read_only_find(arguments: &[Argument], context: &ClassifierContext<'_>) -> bool {
    let start = arguments.iter().take_while(|argument| argument.text == "-P").count();
    let rest = arguments.get(start..).unwrap_or_default();
    let is_expression = |argument: &&Argument| {
        argument.text.starts_with('-') || matches!(argument.text.as_str(), "!" | "(" | ")" | ",")
    };
    let path_count = rest.iter().take_while(|argument| !is_expression(argument)).count();
    let (paths, expression) = rest.split_at(path_count);
    // A glob that starts with a pattern character may expand to a name find reads as a primary (`-delete`).
    if paths.iter().any(|path| path.glob && path.text.starts_with(['*', '?', '['])) {
        return false;
    }
    let mut words = expression.iter();
    while let Some(word) = words.next() {
        if word.glob {
            return false;
        }
        let primary = word.text.as_str();
        if FIND_TESTS.contains(&primary) {
            continue;
        }
        let reads_path = FIND_TESTS_WITH_PATH.contains(&primary);
        if !FIND_TESTS_WITH_VALUE.contains(&primary) && !reads_path {
            return false;
        }
        match words.next() {
            Some(value) if !value.glob && (!reads_path || path_is_safe(&value.text, false, Reach::Single, context)) => {
            }
            _ => return false,
        }
    }
    paths_are_safe(paths.iter(), Reach::Recursive, true, Operands::NotFollowed, context)
}
