//! The hard denies: operations refused in every permission mode, whatever the rules and grants say.
//!
//! This is a seatbelt, not a sandbox. It catches the daemon's own files by path and a handful of catastrophic
//! shell commands by their text. Commands are read with a shell grammar ([`super::shell_ast`]): every simple
//! command anywhere in the line counts, inside `{ }`, `if`, `while`, `for`, `case`, `!`, subshells, function
//! bodies, `$( )`, backticks and process substitutions, after wrappers (`sudo`, `timeout 5`, `env -i A=b`,
//! `xargs`, ...) and inside `sh -c`, `eval` and scripts piped or here-documented into a shell, to a depth limit.
//! What the grammar cannot read is read again by the word lexer ([`super::shell_words`]), and the whole line is
//! always read by the lexer too: an unknown structure is never a reason not to deny. A variable, a script file or
//! another interpreter still reaches the same effects unrecognized; the kernel sandbox is the boundary.

use std::path::Path;

use troupe_protocol::types::approval::PermissionAction;

use super::shell_ast::{self, CommandView};
use super::shell_words::lex;
use crate::tools::PermissionRequest;

/// How deep `sh -c '...'`, `eval ...` and scripts fed to a shell are followed before giving up.
const MAX_NESTING: usize = 3;

/// Pseudo-devices that `dd of=` may write to without harm.
const HARMLESS_DEVICES: [&str; 8] =
    ["/dev/null", "/dev/zero", "/dev/full", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/random", "/dev/urandom"];

/// Name prefixes (under `/dev/`) of disks and partitions, which a redirection must never overwrite.
const DISK_DEVICE_PREFIXES: [&str; 10] = ["sd", "hd", "vd", "xvd", "nvme", "mmcblk", "disk", "dm-", "md", "mapper/"];

/// Commands that run (part of) their arguments as another command. Every later word is tried as the start of
/// the real command, so their options and values (`timeout 5`, `nice -n 5`, `sudo -u x`) need no parsing.
const WRAPPERS: [&str; 21] = [
    "sudo", "doas", "command", "exec", "nohup", "nice", "time", "env", "builtin", "timeout", "stdbuf", "ionice",
    "xargs", "setsid", "chroot", "busybox", "unbuffer", "watch", "flock", "strace", "find",
];

/// Programs that read a script from `-c`, their arguments or standard input.
const SHELLS: [&str; 9] = ["sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh"];

/// Words that open or continue a compound command; the lexer fallback skips them to find the program.
const KEYWORDS: [&str; 12] = ["{", "}", "!", "if", "then", "else", "elif", "do", "while", "until", "time", "fi"];

/// Why `request` is refused outright, or `None`. `data_dir` is the daemon's data directory.
pub(super) fn check(request: &PermissionRequest, data_dir: &Path) -> Option<String> {
    match request.action {
        PermissionAction::Write if Path::new(&request.resource).starts_with(data_dir) => {
            Some(format!("writing inside the daemon's data directory ({}) is never allowed", data_dir.display()))
        }
        PermissionAction::Read if is_secret_file(Path::new(&request.resource), data_dir) => Some(format!(
            "reading the daemon's token or provider credentials in {} is never allowed",
            data_dir.display()
        )),
        PermissionAction::Execute => {
            catastrophic_command(&request.resource, 0).map(|what| format!("{what} is never allowed"))
        }
        _ => None,
    }
}

/// `<data_dir>/daemon/**` (the bearer token) and `<data_dir>/providers.json` (API keys).
fn is_secret_file(path: &Path, data_dir: &Path) -> bool {
    path.starts_with(data_dir.join("daemon")) || path == data_dir.join(crate::provider_store::PROVIDERS_FILE_NAME)
}

/// What makes `command` catastrophic, or `None`: read with the grammar, then (always) with the word lexer.
fn catastrophic_command(command: &str, depth: usize) -> Option<&'static str> {
    if is_fork_bomb(command) {
        return Some("a fork bomb");
    }
    let walked = shell_ast::walk(command);
    if walked.output_targets.iter().any(|target| is_disk_device(&target.text)) {
        return Some("writing over a disk device");
    }
    if walked.commands.iter().any(is_recursive_background_call) {
        return Some("a fork bomb");
    }
    for view in &walked.commands {
        let words: Vec<&str> = view.words.iter().map(|word| word.text.as_str()).collect();
        if let Some(found) = catastrophic_words(&words, &view.stdin_scripts, depth) {
            return Some(found);
        }
    }
    walked
        .unparsed
        .iter()
        .find_map(|text| catastrophic_lexed(text, depth))
        .or_else(|| catastrophic_lexed(command, depth))
}

