//! `troupe config check`: reads a data directory's `config.toml` (and `providers.json`) with the runtime's own
//! loader and checks (`troupe_runtime::config::check_config`, no daemon needed), prints what is wrong, and says whether a
//! running daemon has the file's current contents.
//!
//! The daemon reads its config once, at start. Whether the running daemon predates the file's last change is found
//! without asking it: the daemon holds an `flock` on `<data dir>/daemon/lock` for its lifetime, `/proc/locks`
//! names the process holding it, and the daemon writes its pid into the lock file right before it reads the
//! config, so the lock file's mtime is when the config was read (to the file system's precision; a daemon that
//! did not write its pid falls back to `/proc/<pid>/stat`'s start, known to whole boot-time seconds only). That is
//! compared with `config.toml`'s status change time (ctime), which a copy keeping an old mtime cannot set back.
//! When none of this can be read, the command says that changes apply on restart instead of guessing.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use troupe_runtime::config::{ConfigProblem, ProblemSeverity, check_config};
use troupe_runtime::data_dir::DataDir;

use crate::style::{Style, relative_time};

/// A problem in `--json`.
pub fn problem_json(problem: &ConfigProblem) -> serde_json::Value {
    serde_json::json!({
        "severity": problem.severity.as_str(),
        "location": problem.location,
        "message": problem.message,
    })
}

/// The daemon process that holds a data dir's lock: its pid and when it started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DaemonProcess {
    pub pid: u32,
    /// When it read its config: the lock file's mtime, else the process's start.
    pub started: SystemTime,
    /// Whether `started` is the lock file's mtime (precise) rather than the coarse process start.
    pub precise: bool,
}

/// What is known about a daemon running on a data dir, from this machine's `/proc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalDaemon {
    /// Nothing holds the data dir's lock: no daemon runs on it.
    NotRunning,
    Running(DaemonProcess),
    /// The lock or the process could not be read (another machine, another PID namespace, no `/proc`).
    Unknown,
}

/// Finds the daemon running on `data_dir` through its lock.
pub fn local_daemon(data_dir: &DataDir) -> LocalDaemon {
    use std::os::unix::fs::MetadataExt;
    let lock = data_dir.lock_path();
    let Ok(metadata) = std::fs::metadata(&lock) else {
        // No lock file: no daemon has ever started here.
        return LocalDaemon::NotRunning;
    };
    let Ok(locks) = std::fs::read_to_string("/proc/locks") else {
        return LocalDaemon::Unknown;
    };
    let device = format!("{:02x}:{:02x}:{}", libc::major(metadata.dev()), libc::minor(metadata.dev()), metadata.ino());
    let inode = metadata.ino().to_string();
    // `1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF`; waiters are marked `->` and skipped. The device is matched
    // too when it can be; on overlay file systems `/proc/locks` names the lower device, so then the inode alone.
    let holders: Vec<(u32, bool)> = locks
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 6 || fields[1] != "FLOCK" || fields[5].rsplit(':').next() != Some(inode.as_str()) {
                return None;
            }
            Some((fields[4].parse::<u32>().ok()?, fields[5] == device))
        })
        .collect();
    let holder = holders.iter().find(|(_, exact)| *exact).or(holders.first()).map(|(pid, _)| *pid);
    let Some(pid) = holder else {
        return LocalDaemon::NotRunning;
    };
    // The pid in the file says the daemon wrote it (and so stamped the mtime) at this start.
    let recorded = std::fs::read_to_string(&lock).ok().and_then(|text| text.trim().parse::<u32>().ok());
    if recorded == Some(pid)
        && let Ok(started) = std::fs::metadata(&lock).and_then(|metadata| metadata.modified())
    {
        return LocalDaemon::Running(DaemonProcess { pid, started, precise: true });
    }
    process_start(pid)
        .map_or(LocalDaemon::Unknown, |started| LocalDaemon::Running(DaemonProcess { pid, started, precise: false }))
}

/// When process `pid` started: its start in clock ticks after boot (`/proc/<pid>/stat`, field 22) plus the boot
/// time (`btime` of `/proc/stat`).
fn process_start(pid: u32) -> Option<SystemTime> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count fields after its closing one.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let start_ticks: u64 = after_name.split_whitespace().nth(19)?.parse().ok()?;
    let boot: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("btime ").and_then(|value| value.trim().parse().ok()))?;
    // SAFETY: sysconf has no preconditions.
    let ticks_per_second =
        u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok().filter(|ticks| *ticks > 0)?;
    let since_boot = Duration::from_millis(start_ticks * 1000 / ticks_per_second);
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(boot) + since_boot)
}

