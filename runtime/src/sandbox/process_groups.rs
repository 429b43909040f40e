//! Live tool process groups, recorded durably, so that a daemon that died without cleaning up (SIGKILL, a crash,
//! a power cut of the daemon alone) kills what it left behind when it starts again.
//!
//! Each shell call leads its own process group, and its leader has `PR_SET_PDEATHSIG`, so the leader dies with
//! the daemon. Its children (a pipeline, `grep -R` under `sh -c`, background jobs) do not: the death signal is not
//! inherited. So right after spawning, the call records the group in `<data_dir>/daemon/process-groups/<pgid>`
//! (written, then renamed into place) and removes the record once the group is killed and reaped. At start,
//! before any session is loaded, [`ProcessGroups::kill_leftovers`] kills every recorded group that is still the
//! one recorded, then removes the records.
//!
//! A process group id can be reused once every member of the group is gone. A record therefore carries the boot
//! id and the leader's start time (clock ticks since boot, from `/proc/<pid>/stat`): a group is killed only when
//! the boot is the same and either the leader still runs with that start time or no process has its id (then any
//! process still in group `pgid` is one of ours: a new group of that id could only have been made by a new
//! process of that pid).
//!
//! The data directory is denied to tool processes, so a tool cannot forge or remove a record.
//!
//! Records are not fsynced. What they guard against is the daemon dying while the machine runs on, and then the
//! kernel's page cache still holds every record written (a new daemon reads it like any file); the only loss an
//! fsync would prevent is the machine's own crash, which ends the groups too (and changes the boot id). Two
//! fsyncs on every shell call cost milliseconds on a rotating disk (figure 13 of docs/performance.md).

use std::io::{self, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The directory of records, one file per live process group of a tool call.
#[derive(Debug)]
pub struct ProcessGroups {
    dir: PathBuf,
}

/// What is recorded of one live group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct GroupRecordData {
    pgid: i32,
    /// `/proc/sys/kernel/random/boot_id` when the group was started.
    boot_id: String,
    /// The leader's start time in clock ticks after boot (field 22 of `/proc/<pid>/stat`).
    leader_start: u64,
}

/// The record of one live group; dropping it removes the record (the group is gone or was killed).
#[derive(Debug)]
pub struct GroupRecord {
    path: Option<PathBuf>,
}

/// What [`ProcessGroups::kill_leftovers`] did with one record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leftover {
    /// The group was still there and got SIGKILL.
    Killed { pgid: i32 },
    /// Nothing of the group was left, or its id now belongs to someone else: the record was only removed.
    Gone { pgid: i32 },
    /// The record could not be read or the kill failed; it was removed (or left, if removal failed too).
    Failed { record: PathBuf, reason: String },
}

impl ProcessGroups {
    pub fn new(dir: PathBuf) -> ProcessGroups {
        ProcessGroups { dir }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Records that process group `pgid` (led by the process of the same id, just started) is live. Blocking:
    /// writes a small file and renames it into place (never half a record), without fsync (see the module doc).
    pub fn record(&self, pgid: i32) -> io::Result<GroupRecord> {
        let data = GroupRecordData { pgid, boot_id: boot_id()?, leader_start: start_time(pgid)? };
        if !self.dir.is_dir() {
            std::fs::DirBuilder::new().recursive(true).mode(crate::data_dir::PRIVATE_DIR_MODE).create(&self.dir)?;
        }
        let path = self.dir.join(pgid.to_string());
        let staging = self.dir.join(format!(".{pgid}.tmp"));
        let text = serde_json::to_vec(&data).map_err(io::Error::other)?;
        let mut file = std::fs::File::create(&staging)?;
        file.write_all(&text)?;
        drop(file);
        std::fs::rename(&staging, &path)?;
        Ok(GroupRecord { path: Some(path) })
    }

    /// Kills every recorded group that is still the one recorded and removes every record. Called once at start,
    /// before sessions load and runs left in flight are marked interrupted.
    pub fn kill_leftovers(&self) -> Vec<Leftover> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Vec::new(),
            Err(error) => {
                return vec![Leftover::Failed { record: self.dir.clone(), reason: error.to_string() }];
            }
        };
        let current_boot = boot_id().ok();
        let mut outcomes = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let outcome = match read_record(&path) {
                Ok(record) => kill_if_ours(&record, current_boot.as_deref()),
                Err(reason) => Leftover::Failed { record: path.clone(), reason },
            };
            if let Err(error) = std::fs::remove_file(&path)
                && error.kind() != io::ErrorKind::NotFound
            {
                outcomes.push(Leftover::Failed { record: path, reason: format!("could not remove it: {error}") });
            }
            outcomes.push(outcome);
        }
        outcomes
    }
}

