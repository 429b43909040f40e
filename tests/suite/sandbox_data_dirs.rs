//! Every troupe data directory is private, not only the serving daemon's: another daemon's data dir inside the
//! session's folder (`troupe serve --data-dir .troupe-dev`), one under the temp dir, and an older daemon's (no
//! marker, never registered) are read neither by a command nor by `read_file`, `list_dir` or `search`, in every
//! sandbox mode that runs tools; and their tokens are masked in what a tool prints anyway.

use serde_json::{Value, json};
use troupe_protocol::types::run::ToolResultStatus;

use super::support::*;

/// A daemon whose `config.toml` sets `[sandbox] mode`.
fn daemon_in_mode(mode: &str) -> TestDaemon {
    let config_toml = format!("[sandbox]\nmode = \"{mode}\"\n");
    TestDaemon::start_with(DaemonSetup { config_toml: Some(config_toml), ..DaemonSetup::default() })
}

/// The data dir of an older daemon: its token, lock and config, no marker, in no registry.
fn older_daemons_data_dir(path: &std::path::Path, token: &str) {
    std::fs::create_dir_all(path.join("daemon")).unwrap();
    std::fs::create_dir_all(path.join("sessions")).unwrap();
    std::fs::write(path.join("daemon/token"), format!("{token}\n")).unwrap();
    std::fs::write(path.join("daemon/lock"), "").unwrap();
    std::fs::write(path.join("config.toml"), "").unwrap();
}

/// A command reading every file of the project, the data dirs in it included if the sandbox let it.
const WHOLE_PROJECT_GREP: &str = "grep -rs token . ; true";