/// How finely a process's start is known from `/proc` (the boot time is in whole seconds): a file written this
/// soon after the start is taken to be older, since the daemon reads it later still. The lock file's mtime
/// needs no such slack.
const START_RESOLUTION: Duration = Duration::from_secs(1);

/// When a file last changed: its status change time (ctime), which, unlike the mtime, no one can set back (`cp -p`,
/// `rsync -a`, `touch -d` and unpacked archives keep an old mtime on new contents).
fn changed_at(metadata: &std::fs::Metadata) -> SystemTime {
    use std::os::unix::fs::MetadataExt;
    let (seconds, nanos) = (metadata.ctime(), metadata.ctime_nsec());
    match (u64::try_from(seconds), u32::try_from(nanos)) {
        (Ok(seconds), Ok(nanos)) => SystemTime::UNIX_EPOCH + Duration::new(seconds, nanos),
        _ => metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH),
    }
}

/// How the daemon `pid` was started, as a command to start it the same way again (`troupe serve --listen …`): its
/// arguments from `/proc/<pid>/cmdline`, after `troupe`. `None` when they cannot be read or it is not `serve`.
fn started_as(pid: u32) -> Option<String> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let arguments: Vec<String> = cmdline
        .split(|byte| *byte == 0)
        .skip(1)
        .filter(|argument| !argument.is_empty())
        .map(|argument| quoted(without_credentials(&String::from_utf8_lossy(argument)).as_bytes()))
        .collect();
    arguments.iter().any(|argument| argument == "serve").then(|| format!("troupe {}", arguments.join(" ")))
}

