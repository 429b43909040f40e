//! The CLI on a session of 100,000 events: `troupe watch` prints every event once and in order as it reads,
//! and `troupe run --session` starts and finishes a run without replaying the history first. The session is
//! laid on disk before the daemon starts, in the log format of `runtime/src/event_log.rs`.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

use super::cli_support::*;
use super::support::*;

const SESSION_ID: &str = "01900000-0000-7000-8000-000000100000";
const EVENTS: u64 = 100_000;
/// Generous: a debug build prints 100,000 lines through a pipe.
const LIMIT: Duration = Duration::from_secs(180);

/// `session_created`, then title changes: one compact JSON object and one `\n` per event.
fn write_big_log(data_dir: &std::path::Path, cwd: &std::path::Path) {
    let mut log = String::with_capacity(EVENTS as usize * 220);
    let created = json!({"session_id": SESSION_ID, "run_id": null, "seq": 1, "timestamp": "2026-01-01T00:00:00.000Z",
        "payload": {"type": "session_created", "origin": {"type": "root"}, "cwd": cwd, "selection": echo_selection()}});
    log.push_str(&created.to_string());
    log.push('\n');
    for seq in 2..=EVENTS {
        let event = json!({"session_id": SESSION_ID, "run_id": null, "seq": seq,
            "timestamp": "2026-01-01T00:00:00.000Z",
            "payload": {"type": "session_title_committed", "title": format!("title {seq}"), "change": "set",
                "client_rename_id": format!("rename-{seq}")}});
        log.push_str(&event.to_string());
        log.push('\n');
    }
    let dir = data_dir.join("sessions").join(SESSION_ID);
    std::fs::create_dir_all(&dir).expect("session dir");
    std::fs::write(dir.join("events.jsonl"), log).expect("write the log");
}

/// The peak resident memory of a live process, from `/proc`, in KiB.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_and_run_work_on_a_session_of_100000_events() {
    let data_dir = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    write_big_log(data_dir.path(), project.path());
    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..DaemonSetup::default() });

    // watch: every event once, in order, printed as read.
    let started = Instant::now();
    let mut watch = troupe_command(&daemon, &["watch", SESSION_ID])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = watch.id().expect("watch is running");
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let mut expected = 1;
    let mut peak_kib = 0;
    tokio::time::timeout(LIMIT, async {
        while expected <= EVENTS {
            let line = lines.next_line().await.expect("read watch").unwrap_or_else(|| {
                panic!("watch ended after #{}", expected - 1);
            });
            let Some(rest) = line.strip_prefix('#') else { continue };
            let seq: u64 = rest.split_whitespace().next().and_then(|seq| seq.parse().ok()).expect("a seq");
            assert_eq!(seq, expected, "each event once, in order: {line}");
            expected += 1;
            if seq.is_multiple_of(10_000) {
                peak_kib = peak_kib.max(peak_rss_kib(pid).unwrap_or(0));
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("watch printed only up to #{} within {LIMIT:?}", expected - 1));
    eprintln!("watch printed {EVENTS} events in {:?}; peak RSS {} KiB", started.elapsed(), peak_kib);
    // The log is about 20 MB; following it must not mean holding it.
    assert!(peak_kib < 96 * 1024, "watch peaked at {peak_kib} KiB");
    let _ = watch.kill().await;

    // run --session: follows the session from its end, so it starts at once and prints only its own run.
    let started = Instant::now();
    let output = troupe_within(&daemon, &["run", "--session", SESSION_ID, "hello after a long history"], LIMIT).await;
    eprintln!("run on the big session took {:?}", started.elapsed());
    let printed = output.ok();
    assert!(printed.contains("run completed"), "{printed}");
    let first_seq: u64 = printed
        .lines()
        .find_map(|line| line.strip_prefix('#')?.split_whitespace().next()?.parse().ok())
        .expect("an event line");
    assert!(first_seq > EVENTS, "the history was not printed again: {first_seq}");
}
