//! The decision table (every mode × effect × grant × classifier verdict) and the `auto_approve` classifier.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::path::{Path, PathBuf};

use serde_json::json;
use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::session::PermissionMode;
use troupe_runtime::policy::{ClassifierContext, Decision, Effect, Evaluation, RuleSource, decide, is_low_risk};
use troupe_runtime::tools::PermissionRequest;

const MODES: [PermissionMode; 5] = [
    PermissionMode::AutoApprove,
    PermissionMode::AutoApproveN,
    PermissionMode::AutoApproveY,
    PermissionMode::Ask,
    PermissionMode::Yolo,
];

/// A shell command: the mode table applies to it as it is.
fn command() -> PermissionRequest {
    PermissionRequest {
        action: PermissionAction::Execute,
        resource: "cargo test".to_owned(),
        summary: String::new(),
        inside_cwd: true,
    }
}

/// A file tool's write, inside the cwd or not.
fn write(inside_cwd: bool) -> PermissionRequest {
    let resource = if inside_cwd { "/work/project/src/lib.rs" } else { "/home/me/.bashrc" };
    PermissionRequest {
        action: PermissionAction::Write,
        resource: resource.to_owned(),
        summary: String::new(),
        inside_cwd,
    }
}

fn evaluation(effect: Effect, source: RuleSource) -> Evaluation {
    Evaluation { effect, reason: "because".to_owned(), source }
}

/// What the decision is, without the exact reason wording.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Allow,
    Deny,
    AskUser,
    AllowOnceByMode,
}

fn outcome(decision: &Decision) -> Outcome {
    match decision {
        Decision::Allow { .. } => Outcome::Allow,
        Decision::Deny { .. } => Outcome::Deny,
        Decision::AskUser { .. } => Outcome::AskUser,
        Decision::AllowOnceByMode => Outcome::AllowOnceByMode,
    }
}

#[test]
fn hard_denies_and_rule_denies_hold_in_every_mode_whatever_the_grants() {
    for source in [RuleSource::HardDeny, RuleSource::Config(0), RuleSource::Agent(2)] {
        for mode in MODES {
            for granted in [false, true] {
                for low_risk in [false, true] {
                    let decision = decide(mode, &evaluation(Effect::Deny, source), &command(), granted, low_risk);
                    assert_eq!(decision, Decision::Deny { reason: "because".to_owned() }, "{source:?} {mode:?}");
                }
            }
        }
    }
}

#[test]
fn allows_hold_in_every_mode() {
    for source in [RuleSource::BuiltIn, RuleSource::Config(1), RuleSource::Agent(0)] {
        for mode in MODES {
            for granted in [false, true] {
                for low_risk in [false, true] {
                    let decision = decide(mode, &evaluation(Effect::Allow, source), &command(), granted, low_risk);
                    assert_eq!(decision, Decision::Allow { reason: "because".to_owned() }, "{source:?} {mode:?}");
                }
            }
        }
    }
}

#[test]
fn asks_follow_the_grant_the_classifier_and_the_mode() {
    use Outcome::*;
    use PermissionMode::*;
    // (mode, granted, low_risk, outcome)
    let table = [
        (AutoApprove, false, false, AskUser),
        (AutoApprove, false, true, Allow),
        (AutoApprove, true, false, Allow),
        (AutoApprove, true, true, Allow),
        (AutoApproveN, false, false, Deny),
        (AutoApproveN, false, true, Allow),
        (AutoApproveN, true, false, Allow),
        (AutoApproveN, true, true, Allow),
        (AutoApproveY, false, false, AllowOnceByMode),
        (AutoApproveY, false, true, Allow),
        (AutoApproveY, true, false, Allow),
        (AutoApproveY, true, true, Allow),
        (Ask, false, false, AskUser),
        (Ask, false, true, AskUser),
        (Ask, true, false, Allow),
        (Ask, true, true, Allow),
        (Yolo, false, false, Allow),
        (Yolo, false, true, Allow),
        (Yolo, true, false, Allow),
        (Yolo, true, true, Allow),
    ];
    assert_eq!(table.len(), MODES.len() * 4, "every mode, grant and verdict");
    for source in [RuleSource::BuiltIn, RuleSource::Config(0), RuleSource::Agent(0)] {
        for (mode, granted, low_risk, expected) in &table {
            let decision = decide(*mode, &evaluation(Effect::Ask, source), &command(), *granted, *low_risk);
            assert_eq!(outcome(&decision), *expected, "{mode:?} granted={granted} low_risk={low_risk}");
        }
    }
}

