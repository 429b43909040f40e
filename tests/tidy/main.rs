//! Architecture rules, tested (after rust-analyzer's `tidy` tests): the top-level modules of `gateway/src`,
//! `actors/src`, `cluster/src` and the protocol crate's `client/` must not import each other in a circle.
//!
//! Run it with `cargo test --test tidy`; `cargo test --workspace` runs it too. It only reads the source (in well
//! under a second), though cargo builds the package's binary first, as for any of its integration tests.
//!
//! Each file of a scope belongs to one unit: the scope's root (`lib.rs`, or `client/mod.rs`, with the items they
//! define) or the top-level module it lies in (`src/console/book.rs` is `console`). Every path in code that names
//! another unit is an edge: `use` trees, nested braces included, and inline paths such as `crate::a::f()`; comments,
//! doc comments and string literals are stripped first (`lexer.rs`, `references.rs`). The graph's strongly
//! connected components (Tarjan, `graph.rs`) are its cycles. The test fails with each cycle, its edges and the
//! file:line of every path that makes them.
//!
//! None of the three scopes has a cycle, and none may get one: the actors reach the actors above them through
//! `actors/src/ports`, and the client's parts are owned by its connection task. A cycle fails the test with its
//! modules and the file:line of every path that makes its edges (`cycles.rs`).
//!
//! No `.rs` file under `actors/src` may have more than [`MAX_ACTOR_FILE_LINES`] (400) lines: a longer one holds more
//! than one concern and is split (`actor_files_stay_short`, which lists each file over the bound with its count).
//!
//! In `actors/src`, only `error/rpc.rs` builds `RpcError`s (`rpc_errors.rs`).
//!
//! `ARCHITECTURE.md` has no paragraph over 150 words and names no file that does not exist
//! (`architecture_doc.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

mod architecture_doc;
mod cycles;
mod graph;
mod lexer;
mod references;
mod rpc_errors;
mod skips;

use std::path::Path;

use references::{SourceFile, references};

/// A folder whose top-level modules are checked.
struct Scope {
    /// The folder, from the workspace root; also the scope's name in the failure messages.
    folder: &'static str,
    /// The folder's module path in its crate.
    module: &'static [&'static str],
    /// The name of the unit of the folder's `lib.rs` or `mod.rs`.
    root_unit: &'static str,
}

const SCOPES: [Scope; 4] = [
    Scope { folder: "gateway/src", module: &[], root_unit: "crate" },
    Scope { folder: "actors/src", module: &[], root_unit: "crate" },
    Scope { folder: "cluster/src", module: &[], root_unit: "crate" },
    Scope { folder: "protocol/src/client", module: &["client"], root_unit: "client" },
];

#[test]
fn top_level_modules_do_not_import_each_other_in_a_circle() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut problems = Vec::new();
    for scope in &SCOPES {
        let files = source_files(&workspace.join(scope.folder));
        assert!(files.len() > 1, "{}: no source files found", scope.folder);
        let found = references(scope.module, scope.root_unit, &files);
        problems.extend(cycles::check(scope.folder, &found));
    }
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n\n"));
}

/// The `.rs` files under `folder`, with paths relative to it, in a stable order.
pub(crate) fn source_files(folder: &Path) -> Vec<SourceFile> {
    let mut files = Vec::new();
    let mut folders = vec![folder.to_path_buf()];
    while let Some(current) = folders.pop() {
        let entries = std::fs::read_dir(&current).unwrap_or_else(|error| panic!("{}: {error}", current.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                let relative = path.strip_prefix(folder).expect("a path under the folder");
                let relative = relative.components().map(|part| part.as_os_str().to_string_lossy()).collect::<Vec<_>>();
                let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
                files.push(SourceFile { path: relative.join("/"), text });
            }
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files
}

/// The most lines an `.rs` file under `actors/src` may have.
const MAX_ACTOR_FILE_LINES: usize = 400;

#[test]
fn actor_files_stay_short() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("actors/src");
    let mut problems = Vec::new();
    for file in source_files(&folder) {
        let lines = file.text.lines().count();
        if lines > MAX_ACTOR_FILE_LINES {
            problems.push(format!("actors/src/{}: {lines} lines", file.path));
        }
    }
    assert!(
        problems.is_empty(),
        "files under actors/src may have at most {MAX_ACTOR_FILE_LINES} lines; split these by concern:\n{}\n",
        problems.join("\n")
    );
}
