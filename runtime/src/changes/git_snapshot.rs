//! Snapshots of a git working tree, taken around shell commands, so that what a run's commands changed can be shown
//! as a diff (`session.diff`'s `shell`).
//!
//! A shell command may change any file; recording each one as the file tools do is not possible. In a git
//! repository, the working tree as a whole can be written down cheaply as a tree object, and two trees compared. The
//! snapshots never touch the user's repository: each repository gets a *shadow* git directory in the data dir
//! (`<data_dir>/shell-snapshots/<key>/`) with its own index, whose work tree is the repository's, and which borrows
//! the repository's objects (`objects/info/alternates`), so that only contents the repository does not hold already
//! are stored. Its index starts as a copy of the repository's, so the first snapshot hashes only what changed.
//!
//! Nothing of the repository runs. `git` reads the repository's files and `.gitignore`s, but its configuration is
//! the shadow's own: no system or global config (so no filter, textconv or fsmonitor program a repository's
//! attributes could name is defined), no hooks. The daemon runs these `git` processes itself (the data dir they
//! write in is closed to tool processes), with a cleared environment.
//!
//! Bounded: a file that is new or changed and larger than [`MAX_FILE_BYTES`] is left out (and named), more than
//! [`MAX_CHANGED_FILES`] new or changed files refuse the snapshot, and the sandbox's denied paths are never read.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

/// A new or changed file larger than this is left out of a snapshot.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// More new or changed files than this (a build's output not ignored, a `node_modules` not ignored) and no snapshot
/// is taken: hashing them before every command would cost more than the diff is worth.
pub const MAX_CHANGED_FILES: usize = 10_000;
/// The most files a diff shows; the rest are counted.
pub const MAX_DIFF_FILES: usize = 300;

/// The git repository holding a session's folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repository {
    /// The work tree's top folder.
    pub toplevel: PathBuf,
    /// The repository's git dir (a linked worktree's own), where its index is.
    git_dir: PathBuf,
    /// The git dir shared by all its worktrees, where its objects are.
    common_dir: PathBuf,
}

/// One snapshot: the work tree as a tree object of the shadow, and what was left out of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The shadow git dir's name (under the snapshots folder).
    pub shadow: String,
    /// The tree object's id.
    pub tree: String,
    /// Paths relative to the top folder left out for their size.
    pub left_out: Vec<String>,
}

/// One file two snapshots differ in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeChange {
    /// Relative to the top folder.
    pub path: String,
    /// The content before and after: `None` where the side has no file.
    pub before: Option<Side>,
    pub after: Option<Side>,
}

/// One side of a [`TreeChange`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Side {
    Content(Vec<u8>),
    /// Not read: over the size shown, a nested repository's commit, or gone from the object store.
    Unread {
        size: u64,
        why: String,
    },
}

/// The shadow git dirs of every repository snapshotted.
pub struct ShadowRepos {
    root: PathBuf,
    /// Where each session folder's repository was found: one `git rev-parse` per folder, not per command. A folder
    /// without one is not remembered (a command may run `git init`).
    located: Mutex<std::collections::HashMap<PathBuf, Repository>>,
    /// One snapshot at a time: git locks a shadow's index, and two sessions in one repository share its shadow.
    lock: Mutex<()>,
}

/// A `git` command that reads no configuration but the shadow's (or the repository's, for `rev-parse`).
fn git(home: &Path) -> Command {
    let mut command = Command::new("git");
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("LC_ALL", "C")
        .stdin(Stdio::null());
    command
}

/// Runs `command`, feeding it `input`; its stdout, or its stderr's first line as the error.
fn output(mut command: Command, input: Option<&[u8]>) -> Result<Vec<u8>, String> {
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    if input.is_some() {
        command.stdin(Stdio::piped());
    }
    let mut child = command.spawn().map_err(|error| format!("git could not be started: {error}"))?;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        // Small (path lists); written before reading, and git reads all of it before it writes much.
        stdin.write_all(input).map_err(|error| format!("git's input: {error}"))?;
    }
    let done = child.wait_with_output().map_err(|error| format!("git: {error}"))?;
    if done.status.success() {
        Ok(done.stdout)
    } else {
        let stderr = String::from_utf8_lossy(&done.stderr);
        Err(stderr.lines().next().unwrap_or("git failed").trim().to_owned())
    }
}

/// Whether a `.git` (a folder, or a worktree's file) is in `cwd` or a folder above it: without one there is no
/// repository, and no `git` process needs to be started to learn it.
fn has_git_above(cwd: &Path) -> bool {
    cwd.ancestors().any(|folder| std::fs::symlink_metadata(folder.join(".git")).is_ok())
}

