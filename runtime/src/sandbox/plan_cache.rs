//! The plans of recent cwds, reused while they are still true, so that a session's commands do not list the
//! folders above the denied paths again at every call (about a millisecond on a small home folder, half a second
//! beside a folder of 50,000 entries).
//!
//! A plan ([`super::plan`]) depends on the sandbox (fixed for the daemon's life: the cache lives in it), the cwd,
//! the further writable roots, the denied paths (the sandbox's and the other troupe data dirs found around the cwd,
//! looked up again at every call), and the entries of the folders it listed: the folders that hold a denied path,
//! whose other entries each got a rule of their own. A new, removed or renamed entry changes its folder's mtime and
//! ctime, and a folder put in another's place has another device or inode; so a plan is reused only while every
//! folder it listed has the identity and times it had right before it was listed, and the denied paths are the same
//! and name the same files (or still nothing).
//!
//! File times advance in ticks: the kernel's coarse clock (a jiffy, at most 10 ms) on ext4, xfs, btrfs and tmpfs,
//! whole seconds on some file systems (two on FAT). An entry made in the same tick as the folder was stamped, after
//! the stamp, would leave its times as they were. So a plan is kept only when every folder it listed was last
//! changed well before its stamp was taken: [`FINE_GRANULARITY`] before when its times carry nanoseconds, else
//! [`COARSE_GRANULARITY`] (times in whole seconds are what a file system of second ticks stores). A folder changed
//! more recently is listed again at the next call. (A clock set back by more than that between two calls, or a
//! network file system whose server's clock runs behind, could hide a change; the next change of the folder, or
//! the cache's bounds, end it.)
//!
//! The Landlock ruleset built from a plan is kept with it, one per temp dir (a run's calls share theirs), because
//! building it opens every rule's path: a kept ruleset's rules name the inodes its paths named when it was built.
//! Those of entries of listed folders are covered by the folders' stamps (an entry renamed, removed or replaced
//! changes its folder); the others (`/`, the devices, the cwd, the temp dir and the other writable roots) are
//! compared by device and inode at each call, and the ruleset is built again when one differs. A child adds one
//! rule to the ruleset for the `/proc` it mounts (a new inode each time, in its own mount namespace, which no other
//! command can reach; once that namespace is gone the rule names nothing, but every later command's domain still
//! copies it), so a kept ruleset is built again once those rules would add a sixteenth to the ones it was built
//! with, and after [`MIN_RULESET_USES`] commands at the least ([`uses_allowed`]): a small plan's ruleset is cheap
//! to build again, and one beside a folder of 50,000 entries serves thousands of commands before it is.
//!
//! One check of a fresh build is not repeated on reuse: an entry file that gets a second name after the ruleset was
//! built (a hard link made in another folder, which changes no listed folder) keeps its rule, where a fresh build
//! would skip it. The rule only ever reaches that file's own contents, which the entry's name reached before; the
//! check exists for the other direction, a denied file linked into a listed folder, which changes that folder.
//! The other way round, a root rule skipped at the build (a file then with several names) stays skipped while
//! its path names the same inode: less access, until the ruleset is built again.

use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::plan::{DirStamp, Grant, Listed, SandboxPlan};

/// How long before its stamp a listed folder must have last changed for a plan to be kept (see the module doc):
/// when its times carry nanoseconds (ten times the longest jiffy), and when they are whole seconds (FAT's ticks).
pub const FINE_GRANULARITY: Duration = Duration::from_millis(100);
pub const COARSE_GRANULARITY: Duration = Duration::from_secs(2);

/// The most plans kept (the most recently used), and the most rules in all: a plan beside a large folder holds a
/// rule per entry.
const MAX_PLANS: usize = 16;
const MAX_RULES: usize = 250_000;

/// The most rulesets kept per plan (runs of one cwd at the same time), and how many commands one serves at the
/// least before it is built again (each adds a rule for its own `/proc`; see [`uses_allowed`]).
const MAX_RULESETS: usize = 4;
pub const MIN_RULESET_USES: usize = 64;

/// How many commands a ruleset built with `rules` rules serves before it is built again: until the rules their
/// `/proc`s add would be a sixteenth more, and at least [`MIN_RULESET_USES`].
pub fn uses_allowed(rules: usize) -> usize {
    MIN_RULESET_USES.max(rules / 16)
}

/// The device and inode of a path (a final symlink not followed), `None` when nothing is there.
pub(super) type Identity = Option<(u64, u64)>;

pub(super) fn identity(path: &Path) -> Identity {
    std::fs::symlink_metadata(path).ok().map(|metadata| (metadata.dev(), metadata.ino()))
}

