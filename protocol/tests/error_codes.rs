//! Every typed error code and every origin is documented: `docs/protocol.md`'s "Error codes" table names each
//! variant of `ErrorCode` and no code that is not one, and its origin table each `Origin` word and no other.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::collections::BTreeSet;

use troupe_protocol::error_code::ErrorCode;

/// The codes of the "Error codes" table: the first cell of each row, in backquotes.
fn documented_codes() -> BTreeSet<String> {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/protocol.md")).unwrap();
    let section = docs.split("### Error codes").nth(1).expect("an \"Error codes\" section in docs/protocol.md");
    let table = section.split("\n#").next().unwrap_or(section);
    table
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|cell| cell.split('`').next())
        .filter(|code| *code != "data.code")
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_error_code_is_documented_and_every_documented_code_exists() {
    let documented = documented_codes();
    let known: BTreeSet<String> = ErrorCode::ALL.iter().map(|code| code.as_str().to_owned()).collect();
    let missing: Vec<_> = known.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&known).collect();
    assert!(missing.is_empty(), "codes missing from docs/protocol.md's \"Error codes\" table: {missing:?}");
    assert!(unknown.is_empty(), "codes in docs/protocol.md's table that ErrorCode does not have: {unknown:?}");
}

/// The words of the origin table (after "`origin` says who produced the event"): the first cell of each row.
fn documented_origins() -> BTreeSet<String> {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/protocol.md")).unwrap();
    let section =
        docs.split("`origin` says who produced the event").nth(1).expect("the origin table in docs/protocol.md");
    let table = section.split("\n\n").nth(1).unwrap_or(section);
    table
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|cell| cell.split('`').next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_origin_is_documented_and_every_documented_origin_exists() {
    use troupe_protocol::types::origin::{EngineOrigin, Origin};
    let documented = documented_origins();
    let mut known: BTreeSet<String> = EngineOrigin::ALL.iter().map(|engine| engine.as_str().to_owned()).collect();
    known.insert(Origin::User.word().into_owned());
    known.insert("plugin:<name>".to_owned());
    let missing: Vec<_> = known.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&known).collect();
    assert!(missing.is_empty(), "origins missing from docs/protocol.md's origin table: {missing:?}");
    assert!(unknown.is_empty(), "origins in docs/protocol.md's table that Origin does not have: {unknown:?}");
}
