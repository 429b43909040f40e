//! Architecture rules, tested (after rust-analyzer's `tidy` tests): the top-level modules of `gateway/src`,
//! `actors/src` and the protocol crate's `client/` must not import each other in a circle.
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
//! `gateway/src` has no cycle and may get none. `actors/src` and `protocol/src/client` still have some while they
//! are being untangled: the edges that lie on a cycle today are listed in `known_cycle_edges.txt`, a ratchet
//! (`ratchet.rs`): an edge on a cycle that is not listed fails, and a listed edge that no longer lies on a cycle
//! fails too, asking to be deleted from the list, so the list only shrinks.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

mod graph;
mod lexer;
mod ratchet;
mod references;
mod skips;

use std::path::Path;

use references::{SourceFile, references};

/// A folder whose top-level modules are checked.
struct Scope {
    /// The folder, from the workspace root; also the scope's name in the list and the failure messages.
    folder: &'static str,
    /// The folder's module path in its crate.
    module: &'static [&'static str],
    /// The name of the unit of the folder's `lib.rs` or `mod.rs`.
    root_unit: &'static str,
    /// Whether the scope may have cycles listed in `known_cycle_edges.txt`.
    ratcheted: bool,
}

const SCOPES: [Scope; 3] = [
    Scope { folder: "gateway/src", module: &[], root_unit: "crate", ratcheted: false },
    Scope { folder: "actors/src", module: &[], root_unit: "crate", ratcheted: true },
    Scope { folder: "protocol/src/client", module: &["client"], root_unit: "client", ratcheted: true },
];

#[test]
fn top_level_modules_do_not_import_each_other_in_a_circle() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let list = std::fs::read_to_string(workspace.join(ratchet::LIST)).expect("the list of known cycle edges");
    let listed = ratchet::parse_list(&list).unwrap_or_else(|problem| panic!("{problem}"));
    let mut problems = Vec::new();
    for scope_name in listed.keys() {
        match SCOPES.iter().find(|scope| scope.folder == scope_name) {
            None => problems.push(format!("{}: lists edges of `{scope_name}`, which is no scope", ratchet::LIST)),
            Some(scope) if !scope.ratcheted => problems.push(format!(
                "{}: `{scope_name}` has no cycles and must keep none: fix the cycle instead of listing it",
                ratchet::LIST
            )),
            Some(_) => {}
        }
    }
    for scope in &SCOPES {
        let files = source_files(&workspace.join(scope.folder));
        assert!(files.len() > 1, "{}: no source files found", scope.folder);
        let found = references(scope.module, scope.root_unit, &files);
        let known = listed.get(scope.folder).cloned().unwrap_or_default();
        problems.extend(ratchet::check(scope.folder, &found, &known));
    }
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n\n"));
}

/// The `.rs` files under `folder`, with paths relative to it, in a stable order.
fn source_files(folder: &Path) -> Vec<SourceFile> {
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
