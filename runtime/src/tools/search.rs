//! `search`: a regular expression over the text files under a directory, honouring `.gitignore`.
//!
//! The walk never follows symlinks, so it cannot wander out of the directory it was confined to; binary files
//! (a NUL byte near the start) and very large files are skipped, and results stop at the configured cap. Every
//! file is opened beneath the search root's verified handle, never by its path (see [`super::dir_handle`]).
//!
//! The sandbox's denied paths (the daemon's data directory, `~/.ssh` and the like) are skipped while walking, by
//! path and by identity, hidden or not and whatever `.gitignore` says, and every file is checked again once
//! opened, so a hard link to a denied file is never read. A search rooted in a denied path is `denied`.
//!
//! The walker reads each folder's ignore files (`.gitignore`, `.ignore`, `.git/info/exclude`) itself, by path and
//! with a blocking open: one that is a FIFO (or leads to one, or to a device) would stop the search in `open`
//! for good. So a folder with such an ignore file is skipped, and said so in the result; when the search root or
//! a folder above it has one, no ignore file is read at all. (Should one be swapped for a FIFO between that check
//! and the walker's open, the call still ends when its run is cancelled: the run stops waiting for it.)

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use ignore::WalkBuilder;
use ignore::overrides::OverrideBuilder;
use regex::Regex;
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::run::PersistedToolResult;

use super::dir_handle::Anchor;
use super::error::ToolError;
use super::file_tool::{execute_here, on_blocking_pool, path_permission};
use super::fs_access::{open_search_root, open_walked_file, resolve_for_execute};
use super::paths::ResolvedPath;
use super::results::{self, parse_arguments};
use super::{InPlaceTool, PermissionRequest, Tool, ToolContext, ToolDefinition};
use crate::sandbox::{ProtectedPaths, Sandbox};

const NAME: &str = "search";

/// Longest line text shown per match, in characters.
const MAX_LINE_CHARS: usize = 300;
/// Files larger than this are skipped: they are data, not source, and would cost the whole budget.
const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;
/// How much of a file's start is checked for a NUL byte, as git and ripgrep do, to call it binary.
const BINARY_SNIFF_BYTES: usize = 8 * 1024;
/// The files the walker reads in a folder for its ignore rules, relative to the folder.
const IGNORE_FILES: [&str; 3] = [".gitignore", ".ignore", ".git/info/exclude"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Arguments {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    glob: Option<String>,
}

impl Arguments {
    fn path(&self) -> &str {
        self.path.as_deref().unwrap_or(".")
    }
}

pub struct SearchTool;

impl Tool for SearchTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: NAME.to_owned(),
            description: "Search file contents with a regular expression (Rust regex syntax), skipping files \
                          ignored by .gitignore and binary files. Returns 'path:line: text' per matching line."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Regular expression, matched against each line."},
                    "path": {"type": "string", "description": "Directory or file to search. Default: the working directory."},
                    "glob": {"type": "string", "description": "Only search files matching this glob, e.g. '*.rs'."}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        }
    }

    fn permission(&self, arguments: &serde_json::Value, cwd: &Path) -> Result<PermissionRequest, ToolError> {
        let arguments: Arguments = parse_arguments(NAME, arguments)?;
        path_permission(cwd, arguments.path(), PermissionAction::Read, |path| {
            format!("search for /{}/ in {path}", arguments.pattern)
        })
    }

    fn in_place(&self) -> Option<&dyn InPlaceTool> {
        Some(self)
    }

    fn execute(&self, arguments: serde_json::Value, context: ToolContext) -> BoxFuture<'static, PersistedToolResult> {
        on_blocking_pool(move || work(arguments, context))
    }
}

impl InPlaceTool for SearchTool {
    fn execute_in_place(&self, arguments: serde_json::Value, context: ToolContext) -> PersistedToolResult {
        work(arguments, context)
    }
}

/// The whole call, on a thread that may block. No up-front cancellation check: the walk watches the token before
/// every file.
fn work(arguments: serde_json::Value, context: ToolContext) -> PersistedToolResult {
    execute_here(NAME, arguments, context, None, |arguments: Arguments, context| {
        let limit = context.limits.max_search_results;
        let approved = context.approved_request.as_ref();
        search(&context.cwd, &arguments, limit, &context.cancel, approved, &context.sandbox)
    })
}