/// A plan, what it was made from, and the rulesets built from it.
#[derive(Debug)]
pub struct Planned {
    pub plan: SandboxPlan,
    /// Every folder the plan listed, with its stamp.
    listed: Vec<(PathBuf, Option<DirStamp>)>,
    /// The identities of `plan.denied`, in order.
    denied: Vec<Identity>,
    /// Whether a rule grants reading `/proc`.
    proc_read: bool,
    rulesets: Mutex<Vec<KeptRuleset>>,
}

/// A ruleset built from a plan and one temp dir's rules.
#[derive(Debug)]
struct KeptRuleset {
    temp_dir: PathBuf,
    fd: Arc<OwnedFd>,
    /// The commands it may serve ([`uses_allowed`]).
    allowed: usize,
    /// The rules not beneath a listed folder, with the identity of what each named when the ruleset was built.
    roots: Vec<(PathBuf, Identity)>,
    uses: usize,
}

impl Planned {
    /// A plan made after listing `listed` and taking the `identities` of its denied paths.
    pub(super) fn new(plan: SandboxPlan, listed: &[Listed], identities: Vec<Identity>) -> Planned {
        let listed = listed.iter().map(|listed| (listed.path.clone(), listed.stamp)).collect();
        let proc_read = plan.rules.iter().any(|rule| rule.grant == Grant::Read && rule.path == Path::new("/proc"));
        Planned { plan, listed, denied: identities, proc_read, rulesets: Mutex::new(Vec::new()) }
    }

    /// Whether the plan lets commands read `/proc` (then each reads its own; a temp dir never is `/proc`).
    pub(super) fn grants_proc_read(&self) -> bool {
        self.proc_read
    }

    /// The inodes of the denied paths and of the folders the plan listed (those that hold one), as they were when
    /// the plan was made: no rule may name one ([`super::landlock`]'s ruleset).
    pub(super) fn carved_inodes(&self) -> std::collections::HashSet<(u64, u64)> {
        let folders = self.listed.iter().filter_map(|(_, stamp)| stamp.map(|stamp| (stamp.dev, stamp.ino)));
        self.denied.iter().flatten().copied().chain(folders).collect()
    }

    /// The folders whose entries the plan listed: a rule directly in one names an inode its stamp covers.
    pub(super) fn listed_folders(&self) -> impl Iterator<Item = &Path> {
        self.listed.iter().map(|(path, _)| path.as_path())
    }

    /// The ruleset kept for `temp_dir`, when every root rule still names what it named and it has uses left.
    /// Blocking I/O: a `stat` per root rule.
    pub(super) fn ruleset(&self, temp_dir: &Path) -> Option<Arc<OwnedFd>> {
        let mut rulesets = self.rulesets.lock().unwrap_or_else(PoisonError::into_inner);
        let index = rulesets.iter().position(|kept| kept.temp_dir == temp_dir)?;
        let kept = &mut rulesets[index];
        if kept.uses < kept.allowed && kept.roots.iter().all(|(path, known)| identity(path) == *known) {
            kept.uses += 1;
            return Some(Arc::clone(&kept.fd));
        }
        rulesets.remove(index);
        None
    }

    /// Keeps the ruleset `fd` built for `temp_dir` from `rules` rules, whose root rules named `roots`.
    pub(super) fn keep_ruleset(
        &self,
        temp_dir: &Path,
        fd: Arc<OwnedFd>,
        rules: usize,
        roots: Vec<(PathBuf, Identity)>,
    ) {
        let mut rulesets = self.rulesets.lock().unwrap_or_else(PoisonError::into_inner);
        rulesets.retain(|kept| kept.temp_dir != temp_dir);
        if rulesets.len() >= MAX_RULESETS {
            rulesets.remove(0);
        }
        rulesets.push(KeptRuleset {
            temp_dir: temp_dir.to_path_buf(),
            fd,
            allowed: uses_allowed(rules),
            roots,
            uses: 1,
        });
    }
}

/// The identities of `denied`, taken before a plan around them is made.
pub(super) fn identities(denied: &[PathBuf]) -> Vec<Identity> {
    denied.iter().map(|path| identity(path)).collect()
}

/// Recent plans, most recently used last.
#[derive(Debug, Default)]
pub(super) struct PlanCache {
    entries: Mutex<Vec<Entry>>,
}

#[derive(Debug)]
struct Entry {
    cwd: PathBuf,
    extra_writable: Vec<PathBuf>,
    planned: Arc<Planned>,
}

