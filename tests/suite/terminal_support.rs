//! Real terminals for the tests of what `troupe` prints on one: a tmux server of the test's own (the TUI, and
//! `troupe` with only `--url`), and `script(1)`'s pseudo-terminal (colours, dimmed lines and the spinner of
//! `troupe run`). Both fail, rather than pass without testing anything, when the program is missing.

use std::process::Command;
use std::time::Duration;

use super::cli_support::{CliOutput, finish};
use super::support::{TestDaemon, WAIT, holds_within, troupe_binary};

/// How long one screen may take to appear.
pub const SCREEN_WAIT: Duration = Duration::from_secs(30);

/// A tmux server of this test's own (its own socket), with one 120×40 session `tui`; killed when dropped.
pub struct Tmux {
    socket: String,
}

impl Tmux {
    /// Starts `command` in a new tmux server named after `name` and this test process.
    pub fn start(name: &str, command: &str) -> Tmux {
        let found = Command::new("tmux").arg("-V").output().is_ok_and(|output| output.status.success());
        assert!(found, "tmux is not installed (scripts/test installs it); this test needs a real terminal");
        let tmux = Tmux { socket: format!("troupe-{name}-{}", std::process::id()) };
        let started = tmux.tmux(&["new-session", "-d", "-s", "tui", "-x", "120", "-y", "40", command]);
        assert!(started.status.success(), "tmux new-session: {started:?}");
        tmux
    }

    pub fn tmux(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux").arg("-L").arg(&self.socket).args(args).output().expect("tmux runs")
    }

    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "tui"];
        args.extend_from_slice(keys);
        assert!(self.tmux(&args).status.success(), "send-keys {keys:?}");
    }

    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.tmux(&["capture-pane", "-p", "-t", "tui"]).stdout).into_owned()
    }

    /// Polls the screen until `wanted` is on it.
    pub async fn wait_for(&self, wanted: &str) -> String {
        let mut screen = String::new();
        let appeared = holds_within(SCREEN_WAIT, || {
            screen = self.screen();
            screen.contains(wanted)
        })
        .await;
        assert!(appeared, "{wanted:?} never appeared; the screen:\n{screen}");
        screen
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

/// The shell command that runs `troupe tui ARGS` against `daemon` in its project directory, for [`Tmux::start`].
pub fn tui_command(daemon: &TestDaemon, args: &str) -> String {
    format!(
        "cd {} && {} tui {args} --url {} --token {}",
        daemon.project_path().display(),
        env!("CARGO_BIN_EXE_troupe"),
        daemon.url(),
        daemon.token
    )
}

/// `troupe ARGS` against `daemon`, in the daemon's project directory, with stdout and stderr on `script(1)`'s
/// pseudo-terminal (so both are captured as one stream, in `stdout`), colours allowed.
pub async fn troupe_on_a_terminal(daemon: &TestDaemon, args: &str) -> CliOutput {
    let command = format!("{} {args}", troupe_binary().display());
    let mut shell = tokio::process::Command::new("script");
    shell
        .args(["-qec", &command, "/dev/null"])
        .current_dir(daemon.project_path())
        .env("TROUPE_URL", daemon.url())
        .env("TROUPE_TOKEN", &daemon.token)
        .env_remove("NO_COLOR")
        .env("TERM", "xterm")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = finish(shell, WAIT).await;
    assert!(output.succeeded(), "troupe {args} on script(1)'s terminal (scripts/test installs script): {output:?}");
    output
}