/// The repository whose work tree holds `cwd`, if any. Blocking.
fn locate(cwd: &Path, home: &Path) -> Option<Repository> {
    if !has_git_above(cwd) {
        return None;
    }
    let mut command = git(home);
    command.current_dir(cwd).args([
        "-c",
        "core.fsmonitor=false",
        "rev-parse",
        "--path-format=absolute",
        "--show-toplevel",
        "--git-dir",
        "--git-common-dir",
    ]);
    let text = String::from_utf8(output(command, None).ok()?).ok()?;
    let mut lines = text.lines().map(PathBuf::from);
    let (toplevel, git_dir, common_dir) = (lines.next()?, lines.next()?, lines.next()?);
    // A work tree that does not hold the cwd is not the session's repository: a `.git` file or config a command
    // wrote (`core.worktree`) could name any folder, and the snapshot would then read a tree the session's denied
    // paths were not looked up around.
    let real_cwd = cwd.canonicalize().ok()?;
    if !real_cwd.starts_with(&toplevel) {
        tracing::warn!(cwd = %cwd.display(), toplevel = %toplevel.display(), "a repository whose work tree does not hold the session's folder is not snapshotted");
        return None;
    }
    Some(Repository { toplevel, git_dir, common_dir })
}

impl ShadowRepos {
    pub fn new(root: PathBuf) -> Self {
        ShadowRepos { root, located: Mutex::default(), lock: Mutex::new(()) }
    }

    /// The repository holding `cwd` ([`locate`]), remembered once found. Blocking.
    pub fn repository_of(&self, cwd: &Path) -> Option<Repository> {
        let mut located = self.located.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(repository) = located.get(cwd) {
            // Still there (not removed or moved since).
            if repository.git_dir.exists() {
                return Some(repository.clone());
            }
        }
        let found = locate(cwd, &self.root)?;
        located.insert(cwd.to_path_buf(), found.clone());
        Some(found)
    }

    /// The folder of a shadow by name.
    fn dir(&self, shadow: &str) -> PathBuf {
        self.root.join(shadow)
    }

    /// A command on the shadow `shadow` whose work tree is `toplevel`.
    fn shadow_git(&self, shadow: &str, toplevel: &Path) -> Command {
        let mut command = git(&self.root);
        command.env("GIT_DIR", self.dir(shadow)).env("GIT_WORK_TREE", toplevel).current_dir(toplevel);
        command
    }

    /// The shadow of `repository`, made on first use. Blocking.
    fn shadow_of(&self, repository: &Repository) -> Result<String, String> {
        let key = Sha256::digest(repository.toplevel.as_os_str().as_bytes());
        let name: String = key.iter().take(12).map(|byte| format!("{byte:02x}")).collect();
        let dir = self.dir(&name);
        if dir.join("config").exists() {
            return Ok(name);
        }
        std::fs::create_dir_all(&self.root).map_err(|error| format!("the snapshots folder: {error}"))?;
        let staging = self.root.join(format!(".{name}.new"));
        let _ = std::fs::remove_dir_all(&staging);
        let mut init = git(&self.root);
        init.arg("init").arg("--quiet").arg("--bare").arg(&staging);
        output(init, None)?;
        let settings = [
            ("core.bare", "false"),
            ("core.autocrlf", "false"),
            ("core.fsmonitor", "false"),
            ("core.untrackedCache", "false"),
            ("core.quotePath", "false"),
            ("gc.auto", "0"),
            ("advice.addEmbeddedRepo", "false"),
            ("advice.addIgnoredFile", "false"),
        ];
        for (key, value) in settings {
            let mut set = git(&self.root);
            set.env("GIT_DIR", &staging).args(["config", key, value]);
            output(set, None)?;
        }
        // The repository's own excludes (`.git/info/exclude`) apply as they do to `git status` there.
        let mut excludes = git(&self.root);
        excludes
            .env("GIT_DIR", &staging)
            .arg("config")
            .arg("core.excludesFile")
            .arg(repository.common_dir.join("info").join("exclude"));
        output(excludes, None)?;
        let mut alternates = repository.common_dir.join("objects").into_os_string();
        alternates.push("\n");
        std::fs::write(staging.join("objects/info/alternates"), alternates.as_bytes())
            .map_err(|error| format!("the snapshot store: {error}"))?;
        std::fs::write(staging.join("repository"), repository.toplevel.as_os_str().as_bytes())
            .map_err(|error| format!("the snapshot store: {error}"))?;
        std::fs::rename(&staging, &dir).map_err(|error| format!("the snapshot store: {error}"))?;
        Ok(name)
    }

