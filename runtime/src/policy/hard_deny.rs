//! The hard denies: operations refused in every permission mode, whatever the rules and grants say.
//!
//! This is a seatbelt, not a sandbox. It catches the daemon's own files by path and a handful of catastrophic
//! shell commands by their text. Commands are read with a shell grammar ([`super::shell_walk`]): every simple
//! command anywhere in the line counts, inside `{ }`, `if`, `while`, `for`, `case`, `!`, subshells, function
//! bodies, `$( )`, backticks and process substitutions. Within a simple command every later word is tried as the
//! start of the real command (so any wrapper counts: `sudo`, `timeout 5`, `taskset 1`, `setpriv ...`,
//! `unshare -r`, `xargs` with its piped input, `find -exec`, ...), and every word that looks like a script (a
//! space, `;`, `&`, `|` or a newline in it: `su -c 'rm -rf /'`, `script -qc "..."`) is read as a nested command
//! line, as are the scripts given to `sh`/`bash`/... and `eval`, to a depth limit. The words of programs that
//! only print or search text ([`DATA_PROGRAMS`]: `echo 'rm -rf /'`, `grep 'rm -rf /'`, `git commit -m ...`) are
//! not read as commands. What the grammar cannot read is read again by the word lexer ([`super::shell_words`]),
//! and the whole line is always read by the lexer too: an unknown structure is never a reason not to deny. A
//! variable, a script file or another interpreter still reaches the same effects unrecognized; the kernel
//! sandbox is the boundary.

use std::path::Path;

use troupe_protocol::types::approval::PermissionAction;

use super::dangerous_targets::{device_name, is_catastrophic_removal_target, is_disk_device};
use super::fork_bomb::is_fork_bomb;
use super::shell_walk;
use super::shell_words::lex;
use crate::tools::PermissionRequest;

/// How deep `sh -c '...'`, `eval ...`, script-like words and scripts fed to a shell are followed.
const MAX_NESTING: usize = 3;

/// Pseudo-devices that `dd of=` may write to without harm.
const HARMLESS_DEVICES: [&str; 8] = ["null", "zero", "full", "stdout", "stderr", "tty", "random", "urandom"];

/// Programs whose arguments are text, patterns or names, never a command they run: their later words are not
/// read as commands or scripts.
const DATA_PROGRAMS: [&str; 20] = [
    "echo",
    "printf",
    "grep",
    "egrep",
    "fgrep",
    "rg",
    "ag",
    "ack",
    "git",
    "hg",
    "jj",
    "test",
    "[",
    "true",
    "false",
    ":",
    "man",
    "which",
    "type",
    "notify-send",
];

/// Programs that may name a disk device without reading or writing it.
const DEVICE_NAMERS: [&str; 10] =
    ["ls", "lsblk", "stat", "readlink", "realpath", "basename", "dirname", "echo", "printf", "test"];

