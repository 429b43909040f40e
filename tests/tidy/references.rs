//! Which top-level module of a scope each file belongs to, and which other top-level modules its code names.
//!
//! A scope is a folder of a crate (`gateway/src`, or `protocol/src/client`) whose module is `prefix`. Its units
//! are the scope's root (the items of its `lib.rs` or `mod.rs`) and each child module of it (a file `x.rs`, a folder
//! `x/`, or both). A reference is any path that resolves into the scope: `use` trees (`use crate::{a, b::{c, d}}`,
//! `use super::x::*`, a bare `use x::y` naming a child module) and inline paths in code (`crate::a::f()`,
//! `super::super::b::T`, `$crate::c` in macros). `super::X` naming an item of the root counts as the root. Paths in
//! comments, doc comments and literals are not seen (the lexer drops them).

use std::collections::{BTreeSet, HashMap};

use crate::lexer::{Kind, Token, tokenize};

/// A source file of a scope: its path relative to the scope's folder, with `/` separators.
pub struct SourceFile {
    pub path: String,
    pub text: String,
}

/// One path in `file` at `line` by which unit `from` names unit `to`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Reference {
    pub from: String,
    pub to: String,
    pub file: String,
    pub line: usize,
}

/// The module references between the units of the scope whose module path is `prefix` and whose root unit is
/// called `root_unit`, found in `files` (the scope's whole folder).
pub fn references(prefix: &[&str], root_unit: &str, files: &[SourceFile]) -> Vec<Reference> {
    let prefix: Vec<String> = prefix.iter().map(|segment| (*segment).to_owned()).collect();
    let tokens: Vec<Vec<Token>> = files.iter().map(|file| tokenize(&file.text)).collect();
    let mut module_of: HashMap<&str, Vec<String>> =
        files.iter().map(|file| (file.path.as_str(), module_of_path(&prefix, &file.path))).collect();
    for (file, tokens) in files.iter().zip(&tokens) {
        for (target, name) in path_attributes(tokens) {
            let target = join_relative(&file.path, &target);
            if let Some(target_file) = files.iter().find(|candidate| candidate.path == target) {
                let mut module = module_of[file.path.as_str()].clone();
                module.push(name);
                module_of.insert(target_file.path.as_str(), module);
            }
        }
    }
    let modules: BTreeSet<Vec<String>> =
        module_of.values().flat_map(|module| (0..=module.len()).map(|length| module[..length].to_vec())).collect();
    let scope = Scope { prefix: &prefix, root_unit, modules: &modules };
    let mut found = BTreeSet::new();
    for (file, tokens) in files.iter().zip(&tokens) {
        let module = &module_of[file.path.as_str()];
        let from = scope.unit_of(module).unwrap_or_else(|| root_unit.to_owned());
        for (path, line) in paths_in(module, tokens, &modules) {
            if let Some(to) = scope.unit_of(&path)
                && to != from
            {
                found.insert(Reference { from: from.clone(), to, file: file.path.clone(), line });
            }
        }
    }
    found.into_iter().collect()
}

struct Scope<'a> {
    prefix: &'a [String],
    root_unit: &'a str,
    modules: &'a BTreeSet<Vec<String>>,
}

impl Scope<'_> {
    /// The unit an absolute path (module path plus item names) lies in, if it lies in the scope.
    fn unit_of(&self, path: &[String]) -> Option<String> {
        let rest = path.strip_prefix(self.prefix)?;
        let Some(first) = rest.first() else {
            return Some(self.root_unit.to_owned());
        };
        let mut child = self.prefix.to_vec();
        child.push(first.clone());
        Some(if self.modules.contains(&child) { first.clone() } else { self.root_unit.to_owned() })
    }
}

/// The module path of a file from its place in the folder: `lib.rs` and `mod.rs` are their folder's module.
fn module_of_path(prefix: &[String], path: &str) -> Vec<String> {
    let mut module = prefix.to_vec();
    let without_extension = path.strip_suffix(".rs").unwrap_or(path);
    let segments: Vec<&str> = without_extension.split('/').collect();
    for (index, segment) in segments.iter().enumerate() {
        let last = index + 1 == segments.len();
        if !(last && matches!(*segment, "lib" | "mod" | "main")) {
            module.push((*segment).to_owned());
        }
    }
    module
}

/// `relative` (from a `#[path]` attribute) joined to the folder of `file`.
fn join_relative(file: &str, relative: &str) -> String {
    let mut segments: Vec<&str> = file.split('/').collect();
    segments.pop();
    for segment in relative.split('/') {
        match segment {
            "." => {}
            ".." => {
                segments.pop();
            }
            other => segments.push(other),
        }
    }
    segments.join("/")
}

/// `#[path = "file.rs"] mod name;` declarations: (file, name).
fn path_attributes(tokens: &[Token]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (index, window) in tokens.windows(6).enumerate() {
        let [hash, open, path, equals, literal, close] = window else { continue };
        if hash.kind == Kind::Hash
            && open.kind == Kind::OpenBracket
            && path.is_ident("path")
            && equals.kind == Kind::Equals
            && close.kind == Kind::CloseBracket
            && let Kind::Str(target) = &literal.kind
        {
            let declaration = tokens[index + 6..].iter().skip_while(|token| !token.is_ident("mod")).nth(1);
            if let Some(Token { kind: Kind::Ident(name), .. }) = declaration {
                found.push((target.clone(), name.clone()));
            }
        }
    }
    found
}