/// The word lexer's reading of `command`: a fallback for text the grammar rejects or reads differently.
fn catastrophic_lexed(command: &str, depth: usize) -> Option<&'static str> {
    let lexed = lex(command);
    if lexed.redirect_targets().any(|target| is_disk_device(&target.text)) {
        return Some("writing over a disk device");
    }
    lexed.simple_commands().iter().find_map(|words| {
        let texts: Vec<&str> = words.iter().map(|word| word.text.as_str()).collect();
        let start = texts.iter().take_while(|word| KEYWORDS.contains(word)).count();
        catastrophic_words(texts.get(start..).unwrap_or_default(), &[], depth)
    })
}

/// A function that calls itself in a pipeline or in the background: `:(){ :|:& };:` with any name and spacing.
fn is_recursive_background_call(view: &CommandView) -> bool {
    let program = view.words.first().map(|word| word.text.as_str());
    view.in_pipeline_or_background && program.is_some() && view.enclosing_function.as_deref() == program
}

/// What makes the simple command `words` (with `stdin` fed to it) catastrophic, or `None`.
fn catastrophic_words(words: &[&str], stdin: &[String], depth: usize) -> Option<&'static str> {
    let start = words.iter().take_while(|word| is_assignment(word)).count();
    let words = words.get(start..).unwrap_or_default();
    let program = words.first().map(|word| basename(word))?;
    if !WRAPPERS.contains(&program) {
        return catastrophic_program(words, stdin, depth);
    }
    // `xargs` appends its standard input to the command: `echo / | xargs rm -rf`.
    let piped_words: Vec<&str> =
        if program == "xargs" { stdin.iter().flat_map(|text| text.split_whitespace()).collect() } else { Vec::new() };
    for index in 1..words.len() {
        let mut candidate: Vec<&str> = words.get(index..).unwrap_or_default().to_vec();
        candidate.extend(&piped_words);
        let start = candidate.iter().take_while(|word| is_assignment(word)).count();
        let candidate = candidate.get(start..).unwrap_or_default();
        if let Some(found) = catastrophic_program(candidate, stdin, depth) {
            return Some(found);
        }
        // A shell or `eval` has read every later word as a script already; reading them again from each later
        // start would only multiply the work.
        if candidate.first().is_some_and(|word| SHELLS.contains(&basename(word)) || *word == "eval") {
            return None;
        }
    }
    None
}

/// The catastrophic programs themselves, and the shells and `eval` whose scripts are read again.
fn catastrophic_program(words: &[&str], stdin: &[String], depth: usize) -> Option<&'static str> {
    let (program, arguments) = words.split_first()?;
    let program = basename(program);
    match program {
        "rm" if is_recursive_removal_of_root_or_home(arguments) => Some("recursively deleting / or the home directory"),
        _ if program.starts_with("mkfs") => Some("making a file system (mkfs)"),
        "dd" if arguments.iter().any(|argument| {
            argument.strip_prefix("of=").is_some_and(|target| {
                target.starts_with("/dev/") && !HARMLESS_DEVICES.contains(&target) && !target.starts_with("/dev/fd/")
            })
        }) =>
        {
            Some("writing onto a device with dd")
        }
        // Every argument may be the script (`sh -c`, `sh -ec`, `bash -lc`), and without one the script may come
        // from standard input (`echo ... | sh`, `sh <<EOF`).
        _ if SHELLS.contains(&program) && depth < MAX_NESTING => arguments
            .iter()
            .copied()
            .chain(stdin.iter().map(String::as_str))
            .find_map(|script| catastrophic_command(script, depth + 1)),
        "eval" if depth < MAX_NESTING => catastrophic_command(&arguments.join(" "), depth + 1),
        _ => None,
    }
}

fn basename(program: &str) -> &str {
    program.rsplit('/').next().unwrap_or_default()
}

fn is_assignment(word: &&str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit())
    })
}