#[test]
fn file_tool_writes_outside_the_cwd_are_never_approved_by_a_mode_or_the_classifier() {
    use Outcome::*;
    use PermissionMode::*;
    let ask = evaluation(Effect::Ask, RuleSource::BuiltIn);
    for (mode, expected) in
        [(AutoApprove, AskUser), (AutoApproveN, Deny), (AutoApproveY, AskUser), (Ask, AskUser), (Yolo, AskUser)]
    {
        for low_risk in [false, true] {
            let decision = decide(mode, &ask, &write(false), false, low_risk);
            assert_eq!(outcome(&decision), expected, "{mode:?} low_risk={low_risk}");
        }
        // A tree grant or an explicit allow rule is the user's own intent.
        assert_eq!(outcome(&decide(mode, &ask, &write(false), true, false)), Allow, "{mode:?} granted");
        let allow_rule = evaluation(Effect::Allow, RuleSource::Config(0));
        assert_eq!(outcome(&decide(mode, &allow_rule, &write(false), false, false)), Allow, "{mode:?} allow rule");
    }
    // Inside the cwd, writes follow the ordinary table.
    assert_eq!(outcome(&decide(Yolo, &ask, &write(true), false, false)), Allow);
    assert_eq!(outcome(&decide(AutoApproveY, &ask, &write(true), false, false)), AllowOnceByMode);
    let Decision::Deny { reason } = decide(AutoApproveN, &ask, &write(false), false, false) else { panic!() };
    assert_eq!(reason, "rejected by auto_approve_n: because");
}

#[test]
fn reasons_say_who_decided() {
    let ask = evaluation(Effect::Ask, RuleSource::BuiltIn);
    let Decision::Deny { reason } = decide(PermissionMode::AutoApproveN, &ask, &command(), false, false) else {
        panic!()
    };
    assert_eq!(reason, "rejected by auto_approve_n: because");
    let Decision::AskUser { reason } = decide(PermissionMode::Ask, &ask, &command(), false, false) else { panic!() };
    assert_eq!(reason, "because");
    let Decision::Allow { reason } = decide(PermissionMode::Ask, &ask, &command(), true, false) else { panic!() };
    assert!(reason.contains("approve_tree"), "{reason}");
    let Decision::Allow { reason } = decide(PermissionMode::Yolo, &ask, &command(), false, false) else { panic!() };
    assert!(reason.contains("yolo"), "{reason}");
}

/// Every path is its own physical path: there are no symlinks.
fn resolve(path: &Path) -> Option<PathBuf> {
    Some(path.to_path_buf())
}

/// The session runs in `/work/project`; the data dir lies elsewhere.
fn context(denied: &[PathBuf]) -> ClassifierContext<'_> {
    ClassifierContext { cwd: Path::new("/work/project"), denied, resolve: &resolve }
}

fn shell(command: &str) -> bool {
    let request = PermissionRequest {
        action: PermissionAction::Execute,
        resource: command.to_owned(),
        summary: format!("run {command}"),
        inside_cwd: true,
    };
    let denied = [PathBuf::from("/home/me/.troupe")];
    is_low_risk("shell", &request, &json!({"command": command}), &context(&denied))
}