impl Drop for GroupRecord {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            // A record that comes back after a crash names a group that is gone, which the next start recognises
            // and only removes.
            let _ = std::fs::remove_file(path);
        }
    }
}

fn read_record(path: &Path) -> Result<GroupRecordData, String> {
    let text = std::fs::read(path).map_err(|error| error.to_string())?;
    serde_json::from_slice(&text).map_err(|_| "the record is not valid".to_owned())
}

fn kill_if_ours(record: &GroupRecordData, current_boot: Option<&str>) -> Leftover {
    let pgid = record.pgid;
    if pgid <= 1 || current_boot != Some(record.boot_id.as_str()) {
        return Leftover::Gone { pgid };
    }
    match start_time(pgid) {
        // The leader's id belongs to another process now: the group is not ours any more.
        Ok(start) if start != record.leader_start => return Leftover::Gone { pgid },
        Ok(_) => {}
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Leftover::Failed { record: PathBuf::from(pgid.to_string()), reason: error.to_string() },
    }
    // SAFETY: killpg has no memory-safety preconditions; pgid > 1 was checked, and the group was shown above to
    // be the one recorded.
    if unsafe { libc::killpg(pgid, libc::SIGKILL) } == 0 {
        return Leftover::Killed { pgid };
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::ESRCH) {
        Leftover::Gone { pgid }
    } else {
        Leftover::Failed { record: PathBuf::from(pgid.to_string()), reason: error.to_string() }
    }
}

fn boot_id() -> io::Result<String> {
    Ok(std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?.trim().to_owned())
}

/// The start time of process `pid` in clock ticks after boot.
fn start_time(pid: i32) -> io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) is in parentheses and may hold spaces and parentheses: count from the last `)`.
    let after_name = stat.rsplit_once(')').map(|(_, rest)| rest).ok_or_else(|| io::Error::other("bad stat"))?;
    // After the name come field 3 (state) onwards; the start time is field 22.
    after_name
        .split_whitespace()
        .nth(22 - 3)
        .and_then(|field| field.parse().ok())
        .ok_or_else(|| io::Error::other("no start time in /proc/<pid>/stat"))
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    use super::*;

    fn alive(pid: i32) -> bool {
        // A zombie still has a /proc entry; count it as gone.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')))
    }

    #[test]
    fn a_recorded_group_left_behind_is_killed_with_its_children_and_the_record_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let groups = ProcessGroups::new(dir.path().join("groups"));
        // A leader whose child would survive the leader's death signal: the case the records exist for.
        let mut leader = Command::new("/bin/sh")
            .args(["-c", "sleep 600 & echo $!; wait"])
            .process_group(0)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        let pgid = leader.id() as i32;
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(leader.stdout.take().expect("stdout")), &mut line)
            .expect("read the child's pid");
        let child: i32 = line.trim().parse().expect("pid");
        let record = groups.record(pgid).expect("record");
        std::mem::forget(record); // as if the daemon died without dropping it

        let outcomes = groups.kill_leftovers();
        assert_eq!(outcomes, vec![Leftover::Killed { pgid }]);
        let _ = leader.wait();
        troupe_test_support::eventually_blocking("the group's child to die", troupe_test_support::WAIT, || {
            !alive(child)
        });
        assert_eq!(std::fs::read_dir(groups.dir()).expect("dir").count(), 0);
        assert!(groups.kill_leftovers().is_empty());
    }

    #[test]
    fn a_record_whose_group_id_was_reused_is_not_killed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let groups = ProcessGroups::new(dir.path().to_path_buf());
        let mut other = Command::new("sleep").arg("600").process_group(0).spawn().expect("spawn");
        let pgid = other.id() as i32;
        // A record of an earlier group with the same id but another leader start time.
        let stale = GroupRecordData { pgid, boot_id: boot_id().expect("boot id"), leader_start: 1 };
        std::fs::write(dir.path().join(pgid.to_string()), serde_json::to_vec(&stale).expect("json")).expect("write");
        assert_eq!(groups.kill_leftovers(), vec![Leftover::Gone { pgid }]);
        assert!(alive(pgid), "an unrelated group was killed");
        let _ = other.kill();
        let _ = other.wait();
    }

    #[test]
    fn dropping_a_record_removes_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let groups = ProcessGroups::new(dir.path().to_path_buf());
        let record = groups.record(std::process::id() as i32).expect("record");
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 1);
        drop(record);
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
    }
}
