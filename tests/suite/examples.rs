//! The example clients of `examples/`, each run as a real process against a live daemon with exactly the command
//! its section of `examples/README.md` shows (read from the README, so a documented command that breaks fails
//! here), in the directory the README names, with `TROUPE_URL` and `TROUPE_TOKEN` set.
//!
//! What the README's "once" steps prepare, `scripts/test` prepares: the Python packages in
//! `target/examples-venv` (first on `PATH` here, as activating the venv does) and `npm ci` in `examples/node`.
//! When they are missing these tests fail and say so; they never skip.

use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use troupe_protocol::method;
use troupe_protocol::types::provider::ProviderDisconnectParams;

use super::support::*;

/// How long an interpreted example may take (it runs in well under a second on an idle machine).
const SCRIPT_LIMIT: Duration = Duration::from_secs(90);
/// How long a `cargo run --example` may take: the examples are normally built already (`cargo test` builds them),
/// but cargo may first wait for the build lock or rebuild the example.
const CARGO_LIMIT: Duration = Duration::from_secs(1200);

fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The commands of `examples/README.md` marked `<!-- tested: DIR -->`: each is the one line of the `sh` block that
/// follows its marker, run in `DIR` (relative to the repository).
#[derive(Debug)]
struct ReadmeCommand {
    dir: PathBuf,
    command: String,
}

fn readme_commands() -> Vec<ReadmeCommand> {
    let path = repository().join("examples/README.md");
    let readme = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let mut commands = Vec::new();
    let mut lines = readme.lines();
    while let Some(line) = lines.next() {
        let Some(dir) = line.trim().strip_prefix("<!-- tested:").and_then(|rest| rest.strip_suffix("-->")) else {
            continue;
        };
        assert_eq!(lines.next().map(str::trim), Some("```sh"), "a `tested` marker is followed by a ```sh block");
        let body: Vec<&str> = lines.by_ref().take_while(|line| line.trim() != "```").collect();
        assert_eq!(body.len(), 1, "a tested block holds exactly one command, found {body:?}");
        commands.push(ReadmeCommand { dir: PathBuf::from(dir.trim()), command: body[0].trim().to_owned() });
    }
    commands
}

/// The README's tested command that runs `program`.
fn readme_command(program: &str) -> ReadmeCommand {
    let commands = readme_commands();
    let mut matching = commands.into_iter().filter(|command| command.command.contains(program));
    let found = matching.next().unwrap_or_else(|| panic!("examples/README.md has no tested command for {program}"));
    assert!(matching.next().is_none(), "examples/README.md has two tested commands for {program}");
    found
}

/// A README command running as a child in its own process group, its output collected as it comes.
struct Running {
    child: Child,
    output: Arc<Mutex<String>>,
    what: String,
}

