//! A model that cannot run is refused by the CLI before anything is created (issue 13's tryout): with no script
//! connected, `troupe models` lists `local/scripted` as `no (no script)`, and `run`, `exec`, `create` and
//! `continue` with `--model local/scripted` say so with the command that fixes it, leaving no session or run behind.

use troupe_protocol::client::Client;
use troupe_protocol::method;
use troupe_protocol::types::common::SessionMeta;
use troupe_protocol::types::session::SessionListParams;

use super::cli_support::*;
use super::support::*;

async fn sessions(client: &Client) -> Vec<SessionMeta> {
    within("session.list", client.call::<method::SessionList>(SessionListParams::default()))
        .await
        .expect("session.list")
        .sessions
}

/// Asserts that `said` is the refusal of `local/scripted` for lack of a script, in CLI words.
fn is_the_no_script_refusal(said: &str, command: &str) {
    assert!(said.contains("local/scripted cannot run"), "troupe {command}: {said}");
    assert!(said.contains("hint: connect one with `troupe connect local --script FILE`"), "troupe {command}: {said}");
}

#[tokio::test]
async fn local_scripted_without_a_script_is_refused_before_anything_is_created() {
    let daemon = TestDaemon::start();
    let (client, _deliveries) = daemon.client().await;
    let cwd = daemon.project_path().to_str().unwrap().to_owned();

    let listed = troupe(&daemon, &["models"]).await.ok();
    let row = listed.lines().find(|line| line.starts_with("local/scripted ")).expect("local/scripted listed");
    assert!(row.contains("no (no script)"), "{listed}");

    for args in [
        vec!["run", "--model", "local/scripted", "--cwd", &cwd, "x"],
        vec!["exec", "--model", "local/scripted", "--cwd", &cwd, "x"],
        vec!["create", "--model", "local/scripted", "--cwd", &cwd],
    ] {
        let said = troupe(&daemon, &args).await.refused();
        is_the_no_script_refusal(&said, args[0]);
        assert!(sessions(&client).await.is_empty(), "troupe {} left a session behind", args[0]);
    }

    // `continue` in a directory with a session: refused, and that session gets no run.
    let mut create = troupe_command(&daemon, &["create", "--model", "local/echo"]);
    create.current_dir(daemon.project_path());
    let session_id = finish(create, WAIT).await.ok().trim().to_owned();
    let before = sessions(&client).await;
    assert_eq!(before.len(), 1);
    let mut continued = troupe_command(&daemon, &["continue", "--model", "local/scripted", "x"]);
    continued.current_dir(daemon.project_path());
    let said = finish(continued, WAIT).await.refused();
    is_the_no_script_refusal(&said, "continue");
    let after = sessions(&client).await;
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].session_id, session_id);
    assert_eq!(after[0].last_event_seq, before[0].last_event_seq, "continue started nothing in {session_id}");

    // The model that needs nothing runs, so the refusal was about the script, not the command.
    let ran = troupe(&daemon, &["run", "--model", "local/echo", "--cwd", &cwd, "hello"]).await.ok();
    assert!(ran.contains("hello"), "{ran}");
}
