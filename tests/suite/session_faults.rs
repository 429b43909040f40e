//! Faults inside a session must not cost its subscribers: when its actor ends abnormally (a log write that fails
//! on a full disk, a panic), every subscriber gets its one `gap`, and resubscribing from its cursor gives every
//! event, from the session's next actor. The full disk is a real one: a small tmpfs mounted as `sessions/` and
//! filled up (root only, like any mount).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;
use troupe_protocol::client::ClientDelivery;
use troupe_protocol::method;

use super::cli_support::troupe_command;
use super::support::*;
use super::unavailable::{Missing, is_root, skip};

/// Reads the subscription's frames up to its gap; returns the events delivered before it and the gap's
/// `last_delivered_seq`. Fails on a reply or anything else but event notifications and `runtime.changed`.
async fn events_until_gap(socket: &mut RawSocket) -> (Vec<u64>, u64) {
    let mut delivered = Vec::new();
    loop {
        let frame = socket.recv().await;
        match frame["params"]["type"].as_str() {
            Some("event") => delivered.push(frame["params"]["event"]["seq"].as_u64().expect("seq")),
            Some("gap") => return (delivered, frame["params"]["last_delivered_seq"].as_u64().expect("cursor")),
            _ if frame["method"] == "runtime.changed" => {}
            _ => panic!("unexpected frame while waiting for a gap: {frame}"),
        }
    }
}

/// Resubscribes from `cursor` and reads the reply and the replayed notifications until `through`.
async fn resubscribe_through(socket: &mut RawSocket, id: u64, session_id: &str, cursor: u64, through: u64) -> Vec<u64> {
    socket
        .send(&json!({"jsonrpc": "2.0", "id": id, "method": "events.subscribe",
            "params": {"session_id": session_id, "cursor": cursor}}))
        .await;
    let mut seqs = Vec::new();
    while seqs.last().is_none_or(|seq| *seq < through) {
        let frame = socket.recv().await;
        if frame["id"] == id {
            let events = frame["result"]["events"].as_array().unwrap_or_else(|| panic!("a page of events: {frame}"));
            seqs.extend(events.iter().map(|event| event["seq"].as_u64().expect("seq")));
            continue;
        }
        match frame["params"]["type"].as_str() {
            Some("event") => seqs.push(frame["params"]["event"]["seq"].as_u64().expect("seq")),
            _ if frame["method"] == "runtime.changed" => {}
            _ => panic!("unexpected frame while resubscribing: {frame}"),
        }
    }
    seqs
}

async fn subscribed_raw(daemon: &TestDaemon, session_id: &str) -> RawSocket {
    let mut socket = daemon.raw().await;
    socket.handshake().await;
    let reply = socket.call(1, "events.subscribe", json!({"session_id": session_id})).await;
    assert!(reply["result"]["last_seq"].is_u64(), "{reply}");
    socket
}

async fn last_event_seq(socket: &mut RawSocket, id: u64, session_id: &str) -> u64 {
    let got = socket.call(id, "session.get", json!({"session_id": session_id})).await;
    got["result"]["session"]["last_event_seq"].as_u64().unwrap_or_else(|| panic!("session.get: {got}"))
}

#[tokio::test]
async fn a_session_actor_that_panics_ends_its_subscriptions_with_a_gap_and_the_clients_recover() {
    let daemon = TestDaemon::start();
    let (writer, _) = daemon.client().await;
    let session = daemon.create_session(&writer).await;
    let id = session.session_id.clone();
    let mut raw = subscribed_raw(&daemon, &id).await;
    // The shared client, which recovers from a gap by itself.
    let (follower, mut deliveries) = daemon.client().await;
    follower.subscribe(&id, None).await.expect("subscribe");
    for index in 0..2 {
        set_title(&writer, &id, &format!("before-{index}"), &format!("before {index}")).await.expect("rename");
    }
    assert_eq!(collect_event_seqs(&mut deliveries, 3).await, vec![1, 2, 3]);

    within("panic hook", daemon.engine().inject_session_panic(&id)).await.expect("hook");

    let (delivered, cursor) = within("the gap", events_until_gap(&mut raw)).await;
    assert_eq!((delivered, cursor), (vec![2, 3], 3));
    // The session's next actor takes the writes; the raw subscriber gets them from its cursor, the shared client
    // by itself.
    set_title(&writer, &id, "after", "after the panic").await.expect("rename after the panic");
    let last = last_event_seq(&mut raw, 2, &id).await;
    assert_eq!(last, 4);
    assert_eq!(resubscribe_through(&mut raw, 3, &id, cursor, last).await, vec![4]);
    let recovered = within("the shared client's recovery", async {
        loop {
            match deliveries.next().await.expect("deliveries open") {
                ClientDelivery::Live(event) | ClientDelivery::ReplayEvent(event) if event.seq == 4 => return event,
                _ => {}
            }
        }
    })
    .await;
    assert_eq!(recovered.seq, 4);
}

/// A tmpfs of `bytes` mounted on a directory, unmounted when dropped.
struct SmallFilesystem {
    path: PathBuf,
}