impl Running {
    /// Starts `command` with `sh -c` against `daemon`; `path_first` goes in front of `PATH`.
    fn start(daemon: &TestDaemon, command: &ReadmeCommand, path_first: Option<&Path>) -> Running {
        let mut shell = Command::new("sh");
        shell
            .arg("-c")
            // `exec`: the program replaces the shell (as `cargo run` replaces itself with the example), so a
            // Ctrl-C reaches the program alone, as it does in a terminal, not a shell that dies of it.
            .arg(format!("exec {}", command.command))
            .current_dir(repository().join(&command.dir))
            .env("TROUPE_URL", daemon.url())
            .env("TROUPE_TOKEN", &daemon.token)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, so a timeout or Ctrl-C reaches cargo's child and the interpreter too.
            .process_group(0);
        if let Some(dir) = path_first {
            let path = std::env::var_os("PATH").unwrap_or_default();
            let joined = std::env::join_paths(std::iter::once(dir.to_path_buf()).chain(std::env::split_paths(&path)))
                .expect("PATH");
            shell.env("PATH", joined).env("VIRTUAL_ENV", dir.parent().expect("venv"));
        }
        let mut child = shell.spawn().unwrap_or_else(|error| panic!("starting `{}`: {error}", command.command));
        let output = Arc::new(Mutex::new(String::new()));
        for stream in [
            Box::new(child.stdout.take().expect("stdout")) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().expect("stderr")),
        ] {
            let output = Arc::clone(&output);
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut buffer = [0u8; 4096];
                while let Ok(read) = stream.read(&mut buffer) {
                    if read == 0 {
                        break;
                    }
                    output.lock().expect("output").push_str(&String::from_utf8_lossy(&buffer[..read]));
                }
            });
        }
        Running { child, output, what: format!("`{}` in {}", command.command, command.dir.display()) }
    }

    fn output(&self) -> String {
        self.output.lock().expect("output").clone()
    }

    fn signal_group(&self, signal: libc::c_int) {
        // SAFETY: signalling the process group this test started (its id is the child's pid).
        unsafe {
            libc::kill(-(self.child.id() as libc::pid_t), signal);
        }
    }

    /// Polls until the output contains `text`; fails (with the output) after `limit` or if the program exits.
    fn wait_for_output(&mut self, text: &str, limit: Duration) {
        let printed = holds_within_blocking(limit, || {
            if let Some(status) = self.child.try_wait().expect("wait") {
                panic!("{} exited ({status}) before printing {text:?}; its output:\n{}", self.what, self.output());
            }
            self.output().contains(text)
        });
        if !printed {
            self.signal_group(libc::SIGKILL);
            panic!("{} printed no {text:?} within {limit:?}; its output:\n{}", self.what, self.output());
        }
    }

    /// Polls until the program exits; kills it and fails after `limit`. Returns its status and whole output.
    fn finish(mut self, limit: Duration) -> (ExitStatus, String) {
        let mut status = None;
        let finished = holds_within_blocking(limit, || {
            status = self.child.try_wait().expect("wait");
            status.is_some()
        });
        let Some(status) = status.filter(|_| finished) else {
            self.signal_group(libc::SIGKILL);
            panic!("{} did not finish within {limit:?}; its output:\n{}", self.what, self.output());
        };
        // The readers end when the group's last writer closes the pipes; a grandchild that outlived the shell
        // would keep them open, so this wait is bounded too (and what was read so far is the output either way).
        holds_within_blocking(WAIT, || Arc::strong_count(&self.output) == 1);
        (status, self.output())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.signal_group(libc::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

/// What every `run_and_approve` prints: the run's events in order, the approval from the second connection, and
/// the command's output in its result.
fn assert_ran_and_approved(status: ExitStatus, output: &str) {
    assert!(status.success(), "exit status {status}; output:\n{output}");
    let mut from = 0;
    for step in [
        "approval_requested",
        "approved once",
        "tool_call_terminated",
        "hello from an approved command",
        "run_completed",
        "the run ended: run_completed",
    ] {
        let Some(at) = output[from..].find(step) else {
            panic!("{step:?} missing, or out of order, in the output:\n{output}");
        };
        from += at + step.len();
    }
    assert!(output.contains("[approver]"), "the approval came from the second connection:\n{output}");
}

/// Fails unless the daemon's `local` provider is back to its built-in state, with no script: the examples connect it
/// with a script file they delete at exit, and must disconnect it again, or every later `local/scripted` run fails
/// reading a file that is gone. A `provider.disconnect` finds no stored connection to remove when they did.
fn assert_local_provider_released(daemon: &TestDaemon, output: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    let disconnected = runtime.block_on(async {
        let (client, _deliveries) = daemon.client().await;
        let params = ProviderDisconnectParams {
            provider_id: "local".to_owned(),
            expected_runtime_revision: None,
            expected_connection_generation: None,
            client_request_id: "examples-test-check".to_owned(),
        };
        within("provider.disconnect", client.call::<method::ProviderDisconnect>(params))
            .await
            .expect("provider.disconnect")
            .disconnected
    });
    assert!(!disconnected, "the example left the local provider connected to its deleted script; output:\n{output}");
}

/// An address nothing listens on (a port just bound and released), for the unreachable-daemon tests.
fn closed_port() -> std::net::SocketAddr {
    (std::net::Ipv4Addr::LOCALHOST, free_port()).into()
}

/// What an interpreted example says when its token is refused: the refusal, and where the right token comes from.
fn assert_token_hint(status: ExitStatus, output: &str) {
    assert_eq!(status.code(), Some(2), "{output}");
    assert!(output.contains("refused the connection") && output.contains("HTTP 401"), "{output}");
    assert!(output.contains("set TROUPE_TOKEN") && output.contains("`troupe token`"), "{output}");
}

/// What an interpreted example says when no daemon listens: that it cannot reach it, and what to start or set.
fn assert_unreachable_hint(status: ExitStatus, output: &str) {
    assert_eq!(status.code(), Some(2), "{output}");
    assert!(output.contains("cannot reach"), "{output}");
    assert!(output.contains("`troupe serve`") && output.contains("TROUPE_URL"), "{output}");
}

/// `target/examples-venv/bin` with `websockets` importable, or a failure that says how to get it.
fn python_venv_bin() -> PathBuf {
    let bin = repository().join("target/examples-venv/bin");
    let usable = Command::new(bin.join("python3"))
        .args(["-c", "import websockets.asyncio.client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    assert!(
        usable,
        "no Python with the examples' packages in {}: run scripts/test, which installs python3-venv and \
         examples/python/requirements.txt into it",
        bin.display()
    );
    bin
}

/// Fails, saying how to get them, unless `node` runs and `examples/node` has its packages.
fn require_node() {
    let node = Command::new("node").arg("--version").stdout(Stdio::null()).status().is_ok_and(|s| s.success());
    assert!(node, "no `node` on PATH: run scripts/test, which installs nodejs and npm");
    let ws = repository().join("examples/node/node_modules/ws/package.json");
    assert!(ws.exists(), "no {}: run scripts/test, which runs `npm ci` in examples/node", ws.display());
}

#[test]
fn the_readme_marks_one_tested_command_per_example() {
    let commands = readme_commands();
    let programs: Vec<&str> = commands.iter().map(|command| command.command.as_str()).collect();
    assert_eq!(
        programs,
        [
            "python3 run_and_approve.py",
            "node run_and_approve.js",
            "cargo run --example run_and_approve",
            "cargo run --example follow_session"
        ],
        "each example is run by a test below: add a test with a new tested command"
    );
    for command in &commands {
        assert!(repository().join(&command.dir).is_dir(), "{command:?}: no such directory");
    }
}

#[test]
fn python_runs_an_agent_and_approves_from_a_second_connection() {
    let venv_bin = python_venv_bin();
    let daemon = TestDaemon::start();
    let command = readme_command("run_and_approve.py");
    let (status, output) = Running::start(&daemon, &command, Some(&venv_bin)).finish(SCRIPT_LIMIT);
    assert_ran_and_approved(status, &output);
    assert_local_provider_released(&daemon, &output);
}

#[test]
fn python_fails_with_a_wrong_token() {
    let venv_bin = python_venv_bin();
    let mut daemon = TestDaemon::start();
    daemon.token = "not-the-token".to_owned();
    let command = readme_command("run_and_approve.py");
    let (status, output) = Running::start(&daemon, &command, Some(&venv_bin)).finish(SCRIPT_LIMIT);
    assert_token_hint(status, &output);
}

#[test]
fn python_says_to_start_the_daemon_when_none_listens() {
    let venv_bin = python_venv_bin();
    let mut daemon = TestDaemon::start();
    daemon.addr = closed_port();
    let command = readme_command("run_and_approve.py");
    let (status, output) = Running::start(&daemon, &command, Some(&venv_bin)).finish(SCRIPT_LIMIT);
    assert_unreachable_hint(status, &output);
}

#[test]
fn node_runs_an_agent_and_approves_from_a_second_connection() {
    require_node();
    let daemon = TestDaemon::start();
    let command = readme_command("run_and_approve.js");
    let (status, output) = Running::start(&daemon, &command, None).finish(SCRIPT_LIMIT);
    assert_ran_and_approved(status, &output);
    assert_local_provider_released(&daemon, &output);
}

#[test]
fn node_fails_with_a_wrong_token() {
    require_node();
    let mut daemon = TestDaemon::start();
    daemon.token = "not-the-token".to_owned();
    let command = readme_command("run_and_approve.js");
    let (status, output) = Running::start(&daemon, &command, None).finish(SCRIPT_LIMIT);
    assert_token_hint(status, &output);
}

#[test]
fn node_says_to_start_the_daemon_when_none_listens() {
    require_node();
    let mut daemon = TestDaemon::start();
    daemon.addr = closed_port();
    let command = readme_command("run_and_approve.js");
    let (status, output) = Running::start(&daemon, &command, None).finish(SCRIPT_LIMIT);
    assert_unreachable_hint(status, &output);
}

#[test]
fn rust_runs_an_agent_and_approves_from_the_shared_client() {
    let daemon = TestDaemon::start();
    let command = readme_command("--example run_and_approve");
    let (status, output) = Running::start(&daemon, &command, None).finish(CARGO_LIMIT);
    assert_ran_and_approved(status, &output);
    assert_local_provider_released(&daemon, &output);
}

#[test]
fn rust_follow_session_prints_the_live_rename_and_stops_on_ctrl_c() {
    let daemon = TestDaemon::start();
    let command = readme_command("--example follow_session");
    let mut running = Running::start(&daemon, &command, None);
    running.wait_for_output("[live]  session_title_committed", CARGO_LIMIT);
    running.signal_group(libc::SIGINT);
    let (status, output) = running.finish(Duration::from_secs(30));
    assert!(status.success(), "Ctrl-C ends follow_session with status 0, not {status}; output:\n{output}");
    assert!(output.contains("session_created"), "the stored events are replayed first:\n{output}");
}
