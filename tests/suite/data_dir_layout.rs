//! A data directory holding a directory where a file belongs (the red team made `config.toml` one through a
//! swapped symlink): the daemon starts without the file and says what is wrong, or, where it cannot run safely
//! without it (its token, its lock), refuses in one line naming the path and what to do. And how the red team
//! got there: a run's `write_file` calls through a folder that a thread keeps exchanging with a symlink into the
//! data directory never create anything in it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use troupe_protocol::client::{Client, ClientOptions};
use troupe_protocol::method;
use troupe_protocol::types::session::SessionListParams;

use super::support::*;

/// `troupe serve` on a free port with stderr in `log` (and `TROUPE_TOKEN` set to `token`), once it printed its
/// address.
fn serve_logging_to(data_dir: &Path, log: &Path, token: Option<&str>) -> ChildDaemon {
    let mut command = troupe_serve(data_dir)
        .listen("127.0.0.1:0")
        .default_log_level()
        .no_default_config()
        .log(DaemonLog::File(log.to_path_buf()));
    if let Some(token) = token {
        command = command.env("TROUPE_TOKEN", token);
    }
    command.spawn()
}

/// `troupe serve` that must refuse to start: its exit status and stderr, within a deadline.
fn serve_refused(data_dir: &Path) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(troupe_binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .env_remove("TROUPE_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn troupe serve");
    let status = exit_status_within(&mut child, "the daemon to refuse to start", Duration::from_secs(30));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (status, stderr)
}

#[tokio::test]
async fn directories_where_files_belong_leave_the_daemon_running_and_saying_so() {
    let data_dir = tempfile::tempdir().unwrap();
    let root = data_dir.path();
    // A daemon that ran here before, with a session.
    let session_id = {
        let mut daemon = spawn_daemon(root, "127.0.0.1:0");
        let (client, _deliveries) = daemon.client().await;
        let session = create_session_in(&client, root).await;
        drop(client);
        assert!(daemon.terminate().success());
        session.session_id
    };
    let session_dir = root.join("sessions").join(&session_id);
    let misplaced = [
        root.join("config.toml"),
        root.join("providers.json"),
        root.join("daemon/url"),
        root.join("daemon/console-sessions.json"),
        root.join("daemon/session-index.jsonl"),
    ];
    for path in misplaced.iter().chain([&session_dir.join("meta.json")]) {
        let _ = std::fs::remove_file(path);
        std::fs::create_dir(path).unwrap();
    }

    let log = tempfile::NamedTempFile::new().unwrap();
    let mut daemon = serve_logging_to(root, log.path(), None);
    let (client, _deliveries) = daemon.client().await;
    let listed = within("session.list", client.call::<method::SessionList>(SessionListParams::default()))
        .await
        .expect("session.list");
    assert_eq!(
        listed.sessions.iter().map(|session| session.session_id.as_str()).collect::<Vec<_>>(),
        [session_id.as_str()],
        "the session whose metadata cache is a directory is still listed"
    );
    drop(client);
    daemon.kill();

    let text = std::fs::read_to_string(log.path()).unwrap();
    for path in &misplaced {
        let expected = format!("data directory problem: {} is a directory", path.display());
        assert!(text.contains(&expected), "missing {expected:?} in the log:\n{text}");
        assert!(text.contains(&format!("`rmdir {}`", path.display())), "{text}");
    }
    assert!(text.contains("it runs on the default settings"), "{text}");
    // A directory's link count is not a hard link to warn about.
    assert!(!text.contains("other hard links"), "{text}");

    // `troupe config check` says the same of the files the config is made of.
    let output = Command::new(troupe_binary())
        .args(["config", "check", "--data-dir"])
        .arg(root)
        .env_remove("TROUPE_TOKEN")
        .output()
        .expect("troupe config check");
    let printed = String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
    for path in [&misplaced[0], &misplaced[1]] {
        let expected = format!("warning: {}: is a directory", path.display());
        assert!(printed.contains(&expected), "missing {expected:?} in:\n{printed}");
    }
}

