//! Where a client command takes the token from, through the real binary: a file (`--token-file`,
//! `TROUPE_TOKEN_FILE`) or the environment (`TROUPE_TOKEN`) quietly; `--token VALUE` on the command line, which
//! every process of the machine can read in `/proc/PID/cmdline`, with a warning that says so.

use std::process::{Command, Output};

use super::support::*;

const WARNING: &str = "warning: --token puts the token on the command line";

fn troupe(url: &str, arguments: &[&str], environment: &[(&str, &str)]) -> Output {
    let data_dir = tempfile::tempdir().expect("empty data dir");
    Command::new(troupe_binary())
        .args(["sessions", "--json", "--url", url, "--data-dir"])
        .arg(data_dir.path())
        .args(arguments)
        .env("RUST_LOG", "off")
        .env_remove("TROUPE_TOKEN")
        .env_remove("TROUPE_TOKEN_FILE")
        .envs(environment.iter().copied())
        .output()
        .expect("troupe sessions")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_comes_from_a_file_or_the_environment_and_on_the_command_line_only_with_a_warning() {
    let data_dir = tempfile::tempdir().expect("data dir");
    let daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let secrets = tempfile::tempdir().expect("secrets dir");
    let token_file = secrets.path().join("remote-token");
    std::fs::write(&token_file, format!("{}\n", daemon.token)).expect("write token file");
    let file = token_file.to_str().expect("utf-8 path");

    for (what, arguments, environment) in [
        ("--token-file", vec!["--token-file", file], vec![]),
        ("TROUPE_TOKEN_FILE", vec![], vec![("TROUPE_TOKEN_FILE", file)]),
        ("TROUPE_TOKEN", vec![], vec![("TROUPE_TOKEN", daemon.token.as_str())]),
    ] {
        let output = troupe(&daemon.url, &arguments, &environment);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{what}: {stderr}");
        assert!(!stderr.contains(WARNING), "{what} warns: {stderr}");
    }

    let output = troupe(&daemon.url, &["--token", &daemon.token], &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(stderr.matches(WARNING).count(), 1, "one warning: {stderr}");
    assert!(stderr.contains("--token-file FILE or the TROUPE_TOKEN environment variable"), "{stderr}");

    let missing = secrets.path().join("missing");
    let output = troupe(&daemon.url, &["--token-file", missing.to_str().expect("utf-8")], &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("cannot read the token file") && stderr.contains("--token-file"), "{stderr}");

    let output = troupe(&daemon.url, &["--token", &daemon.token, "--token-file", file], &[]);
    assert!(!output.status.success(), "both at once is refused");
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot be used with"), "{output:?}");
}