impl PlanCache {
    /// The plan made for `cwd` and `extra_writable`, when it was made around `denied` and is still true. Blocking
    /// I/O: one `stat` per listed folder and per denied path, outside the lock.
    pub(super) fn get(&self, cwd: &Path, extra_writable: &[PathBuf], denied: &[PathBuf]) -> Option<Arc<Planned>> {
        let planned = {
            let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            let index = entries.iter().position(|entry| entry.cwd == cwd && entry.extra_writable == extra_writable)?;
            let entry = entries.remove(index);
            let planned = Arc::clone(&entry.planned);
            entries.push(entry);
            planned
        };
        let unchanged = planned.plan.denied == denied
            && planned.listed.iter().all(|(path, stamp)| DirStamp::of(path) == *stamp)
            && denied.iter().zip(&planned.denied).all(|(path, known)| identity(path) == *known);
        if unchanged {
            return Some(planned);
        }
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.retain(|entry| !Arc::ptr_eq(&entry.planned, &planned));
        None
    }

    /// Keeps `planned`, made for `cwd` and `extra_writable` after listing the folders `listed`, unless a listed
    /// folder changed too recently to trust its times.
    pub(super) fn insert(&self, cwd: &Path, extra_writable: &[PathBuf], planned: Arc<Planned>, listed: &[Listed]) {
        if !listed.iter().all(settled) || planned.plan.rules.len() > MAX_RULES {
            return;
        }
        let entry = Entry { cwd: cwd.to_path_buf(), extra_writable: extra_writable.to_vec(), planned };
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.retain(|known| known.cwd != entry.cwd || known.extra_writable != entry.extra_writable);
        entries.push(entry);
        let mut rules: usize = entries.iter().map(|entry| entry.planned.plan.rules.len()).sum();
        while entries.len() > MAX_PLANS || rules > MAX_RULES {
            let evicted = entries.remove(0);
            rules -= evicted.planned.plan.rules.len();
        }
    }

    /// How many plans are kept (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

/// Whether the folder's times lie far enough before its stamp that a change after the stamp must change them.
fn settled(listed: &Listed) -> bool {
    let Some(stamp) = listed.stamp else {
        // Nothing there (or unreadable): whatever appears changes the stamp.
        return true;
    };
    let granularity = if stamp.mtime.1 == 0 && stamp.ctime.1 == 0 { COARSE_GRANULARITY } else { FINE_GRANULARITY };
    let Some(limit) = listed.read_at.checked_sub(granularity) else {
        return false;
    };
    [stamp.mtime, stamp.ctime].into_iter().all(|time| as_system_time(time).is_some_and(|time| time <= limit))
}

fn as_system_time((seconds, nanoseconds): (i64, i64)) -> Option<SystemTime> {
    let nanoseconds = u32::try_from(nanoseconds).ok()?;
    match u64::try_from(seconds) {
        Ok(seconds) => UNIX_EPOCH.checked_add(Duration::new(seconds, nanoseconds)),
        // Before 1970: long settled.
        Err(_) => Some(UNIX_EPOCH),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "a test panics to fail")]
mod tests {
    use super::*;

    fn listed(path: &Path, read_at: SystemTime) -> Listed {
        Listed { path: path.to_path_buf(), stamp: DirStamp::of(path), read_at }
    }

    fn plan(denied: &[PathBuf], listed: &[Listed]) -> Arc<Planned> {
        let plan = SandboxPlan { denied: denied.to_vec(), ..SandboxPlan::default() };
        Arc::new(Planned::new(plan, listed, identities(denied)))
    }

    fn insert(cache: &PlanCache, cwd: &Path, denied: &[PathBuf], listed: Vec<Listed>) -> Arc<Planned> {
        let planned = plan(denied, &listed);
        cache.insert(cwd, &[], Arc::clone(&planned), &listed);
        planned
    }

    /// Sets the folder's mtime well in the past (its ctime stays now, so stamps are read "later" below).
    fn age(path: &Path) {
        let old = SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::open(path).unwrap().set_modified(old).unwrap();
    }

    #[test]
    fn a_plan_is_reused_while_its_folders_are_unchanged_and_dropped_when_one_changes() {
        let dir = tempfile::tempdir().unwrap();
        let denied = vec![dir.path().join("secret")];
        let cache = PlanCache::default();
        // Stamped "a minute from now": the folder's times (now) lie more than the granularity before it.
        let later = SystemTime::now() + Duration::from_secs(60);
        let made = insert(&cache, dir.path(), &denied, vec![listed(dir.path(), later)]);
        let reused = cache.get(dir.path(), &[], &denied).unwrap();
        assert!(Arc::ptr_eq(&reused, &made));
        // Another cwd, other writable roots or other denied paths: not this plan.
        assert!(cache.get(&dir.path().join("other"), &[], &denied).is_none());
        assert!(cache.get(dir.path(), &[PathBuf::from("/x")], &denied).is_none());
        assert!(cache.get(dir.path(), &[], &[PathBuf::from("/y")]).is_none());
        assert_eq!(cache.len(), 0, "a plan found untrue is dropped");

        insert(&cache, dir.path(), &denied, vec![listed(dir.path(), later)]);
        std::fs::write(dir.path().join("new-entry"), "").unwrap();
        age(dir.path());
        assert!(cache.get(dir.path(), &[], &denied).is_none(), "a new entry changed the folder's ctime");
    }