/// Every path of the file's tokens that resolves to an absolute path, with its line. `module` is the file's module;
/// inline `mod x { … }` blocks are followed so that `super` inside them resolves right.
fn paths_in(module: &[String], tokens: &[Token], modules: &BTreeSet<Vec<String>>) -> Vec<(Vec<String>, usize)> {
    let mut found = Vec::new();
    let mut current = module.to_vec();
    // (depth of the block's contents, whether the block is an inline module)
    let mut blocks: Vec<bool> = Vec::new();
    let mut index = 0;
    while index < tokens.len() {
        let token = &tokens[index];
        match &token.kind {
            Kind::OpenBrace => {
                let inline_module =
                    index >= 2 && tokens[index - 2].is_ident("mod") && matches!(tokens[index - 1].kind, Kind::Ident(_));
                if inline_module && let Kind::Ident(name) = &tokens[index - 1].kind {
                    current.push(name.clone());
                }
                blocks.push(inline_module);
                index += 1;
            }
            Kind::CloseBrace => {
                if blocks.pop() == Some(true) {
                    current.pop();
                }
                index += 1;
            }
            Kind::Ident(word) if word == "use" => {
                let mut trees = Vec::new();
                index += 1;
                parse_use_tree(tokens, &mut index, Vec::new(), &mut trees);
                for (segments, line) in trees {
                    if let Some(path) = resolve(&current, &segments, modules) {
                        found.push((path, line));
                    }
                }
            }
            Kind::Ident(_) | Kind::Dollar if starts_path(tokens, index) => {
                let mut segments = Vec::new();
                let mut line = token.line;
                if token.kind == Kind::Dollar {
                    index += 1;
                }
                while let Some(Token { kind: Kind::Ident(segment), line: segment_line }) = tokens.get(index) {
                    segments.push(segment.clone());
                    line = *segment_line;
                    if tokens.get(index + 1).map(|next| &next.kind) == Some(&Kind::PathSep) {
                        index += 2;
                    } else {
                        index += 1;
                        break;
                    }
                }
                if let Some(path) = resolve(&current, &segments, modules) {
                    found.push((path, line));
                }
            }
            _ => index += 1,
        }
    }
    found
}

/// Whether a path of at least two segments starts at `index`: not the tail of a longer path, and not the
/// `crate` of a visibility `pub(in crate::x)`, which names an ancestor rather than using it.
fn starts_path(tokens: &[Token], index: usize) -> bool {
    let (first, separator_at) = match tokens[index].kind {
        Kind::Dollar => (index + 1, index + 2),
        _ => (index, index + 1),
    };
    let previous = index.checked_sub(1).map(|at| &tokens[at]);
    let continues_a_path = previous.is_some_and(|token| token.kind == Kind::PathSep || token.kind == Kind::Dollar);
    let visibility = index >= 3
        && tokens[index - 1].is_ident("in")
        && tokens[index - 2].kind == Kind::Other('(')
        && tokens[index - 3].is_ident("pub");
    matches!(tokens.get(first).map(|token| &token.kind), Some(Kind::Ident(_)))
        && tokens.get(separator_at).map(|token| &token.kind) == Some(&Kind::PathSep)
        && !continues_a_path
        && !visibility
}

/// Parses one use tree at `index` (`a::b`, `a::{b, c::*}`, `a as b`, `*`), appending each leaf's segments (after
/// `prefix`) and the line of its last segment; stops after the tree, leaving `index` on the `,`, `}` or `;` after
/// it (a `;` ending the `use` is consumed).
fn parse_use_tree(tokens: &[Token], index: &mut usize, prefix: Vec<String>, out: &mut Vec<(Vec<String>, usize)>) {
    let mut segments = prefix;
    let mut line = tokens.get(*index).map_or(0, |token| token.line);
    if tokens.get(*index).map(|token| &token.kind) == Some(&Kind::PathSep) {
        // `use ::external::x`: a crate from outside, never this one.
        segments.push("::".to_owned());
        *index += 1;
    }
    while let Some(token) = tokens.get(*index) {
        match &token.kind {
            Kind::Ident(word) if word == "as" => *index += 2,
            Kind::Ident(word) => {
                if word != "self" || segments.is_empty() {
                    segments.push(word.clone());
                }
                line = token.line;
                *index += 1;
            }
            Kind::PathSep => *index += 1,
            Kind::Star => {
                line = token.line;
                *index += 1;
            }
            Kind::OpenBrace => {
                *index += 1;
                loop {
                    match tokens.get(*index).map(|token| &token.kind) {
                        None => return,
                        Some(Kind::CloseBrace) => {
                            *index += 1;
                            break;
                        }
                        Some(Kind::Comma) => *index += 1,
                        Some(_) => parse_use_tree(tokens, index, segments.clone(), out),
                    }
                }
                if tokens.get(*index).map(|token| &token.kind) == Some(&Kind::Semicolon) {
                    *index += 1;
                }
                return;
            }
            Kind::Semicolon => {
                *index += 1;
                break;
            }
            _ => break,
        }
    }
    out.push((segments, line));
}

