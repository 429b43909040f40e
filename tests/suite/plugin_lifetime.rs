//! A plugin's process does not outlive the daemon, even when the daemon is killed with SIGKILL and the plugin
//! ignores its closed stdin.

use std::time::Duration;

use super::support::*;

/// A plugin that answers `plugin/initialize`, then sleeps without ever reading stdin again (so it would not notice
/// the daemon going away). `marker` makes its command line unique.
const STUBBORN_PLUGIN: &str = r#"
import json, sys, time
line = sys.stdin.readline()
request = json.loads(line)
reply = {"jsonrpc": "2.0", "id": request["id"], "result": {"protocol_version": "0.0.6", "name": "stubborn",
         "version": "1.0.0", "capabilities": {"tools": False, "producer_messaging": False}, "tools": []}}
sys.stdout.write(json.dumps(reply) + "\n")
sys.stdout.flush()
time.sleep(3600)
"#;

fn python3() -> std::path::PathBuf {
    let path = std::env::var_os("PATH").expect("PATH");
    std::env::split_paths(&path)
        .map(|dir| dir.join("python3"))
        .find(|candidate| candidate.is_file())
        .expect("python3 on PATH (scripts/test installs it)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_dies_with_a_daemon_killed_by_sigkill() {
    let data_dir = tempfile::tempdir().expect("temp dir");
    let script = data_dir.path().join(format!("stubborn-{}.py", std::process::id()));
    std::fs::write(&script, STUBBORN_PLUGIN).expect("write plugin");
    let quote = |path: &std::path::Path| serde_json::to_string(path.to_str().expect("utf-8")).expect("string");
    let config = format!("[plugins.stubborn]\ncommand = {}\nargs = [{}]\n", quote(&python3()), quote(&script));
    std::fs::write(data_dir.path().join("config.toml"), config).expect("write config");

    let mut daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let marker = script.to_str().unwrap().to_owned();
    eventually("the plugin runs", || super::processes::processes_with(&marker).len() == 1).await;
    daemon.kill();
    troupe_test_support::eventually("the plugin to die with the killed daemon", Duration::from_secs(10), || {
        super::processes::processes_with(&marker).is_empty()
    })
    .await;
}