/// Disk tools that are denied when any argument is a device (`mkfs*` is denied whatever its arguments).
const DISK_TOOLS: [&str; 12] = [
    "mke2fs",
    "mkswap",
    "wipefs",
    "mkdosfs",
    "mkntfs",
    "fdisk",
    "sfdisk",
    "cfdisk",
    "parted",
    "sgdisk",
    "gdisk",
    "blkdiscard",
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
    let walked = shell_walk::walk(command);
    if is_fork_bomb(command, &walked) {
        return Some("a fork bomb");
    }
    if walked.output_targets.iter().any(|target| is_disk_device(&target.text)) {
        return Some("writing over a disk device");
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

/// What makes the simple command `words` (with `stdin` fed to it) catastrophic, or `None`: the command itself,
/// any later word read as the start of the real command, and any script-like word read as a command line.
fn catastrophic_words(words: &[&str], stdin: &[String], depth: usize) -> Option<&'static str> {
    let start = words.iter().take_while(|word| is_assignment(word)).count();
    let words = words.get(start..).unwrap_or_default();
    let program = words.first().map(|word| basename(word))?;
    if !DEVICE_NAMERS.contains(&program) && words.iter().skip(1).any(|word| names_disk_device(word)) {
        return Some("using a raw disk device");
    }
    if let Some(found) = catastrophic_program(words, stdin, depth) {
        return Some(found);
    }
    if DATA_PROGRAMS.contains(&program) || reads_script(program) {
        return None;
    }
    // `xargs` appends its standard input to the command: `echo / | xargs rm -rf`.
    let mut piped_words: Vec<&str> = Vec::new();
    for (index, word) in words.iter().enumerate().skip(1) {
        if basename(words.get(index - 1).copied().unwrap_or_default()) == "xargs" && piped_words.is_empty() {
            piped_words = stdin.iter().flat_map(|text| text.split_whitespace()).collect();
        }
        if depth < MAX_NESTING
            && looks_like_script(word)
            && let Some(found) = catastrophic_command(word, depth + 1)
        {
            return Some(found);
        }
        let candidate_program = basename(word);
        if is_catastrophic_program_name(candidate_program) {
            let mut candidate: Vec<&str> = words.get(index..).unwrap_or_default().to_vec();
            candidate.extend(&piped_words);
            if let Some(found) = catastrophic_program(&candidate, stdin, depth) {
                return Some(found);
            }
        }
        // A shell or `eval` has read every later word as a script already, and a data program's words are text.
        if reads_script(candidate_program) || DATA_PROGRAMS.contains(&candidate_program) {
            return None;
        }
    }
    None
}

/// A word the shell would have to parse: `su -c 'rm -rf /'`, `script -qc "..."`.
fn looks_like_script(word: &str) -> bool {
    word.contains([' ', '\t', '\n', ';', '&', '|'])
}

fn reads_script(program: &str) -> bool {
    SHELLS.contains(&program) || program == "eval"
}

/// The programs [`catastrophic_program`] can say something about, to skip the others cheaply.
fn is_catastrophic_program_name(program: &str) -> bool {
    matches!(program, "rm" | "dd" | "find")
        || program.starts_with("mkfs")
        || DISK_TOOLS.contains(&program)
        || reads_script(program)
}

/// The catastrophic programs themselves, and the shells and `eval` whose scripts are read again.
fn catastrophic_program(words: &[&str], stdin: &[String], depth: usize) -> Option<&'static str> {
    let (program, arguments) = words.split_first()?;
    let program = basename(program);
    match program {
        "rm" if is_recursive_removal_of_root_or_home(arguments) => Some("recursively deleting / or the home directory"),
        "find" if is_find_deleting_root_or_home(arguments) => Some("deleting / or the home directory with find"),
        _ if program.starts_with("mkfs") => Some("making a file system (mkfs)"),
        _ if DISK_TOOLS.contains(&program) && arguments.iter().any(|argument| device_name(argument).is_some()) => {
            Some("formatting, partitioning or wiping a device")
        }
        "dd" if arguments.iter().any(|argument| {
            argument
                .strip_prefix("of=")
                .and_then(device_name)
                .is_some_and(|device| !HARMLESS_DEVICES.contains(&device.as_str()) && !device.starts_with("fd/"))
        }) =>
        {
            Some("writing onto a device with dd")
        }
        // Every argument may be the script (`sh -c`, `sh -ec`, `bash -lc`), and without one the script may come
        // from standard input (`echo ... |`, `sh <<EOF`).
        _ if SHELLS.contains(&program) && depth < MAX_NESTING => arguments
            .iter()
            .copied()
            .chain(stdin.iter().map(String::as_str))
            .find_map(|script| catastrophic_command(script, depth + 1)),
        "eval" if depth < MAX_NESTING => catastrophic_command(&arguments.join(" "), depth + 1),
        _ => None,
    }
}

/// An argument that is a disk device, or a `dd`-style `of=` naming one.
fn names_disk_device(word: &str) -> bool {
    is_disk_device(word) || word.strip_prefix("of=").is_some_and(is_disk_device)
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

/// `rm` with `-r`, `-R` or `--recursive` (force is not needed to do the damage) and a target that
/// [`is_catastrophic_removal_target`]: `/`, a system directory, a home, in any spelling.
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
            dangerous_target |= is_catastrophic_removal_target(text);
        }
    }
    recursive && dangerous_target
}

