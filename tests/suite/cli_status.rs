//! What a new user meets first, through the real binary: `troupe serve` refusing a socket it cannot bind without
//! a panic, clients finding a daemon started with `--listen` through its data dir (`daemon/url`), `troupe status`
//! on a freshly provisioned config, on a remote daemon and with a wrong token, and a unix socket this user may not
//! connect to.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::cli_support::{CliOutput, finish, troupe_bare};
use super::support::*;

/// `troupe args…` with no daemon address or token from the environment: what a user types in a fresh shell.
fn troupe_fresh(args: &[&str]) -> tokio::process::Command {
    let mut command = troupe_bare(args);
    command.env("RUST_LOG", "warn").env("NO_COLOR", "1");
    command
}

async fn run(args: &[&str]) -> CliOutput {
    finish(troupe_fresh(args), WAIT).await
}

/// `troupe serve` that must fail at once: its output.
async fn serve_refused(data_dir: &Path, listen: &str) -> CliOutput {
    let data_dir = data_dir.to_str().unwrap();
    let output = run(&["serve", "--data-dir", data_dir, "--listen", listen]).await;
    assert_eq!(output.code, Some(1), "{output:?}");
    assert!(!output.stderr.contains("panicked"), "no panic: {output:?}");
    output
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_a_socket_it_cannot_bind_in_one_clear_error_without_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");

    // The socket's directory is missing: said once, with the fix.
    let socket = dir.path().join("nodir/troupe.sock");
    let output = serve_refused(&data_dir, &format!("unix:{}", socket.display())).await;
    let said = output.stderr;
    assert!(said.contains(&format!("the directory {} does not exist", dir.path().join("nodir").display())), "{said}");
    assert!(said.contains("mkdir -p") && said.contains("RuntimeDirectory="), "{said}");
    assert_eq!(said.matches("No such file").count(), 0, "{said}");

    // A path too long for a socket fails in the gateway's bind, after the engine started: the engine stops in
    // its runtime (no "no reactor running" panic), and the cause is said once.
    let long = dir.path().join("d".repeat(120));
    std::fs::create_dir_all(&long).unwrap();
    let output = serve_refused(&data_dir, &format!("unix:{}", long.join("troupe.sock").display())).await;
    let said = output.stderr;
    assert_eq!(said.matches("cannot listen on").count(), 1, "{said}");
    assert_eq!(said.matches("SUN_LEN").count(), 1, "the cause once: {said}");

    // An address another program holds: refused before the engine starts, no panic either.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let output = serve_refused(&data_dir, &held.local_addr().unwrap().to_string()).await;
    assert!(output.stderr.contains("another program"), "{output:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_started_with_listen_is_found_through_its_data_dir_until_it_stops() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap().to_owned();
    // Scripted provisioning: the config is written right before the daemon starts, and names an address where
    // nothing listens, so only the daemon's own record can lead a client to it.
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "listen = \"127.0.0.1:1\"\n[titles]\nauto = false\n").unwrap();
    let mut daemon = spawn_daemon(dir.path(), "127.0.0.1:0");

    let url_file = dir.path().join("daemon/url");
    assert_eq!(std::fs::read_to_string(&url_file).unwrap().trim(), daemon.url);
    assert_eq!(std::fs::metadata(&url_file).unwrap().permissions().mode() & 0o777, 0o600);

    let output = run(&["status", "--data-dir", &data]).await;
    assert_eq!(output.code, Some(0), "{output:?}");
    let printed = output.stdout;
    assert!(printed.contains(&format!("reachable at {}", daemon.url)), "{printed}");
    assert!(printed.contains(&format!("the running daemon (pid {}", daemon.child.id())), "{printed}");
    assert!(!printed.contains("changed after"), "the config predates the daemon: {printed}");
    assert!(printed.contains(&format!("data dir  {data}")) && !printed.contains("local data dir"), "{printed}");
    run(&["sessions", "--data-dir", &data]).await.ok();
    // A wrong --url while this data dir's daemon runs: not "start it", which would only be refused.
    let output = run(&["status", "--data-dir", &data, "--url", "ws://127.0.0.1:1/ws"]).await;
    assert_eq!(output.code, Some(1), "{output:?}");
    let hint = format!("a daemon (pid {}) is running on the data dir {data}, but not there", daemon.child.id());
    assert!(output.stdout.contains(&hint) && !output.stdout.contains("troupe serve"), "{output:?}");

    // A change after the start is one.
    std::fs::write(&config, "listen = \"127.0.0.1:1\"\n[titles]\nauto = true\n").unwrap();
    let printed = run(&["status", "--data-dir", &data]).await.ok();
    assert!(printed.contains("changed after the running daemon"), "{printed}");

    // A clean stop removes the record: clients fall back to the config's listen.
    assert!(daemon.terminate().success());
    assert!(!url_file.exists(), "removed at a clean stop");
    let output = run(&["status", "--data-dir", &data]).await;
    assert_eq!(output.code, Some(1), "{output:?}");
    assert!(output.stdout.contains("not reachable at ws://127.0.0.1:1/ws"), "{output:?}");
    assert!(output.stdout.contains("no daemon is running on this data dir"), "{output:?}");

    // A killed daemon's record is left behind, and ignored: its lock is not held.
    let mut daemon = spawn_daemon(dir.path(), "127.0.0.1:0");
    daemon.kill();
    assert_eq!(std::fs::read_to_string(&url_file).unwrap().trim(), daemon.url);
    let output = run(&["status", "--data-dir", &data]).await;
    assert_eq!(output.code, Some(1), "{output:?}");
    assert!(output.stdout.contains("not reachable at ws://127.0.0.1:1/ws"), "{output:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_of_another_data_dirs_daemon_labels_the_local_files_and_names_a_refused_token() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = spawn_daemon(dir.path(), "127.0.0.1:0");
    // This machine's own data dir has never run a daemon.
    let here = tempfile::tempdir().unwrap();
    let local = here.path().join("troupe");
    let local = local.to_str().unwrap();

    let output = run(&["status", "--url", &daemon.url, "--token", &daemon.token, "--data-dir", local]).await;
    assert_eq!(output.code, Some(0), "{output:?}");
    let printed = output.stdout;
    assert!(printed.contains(&format!("reachable at {}", daemon.url)), "{printed}");
    assert!(printed.contains(&format!("local data dir  {local} (missing)")), "{printed}");
    assert!(printed.contains(&format!("its data dir: {}", dir.path().display())), "the daemon's own: {printed}");
    assert!(printed.contains("local config  "), "{printed}");
    assert!(!printed.contains("no daemon is running on this data dir"), "{printed}");
    let json = run(&["status", "--url", &daemon.url, "--token", &daemon.token, "--data-dir", local, "--json"]).await;
    let json: serde_json::Value = serde_json::from_str(&json.ok()).unwrap();
    assert_eq!(json["url_is_local_data_dir"], false);
    assert_eq!(json["daemon"]["data_dir"], dir.path().to_str().unwrap());

    // A wrong token: reachable, refused. (The daemon is on this machine, so the hint names its data dir; a
    // remote one's names `troupe token` on its machine: the unit tests of `connection` cover that wording.)
    let output = run(&["status", "--url", &daemon.url, "--token", "wrong", "--data-dir", local]).await;
    assert_eq!(output.code, Some(1), "{output:?}");
    assert!(output.stdout.contains(&format!("reachable at {}, but it refused the token", daemon.url)), "{output:?}");
    assert!(output.stdout.contains("is reachable, but it refused the token given with --token"), "{output:?}");
    assert!(!output.stdout.contains("not reachable"), "{output:?}");
    assert!(output.stdout.contains("troupe token --data-dir DIR"), "{output:?}");
    let json = run(&["status", "--url", &daemon.url, "--token", "wrong", "--data-dir", local, "--json"]).await;
    assert_eq!(serde_json::from_str::<serde_json::Value>(&json.stdout).unwrap()["failure"], "token_refused");
}

/// Runs `troupe` as the unprivileged `nobody` when root (root passes any file mode), as this user otherwise.
async fn as_nobody(args: &[&str]) -> CliOutput {
    let mut command = troupe_bare(args);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        // The supplementary groups are dropped too when the uid is set from root.
        command.uid(65534).gid(65534);
    }
    finish(command, WAIT).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unix_socket_this_user_may_not_use_is_named_as_a_permission_problem() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    std::fs::create_dir_all(&run_dir).unwrap();
    // Traversable by anyone: the refusal is the socket's own mode (0660, the daemon's group).
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&run_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = run_dir.join("troupe.sock");
    let daemon = spawn_daemon(&dir.path().join("data"), &format!("unix:{}", socket.display()));
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        // Not root: this user owns the socket, so take its own rights away.
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o000)).unwrap();
    }
    let url = format!("unix:{}", socket.display());
    let output = as_nobody(&["--url", &url, "--token", &daemon.token, "sessions"]).await;
    assert_eq!(output.code, Some(1), "{output:?}");
    let said = output.stderr;
    assert!(said.contains(&format!("no permission to connect to the daemon's socket {}", socket.display())), "{said}");
    assert!(said.contains("usermod -aG"), "{said}");
    assert!(!said.contains("troupe serve"), "the daemon runs: {said}");
}