    #[test]
    fn a_denied_path_that_appears_drops_the_plan() {
        let dir = tempfile::tempdir().unwrap();
        let denied = vec![dir.path().join("secret")];
        let cache = PlanCache::default();
        insert(&cache, dir.path(), &denied, Vec::new());
        assert!(cache.get(dir.path(), &[], &denied).is_some());
        std::fs::write(&denied[0], "token").unwrap();
        assert!(cache.get(dir.path(), &[], &denied).is_none());
    }

    #[test]
    fn a_folder_changed_within_the_granularity_of_its_stamp_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let cache = PlanCache::default();
        // Stamped now, right after the folder was made: a change in the same tick could leave its times as they are.
        insert(&cache, dir.path(), &[], vec![listed(dir.path(), SystemTime::now())]);
        assert_eq!(cache.len(), 0);
        // Times in whole seconds: a file system of second ticks, whose times must lie seconds before the stamp.
        let whole_seconds = |seconds_before: u64| {
            let made = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() - seconds_before;
            let time = (i64::try_from(made).unwrap(), 0);
            let stamp = DirStamp { dev: 1, ino: 1, mtime: time, ctime: time };
            Listed { path: dir.path().to_path_buf(), stamp: Some(stamp), read_at: SystemTime::now() }
        };
        assert!(!settled(&whole_seconds(1)));
        assert!(settled(&whole_seconds(3)));
        let fine = |before: Duration| {
            let made = SystemTime::now().duration_since(UNIX_EPOCH).unwrap() - before;
            let time = (i64::try_from(made.as_secs()).unwrap(), i64::from(made.subsec_nanos().max(1)));
            let stamp = DirStamp { dev: 1, ino: 1, mtime: time, ctime: time };
            Listed { path: dir.path().to_path_buf(), stamp: Some(stamp), read_at: SystemTime::now() }
        };
        assert!(!settled(&fine(Duration::from_millis(20))));
        assert!(settled(&fine(Duration::from_millis(500))));
        // A folder that is not there can be trusted: anything made there changes its stamp.
        let missing = dir.path().join("missing");
        insert(&cache, dir.path(), &[], vec![listed(&missing, SystemTime::now())]);
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn the_cache_is_bounded() {
        let cache = PlanCache::default();
        for index in 0..MAX_PLANS + 3 {
            insert(&cache, Path::new(&format!("/cwd{index}")), &[], Vec::new());
        }
        assert_eq!(cache.len(), MAX_PLANS);
        assert!(cache.get(Path::new("/cwd0"), &[], &[]).is_none(), "the oldest was evicted");
        assert!(cache.get(Path::new(&format!("/cwd{}", MAX_PLANS + 2)), &[], &[]).is_some());
    }

    #[test]
    fn a_kept_ruleset_serves_its_temp_dir_until_a_root_changes_or_its_uses_run_out() {
        let dir = tempfile::tempdir().unwrap();
        let (temp, root) = (dir.path().join("temp"), dir.path().join("root"));
        std::fs::create_dir(&temp).unwrap();
        std::fs::create_dir(&root).unwrap();
        let planned = plan(&[], &[]);
        let fd = Arc::new(OwnedFd::from(std::fs::File::open(dir.path()).unwrap()));
        planned.keep_ruleset(&temp, Arc::clone(&fd), 300, vec![(root.clone(), identity(&root))]);
        assert!(Arc::ptr_eq(&planned.ruleset(&temp).unwrap(), &fd));
        assert!(planned.ruleset(&dir.path().join("other-temp")).is_none());
        for _ in 2..MIN_RULESET_USES {
            assert!(planned.ruleset(&temp).is_some());
        }
        assert!(planned.ruleset(&temp).is_none(), "used up");
        // A large ruleset serves more commands before the rules they add would matter.
        planned.keep_ruleset(&temp, Arc::clone(&fd), 100_000, vec![(root.clone(), identity(&root))]);
        for _ in 1..100_000 / 16 {
            assert!(planned.ruleset(&temp).is_some());
        }
        assert!(planned.ruleset(&temp).is_none(), "used up");

        planned.keep_ruleset(&temp, Arc::clone(&fd), 300, vec![(root.clone(), identity(&root))]);
        std::fs::rename(&root, dir.path().join("moved")).unwrap();
        std::fs::create_dir(&root).unwrap();
        assert!(planned.ruleset(&temp).is_none(), "a root replaced by another folder");
    }
}
