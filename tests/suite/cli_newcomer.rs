//! Smaller things a newcomer meets: `troupe serve`'s banner is not buried under actix's start-up lines, and
//! `troupe open` opens the link in the browser there is ($BROWSER) and says when it expires in local, relative
//! words, not as a UTC timestamp.

use std::time::Duration;

use troupe_test_support::DaemonLog;

use super::cli_support::*;
use super::support::*;

#[test]
fn the_serve_banner_is_not_buried_under_actix_lines() {
    let data_dir = tempfile::tempdir().expect("data dir");
    let daemon = troupe_serve(data_dir.path()).listen("127.0.0.1:0").default_log_level().log(DaemonLog::Lines).spawn();
    // The log is read from the daemon's stderr by a thread of the test: the banner may arrive a moment after the
    // daemon said where it listens (on its stdout).
    let banner =
        holds_within_blocking(WAIT, || daemon.log_lines().iter().any(|line| line.contains("troupe is listening")));
    let lines = daemon.log_lines();
    assert!(banner, "no banner: {lines:#?}");
    assert!(!lines.iter().any(|line| line.contains("actix")), "actix's start-up lines at info: {lines:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_opens_the_browser_there_is_and_says_when_the_link_expires_in_local_words() {
    let daemon = TestDaemon::start();
    let dir = tempfile::tempdir().expect("dir");
    let opened = dir.path().join("opened");
    let browser = dir.path().join("browser");
    std::fs::write(&browser, format!("#!/bin/sh\nprintf '%s' \"$1\" > {}\n", opened.display())).expect("browser");
    std::fs::set_permissions(&browser, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");

    let mut command = troupe_command(&daemon, &["open"]);
    command.env("BROWSER", &browser);
    let said = finish(command, WAIT).await.ok();
    let link = said.lines().next().expect("the link").to_owned();
    assert!(said.contains("Opened in your browser"), "{said}");
    assert!(said.contains("expires in 5 minutes (at ") && said.contains(" local time)"), "{said}");
    assert!(!said.contains("Z."), "no UTC timestamp: {said}");
    let mut handed = String::new();
    let arrived = holds_within(Duration::from_secs(10), || {
        handed = std::fs::read_to_string(&opened).unwrap_or_default();
        !handed.is_empty()
    })
    .await;
    assert!(arrived && handed == link, "the browser got {handed:?}, the link is {link:?}");

    // --no-browser: printed only.
    std::fs::remove_file(&opened).expect("rm");
    let mut command = troupe_command(&daemon, &["open", "--no-browser"]);
    command.env("BROWSER", &browser);
    let said = finish(command, WAIT).await.ok();
    assert!(said.contains("Open it in your browser"), "{said}");
    assert!(!holds_within(Duration::from_millis(500), || opened.exists()).await, "a browser was started");
}