/// The absolute path (from the crate root) of `segments` written in module `current`, or `None` for a path that
/// starts outside the crate (another crate, a local name, a type's associated item).
fn resolve(current: &[String], segments: &[String], modules: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
    let (first, rest) = segments.split_first()?;
    let mut base = match first.as_str() {
        "crate" => Vec::new(),
        "self" => current.to_vec(),
        "super" => {
            let mut base = current.to_vec();
            base.pop()?;
            base
        }
        name => {
            let mut child = current.to_vec();
            child.push(name.to_owned());
            if !modules.contains(&child) {
                return None;
            }
            child
        }
    };
    let mut rest = rest.iter().peekable();
    if first == "super" {
        while rest.next_if(|segment| *segment == "super").is_some() {
            base.pop()?;
        }
    }
    base.extend(rest.filter(|segment| *segment != "self").cloned());
    Some(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, text: &str) -> SourceFile {
        SourceFile { path: path.to_owned(), text: text.to_owned() }
    }

    /// (from, to, file:line) of each reference, for assertions that read like the failure report.
    fn edges(prefix: &[&str], root: &str, files: &[SourceFile]) -> Vec<String> {
        references(prefix, root, files)
            .into_iter()
            .map(|found| format!("{} -> {} {}:{}", found.from, found.to, found.file, found.line))
            .collect()
    }

    #[test]
    fn use_trees_with_nested_braces_name_each_module() {
        let files = [
            file("lib.rs", "mod a; mod b; mod c; mod d; pub struct Root;"),
            file("a.rs", "use crate::{\n    b::{self, X},\n    c::{y::{Z, W}, *},\n    Root,\n};\nuse std::fmt;"),
            file("b.rs", ""),
            file("c/mod.rs", "mod y;"),
            file("c/y.rs", "use super::super::d::Thing as Other;"),
            file("d.rs", ""),
        ];
        assert_eq!(
            edges(&[], "crate", &files),
            ["a -> b a.rs:2", "a -> c a.rs:3", "a -> crate a.rs:4", "c -> d c/y.rs:1"]
        );
    }

    #[test]
    fn inline_paths_count_but_comments_strings_and_visibility_do_not() {
        let files = [
            file("lib.rs", "mod a; mod b; mod c; mod d;"),
            file(
                "a.rs",
                "//! [`B`](crate::b::B)\n\
                 /// crate::c::f()\n\
                 pub(in crate::d) fn f() -> Option<crate::b::B> {\n\
                     let text = \"crate::c::g()\";\n\
                     crate::c::g();\n\
                     macro_rules! m { () => { $crate::d::h() } }\n\
                 }",
            ),
            file("b.rs", ""),
            file("c.rs", ""),
            file("d.rs", ""),
        ];
        assert_eq!(edges(&[], "crate", &files), ["a -> b a.rs:3", "a -> c a.rs:5", "a -> d a.rs:6"]);
    }

    #[test]
    fn super_inside_an_inline_module_starts_from_that_module() {
        let files = [
            file("lib.rs", "mod a; mod b;"),
            file("a.rs", "fn f() {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n    use super::super::b::G;\n}"),
            file("b.rs", "mod inner { fn g() { super::super::a::f() } }"),
        ];
        assert_eq!(edges(&[], "crate", &files), ["a -> b a.rs:5", "b -> a b.rs:1"]);
    }

    #[test]
    fn a_folder_scope_counts_items_of_its_mod_rs_as_its_root() {
        let files = [
            file(
                "mod.rs",
                "mod calls;\nmod task;\nuse task::Command;\npub struct ClientError;\nfn f() { calls::go() }",
            ),
            file("calls.rs", "use super::{ClientError, task::Pending};\nuse crate::jsonrpc::Id;"),
            file("task.rs", "use super::calls::go;"),
        ];
        assert_eq!(
            edges(&["client"], "client", &files),
            [
                "calls -> client calls.rs:1",
                "calls -> task calls.rs:1",
                "client -> calls mod.rs:5",
                "client -> task mod.rs:3",
                "task -> calls task.rs:1",
            ]
        );
    }

    #[test]
    fn a_path_attribute_places_its_file_where_it_is_declared() {
        let files = [
            file("lib.rs", "mod a; mod b;"),
            file("a/mod.rs", "mod lane;"),
            file("a/lane.rs", "#[cfg(test)]\n#[path = \"lane_tests.rs\"]\nmod tests;"),
            // Were this file `a::lane_tests`, `super::super` would be the crate root and `b` a module of it.
            file("a/lane_tests.rs", "use super::super::b::Helper;"),
            file("b.rs", ""),
        ];
        assert_eq!(edges(&[], "crate", &files), Vec::<String>::new());
    }
}
