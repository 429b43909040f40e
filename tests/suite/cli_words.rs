//! What the CLI prints is in a reader's words, not the program's internals: event numbers as `#N` (not a Rust
//! range), a model that costs nothing priced at nothing (not "unknown"), the home directory as `~` wherever a
//! session's directory is shown.

use tokio::io::{AsyncBufReadExt, BufReader};

use super::cli_support::*;
use super::support::*;

#[tokio::test]
async fn ranges_costs_and_directories_read_as_words() {
    let daemon = TestDaemon::start();
    let mut command = troupe_command(&daemon, &["run", "--model", "local/echo", "hello"]);
    command.current_dir(daemon.project_path());
    let ran = finish(command, WAIT).await;
    assert!(ran.succeeded(), "{ran:?}");
    let listed = troupe(&daemon, &["sessions", "--json"]).await.ok();
    let sessions: serde_json::Value = serde_json::from_str(&listed).expect("json");
    let session = sessions[0]["session_id"].as_str().expect("a session").to_owned();

    // An event number past the end: the range in words, as `#N` like every event number the CLI prints.
    let said = troupe(&daemon, &["revert", &session, "999"]).await.refused();
    assert!(said.contains("its events are #1 to #"), "{said}");
    assert!(!said.contains("..="), "{said}");

    // The local provider's models run in the daemon: free, not of unknown cost.
    let usage = troupe(&daemon, &["usage", "--session", &session]).await.ok();
    let row = usage.lines().find(|line| line.contains("local/echo")).unwrap_or_else(|| panic!("{usage}"));
    assert!(row.trim_end().ends_with("$0.0000"), "{usage}");

    // The session's directory with the home directory as `~`, in `watch` as in `sessions`.
    let project = daemon.project_path().to_str().expect("utf-8").to_owned();
    let home = std::path::Path::new(&project).parent().expect("a parent").to_str().expect("utf-8").to_owned();
    let mut watch = troupe_command(&daemon, &["watch", &session]);
    watch.env("HOME", &home).stdout(std::process::Stdio::piped());
    let mut watching = watch.spawn().expect("spawn watch");
    let mut lines = BufReader::new(watching.stdout.take().expect("stdout")).lines();
    let created = tokio::time::timeout(WAIT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("session created in") {
                return line;
            }
        }
        String::new()
    })
    .await
    .expect("watch prints the session's creation");
    let _ = watching.kill().await;
    assert!(created.contains("session created in ~/"), "{created}");
    let mut sessions = troupe_command(&daemon, &["sessions"]);
    sessions.env("HOME", &home);
    assert!(finish(sessions, WAIT).await.ok().contains(" ~/"), "the sessions list shows ~ too");
}
