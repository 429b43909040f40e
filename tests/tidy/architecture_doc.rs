//! `ARCHITECTURE.md` stays short and points at files that exist.
//!
//! - **Short paragraphs.** No paragraph has more than [`MAX_PARAGRAPH_WORDS`] words. A paragraph is a run of
//!   non-blank lines; each list item and each table row counts as a paragraph of its own, and headings and fenced
//!   code blocks are not counted.
//! - **No dead paths.** Every path in backquotes that looks like a repository file (a folder, a `/`, a name
//!   ending in `.rs`, `.md`, `.toml`, `.mjs` or `.js`) or a folder (ending in `/`) must exist. It is looked up from
//!   the workspace root, then in the crate the current section is about: a heading that names a top-level folder
//!   in backquotes (`` ### `actors/` ``) makes `actors/src/` and `actors/` the places a short path such as
//!   `session_actor/commit.rs` is looked up, until the next heading of the same or a higher level names another.
//!   Paths with placeholders (`<id>`), globs or a leading `../` (outside the repository) are not checked.

use std::path::Path;

/// The most words a paragraph of `ARCHITECTURE.md` may have.
pub const MAX_PARAGRAPH_WORDS: usize = 150;

const EXTENSIONS: [&str; 5] = [".rs", ".md", ".toml", ".mjs", ".js"];

/// A paragraph: its first line (1-based) and its number of words.
struct Paragraph {
    line: usize,
    words: usize,
}

/// The paragraphs of a markdown text, as the module doc defines them.
fn paragraphs(text: &str) -> Vec<Paragraph> {
    let mut found = Vec::new();
    let mut current: Option<Paragraph> = None;
    let mut in_code = false;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            in_code = !in_code;
            found.extend(current.take());
            continue;
        }
        if in_code || trimmed.starts_with('#') || trimmed.is_empty() {
            found.extend(current.take());
            continue;
        }
        let starts_item = trimmed.starts_with("- ")
            || trimmed.starts_with("* ")
            || trimmed.starts_with('|')
            || trimmed
                .split_once(". ")
                .is_some_and(|(number, _)| !number.is_empty() && number.chars().all(|c| c.is_ascii_digit()));
        if starts_item {
            found.extend(current.take());
        }
        let words = trimmed.split_whitespace().filter(|word| *word != "|" && *word != "-").count();
        match current.as_mut() {
            Some(paragraph) => paragraph.words += words,
            None => current = Some(Paragraph { line: index + 1, words }),
        }
    }
    found.extend(current);
    found
}

/// The spans in backquotes of a line.
fn code_spans(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

/// Whether a span in backquotes names a repository path the test checks.
fn looks_like_path(span: &str) -> bool {
    let plain = !span.is_empty()
        && !span.starts_with("../")
        && !span.starts_with('/')
        && span.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-'));
    plain && span.contains('/') && (span.ends_with('/') || EXTENSIONS.iter().any(|extension| span.ends_with(extension)))
}

/// Each heading's level and the top-level folders it names in backquotes.
fn heading_crate(line: &str, workspace: &Path) -> Option<(usize, Option<String>)> {
    let level = line.chars().take_while(|c| *c == '#').count();
    if level == 0 || !line[level..].starts_with(' ') {
        return None;
    }
    let folder = code_spans(line).into_iter().find_map(|span| {
        let name = span.strip_suffix('/')?;
        (!name.contains('/') && workspace.join(name).is_dir()).then(|| name.to_owned())
    });
    Some((level, folder))
}

/// Every dead path of `text`, as `line N: path`.
fn dead_paths(text: &str, workspace: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    // The folder of the section being read and the heading level that named it.
    let mut section: Option<(usize, String)> = None;
    let mut in_code = false;
    for (index, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        if let Some((level, folder)) = heading_crate(line, workspace) {
            match folder {
                Some(folder) => section = Some((level, folder)),
                None if section.as_ref().is_some_and(|(named_at, _)| level <= *named_at) => section = None,
                None => {}
            }
        }
        for span in code_spans(line).into_iter().filter(|span| looks_like_path(span)) {
            let mut places = vec![workspace.to_path_buf()];
            if let Some((_, folder)) = &section {
                places.push(workspace.join(folder).join("src"));
                places.push(workspace.join(folder));
            }
            if !places.iter().any(|place| place.join(span.trim_end_matches('/')).exists()) {
                let base = section.as_ref().map(|(_, folder)| format!(" (nor under {folder}/)")).unwrap_or_default();
                problems.push(format!("line {}: `{span}` does not exist{base}", index + 1));
            }
        }
    }
    problems
}

#[test]
fn architecture_doc_has_short_paragraphs_and_no_dead_paths() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(workspace.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md is readable");
    let mut problems: Vec<String> = paragraphs(&text)
        .into_iter()
        .filter(|paragraph| paragraph.words > MAX_PARAGRAPH_WORDS)
        .map(|paragraph| {
            format!("line {}: a paragraph of {} words (at most {MAX_PARAGRAPH_WORDS})", paragraph.line, paragraph.words)
        })
        .collect();
    problems.extend(dead_paths(&text, workspace));
    assert!(problems.is_empty(), "ARCHITECTURE.md:\n{}\n", problems.join("\n"));
}

#[test]
fn a_long_paragraph_and_a_dead_path_are_found() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let long = format!("intro\n\n{}\n\n- item one\n- {}\n", "word ".repeat(151), "word ".repeat(20));
    let counted: Vec<usize> = paragraphs(&long).iter().map(|paragraph| paragraph.words).collect();
    assert_eq!(counted, vec![1, 151, 2, 20]);
    let doc = "## `actors/` (crate)\n\n`session_actor/commit.rs`, `actors/src/nowhere.rs`, `<data_dir>/x.toml`\n\n\
               ## `runtime/`\n\n`session_actor/commit.rs` and `policy/`\n";
    assert_eq!(
        dead_paths(doc, workspace),
        vec![
            "line 3: `actors/src/nowhere.rs` does not exist (nor under actors/)".to_owned(),
            "line 7: `session_actor/commit.rs` does not exist (nor under runtime/)".to_owned(),
        ]
    );
}
