//! The `auto_approve` classifier against the red team's bypasses and the classic bypass corpus.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::path::{Path, PathBuf};

use serde_json::json;
use troupe_protocol::types::approval::PermissionAction;
use troupe_runtime::policy::{ClassifierContext, is_low_risk};
use troupe_runtime::tools::PermissionRequest;

const CWD: &str = "/work/project";

/// The project's symlinks, as the kernel would follow them: `pw -> /etc/passwd`, `etcdir -> /etc`,
/// `inner -> src` (inside), and `broken/...` cannot be resolved.
fn resolve(path: &Path) -> Option<PathBuf> {
    let links = [
        ("/work/project/pw", "/etc/passwd"),
        ("/work/project/etcdir", "/etc"),
        ("/work/project/inner", "/work/project/src"),
    ];
    if path.starts_with("/work/project/broken") {
        return None;
    }
    for (link, target) in links {
        if let Ok(rest) = path.strip_prefix(link) {
            return Some(Path::new(target).join(rest));
        }
    }
    Some(path.to_path_buf())
}

/// Whether `command` is low risk in `/work/project` with the given denied paths.
fn low_risk_with(command: &str, denied: &[&str]) -> bool {
    let denied: Vec<PathBuf> = denied.iter().map(PathBuf::from).collect();
    let context = ClassifierContext { cwd: Path::new(CWD), denied: &denied, resolve: &resolve };
    let request = PermissionRequest {
        action: PermissionAction::Execute,
        resource: command.to_owned(),
        summary: String::new(),
        inside_cwd: true,
    };
    is_low_risk("shell", &request, &json!({"command": command}), &context)
}

/// The data dir outside the cwd.
fn low_risk(command: &str) -> bool {
    low_risk_with(command, &["/home/me/.troupe"])
}

#[test]
fn ordinary_read_only_commands_stay_low_risk() {
    for command in [
        "ls -la",
        "ls -la src",
        "cat src/main.rs",
        "grep -rn foo src",
        "rg foo",
        "rg -n -e foo -g '*.rs' src",
        "find . -name '*.rs'",
        "find src -type f -name '*.toml' -print",
        "wc -l Cargo.toml",
        "head -n 20 README.md",
        "head -n20 README.md",
        "head -20 README.md",
        "tail -n 5 log.txt",
        "tree -L 2",
        "tree -a -L 2 src",
        "du -sh src",
        "df -h",
        "stat -c %s Cargo.toml",
        "file -b src/main.rs",
        "echo hello",
        "which cargo",
        "pwd",
        "ls -- -weird-name",
        "cat /work/project/src/main.rs",
        "ls;",
        // Globs for programs that never follow their operands.
        "ls -l src/*.rs",
        "ls -d -- *",
        "stat src/*.rs",
        "du -sh src/*",
        "find src/* -name x",
        // A symlink that stays inside.
        "cat inner/lib.rs",
        "grep -r x inner",
    ] {
        assert!(low_risk(command), "{command}");
    }
}

#[test]
fn the_red_teams_writes_are_not_low_risk() {
    for command in [
        "tree -ao FILE .",
        "tree -o FILE .",
        "tree --output FILE",
        "tree -Lo 2 FILE",
        "tree -R -H . .",
        "tree --fromfile list",
        "file -zC",
        "file -C -m magic",
        "file --compile",
        "file -m /etc/magic x",
        "file -z x.gz",
    ] {
        assert!(!low_risk(command), "{command}");
    }
}

#[test]
fn git_is_never_low_risk() {
    // A repository's own configuration can make any of them run a program (`core.fsmonitor`, `diff.external`,
    // textconv and clean/smudge filters).
    for command in ["git status", "git diff", "git log --oneline -5", "git show HEAD", "git show HEAD:src/main.rs"] {
        assert!(!low_risk(command), "{command}");
    }
}

#[test]
fn symlinks_out_of_the_cwd_are_not_followed_unasked() {
    for command in [
        // The red team's reads through symlinks.
        "cat pw",
        "head -3 etcdir/shadow",
        "grep -R -l root etcdir",
        "find -L .",
        // The same through other programs and spellings.
        "cat ./pw",
        "ls etcdir",
        "ls etcdir/",
        "grep -r -l root etcdir",
        "rg root etcdir",
        "tree etcdir",
        "du -s etcdir/",
        "stat etcdir/shadow",
        "wc -l pw",
        "cat broken/x",
        // Options that follow symlinks.
        "grep --dereference-recursive root",
        "find -H .",
        "find . -follow",
        "tree -l",
        "ls -L",
        "ls -H src",
        "ls --dereference src",
        "ls --dereference-command-line src",
        "rg -L root",
        "rg --follow root",
        "du -L",
        "du -H src",
        "du -D src",
        "du --dereference",
        "du --dereference-args src",
        "stat -L README.md",
        "stat --dereference README.md",
        "file -L README.md",
        "file --dereference README.md",
        "wc --files0-from=list",
        // Globs whose matches may be symlinks, for programs that follow them.
        "cat *",
        "wc -l src/*.rs",
        "grep -r x *",
        "head src/*.rs",
        "ls *",
        "ls -d */",
        "ls -l etc*/shadow",
        "stat src/*/x",
    ] {
        assert!(!low_risk(command), "{command}");
    }
}

