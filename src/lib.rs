//! The `troupe` binary's library half, so that tests can run exactly what the binary runs.
//!
//! - [`daemon`]: wires the engine (`troupe-actors`) and the gateway (`troupe-gateway`) into a running daemon;
//!   [`daemon_url`]: the URL it records for the clients of its data dir.
//! - [`commands`]: the client commands (`sessions`, `create`, `rename`, `steer`, …), built on the shared
//!   protocol client through its `ClientProtocol` trait; [`follow`]: the ones that follow a session (`run`,
//!   `watch`); [`cli_errors`]: what they say when something goes wrong.
//! - [`client_args`]: the `--url`/`--token`/`--data-dir` flags every client command flattens in.
//! - [`render`]: how those commands print a session's events; [`output`]: `--json` or words on stdout, and a
//!   closed pipe ends a command quietly.
//! - [`connection`]: where the daemon is (`--url`, else the data dir's `listen`) and its token (read, never
//!   created); [`selection`]: which agent and model a run uses, checked before anything is created;
//!   [`run_cmd`]: `run`, `exec`, `continue`; [`run_control`]: `steer`, `recall`, `cancel`, `stdin` by run id or
//!   `--session`; [`session_scan`]: a session's active run and latest selection, read from its events.
//! - [`history_cmd`]: `revert`, `fork`, `compact` and `tree`, a session's history and its delegated sessions.
//! - [`usage_cmd`]: `troupe usage`, token counts and estimated cost per session, agent, tree or overall.
//! - [`tool_output_cmd`]: `troupe output`, a cut tool result's whole output (`output_ref`).
//! - [`session_admin_cmd`]: `rm`, `archive` and `unarchive`, putting a session's tree away.
//! - [`changes_cmd`]: `diff` and `undo`, a run's file changes shown and taken back.
//! - [`session_ref`]: a session named by its id or a unique prefix; [`style`]: short ids, relative times,
//!   colours on a terminal only, untrusted text cleaned before printing.
//! - [`sandbox_explain`]: `troupe sandbox explain`, the sandbox's rules for a session in words.
//! - [`inspect_cmd`]: the read-only `runs`, `approvals`, `models`, `agents`, `providers` and `skills` (in
//!   [`runs_cmd`], [`approvals_cmd`], [`catalog_cmd`], [`skills_cmd`]); [`status_cmd`]: `status` and
//!   `config check` ([`config_check_cmd`]).

/// `--attach FILE`: images and PDFs read and checked for `run.start` and `run.steer`.
pub mod attach_files;
pub mod changes_cmd;
pub mod cli_errors;
pub mod client_args;
pub mod commands;
pub mod completion;
pub mod daemon;
/// `<data dir>/daemon/url`: where the running daemon listens, written, read and trusted in one place.
pub mod daemon_url;
/// A file change's diff as the CLI prints it under an approval.
pub mod diff_words;
pub mod follow;
pub mod goal_cli;
pub mod history_cmd;
/// The text log format's fields, control characters escaped.
pub mod log_fields;
/// The tracing setup of the daemon and the clients, and the daemon's config summary at start.
pub mod logging;
/// `troupe man`: the page of every command.
pub mod man_cmd;
pub mod render;
pub mod sandbox_explain;
pub mod session_admin_cmd;
pub mod session_ref;
pub mod style;
pub mod tool_output_cmd;
pub mod usage_cmd;

// The CLI core: reaching the daemon, choosing the model, running and acting on runs, printing.
pub mod connection;
pub mod event_words;
pub mod output;
pub mod quiet_tools;
pub mod run_cmd;
pub mod run_control;
pub mod selection;
pub mod session_scan;
pub mod spinner;

// The read-only commands of a person looking around (`runs`, `approvals`, `models`, `status`, …).
pub mod approvals_cmd;
pub mod catalog_cmd;
pub mod config_check_cmd;
pub mod inspect_cmd;
pub mod mcp_cmd;
pub mod open_cmd;
pub mod runs_cmd;
pub mod skills_cmd;
pub mod status_cmd;
pub mod unix_listen;

// The interactive terminal UI, on the same client (`troupe` with no arguments, `troupe tui`).
#[cfg(feature = "tui")]
pub mod tui;
