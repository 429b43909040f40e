//! `troupe`: the daemon and its command-line clients. Parses the command line (`cli/command.rs`), sets up logging
//! and runs the command (`cli/dispatch.rs`).

use std::process::ExitCode;

use clap::Parser;

mod cli;

use cli::command::{Cli, Command};
use cli::dispatch::{dispatch, report};

fn main() -> ExitCode {
    // `TROUPE_COMPLETE=SHELL troupe -- …`: the shell asks for completions (see `troupe completions`); answered and
    // exited. A variable of troupe's own, so that an unrelated `COMPLETE` in someone's environment changes nothing.
    clap_complete::CompleteEnv::with_factory(|| {
        troupe::completion::with_completers(<Cli as clap::CommandFactory>::command())
    })
    .var(troupe::completion::VARIABLE)
    .complete();
    let cli = Cli::parse();
    let command = match cli.command {
        Some(command) => command,
        // `troupe tui`, with the flags given before no subcommand (`troupe --url X`) or the environment's.
        #[cfg(feature = "tui")]
        None => Command::Tui { client: cli.client, session: None },
        #[cfg(not(feature = "tui"))]
        None => {
            let _ = <Cli as clap::CommandFactory>::command().print_help();
            return ExitCode::SUCCESS;
        }
    };
    // A client command says what it has to say itself: its own log lines stay quiet unless RUST_LOG asks.
    use troupe::logging::{LogFormat, ProcessKind};
    let (process, log_format) = match &command {
        Command::Serve { log_format, .. } => (ProcessKind::Daemon, *log_format),
        _ => (ProcessKind::Client, LogFormat::Text),
    };
    // The TUI owns the terminal: log lines would write over its screen, so it sets up no logging.
    #[cfg(feature = "tui")]
    let tui = matches!(command, Command::Tui { .. });
    #[cfg(not(feature = "tui"))]
    let tui = false;
    if !tui {
        troupe::logging::init(process, log_format);
    }
    match dispatch(command) {
        Ok(code) => ExitCode::from(code),
        Err(error) => report(&error),
    }
}
