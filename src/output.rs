//! Writing to stdout for a person or a program: `--json` or words, and a closed pipe (`troupe sessions | head
//! -1`) ends the command quietly with exit code 0 instead of a panic.

use std::io::Write as _;

/// How a command prints its result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Human,
    /// One JSON object per result (per event for the commands that follow a session).
    Json,
}

impl Output {
    pub fn from_flag(json: bool) -> Self {
        if json { Output::Json } else { Output::Human }
    }
}

/// Prints `json` (with `--json`) or the line `human` makes; an empty line prints nothing.
pub fn emit(out: Output, json: &serde_json::Value, human: impl FnOnce() -> String) -> anyhow::Result<()> {
    match out {
        Output::Json => line(&json.to_string()),
        Output::Human => {
            let text = human();
            if !text.is_empty() {
                line(&text);
            }
        }
    }
    Ok(())
}

/// `println!` that ends the command quietly on a closed pipe instead of panicking.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::line(&format!($($arg)*))
    };
}

/// `print!` that ends the command quietly on a closed pipe instead of panicking.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::text(&format!($($arg)*))
    };
}

/// [`outln!`] for text that quotes untrusted words (titles, inputs, model text): terminal controls removed.
#[macro_export]
macro_rules! outln_clean {
    ($($arg:tt)*) => {
        $crate::output::line(&$crate::style::clean(&format!($($arg)*)))
    };
}

/// [`out!`] for text that quotes untrusted words: terminal controls removed.
#[macro_export]
macro_rules! out_clean {
    ($($arg:tt)*) => {
        $crate::output::text(&$crate::style::clean(&format!($($arg)*)))
    };
}

/// Prints `text` on stdout as it is.
pub fn text(text: &str) {
    let mut stdout = std::io::stdout().lock();
    checked(write!(stdout, "{text}").and_then(|()| stdout.flush()));
}

/// Prints one line on stdout.
pub fn line(text: &str) {
    let mut stdout = std::io::stdout().lock();
    checked(writeln!(stdout, "{text}").and_then(|()| stdout.flush()));
}

/// Prints `value` as pretty JSON (several lines) and a newline on stdout.
pub fn pretty_json(value: &serde_json::Value) -> anyhow::Result<()> {
    line(&serde_json::to_string_pretty(value)?);
    Ok(())
}

/// Prints `value` as one line of JSON on stdout.
pub fn json_line(value: &serde_json::Value) {
    line(&value.to_string());
}

/// The result of a write to stdout: a closed pipe means the reader has all it wants, so the command ends at
/// once with exit code 0; other errors are ignored (there is nowhere left to report them).
pub fn checked(result: std::io::Result<()>) {
    if let Err(error) = result
        && error.kind() == std::io::ErrorKind::BrokenPipe
    {
        std::process::exit(0);
    }
}

/// Ends the command quietly once stdout is a pipe whose reader has gone, even while it has nothing to print
/// (`troupe watch S | head -1` on a quiet session). Polls the descriptor for `POLLERR`, which Linux reports on
/// the write end of a pipe without readers.
pub fn exit_when_stdout_closes() {
    std::thread::spawn(|| {
        loop {
            let mut poll = libc::pollfd { fd: libc::STDOUT_FILENO, events: 0, revents: 0 };
            // SAFETY: one valid pollfd for the duration of the call.
            let ready = unsafe { libc::poll(&mut poll, 1, 250) };
            if ready > 0 && poll.revents & (libc::POLLERR | libc::POLLHUP) != 0 {
                std::process::exit(0);
            }
            if ready < 0 {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
    });
}