fn search(
    cwd: &Path,
    arguments: &Arguments,
    limit: usize,
    cancel: &CancellationToken,
    approved: Option<&PermissionRequest>,
    sandbox: &Arc<Sandbox>,
) -> PersistedToolResult {
    let regex = match Regex::new(&arguments.pattern) {
        Ok(regex) => regex,
        Err(error) => return results::error(format!("invalid regex: {error}")),
    };
    let root = match resolve_for_execute(cwd, arguments.path(), approved) {
        Ok(root) => root,
        Err(refusal) => return refusal,
    };
    let protected = sandbox.protected();
    // The walker lists folders by path; every file it finds is opened beneath this handle, so a folder swapped
    // for a symlink during the walk leads the walker's listing astray at worst, never a read.
    let anchor = match open_search_root(&root, arguments.path(), protected) {
        Ok(anchor) => anchor,
        Err(refusal) => return refusal,
    };
    let walker_sandbox = Arc::clone(sandbox);
    let skipped: Arc<Mutex<Vec<PathBuf>>> = Arc::default();
    let walker_skipped = Arc::clone(&skipped);
    let mut walk = WalkBuilder::new(&root.path);
    walk.follow_links(false)
        // .gitignore applies whether or not the directory is a git checkout: the model expects ignored build
        // output to stay out of results either way.
        .require_git(false)
        // Hidden files such as .github/ are often what is searched for; only .git itself is noise.
        .hidden(false)
        .filter_entry(move |entry| {
            if entry.file_name() == ".git" || is_protected(walker_sandbox.protected(), entry) {
                return false;
            }
            // Checked before the walker enters the folder, which is when it reads the folder's ignore files.
            if entry.file_type().is_some_and(|kind| kind.is_dir())
                && let Some(bad) = unreadable_ignore_file(entry.path())
            {
                if let Ok(mut skipped) = walker_skipped.lock() {
                    skipped.push(bad);
                }
                return false;
            }
            true
        });
    // The search root's ignore files, and those of the folders above it, are read before any entry is filtered.
    let above = root.path.ancestors().find_map(|folder| match folder.is_dir() {
        true => unreadable_ignore_file(folder),
        false => None,
    });
    if let Some(bad) = &above {
        walk.git_ignore(false).ignore(false).git_exclude(false).parents(false);
        tracing::warn!(path = %bad.display(), "search: an ignore file is not a regular file; no ignore file is read");
    }
    if let Some(glob) = &arguments.glob {
        let mut overrides = OverrideBuilder::new(&root.path);
        if let Err(error) = overrides.add(glob) {
            return results::error(format!("invalid glob {glob:?}: {error}"));
        }
        match overrides.build() {
            Ok(overrides) => {
                walk.overrides(overrides);
            }
            Err(error) => return results::error(format!("invalid glob {glob:?}: {error}")),
        }
    }

    let mut matches = Vec::new();
    let mut truncated = false;
    'files: for entry in walk.build() {
        if cancel.is_cancelled() {
            return results::cancelled("search cancelled");
        }
        // Unreadable entries (permissions, vanished files) are skipped, as ripgrep does, rather than failing
        // the whole search.
        let Ok(entry) = entry else { continue };
        if !entry.file_type().is_some_and(|kind| kind.is_file()) {
            continue;
        }
        let Some(text) = read_text(&anchor, entry.path(), protected) else {
            continue;
        };
        let shown_path = display_path(&root, entry.path());
        for (index, line) in text.lines().enumerate() {
            if !regex.is_match(line) {
                continue;
            }
            if matches.len() == limit {
                truncated = true;
                break 'files;
            }
            matches.push(format!("{shown_path}:{}: {}", index + 1, shorten_line(line)));
        }
    }

    let mut notes: Vec<String> = Vec::new();
    if let Some(bad) = above {
        notes.push(format!(
            "[no .gitignore was applied: {} is not a regular file, and reading it would block]",
            display_path(&root, &bad)
        ));
    }
    for bad in skipped.lock().map(|skipped| skipped.clone()).unwrap_or_default() {
        let folder = bad.parent().and_then(Path::parent).filter(|_| bad.ends_with(".git/info/exclude"));
        let folder = folder.or_else(|| bad.parent()).unwrap_or(&bad);
        notes.push(format!(
            "[skipped {}: its {} is not a regular file, and reading it would block]",
            display_path(&root, folder),
            bad.strip_prefix(folder).unwrap_or(&bad).display()
        ));
    }
    let mut output = match matches.is_empty() {
        true => format!("no matches for /{}/ in {}", arguments.pattern, root.display_for_model()),
        false => matches.join("\n"),
    };
    if truncated {
        output.push_str(&format!("\n[stopped after {limit} matches; narrow the pattern, path or glob to see more]"));
    }
    for note in notes {
        output.push('\n');
        output.push_str(&note);
    }
    results::ok(output)
}

/// The first of `folder`'s ignore files that exists but is neither a regular file nor a folder (judged by what a
/// link leads to, as the walker's open follows it): a FIFO, whose open blocks, or a device, which may never end.
/// `stat` itself never blocks.
fn unreadable_ignore_file(folder: &Path) -> Option<PathBuf> {
    IGNORE_FILES.iter().map(|name| folder.join(name)).find(|path| match std::fs::metadata(path) {
        // A folder by that name the walker's read fails on at once.
        Ok(metadata) => !metadata.is_file() && !metadata.is_dir(),
        // Missing, or unreadable: the walker's open fails at once.
        Err(_) => false,
    })
}

/// Whether the walker must skip `entry` (and, for a folder, everything beneath it): it is a denied path or lies
/// beneath one. An entry whose metadata cannot be read is judged by its path alone; its files are checked again
/// when opened.
fn is_protected(protected: &ProtectedPaths, entry: &ignore::DirEntry) -> bool {
    if protected.is_empty() {
        return false;
    }
    match entry.metadata() {
        Ok(metadata) => protected.is_protected_entry(entry.path(), &metadata),
        Err(_) => protected.paths().iter().any(|path| entry.path().starts_with(path)),
    }
}

/// A file's text, or `None` when it is binary, too large, unreadable or refused by the sandbox.
fn read_text(anchor: &Anchor, path: &Path, protected: &ProtectedPaths) -> Option<String> {
    let (file, metadata) = open_walked_file(anchor, path, protected)?;
    if metadata.len() > MAX_FILE_BYTES {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES).read_to_end(&mut bytes).ok()?;
    let sniff = &bytes[..bytes.len().min(BINARY_SNIFF_BYTES)];
    if sniff.contains(&0) {
        return None;
    }
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// A match's path relative to the cwd, so the model can pass it straight to `read_file` or `edit_file`.
fn display_path(root: &ResolvedPath, path: &Path) -> String {
    match path.strip_prefix(&root.cwd) {
        Ok(relative) if relative.as_os_str().is_empty() => ".".to_owned(),
        Ok(relative) => relative.to_string_lossy().into_owned(),
        Err(_) => path.to_string_lossy().into_owned(),
    }
}

fn shorten_line(line: &str) -> String {
    let line = line.trim_end_matches('\r');
    match line.char_indices().nth(MAX_LINE_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    }
}