/// `rm` with `-r`, `-R` or `--recursive` (force is not needed to do the damage) and a target that is `/`, `/*`,
/// the home directory or everything in it, in any spelling made of `/`, `.`, `..` and `*` components.
fn is_recursive_removal_of_root_or_home(arguments: &[&str]) -> bool {
    let mut recursive = false;
    let mut dangerous_target = false;
    let mut options_ended = false;
    for argument in arguments {
        let text = *argument;
        if !options_ended && text == "--" {
            options_ended = true;
        } else if !options_ended && text.starts_with("--") {
            recursive |= text == "--recursive";
        } else if !options_ended && text.starts_with('-') && text.len() > 1 {
            recursive |= text.contains(['r', 'R']);
        } else {
            dangerous_target |= is_root_or_home(text);
        }
    }
    recursive && dangerous_target
}

fn is_root_or_home(target: &str) -> bool {
    let rest = if let Some(rest) = target.strip_prefix("${HOME}").or_else(|| target.strip_prefix("$HOME")) {
        rest
    } else if let Some(rest) = target.strip_prefix('~') {
        rest
    } else if target.starts_with('/') {
        target
    } else {
        return false;
    };
    (rest.is_empty() || rest.starts_with('/'))
        && rest
            .split('/')
            .filter(|component| !component.is_empty())
            .all(|component| matches!(component, "." | ".." | "*"))
}

fn is_disk_device(target: &str) -> bool {
    target.strip_prefix("/dev/").is_some_and(|name| DISK_DEVICE_PREFIXES.iter().any(|prefix| name.starts_with(prefix)))
}