impl SmallFilesystem {
    /// `None` when this process may not mount (not root); the test is then skipped (see `unavailable::skip`).
    fn mount(path: &Path, bytes: usize) -> Option<SmallFilesystem> {
        if !is_root() {
            skip(Missing::Mount);
            return None;
        }
        std::fs::create_dir_all(path).expect("mount point");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes},mode=0700"), "tmpfs"])
            .arg(path)
            .status()
            .expect("run mount");
        assert!(status.success(), "mount a tmpfs on {}", path.display());
        Some(SmallFilesystem { path: path.to_owned() })
    }

    /// Fills the file system with one file until a write fails with ENOSPC; returns the file.
    fn fill(&self) -> PathBuf {
        let filler = self.path.join("filler");
        let mut file = std::fs::File::create(&filler).expect("filler");
        let chunk = vec![0u8; 4096];
        loop {
            match file.write(&chunk) {
                Ok(0) => break,
                Ok(_) => continue,
                Err(error) if error.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(error) => panic!("filling the file system: {error}"),
            }
        }
        // Smaller writes fill what is left of the last page.
        while file.write(&[0u8]).is_ok_and(|written| written == 1) {}
        filler
    }
}

impl Drop for SmallFilesystem {
    fn drop(&mut self) {
        // Lazily: the daemon may still hold files open on it.
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// A daemon whose `sessions/` is a 1 MiB file system of its own; `None` (the test skipped) when this process may
/// not mount one.
fn daemon_on_a_small_disk() -> Option<(TestDaemon, SmallFilesystem)> {
    let data_dir = tempfile::tempdir().expect("data dir");
    let disk = SmallFilesystem::mount(&data_dir.path().join("sessions"), 1024 * 1024)?;
    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..DaemonSetup::default() });
    Some((daemon, disk))
}

/// The daemon first, then the file system, then the directory it was mounted in.
fn stop_on_a_small_disk(daemon: TestDaemon, disk: SmallFilesystem) {
    let data_dir = daemon.stop();
    drop(disk);
    drop(data_dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_write_that_fails_on_a_full_disk_ends_each_subscription_with_a_gap_and_watch_continues() {
    let Some((daemon, disk)) = daemon_on_a_small_disk() else {
        return;
    };
    let (writer, _) = daemon.client().await;
    let session = daemon.create_session(&writer).await;
    let id = session.session_id.clone();
    let mut raw = subscribed_raw(&daemon, &id).await;
    let mut watch = troupe_command(&daemon, &["watch", &id]);
    watch.stdout(std::process::Stdio::piped());
    let mut watcher = watch.spawn().expect("spawn watch");
    let mut printed = {
        use tokio::io::AsyncBufReadExt;
        tokio::io::BufReader::new(watcher.stdout.take().expect("stdout")).lines()
    };
    let mut seen = Vec::new();
    let mut wait_for = async |needle: &str| {
        within(&format!("watch printing {needle:?}"), async {
            while let Some(line) = printed.next_line().await.expect("watch's output") {
                seen.push(line.clone());
                if line.contains(needle) {
                    return;
                }
            }
            panic!("watch ended before printing {needle:?}: {seen:?}");
        })
        .await
    };
    wait_for("session created").await;

    let filler = disk.fill();
    // Renames go on until one needs a page the disk no longer has: that write fails.
    let mut written = 0;
    let failed = loop {
        assert!(written < 200, "200 renames fit on a full disk");
        match set_title(&writer, &id, &format!("full-{written}"), &format!("on a full disk {written}")).await {
            Ok(_) => written += 1,
            Err(error) => break error,
        }
    };
    let (delivered, cursor) = within("the gap", events_until_gap(&mut raw)).await;
    assert_eq!(delivered, (2..2 + written).collect::<Vec<u64>>(), "{failed:?}");
    assert_eq!(cursor, 1 + written);

    // Space comes back: the session takes writes again, and both subscribers get everything.
    std::fs::remove_file(filler).expect("free the disk");
    set_title(&writer, &id, "back", "after the disk was full").await.expect("rename once there is room");
    let last = last_event_seq(&mut raw, 2, &id).await;
    assert_eq!(last, cursor + 1);
    assert_eq!(resubscribe_through(&mut raw, 3, &id, cursor, last).await, vec![last]);
    wait_for("after the disk was full").await;
    let numbered: Vec<&String> = seen.iter().filter(|line| line.starts_with('#')).collect();
    assert_eq!(numbered.len() as u64, last, "each event printed once: {seen:?}");
    watcher.kill().await.expect("stop watch");
    stop_on_a_small_disk(daemon, disk);
}

/// A session whose log refuses a write while a report of progress alone waits: what the supervisor's index lists
/// afterwards is what was durable. The stopping actor sends its last publication, not its state (which holds the
/// refused event), and the session's restart after the failure reports its log as loaded; this checks where both
/// leave the index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_refused_while_a_progress_report_waits_never_reaches_the_index() {
    let Some((daemon, disk)) = daemon_on_a_small_disk() else {
        return;
    };
    let (client, _deliveries) = daemon.client().await;
    let session = daemon.create_session(&client).await;
    let id = session.session_id.clone();
    let filler = disk.fill();
    // A revert to the first event changes nothing of the metadata but its progress, so each one's report waits
    // (up to 100 ms) and the next revert follows well within that; reverts go on until one needs a page the disk
    // no longer has.
    let mut acknowledged = session.last_event_seq;
    let failed = loop {
        assert!(acknowledged < 1000, "a thousand reverts fit on a full disk");
        match revert(&client, &id, 1).await {
            Ok(reverted) => acknowledged = reverted.last_event_seq,
            Err(error) => break error,
        }
    };
    eventually("the session whose log failed stops", || !daemon.engine().is_live(&id)).await;
    let listed = within("list", client.call::<method::SessionList>(Default::default())).await.expect("list");
    let listed = listed.sessions.into_iter().find(|meta| meta.session_id == id).expect("the session is listed");
    assert_eq!(listed.last_event_seq, acknowledged, "the index holds the refused revert: {failed:?}");

    std::fs::remove_file(filler).expect("free the disk");
    stop_on_a_small_disk(daemon, disk);
}