#[test]
fn the_data_dir_inside_the_cwd_is_out_of_reach() {
    let data_dir_inside = |command: &str| low_risk_with(command, &["/work/project/.troupe"]);
    for command in [
        "cat .troupe/daemon/token",
        "cat ./.troupe/daemon/token",
        "cat /work/project/.troupe/providers.json",
        "grep -r sk- .troupe",
        "grep -r sk- .",
        "grep -rn x",
        "rg sk-",
        "rg -uu sk- .",
        "find .",
        "find",
        "tree",
        "du -a",
        "ls -R",
        "ls .troupe",
        "git diff -- .troupe",
        "cat .*/daemon/token",
    ] {
        assert!(!data_dir_inside(command), "{command}");
    }
    for command in
        ["ls -la", "cat src/main.rs", "grep -rn foo src", "rg foo src", "ls -l docs/*.md", "stat -- *.md", "find src"]
    {
        assert!(data_dir_inside(command), "{command}");
    }
}

#[test]
fn the_classic_bypass_corpus_is_not_low_risk() {
    for command in [
        // Options hidden after `--`, in clusters, attached or abbreviated.
        "find . -exec rm {} \\;",
        "find . -execdir sh -c x \\;",
        "find . -ok rm {} \\;",
        "find . -delete",
        "find . -fprint out",
        "find . -fls out",
        "find . -fprintf out %p",
        "find -L . -newer /etc/passwd",
        "rg --pre cat x",
        "rg --pre=cat x",
        "rg --pre-glob '*' x",
        "rg -z x",
        "rg --search-zip x",
        "rg x *",
        "tail -f log",
        "tail --follow log",
        "grep -f /etc/passwd x",
        "grep --file=/etc/passwd x",
        "wc --files0-from=/etc/list",
        "cat -- /etc/passwd",
        "ls -- ../x",
        "sort -o x y",
        // Redirections of every kind.
        "cat x > y",
        "cat x >| y",
        "cat x >> y",
        "cat < /etc/passwd",
        "cat <<EOF\nx\nEOF",
        "cat <<< x",
        "ls 2>/dev/null",
        "ls &> y",
        // Substitutions, expansions, quoting tricks.
        "echo $'\\x41'",
        "cat $'/etc/passwd'",
        "echo $HOME",
        "echo ${HOME}",
        "echo $(id)",
        "echo `id`",
        "echo $((1+1))",
        "cat <(id)",
        "echo ~",
        "cat ~/.ssh/id_rsa",
        "ls {.,.}.",
        "echo $\"x\"",
        // Globs that can reach dot entries or escape.
        "cat .*",
        "cat */../*",
        "ls .*/x",
        "cat [.]*",
        "cat src/.*",
        // Assignments, aliases and wrappers.
        "A=b ls",
        "LD_PRELOAD=x ls",
        "sh -c ls",
        "bash -c ls",
        "dash -c ls",
        "busybox sh -c ls",
        "env sh -c ls",
        "env ls",
        "xargs ls",
        "command ls",
        "exec ls",
        "nice ls",
        "timeout 5 ls",
        "sudo ls",
        "builtin echo",
        "time ls",
        "eval ls",
        "/bin/ls",
        "./ls",
        // Structure.
        "ls; id",
        "ls && id",
        "ls | sh",
        "ls &",
        "! ls",
        "{ ls; }",
        "(ls)",
        "if true; then ls; fi",
        "f() { ls; }",
        "ls\nid",
        "ls 'open",
        "",
    ] {
        assert!(!low_risk(command), "{command:?}");
    }
}

#[test]
fn quoting_that_spells_an_allowed_name_is_read_as_the_shell_reads_it() {
    // Quote removal gives the shell's own reading: each of these is exactly `ls -la` or `cat src/main.rs`.
    for command in ["'ls' \"-la\"", "l's' -la", "\\ls -la", "cat 'src/main.rs'", "cat src/'main.rs'"] {
        assert!(low_risk(command), "{command}");
    }
    // And quoting hides nothing: `-o` is `-o` however it is spelled.
    for command in ["tree '-o' x", "tree -a\"o\" x", "git \"-c\" a=b log", "'rm' x"] {
        assert!(!low_risk(command), "{command}");
    }
}