#[tokio::test]
async fn a_token_or_lock_that_is_a_directory_stops_the_start_in_one_line_unless_the_token_comes_from_the_environment() {
    for (entry, remedy) in [("daemon/token", "TROUPE_TOKEN"), ("daemon/lock", "and start again")] {
        let data_dir = tempfile::tempdir().unwrap();
        let path = data_dir.path().join(entry);
        std::fs::create_dir_all(&path).unwrap();
        let (status, stderr) = serve_refused(data_dir.path());
        assert!(!status.success(), "{entry}: {stderr}");
        let line = stderr.lines().find(|line| line.contains("cannot start")).unwrap_or_else(|| panic!("{stderr}"));
        assert!(line.contains(&format!("cannot start: {} is a directory", path.display())), "{line}");
        assert!(line.contains(&format!("`rmdir {}`", path.display())) && line.contains(remedy), "{line}");
    }

    // A file where the daemon keeps a folder is refused too, naming it.
    let data_dir = tempfile::tempdir().unwrap();
    std::fs::write(data_dir.path().join("daemon"), "").unwrap();
    let (status, stderr) = serve_refused(data_dir.path());
    assert!(!status.success());
    assert!(stderr.contains(&format!("{}: ", data_dir.path().join("daemon").display())), "{stderr}");
    assert!(stderr.contains("move it away"), "{stderr}");

    // With the token in the environment, the token file is not needed: the daemon runs, and requires that token.
    let data_dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(data_dir.path().join("daemon/token")).unwrap();
    let token = "tok_from_the_environment_0123456789abcdefghij";
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut daemon = serve_logging_to(data_dir.path(), log.path(), Some(token));
    let url = daemon.url.clone();
    within("connect", Client::connect_websocket(&url, token, ClientOptions::default()))
        .await
        .expect("the environment's token is accepted");
    let refused = within("connect", Client::connect_websocket(&url, "tok_wrong", ClientOptions::default())).await;
    assert!(refused.is_err(), "another token is refused");
    daemon.kill();
    let text = std::fs::read_to_string(log.path()).unwrap();
    assert!(text.contains("the token file is a directory; the daemon uses TROUPE_TOKEN"), "{text}");
}

/// Exchanges `first` and `second` (`renameat2(RENAME_EXCHANGE)`) in a loop until `stop` is set.
fn flip_until(first: &Path, second: &Path, stop: &std::sync::atomic::AtomicBool) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let first = std::ffi::CString::new(first.as_os_str().as_bytes()).unwrap();
    let second = std::ffi::CString::new(second.as_os_str().as_bytes()).unwrap();
    let mut flips = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        // SAFETY: both paths are NUL-terminated strings that outlive the call.
        let exchanged = unsafe {
            libc::renameat2(libc::AT_FDCWD, first.as_ptr(), libc::AT_FDCWD, second.as_ptr(), libc::RENAME_EXCHANGE)
        };
        assert_eq!(exchanged, 0, "exchange: {}", std::io::Error::last_os_error());
        flips += 1;
    }
    flips
}

#[tokio::test]
async fn a_folder_flipping_to_a_symlink_into_the_data_dir_never_gets_a_run_s_writes_into_it() {
    // How the red team made `config.toml` a directory: write_file's parent folders created through a symlink
    // swapped in after the check. Here a model's run writes through `flip` while a thread exchanges it with a
    // symlink to the daemon's data directory.
    const WRITES: usize = 450;
    let daemon = TestDaemon::start();
    let data_dir = daemon.data_path().to_path_buf();
    let cwd = daemon.project_path().to_path_buf();
    std::fs::create_dir_all(cwd.join("flip")).unwrap();
    std::os::unix::fs::symlink(&data_dir, cwd.join("flip_alt")).unwrap();
    let calls: Vec<_> = (0..WRITES)
        .map(|index| {
            // Folders to create below `flip`: in the data directory they would stay, as the red team saw.
            let path = format!("flip/new{index}/config.toml/file");
            serde_json::json!({"tool": "write_file", "arguments": {"path": path, "content": "pwned"}})
        })
        .collect();
    let script = serde_json::json!({"turns": [{"tool_calls": calls}, {"text": "done"}]});

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flipper = {
        let (first, second, stop) = (cwd.join("flip"), cwd.join("flip_alt"), stop.clone());
        std::thread::spawn(move || flip_until(&first, &second, &stop))
    };
    let events = run_script_in_yolo(&daemon, &cwd, script).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let flips = flipper.join().unwrap();

    let results = tool_results(&events);
    assert_eq!(results.len(), WRITES, "every call ran");
    assert!(flips > WRITES as u64, "the flipper raced the run ({flips} exchanges)");
    let landed: Vec<String> = std::fs::read_dir(&data_dir)
        .unwrap()
        .chain(std::fs::read_dir(data_dir.join("daemon")).unwrap())
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("new") || name.starts_with("created"))
        .collect();
    assert_eq!(landed, Vec::<String>::new(), "nothing a tool wrote landed in the data directory");
    assert!(data_dir.join("config.toml").is_file(), "config.toml is still a file");
}