/// `NAME(){ NAME|NAME& };NAME` for any function name, spaces ignored: the classic `:(){ :|:& };:`.
fn is_fork_bomb(command: &str) -> bool {
    let compact: String = command.chars().filter(|c| !c.is_whitespace()).collect();
    compact.match_indices("(){").any(|(index, _)| {
        let before = &compact[..index];
        let name_start = before
            .rfind(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | ':' | '.' | '-')))
            .map_or(0, |position| position + 1);
        let name = &before[name_start..];
        let body = &compact[index + 3..];
        !name.is_empty()
            && (body.starts_with(&format!("{name}|{name}&}}")) || body.starts_with(&format!("{name}|{name}&;}}")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn execute(command: &str) -> Option<String> {
        let request = PermissionRequest {
            action: PermissionAction::Execute,
            resource: command.to_owned(),
            summary: String::new(),
            inside_cwd: true,
        };
        check(&request, Path::new("/data"))
    }

    #[test]
    fn catastrophic_commands_are_recognized_in_their_usual_spellings() {
        for command in [
            "rm -rf /",
            "rm -rf /*",
            "rm -fr /",
            "rm -r -f /",
            "rm -Rf //",
            "rm --recursive --force /",
            "rm -rf --no-preserve-root /",
            "sudo rm -rf /",
            "sudo -u root rm -rf /*",
            "/bin/rm -rf '/'",
            "cd /tmp && rm -rf / ",
            "echo hi; rm -rf ~",
            "rm -rf ~/",
            "rm -rf \"$HOME\"",
            "rm -rf /./*",
            "mkfs.ext4 /dev/sda1",
            "mkfs -t ext4 /dev/sdb",
            "dd if=/dev/zero of=/dev/sda bs=1M",
            "dd of=/dev/nvme0n1 if=image",
            "cat image > /dev/sda",
            ":(){ :|:& };:",
            ":(){ :|: & };:",
            "bomb(){ bomb|bomb& }; bomb",
            "sh -c 'rm -rf /'",
            "bash -c \"sudo rm -rf /*\"",
            "eval rm -rf /",
            "FOO=1 rm -rf /",
        ] {
            assert!(execute(command).is_some(), "{command}");
        }
    }

    #[test]
    fn catastrophic_commands_are_recognized_inside_any_structure() {
        for command in [
            // The red team's bypasses of the lexer-only reading.
            "{ rm -rf /; }",
            "if true; then rm -rf /; fi",
            "! rm -rf /",
            "timeout 5 rm -rf /",
            // Compound commands, lists and substitutions.
            "if false; then :; elif true; then :; else rm -rf ~; fi",
            "while true; do rm -rf /; done",
            "until false; do mkfs.ext4 /dev/sda; done",
            "for x in 1; do dd if=/dev/zero of=/dev/sda; done",
            "case x in x) rm -rf /;; esac",
            "(rm -rf /)",
            "ls && (cd / && rm -rf /*)",
            "echo $(rm -rf /)",
            "echo `rm -rf /`",
            "echo \"$(echo $(rm -rf ~))\"",
            "cat <(rm -rf /)",
            "X=$(rm -rf /) true",
            "f() { rm -rf /; }; f",
            "[[ -n $(rm -rf /) ]]",
            "echo ${x:-$(rm -rf /)}",
            "{ cat image; } > /dev/sda",
            "cat image &> /dev/nvme0n1",
            "r\\m -rf /",
            "\"rm\" -rf \"/\"",
            // Wrappers with their options and values.
            "nice -n 5 rm -rf /",
            "env -i A=b rm -rf /",
            "sudo -u x rm -rf /",
            "doas -u root rm -rf /",
            "nohup rm -rf / &",
            "command rm -rf /",
            "exec rm -rf /",
            "time rm -rf /",
            "stdbuf -o0 rm -rf /",
            "ionice -c 3 rm -rf /",
            "builtin eval 'rm -rf /'",
            "xargs rm -rf /",
            "echo / | xargs rm -rf",
            "xargs -0 -n 1 rm -rf ~",
            "sudo timeout 5 nice env rm -rf /",
            "busybox rm -rf /",
            "find / -exec rm -rf / \\;",
            // Nested scripts.
            "sh -c 'rm -rf /'",
            "bash -lc 'if true; then rm -rf /; fi'",
            "dash -ec '{ rm -rf /; }'",
            "busybox sh -c 'rm -rf /'",
            "env sh -c 'rm -rf /'",
            "eval 'timeout 5 rm -rf /'",
            "echo 'rm -rf /' | sh",
            "bash <<EOF\nrm -rf /\nEOF\n",
            "sh <<< 'rm -rf /'",
            // Fork bombs, also spelled with spaces or other names.
            "f() { f | f & }; f",
            "bomb() { bomb & bomb; }; bomb",
        ] {
            assert!(execute(command).is_some(), "{command}");
        }
    }

    #[test]
    fn nesting_is_bounded() {
        let mut command = "rm -rf /".to_owned();
        for _ in 0..6 {
            command = format!("sh -c {}", shell_quote(&command));
        }
        // Too deep to follow: not denied, but answered quickly.
        let _ = execute(&command);
        let many_wrappers = "sudo ".repeat(500) + "ls";
        assert_eq!(execute(&many_wrappers), None);
    }

    fn shell_quote(text: &str) -> String {
        format!("'{}'", text.replace('\'', "'\\''"))
    }

    #[test]
    fn ordinary_commands_are_not_hard_denied() {
        for command in [
            "rm -rf target",
            "rm -rf ./build/*",
            "rm -rf /tmp/x",
            "rm / ",
            "ls -rf /",
            "echo 'rm -rf /'",
            "dd if=/dev/zero of=/dev/null count=1",
            "dd if=x of=out.img",
            "make > /dev/null 2>&1",
            "mkdir fs",
            "cargo test",
            "{ rm -rf target; }",
            "if true; then rm -rf ./build; fi",
            "timeout 5 cargo test",
            "sudo -u x ls /",
            "sh -c 'echo rm -rf /'",
            "f() { g | h; }; f",
            "echo $(ls /)",
        ] {
            assert_eq!(execute(command), None, "{command}");
        }
    }

    #[test]
    fn the_data_directory_is_protected_by_path() {
        let request = |action, resource: &str| PermissionRequest {
            action,
            resource: resource.to_owned(),
            summary: String::new(),
            inside_cwd: false,
        };
        let data_dir = Path::new("/home/u/.troupe");
        assert!(check(&request(PermissionAction::Write, "/home/u/.troupe/config.toml"), data_dir).is_some());
        assert!(check(&request(PermissionAction::Write, "/home/u/.troupe"), data_dir).is_some());
        assert!(check(&request(PermissionAction::Write, "/home/u/.troupe-other/x"), data_dir).is_none());
        assert!(check(&request(PermissionAction::Read, "/home/u/.troupe/daemon/token"), data_dir).is_some());
        assert!(check(&request(PermissionAction::Read, "/home/u/.troupe/providers.json"), data_dir).is_some());
        assert!(check(&request(PermissionAction::Read, "/home/u/.troupe/sessions/s/events.jsonl"), data_dir).is_none());
    }
}