    /// The work tree of `repository` as a tree object, leaving out `denied` paths and files over
    /// [`MAX_FILE_BYTES`]. Blocking.
    pub fn snapshot(&self, repository: &Repository, denied: &[PathBuf]) -> Result<Snapshot, String> {
        crate::blocking::assert_may_block();
        let _one = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let shadow = self.shadow_of(repository)?;
        let index = self.dir(&shadow).join("index");
        let seeded = !index.exists() && std::fs::copy(repository.git_dir.join("index"), &index).is_ok();
        let changed = match self.changed_files(&shadow, &repository.toplevel) {
            // An index format the copy cannot be used in (a split index): start from nothing.
            Err(_) if seeded => {
                let _ = std::fs::remove_file(&index);
                self.changed_files(&shadow, &repository.toplevel)?
            }
            other => other?,
        };
        if changed.len() > MAX_CHANGED_FILES {
            return Err(format!(
                "more than {MAX_CHANGED_FILES} files are new or changed and not ignored; add them to .gitignore"
            ));
        }
        let mut left_out = Vec::new();
        for path in changed {
            let size = std::fs::symlink_metadata(repository.toplevel.join(OsStr::from_bytes(&path)))
                .map(|metadata| metadata.len())
                .unwrap_or(0);
            if size > MAX_FILE_BYTES {
                left_out.push(path);
            }
        }
        let mut pathspecs = b":/\0".to_vec();
        let excluded = denied
            .iter()
            .filter_map(|path| path.strip_prefix(&repository.toplevel).ok())
            .map(|relative| relative.as_os_str().as_bytes().to_vec())
            .chain(left_out.iter().cloned());
        for path in excluded {
            if path.is_empty() {
                // The whole work tree is denied: nothing may be read.
                return Err("the repository's folder is denied by the sandbox".to_owned());
            }
            pathspecs.extend_from_slice(b":(exclude,literal,top)");
            pathspecs.extend_from_slice(&path);
            pathspecs.push(0);
        }
        let mut add = self.shadow_git(&shadow, &repository.toplevel);
        add.args(["add", "--all", "--ignore-errors", "--pathspec-from-file=-", "--pathspec-file-nul"]);
        // An unreadable file is skipped (and git says so); the rest is still added.
        if let Err(error) = output(add, Some(&pathspecs)) {
            tracing::debug!(%error, "git add skipped some files of a snapshot");
        }
        let mut write_tree = self.shadow_git(&shadow, &repository.toplevel);
        write_tree.arg("write-tree");
        let tree = String::from_utf8_lossy(&output(write_tree, None)?).trim().to_owned();
        let left_out = left_out.into_iter().map(|path| String::from_utf8_lossy(&path).into_owned()).collect();
        Ok(Snapshot { shadow, tree, left_out })
    }

    /// The files new or modified against the shadow's index and not ignored, relative to the top folder.
    fn changed_files(&self, shadow: &str, toplevel: &Path) -> Result<Vec<Vec<u8>>, String> {
        let mut list = self.shadow_git(shadow, toplevel);
        list.args(["ls-files", "-z", "--others", "--modified", "--exclude-standard", "--deduplicate", ":/"]);
        let listed = output(list, None)?;
        Ok(listed.split(|byte| *byte == 0).filter(|path| !path.is_empty()).map(<[u8]>::to_vec).collect())
    }

    /// What differs between two trees of `shadow`, at most [`MAX_DIFF_FILES`] files (and how many more there
    /// are); contents over `max_bytes` are not read. Blocking.
    pub fn diff(
        &self,
        shadow: &str,
        toplevel: &Path,
        before: &str,
        after: &str,
        max_bytes: u64,
    ) -> Result<(Vec<TreeChange>, usize), String> {
        crate::blocking::assert_may_block();
        if !self.dir(shadow).join("config").exists() {
            return Err("its snapshots are gone from the data dir".to_owned());
        }
        let mut tree_diff = self.shadow_git(shadow, toplevel);
        tree_diff.args(["diff-tree", "-r", "-z", "--no-renames", before, after]);
        let listed = output(tree_diff, None)?;
        let mut fields = listed.split(|byte| *byte == 0).filter(|field| !field.is_empty());
        let mut entries = Vec::new();
        let mut more = 0;
        while let (Some(header), Some(path)) = (fields.next(), fields.next()) {
            // `:<mode before> <mode after> <id before> <id after> <status>`
            let header = String::from_utf8_lossy(header);
            let parts: Vec<&str> = header.trim_start_matches(':').split(' ').collect();
            let [mode_before, mode_after, id_before, id_after, ..] = parts[..] else { continue };
            if entries.len() == MAX_DIFF_FILES {
                more += 1;
                continue;
            }
            let side = |mode: &str, id: &str| (mode != "000000").then(|| (mode.to_owned(), id.to_owned()));
            entries.push((
                String::from_utf8_lossy(path).into_owned(),
                side(mode_before, id_before),
                side(mode_after, id_after),
            ));
        }
        let wanted: Vec<&(String, String)> =
            entries.iter().flat_map(|(_, before, after)| [before, after]).flatten().collect();
        let mut contents = self.read_blobs(shadow, toplevel, &wanted, max_bytes)?;
        let changes = entries
            .into_iter()
            .map(|(path, before, after)| {
                let mut side = |side: Option<(String, String)>| side.map(|(_, id)| take(&mut contents, &id));
                TreeChange { path, before: side(before), after: side(after) }
            })
            .collect();
        Ok((changes, more))
    }

