//! The hard denies: operations refused in every permission mode, whatever the rules and grants say.
//!
//! This is a seatbelt, not a sandbox. It catches the daemon's own files by path and a handful of catastrophic
//! shell commands by their literal text; a command that reaches the same effect another way (a script, a
//! variable, an interpreter, `xargs`) is not recognized. Confinement is the job of approvals and of the user.

use std::path::Path;

use troupe_protocol::types::approval::PermissionAction;

use super::shell_words::{Word, lex};
use crate::tools::PermissionRequest;

/// How deep `sh -c '...'` and `eval ...` are followed before giving up.
const MAX_NESTING: usize = 3;

/// Pseudo-devices that `dd of=` may write to without harm.
const HARMLESS_DEVICES: [&str; 8] =
    ["/dev/null", "/dev/zero", "/dev/full", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/random", "/dev/urandom"];

/// Name prefixes (under `/dev/`) of disks and partitions, which a redirection must never overwrite.
const DISK_DEVICE_PREFIXES: [&str; 10] = ["sd", "hd", "vd", "xvd", "nvme", "mmcblk", "disk", "dm-", "md", "mapper/"];

/// Commands that run their arguments as another command, skipped to find the real program.
const WRAPPERS: [&str; 9] = ["sudo", "doas", "command", "exec", "nohup", "nice", "time", "env", "builtin"];

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

/// What makes `command` catastrophic, or `None`.
fn catastrophic_command(command: &str, depth: usize) -> Option<&'static str> {
    if is_fork_bomb(command) {
        return Some("a fork bomb");
    }
    let lexed = lex(command);
    if lexed.redirect_targets().any(|target| is_disk_device(&target.text)) {
        return Some("writing over a disk device");
    }
    for words in lexed.simple_commands() {
        let words = skip_wrappers(&words);
        let Some((program, arguments)) = words.split_first() else { continue };
        let program = program.text.rsplit('/').next().unwrap_or_default();
        match program {
            "rm" if is_recursive_removal_of_root_or_home(arguments) => {
                return Some("recursively deleting / or the home directory");
            }
            _ if program.starts_with("mkfs") => return Some("making a file system (mkfs)"),
            "dd" if arguments.iter().any(|argument| {
                argument.text.strip_prefix("of=").is_some_and(|target| {
                    target.starts_with("/dev/")
                        && !HARMLESS_DEVICES.contains(&target)
                        && !target.starts_with("/dev/fd/")
                })
            }) =>
            {
                return Some("writing onto a device with dd");
            }
            "sh" | "bash" | "dash" | "zsh" | "ksh" if depth < MAX_NESTING => {
                let script = arguments.iter().skip_while(|argument| argument.text != "-c").nth(1);
                if let Some(found) = script.and_then(|script| catastrophic_command(&script.text, depth + 1)) {
                    return Some(found);
                }
            }
            "eval" if depth < MAX_NESTING => {
                let script: Vec<&str> = arguments.iter().map(|argument| argument.text.as_str()).collect();
                if let Some(found) = catastrophic_command(&script.join(" "), depth + 1) {
                    return Some(found);
                }
            }
            _ => {}
        }
    }
    None
}

/// Drops leading `NAME=value` assignments and wrapper commands (`sudo -u root`, `env`, `nice -n 5`, ...).
fn skip_wrappers<'a, 'w>(mut words: &'a [&'w Word]) -> &'a [&'w Word] {
    loop {
        let Some((first, rest)) = words.split_first() else { return words };
        if is_assignment(&first.text) {
            words = rest;
        } else if WRAPPERS.contains(&first.text.rsplit('/').next().unwrap_or_default()) {
            words = rest;
            while let Some((option, rest)) = words.split_first() {
                if !option.text.starts_with('-') {
                    break;
                }
                words = rest;
                // Options of sudo and nice that take the next word as their value.
                if matches!(option.text.as_str(), "-u" | "-g" | "-C" | "-D" | "-h" | "-p" | "-r" | "-t" | "-U" | "-n") {
                    words = words.get(1..).unwrap_or_default();
                }
            }
        } else {
            return words;
        }
    }
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit())
    })
}

/// `rm` with `-r`, `-R` or `--recursive` (force is not needed to do the damage) and a target that is `/`, `/*`,
/// the home directory or everything in it, in any spelling made of `/`, `.`, `..` and `*` components.
fn is_recursive_removal_of_root_or_home(arguments: &[&Word]) -> bool {
    let mut recursive = false;
    let mut dangerous_target = false;
    let mut options_ended = false;
    for argument in arguments {
        let text = argument.text.as_str();
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