#[test]
fn the_classifier_approves_read_only_commands_that_stay_in_the_cwd() {
    for command in [
        "ls",
        "ls -la src",
        "pwd",
        "cat Cargo.toml",
        "head -n 20 src/lib.rs",
        "tail -n 5 log.txt",
        "ls -l src/*.rs",
        "grep -rn 'fn main' src",
        "rg -n \"TODO|FIXME\" runtime",
        "find . -name '*.rs' -type f",
        "echo hello world",
        "which cargo",
        "stat README.md",
        "file target",
        "du -sh src",
        "df -h",
        "tree -L 2 src",
        "  ls  ",
    ] {
        assert!(shell(command), "{command}");
    }
}

#[test]
fn the_classifier_escalates_everything_else() {
    for command in [
        // Compound commands, redirections and substitutions.
        "ls; rm -rf target",
        "ls && make",
        "ls || true",
        "cat x | sh",
        "ls &",
        "echo hi > file",
        "cat < /etc/passwd",
        "echo `id`",
        "echo $(id)",
        "cat $HOME/.ssh/id_rsa",
        "cat \"$HOME/.ssh/id_rsa\"",
        "(ls)",
        "ls # comment",
        "ls {a,b}",
        "echo 'unterminated",
        "ls\nrm x",
        // Outside the cwd.
        "cat /etc/passwd",
        "ls ..",
        "cat ../secret",
        "cat src/../../secret",
        "cat ~/.ssh/id_rsa",
        "ls ~",
        "grep -r x /",
        "grep --file=/etc/passwd x",
        "cat .*/x",
        "ls {.,.}.",
        // Programs and options that write or run something.
        "rm -rf target",
        "cargo test",
        "./ls",
        "/bin/ls",
        "FOO=1 ls",
        "sh -c ls",
        "find . -exec rm {} ;",
        "find . -delete",
        "find . -fprint out",
        "find . -ok rm",
        "git push",
        "git commit -m x",
        "git status",
        "git diff --stat",
        "git log --oneline -n 10",
        "wc -l src/*.rs",
        "git -C other status",
        "git -c core.pager=sh log",
        "git diff --output=patch",
        "git diff --ext-diff",
        "rg --pre cat x",
        "tree -o out.txt",
        "file -C -m magic",
        "",
    ] {
        assert!(!shell(command), "{command:?}");
    }
}

#[test]
fn the_classifier_approves_reads_inside_the_cwd_and_never_writes() {
    let request = |action, inside_cwd| PermissionRequest {
        action,
        resource: "/work/project/src/lib.rs".to_owned(),
        summary: String::new(),
        inside_cwd,
    };
    let denied = [PathBuf::from("/work/project/.troupe")];
    let context = context(&denied);
    for tool in ["read_file", "list_dir", "search"] {
        assert!(is_low_risk(tool, &request(PermissionAction::Read, true), &json!({}), &context), "{tool}");
        assert!(!is_low_risk(tool, &request(PermissionAction::Read, false), &json!({}), &context), "{tool}");
    }
    for tool in ["write_file", "edit_file", "goal_update"] {
        assert!(!is_low_risk(tool, &request(PermissionAction::Write, true), &json!({}), &context), "{tool}");
    }
    // Reads of a denied path, or of a directory that holds one, are not low risk even inside the cwd.
    for resource in ["/work/project/.troupe/daemon/token", "/work/project/.troupe", "/work/project"] {
        let read = PermissionRequest { resource: resource.to_owned(), ..request(PermissionAction::Read, true) };
        assert!(!is_low_risk("search", &read, &json!({}), &context), "{resource}");
    }
    // Execute from anything but the shell, and a shell request that disagrees with its own arguments.
    let ls = PermissionRequest {
        action: PermissionAction::Execute,
        resource: "ls".to_owned(),
        summary: String::new(),
        inside_cwd: true,
    };
    assert!(!is_low_risk("plugin_tool", &ls, &json!({"command": "ls"}), &context));
    assert!(!is_low_risk("shell", &ls, &json!({"command": "rm -rf target"}), &context));
}