    /// The contents of blobs `(mode, id)`, by id: read whole up to `max_bytes`, else their size.
    fn read_blobs(
        &self,
        shadow: &str,
        toplevel: &Path,
        wanted: &[&(String, String)],
        max_bytes: u64,
    ) -> Result<std::collections::HashMap<String, Side>, String> {
        let mut sides = std::collections::HashMap::new();
        let mut readable = Vec::new();
        let mut sizes = String::new();
        for (mode, id) in wanted {
            if mode == "160000" {
                sides.insert(id.clone(), Side::Unread { size: 0, why: format!("a nested repository at commit {id}") });
            } else {
                sizes.push_str(id);
                sizes.push('\n');
            }
        }
        if sizes.is_empty() {
            return Ok(sides);
        }
        let mut check = self.shadow_git(shadow, toplevel);
        check.args(["cat-file", "--batch-check"]);
        for line in String::from_utf8_lossy(&output(check, Some(sizes.as_bytes()))?).lines() {
            let parts: Vec<&str> = line.split(' ').collect();
            match parts[..] {
                [id, "blob", size] => {
                    let size = size.parse().unwrap_or(u64::MAX);
                    if size > max_bytes {
                        sides.insert(
                            id.to_owned(),
                            Side::Unread { size, why: format!("{size} bytes, over the diff's {max_bytes}") },
                        );
                    } else {
                        readable.push((id.to_owned(), size));
                    }
                }
                [id, "missing"] => {
                    let why = "gone from the object store (the repository was garbage-collected)".to_owned();
                    sides.insert(id.to_owned(), Side::Unread { size: 0, why });
                }
                _ => {}
            }
        }
        if readable.is_empty() {
            return Ok(sides);
        }
        let mut batch = self.shadow_git(shadow, toplevel);
        batch.args(["cat-file", "--batch"]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
        let mut child = batch.spawn().map_err(|error| format!("git could not be started: {error}"))?;
        let request: String = readable.iter().map(|(id, _)| format!("{id}\n")).collect();
        let mut stdin = child.stdin.take().ok_or("git's input")?;
        // Written from another thread: git answers while it reads, and its answers fill the pipe.
        let writer = std::thread::spawn(move || stdin.write_all(request.as_bytes()));
        let mut stdout = child.stdout.take().ok_or("git's output")?;
        let mut all = Vec::new();
        let read = stdout.read_to_end(&mut all);
        let _ = writer.join();
        let _ = child.wait();
        read.map_err(|error| format!("git's output: {error}"))?;
        let mut rest = &all[..];
        for (id, size) in readable {
            // `<id> blob <size>\n<content>\n`
            let Some(newline) = rest.iter().position(|byte| *byte == b'\n') else { break };
            let start = newline + 1;
            let end = start + size as usize;
            if rest.len() < end + 1 {
                break;
            }
            sides.insert(id, Side::Content(rest[start..end].to_vec()));
            rest = &rest[end + 1..];
        }
        Ok(sides)
    }

    /// Removes every shadow whose name is not in `live`; how many went. Blocking.
    pub fn retain(&self, live: &HashSet<String>) -> io::Result<usize> {
        let _one = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(error) => return Err(error),
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !live.contains(&name) {
                std::fs::remove_dir_all(entry.path())?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

/// The side of blob `id` (cloned: one blob may be a side of several changes).
fn take(contents: &mut std::collections::HashMap<String, Side>, id: &str) -> Side {
    contents.get(id).cloned().unwrap_or(Side::Unread { size: 0, why: "it could not be read".to_owned() })
}