fn call(tool: &str, arguments: Value) -> Value {
    json!({"tool_calls": [{"tool": tool, "arguments": arguments}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_tool_reads_another_daemons_data_dir_in_any_mode_wherever_it_is() {
    let project = tempfile::tempdir().unwrap();
    let project = project.path().canonicalize().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    // Two live daemons of other data dirs: one in the project, as a developer runs one, and one under the temp
    // dir. Both were started after the serving daemons below, so only the registry or their marker tells.
    let inside = project.join(".troupe-dev");
    std::fs::create_dir(&inside).unwrap();
    let outside = elsewhere.path().canonicalize().unwrap().join("daemon-b");
    std::fs::create_dir(&outside).unwrap();
    let older = project.join("tools/old-troupe");
    older_daemons_data_dir(&older, "older-daemon-token-5f2c9a7e1b3d");

    let modes = ["workspace-write", "read-only", "off"];
    let daemons: Vec<TestDaemon> = modes.iter().map(|mode| daemon_in_mode(mode)).collect();
    let inside_daemon = spawn_daemon(&inside, "127.0.0.1:0");
    let outside_daemon = spawn_daemon(&outside, "127.0.0.1:0");
    let tokens = [inside_daemon.token.clone(), outside_daemon.token.clone(), "older-daemon-token-5f2c9a7e1b3d".into()];
    // What a user might paste into a project file: masked in a command's output, not only refused at its source.
    std::fs::write(project.join("notes.txt"), format!("token: {}\n", outside_daemon.token)).unwrap();

    let token_files = [inside.join("daemon/token"), outside.join("daemon/token"), older.join("daemon/token")];
    for (mode, daemon) in modes.iter().zip(&daemons) {
        let mut turns = Vec::new();
        for token_file in &token_files {
            let data_dir = token_file.parent().and_then(std::path::Path::parent).unwrap();
            turns.push(call("read_file", json!({"path": token_file})));
            turns.push(call("list_dir", json!({"path": data_dir})));
            turns.push(call("search", json!({"pattern": "token", "path": data_dir})));
            if *mode != "off" {
                turns.push(call("shell", json!({"command": format!("cat {}", token_file.display())})));
                // Names can be listed everywhere (as in this daemon's own data dir); contents cannot be read.
                turns.push(call("shell", json!({"command": format!("cat {}/config.toml", data_dir.display())})));
            }
        }
        // A search of the whole project skips the data dirs in it; a command's grep cannot enter them.
        turns.push(call("search", json!({"pattern": "token"})));
        if *mode != "off" {
            turns.push(call("shell", json!({"command": WHOLE_PROJECT_GREP})));
        }
        turns.push(call("shell", json!({"command": "cat notes.txt"})));
        turns.push(json!({"text": "done"}));
        let events = run_script_in_yolo(daemon, &project, json!({"turns": turns})).await;
        let results = tool_results(&events);
        assert_eq!(results.len(), turns.len() - 1, "{mode}: every call ends");
        for (turn, result) in turns.iter().zip(&results) {
            let call = &turn["tool_calls"][0];
            let (tool, arguments) = (call["tool"].as_str().unwrap(), &call["arguments"]);
            for token in &tokens {
                assert!(
                    !result.output.contains(token.as_str()),
                    "{mode} {tool} {arguments}: a token leaked: {}",
                    result.output
                );
            }
            // Calls on the whole project succeed (without the data dirs in it); calls on a data dir are refused.
            let whole_project = match tool {
                "search" => arguments.get("path").is_none(),
                "shell" => [WHOLE_PROJECT_GREP, "cat notes.txt"].contains(&arguments["command"].as_str().unwrap()),
                _ => false,
            };
            match tool {
                _ if whole_project => {
                    assert_eq!(result.status, ToolResultStatus::Ok, "{mode} {tool}: {}", result.output)
                }
                "shell" => {
                    assert_eq!(result.status, ToolResultStatus::Error, "{mode} {arguments}: {}", result.output);
                    assert!(result.output.contains("Permission denied"), "{mode} {arguments}: {}", result.output);
                }
                _ => {
                    assert_eq!(result.status, ToolResultStatus::Denied, "{mode} {tool} {arguments}: {}", result.output);
                    assert!(result.output.contains("troupe data directory"), "{mode} {tool}: {}", result.output);
                }
            }
        }
        let notes = results.last().unwrap();
        assert!(notes.output.contains("[redacted") || notes.output.contains("****"), "{mode}: {}", notes.output);
    }
    drop(inside_daemon);
    drop(outside_daemon);
}

/// A daemon started while a command runs: the command can read what the kernel rules made at its start did not
/// cover, but the token it prints is masked in the result the model and the log get (the daemon looks for data
/// dirs registered meanwhile before it masks a long call's result).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_dir_that_appears_while_a_command_runs_is_masked_in_its_result() {
    let project = tempfile::tempdir().unwrap();
    let project = project.path().canonicalize().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let later = elsewhere.path().canonicalize().unwrap().join("daemon-later");
    let daemon = daemon_in_mode("workspace-write");
    let token_file = later.join("daemon/token");
    let command = format!(
        "for i in $(seq 400); do [ -s {token} ] && break; sleep 0.05; done; sleep 0.2; cat {token}",
        token = token_file.display()
    );
    let turns = json!({"turns": [call("shell", json!({"command": command})), {"text": "done"}]});
    let starter = {
        let later = later.clone();
        // The token file's path is in the shell's command line only: once a process has it, the command runs.
        let marker = token_file.display().to_string();
        tokio::spawn(async move {
            eventually("the command to run", || !super::processes::processes_with(&marker).is_empty()).await;
            tokio::task::spawn_blocking(move || {
                std::fs::create_dir(&later).unwrap();
                spawn_daemon(&later, "127.0.0.1:0")
            })
            .await
            .unwrap()
        })
    };
    let events = run_script_in_yolo(&daemon, &project, turns).await;
    let later_daemon = within("the later daemon", starter).await.unwrap();
    let results = tool_results(&events);
    let result = &results[0];
    assert_eq!(result.status, ToolResultStatus::Ok, "{}", result.output);
    assert!(!result.output.contains(&later_daemon.token), "the later daemon's token leaked: {}", result.output);
    assert!(result.output.contains("[redacted") || result.output.contains("****"), "{}", result.output);
    drop(later_daemon);
}