/// `find` starting at `/`, a system directory or a home with `-delete` or `-exec rm` (`-execdir`, `-ok`,
/// `-okdir`).
fn is_find_deleting_root_or_home(arguments: &[&str]) -> bool {
    let mut words = arguments.iter().copied().peekable();
    // Leading options: `-H`, `-L`, `-P`, `-O3`, `-D debugopts`.
    while let Some(option) = words.next_if(|word| matches!(*word, "-H" | "-L" | "-P" | "-D") || word.starts_with("-O"))
    {
        if option == "-D" {
            words.next();
        }
    }
    let is_expression = |word: &&str| word.starts_with('-') || matches!(*word, "!" | "(" | ")" | ",");
    let starts: Vec<&str> = words.clone().take_while(|word| !is_expression(word)).collect();
    let expression: Vec<&str> = words.skip(starts.len()).collect();
    let deletes = expression.iter().enumerate().any(|(index, word)| {
        *word == "-delete"
            || (matches!(*word, "-exec" | "-execdir" | "-ok" | "-okdir")
                && expression.get(index + 1).is_some_and(|program| basename(program) == "rm"))
    });
    deletes && starts.iter().any(|start| is_catastrophic_removal_target(start))
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
    fn the_red_teams_hard_deny_bypasses_are_denied() {
        for command in [
            // Deleting, in other spellings of / and home.
            "rm -rf /usr/../*",
            "rm -rf /[a-z]*",
            "rm -rf /{usr,etc,bin}",
            "rm -rf ~root",
            "rm -rf \"${HOME:?}\"",
            "rm -rf \"${HOME:-x}\"/*",
            "rm -rf \"$PWD\"/../../../..",
            "rm -rf /usr",
            "rm -rf /etc/*",
            "rm -rf /home/me",
            "find / -delete",
            "find -L ~ -delete",
            "find /usr -exec rm {} +",
            // Disk tools and devices.
            "mke2fs /dev/sda",
            "mkswap /dev/sda2",
            "wipefs -a /dev/sda",
            "sfdisk /dev/nvme0n1 < table",
            "parted /dev/sda mklabel gpt",
            "shred /dev/sda",
            "cp /dev/zero /dev/sda",
            "tee /dev/sda < image",
            "dd of=//dev/sda",
            "dd of=/./dev/sda",
            "dd if=x of=/dev/loop0",
            "cat /dev/zero > //dev/sda",
            "cat image > /dev/disk/by-id/ata-x",
            // Wrappers that are on no list.
            "taskset 1 rm -rf /",
            "setpriv --reuid=0 rm -rf /",
            "unshare -r rm -rf /",
            "script -qc 'rm -rf /'",
            "script -qc \"rm -rf /\" /dev/null",
            "su -c 'rm -rf /'",
            "fakeroot rm -rf /",
            "chrt 10 rm -rf /",
            "ionice -c3 rm -rf /",
            "stdbuf -oL rm -rf /",
            "nsenter -t 1 -m rm -rf /",
            "runuser -u root -- rm -rf /",
            "firejail rm -rf /",
            "systemd-run rm -rf /",
            "sudo -s 'rm -rf ~'",
            // Fork bombs: mutual recursion and endless loops of background jobs.
            "a(){ b|b& }; b(){ a|a& }; a",
            "while :; do sleep 9 & done",
            "while true; do x & done",
            "until false; do x & done",
            "for ((;;)); do x & done",
        ] {
            assert!(execute(command).is_some_and(|reason| reason.ends_with("is never allowed")), "{command}");
        }
    }

    #[test]
    fn near_misses_of_the_red_teams_cases_are_not_hard_denied() {
        for command in [
            "rm -rf ./build",
            "rm -rf \"$TMPDIR\"/x",
            "rm -rf ~/.cache/x",
            "rm -rf /usr/local/src/x",
            "rm -rf ../sibling",
            "find . -delete",
            "find build -name '*.o' -delete",
            "find / -name x",
            "dd if=/dev/zero of=./disk.img",
            "mke2fs disk.img",
            "while read l; do echo $l; done < f",
            "while :; do ps aux | grep x; sleep 5; done",
            "cat /dev/null > log.txt",
            "ls -l /dev/sda",
            "echo 'rm -rf /'",
            "grep -rn 'rm -rf /' src",
            "git commit -m 'never run rm -rf / here'",
            "sudo echo rm -rf /",
            "timeout 5 cargo test -- --test-threads 1",
        ] {
            assert_eq!(execute(command), None, "{command}");
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
