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
//! `gateway/src` and `actors/src` have no cycle and may get none (the actors reach the actors above them through
//! `actors/src/ports`). `protocol/src/client` still has some while it is being untangled: the edges that lie on a cycle today are listed in `known_cycle_edges.txt`, a ratchet
//! (`ratchet.rs`): an edge on a cycle that is not listed fails, and a listed edge that no longer lies on a cycle
//! fails too, asking to be deleted from the list, so the list only shrinks.
//!
//! No `.rs` file under `actors/src` may have more than [`MAX_ACTOR_FILE_LINES`] (400) lines: a longer one holds more
//! than one concern and is split (`actor_files_stay_short`, which lists each file over the bound with its count).

mod graph;
mod lexer;
mod ratchet;
mod references;

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
    Scope { folder: "actors/src", module: &[], root_unit: "crate", ratcheted: false },
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

/// The most lines an `.rs` file under `actors/src` may have.
const MAX_ACTOR_FILE_LINES: usize = 400;

/// Files under `actors/src` still over [`MAX_ACTOR_FILE_LINES`] while they are being split, each with the lines it
/// may not exceed meanwhile. A listed file that grows fails, and one that is within the bound fails too, asking to be
/// deleted from the list, so the list only shrinks.
const OVER_THE_BOUND_FOR_NOW: &[(&str, usize)] = &[("run_actor/delegate.rs", 422)];

#[test]
fn actor_files_stay_short() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("actors/src");
    let mut problems = Vec::new();
    for file in source_files(&folder) {
        let lines = file.text.lines().count();
        let listed = OVER_THE_BOUND_FOR_NOW.iter().find(|(path, _)| *path == file.path).map(|(_, most)| *most);
        match listed {
            Some(_) if lines <= MAX_ACTOR_FILE_LINES => problems.push(format!(
                "actors/src/{}: {lines} lines, within the bound now: delete it from OVER_THE_BOUND_FOR_NOW",
                file.path
            )),
            Some(most) if lines > most => problems.push(format!(
                "actors/src/{}: {lines} lines, more than the {most} it is allowed while it waits to be split",
                file.path
            )),
            Some(_) => {}
            None if lines > MAX_ACTOR_FILE_LINES => problems.push(format!("actors/src/{}: {lines} lines", file.path)),
            None => {}
        }
    }
    for (path, _) in OVER_THE_BOUND_FOR_NOW {
        if !folder.join(path).is_file() {
            problems.push(format!("actors/src/{path}: listed in OVER_THE_BOUND_FOR_NOW but gone: delete it there"));
        }
    }
    assert!(
        problems.is_empty(),
        "files under actors/src may have at most {MAX_ACTOR_FILE_LINES} lines; split these by concern:\n{}\n",
        problems.join("\n")
    );
}
