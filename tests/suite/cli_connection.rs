//! How client commands find the daemon and what they say when they cannot: the data dir's configured `listen`
//! when no `--url` is given, a missing token or data dir named (never created), a refused connection and a wrong
//! token explained with the flag that fixes them, and errors without a backtrace even with `RUST_BACKTRACE=1`.

use std::path::Path;
use std::time::Duration;

use super::cli_support::*;
use super::support::*;

/// A `troupe` command with a clean environment: no URL or token from the test, HOME in `home`.
fn bare(args: &[&str], home: &Path) -> tokio::process::Command {
    let mut command = troupe_bare(args);
    command.env("HOME", home).env("RUST_BACKTRACE", "1").env_remove("RUST_LOG");
    command
}

/// `troupe serve --data-dir D` (no --listen: the config's `listen` decides), until its listening line.
fn serve(data_dir: &Path, home: &Path) -> ChildDaemon {
    troupe_serve(data_dir).env("HOME", home).log(DaemonLog::Discard).spawn()
}

#[tokio::test]
async fn a_data_dir_alone_reaches_its_daemon_and_mistakes_are_named_not_created() {
    let home = tempfile::tempdir().expect("home");
    let data_dir = home.path().join("data");
    std::fs::create_dir(&data_dir).expect("data dir");
    let port = free_port();
    std::fs::write(data_dir.join("config.toml"), format!("listen = \"127.0.0.1:{port}\"\n")).expect("config");
    let mut daemon = serve(&data_dir, home.path());
    let data = data_dir.to_str().expect("utf-8");

    // --data-dir alone: the token and the listen address both come from there.
    let listed = finish(bare(&["sessions", "--data-dir", data], home.path()), WAIT).await;
    assert!(listed.succeeded(), "{listed:?}");
    assert!(listed.stdout.contains("no sessions"), "{listed:?}");
    assert_eq!(listed.stderr, "", "a client logs nothing at info by default: {listed:?}");

    // A mistyped data dir: named, not created.
    let typo = home.path().join("dta");
    let said =
        finish(bare(&["sessions", "--data-dir", typo.to_str().expect("utf-8")], home.path()), WAIT).await.refused();
    assert!(said.starts_with("error: no daemon has run with data dir"), "{said}");
    assert!(said.contains(&format!("did you mean --data-dir {data}?")), "{said}");
    assert!(said.contains("troupe serve --data-dir"), "{said}");
    assert!(!said.contains("stack backtrace") && !said.contains("Stack backtrace"), "{said}");
    assert!(!typo.exists(), "a client command created {}", typo.display());
    // `troupe token` too refuses a data dir no daemon used, unless --create.
    let said = finish(bare(&["token", "--data-dir", typo.to_str().expect("utf-8")], home.path()), WAIT).await.refused();
    assert!(said.contains("--create"), "{said}");
    assert!(!typo.exists());
    let created =
        finish(bare(&["token", "--data-dir", typo.to_str().expect("utf-8"), "--create"], home.path()), WAIT).await.ok();
    assert_eq!(created.trim().len(), 43);

    // A token of another data dir: unauthorized, naming the token file used.
    let mut wrong = bare(&["sessions", "--data-dir", typo.to_str().expect("utf-8")], home.path());
    wrong.env("TROUPE_URL", format!("ws://127.0.0.1:{port}/ws"));
    let said = finish(wrong, WAIT).await.refused();
    assert!(said.contains("unauthorized") && said.contains("dta/daemon/token"), "{said}");
    assert!(said.contains("--data-dir"), "{said}");

    // Nobody listening: say how to start one, or where to point.
    daemon.kill();
    let said = finish(bare(&["sessions", "--data-dir", data], home.path()), Duration::from_secs(10)).await.refused();
    assert!(said.starts_with(&format!("error: no daemon at ws://127.0.0.1:{port}/ws")), "{said}");
    assert!(said.contains(&format!("troupe serve --data-dir {data}")) && said.contains("TROUPE_URL"), "{said}");
}

#[tokio::test]
async fn an_error_quoting_terminal_controls_is_printed_without_them() {
    let home = tempfile::tempdir().expect("home");
    let hostile = home.path().join("d\u{1b}]0;retitled\u{7}\u{1b}[2Jir");
    let said =
        finish(bare(&["sessions", "--data-dir", hostile.to_str().expect("utf-8")], home.path()), WAIT).await.refused();
    assert!(said.starts_with("error: no daemon has run with data dir"), "{said}");
    assert!(!said.contains('\u{1b}') && !said.contains('\u{7}'), "{said:?}");
    assert!(!hostile.exists(), "a client command created {}", hostile.display());
}