/// `argument` with the credentials of every URL in it hidden (`--cluster nats://user:secret@host:4222` →
/// `nats://…@host:4222`): the hint is printed, and `troupe status --json` may be pasted anywhere.
fn without_credentials(argument: &str) -> String {
    argument
        .split(',')
        .map(|part| match part.split_once("://") {
            Some((scheme, rest)) => match rest.split('/').next().and_then(|authority| authority.rsplit_once('@')) {
                Some((_, host)) => format!("{scheme}://…@{host}{}", &rest[rest.find('/').unwrap_or(rest.len())..]),
                None => part.to_owned(),
            },
            None => part.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// One argument as a shell reads it back: bare when it holds only safe characters, else in single quotes.
fn quoted(argument: &[u8]) -> String {
    let text = String::from_utf8_lossy(argument);
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./:=@,+%".contains(c);
    if text.chars().all(safe) { text.into_owned() } else { format!("'{}'", text.replace('\'', "'\\''")) }
}

/// Whether the running daemon has the config file's current contents, in one sentence, and whether a restart is
/// due (`None`: cannot tell).
pub fn restart_note(data_dir: &DataDir) -> (String, Option<bool>) {
    let config = data_dir.config_path();
    let modified = std::fs::metadata(&config).ok().map(|metadata| changed_at(&metadata));
    match (local_daemon(data_dir), modified) {
        (LocalDaemon::NotRunning, _) => {
            ("no daemon is running on this data dir: the config applies when it starts".to_owned(), Some(false))
        }
        (LocalDaemon::Running(daemon), Some(modified))
            if modified > daemon.started + if daemon.precise { Duration::ZERO } else { START_RESOLUTION } =>
        {
            let again = started_as(daemon.pid)
                .unwrap_or_else(|| format!("troupe serve --data-dir {}", data_dir.root().display()));
            (
                format!(
                    "{} changed after the running daemon (pid {}) started: restart it (stop it, then `{again}`) to \
                     apply the change",
                    config.display(),
                    daemon.pid,
                ),
                Some(true),
            )
        }
        (LocalDaemon::Running(daemon), _) => (
            format!(
                "the running daemon (pid {}, started {}) has this config; later changes apply when it restarts",
                daemon.pid,
                relative_time(&humantime::format_rfc3339_seconds(daemon.started).to_string())
            ),
            Some(false),
        ),
        (LocalDaemon::Unknown, _) => {
            ("the daemon reads its config at start: changes apply when it restarts".to_owned(), None)
        }
    }
}

/// `troupe config check`. Returns whether the configuration has errors (the caller exits 1).
pub fn check(data_dir: Option<PathBuf>, json: bool) -> anyhow::Result<bool> {
    let data_dir = DataDir::resolve(data_dir)?;
    let config = data_dir.config_path();
    let exists = config.is_file();
    let problems = check_config(&data_dir);
    let (note, restart_needed) = restart_note(&data_dir);
    let has_errors = problems.iter().any(|problem| problem.severity == ProblemSeverity::Error);
    if json {
        let problems: Vec<serde_json::Value> = problems.iter().map(problem_json).collect();
        crate::output::pretty_json(&serde_json::json!({
            "data_dir": data_dir.root().display().to_string(),
            "config_file": config.display().to_string(),
            "exists": exists,
            "problems": problems,
            "restart_needed": restart_needed,
            "note": note,
        }))?;
        return Ok(has_errors);
    }
    let style = Style::stdout();
    let mut text = String::new();
    if !data_dir.root().is_dir() {
        text.push_str(&format!(
            "{} does not exist: no daemon has run with this data dir (start one with `troupe serve --data-dir {}`)\n",
            data_dir.root().display(),
            data_dir.root().display()
        ));
    } else if !exists {
        text.push_str(&format!("{} does not exist: every setting has its default\n", config.display()));
    }
    text.push_str(&render_problems(&problems, style));
    if exists && problems.is_empty() {
        text.push_str(&format!("{}: no problems\n", config.display()));
    }
    if has_errors {
        text.push_str("a daemon does not start with these errors: fix them first\n");
    }
    text.push_str(&format!("{note}\n"));
    crate::output::text(&text);
    Ok(has_errors)
}

/// One line per problem: `error: LOCATION: MESSAGE`.
pub fn render_problems(problems: &[ConfigProblem], style: Style) -> String {
    let mut text = String::new();
    for problem in problems {
        let severity = match problem.severity {
            ProblemSeverity::Error => style.red("error"),
            ProblemSeverity::Warning => style.yellow("warning"),
        };
        text.push_str(&format!("{severity}: {}: {}\n", problem.location, problem.message));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_quoted_as_a_shell_reads_them_back() {
        assert_eq!(quoted(b"--listen"), "--listen");
        assert_eq!(quoted(b"127.0.0.1:47419"), "127.0.0.1:47419");
        assert_eq!(quoted(b"/home/me/my data"), "'/home/me/my data'");
        assert_eq!(quoted(b"it's"), "'it'\\''s'");
        assert_eq!(
            without_credentials("--cluster=nats://u:secret@a:4222,nats://b:4222/x,tls://t0k@c"),
            "--cluster=nats://…@a:4222,nats://b:4222/x,tls://…@c"
        );
        assert_eq!(without_credentials("/home/me/data"), "/home/me/data");
        // This test's own process is not a daemon: nothing to start again.
        assert_eq!(started_as(std::process::id()), None);
    }

    #[test]
    fn a_syntax_error_names_the_file_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(dir.path().to_path_buf());
        assert!(check_config(&data_dir).is_empty(), "a missing file is every default");
        std::fs::write(data_dir.config_path(), "listen = \"127.0.0.1:1\"\n[limits]\nmax_in_flihgt = 3\n").unwrap();
        let problems = check_config(&data_dir);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].location.ends_with("config.toml:3:1"), "{problems:?}");
        assert!(problems[0].message.contains("max_in_flihgt"), "{problems:?}");
    }

    #[test]
    fn this_process_is_found_as_the_holder_of_a_lock_it_holds() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(dir.path().to_path_buf());
        data_dir.ensure_layout().unwrap();
        assert_eq!(local_daemon(&data_dir), LocalDaemon::NotRunning);
        let file = std::fs::File::create(data_dir.lock_path()).unwrap();
        assert_eq!(local_daemon(&data_dir), LocalDaemon::NotRunning);
        // SAFETY: flock on a descriptor we own.
        assert_eq!(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
        match local_daemon(&data_dir) {
            LocalDaemon::Running(daemon) => {
                assert_eq!(daemon.pid, std::process::id());
                assert!(daemon.started <= SystemTime::now());
            }
            LocalDaemon::Unknown => {} // no /proc/locks here
            LocalDaemon::NotRunning => panic!("the lock this process holds was not found"),
        }
    }

    #[test]
    fn a_config_written_after_the_start_with_an_old_mtime_still_needs_a_restart() {
        use std::io::Write as _;
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(dir.path().to_path_buf());
        data_dir.ensure_layout().unwrap();
        let mut lock = std::fs::File::create(data_dir.lock_path()).unwrap();
        // SAFETY: flock on a descriptor we own.
        assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
        writeln!(lock, "{}", std::process::id()).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        // What `rsync -a` or `cp -p` of an older file leaves: new contents, an mtime from before the start.
        let config = std::fs::File::create(data_dir.config_path()).unwrap();
        config.set_modified(SystemTime::now() - Duration::from_secs(3600)).unwrap();
        let (note, restart_needed) = restart_note(&data_dir);
        if local_daemon(&data_dir) != LocalDaemon::Unknown {
            assert_eq!(restart_needed, Some(true), "{note}");
            assert!(note.contains("changed after"), "{note}");
        }
    }
}
