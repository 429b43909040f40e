//! The actors' refusals become JSON-RPC errors in one place, `actors/src/error/rpc.rs` (`From<EngineError> for
//! RpcError`), so a refusal reads the same whichever method or plugin request met it. This fails on any other
//! `RpcError::<constructor>` in `actors/src` (comments and strings aside); `RpcError::from` is the conversion itself.

use std::path::Path;

use crate::lexer::{Kind, tokenize};
use crate::source_files;

/// The one file that builds `RpcError`s.
const CONVERSION: &str = "error/rpc.rs";

#[test]
fn actors_build_rpc_errors_only_in_the_one_conversion() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("actors/src");
    let mut found = Vec::new();
    for file in source_files(&folder) {
        if file.path == CONVERSION {
            continue;
        }
        found.extend(
            constructors(&file.text)
                .into_iter()
                .map(|(line, name)| format!("actors/src/{}:{line}: RpcError::{name}", file.path)),
        );
    }
    assert!(
        found.is_empty(),
        "build the error as an EngineError (a variant in actors/src/error.rs, its code in {CONVERSION}) instead of:\n{}\n",
        found.join("\n")
    );
}

/// `(line, constructor)` of each `RpcError::<name>` other than `from` in `source`.
fn constructors(source: &str) -> Vec<(usize, String)> {
    let tokens = tokenize(source);
    let mut found = Vec::new();
    for window in tokens.windows(3) {
        if window[0].is_ident("RpcError")
            && window[1].kind == Kind::PathSep
            && let Kind::Ident(name) = &window[2].kind
            && name != "from"
        {
            found.push((window[2].line, name.clone()));
        }
    }
    found
}

#[test]
fn constructors_are_found_and_the_conversion_is_not() {
    let source = "// RpcError::internal in a comment\nfn f() { RpcError::from(e); }\nfn g() { RpcError::invalid_params(\"RpcError::x\") }";
    assert_eq!(constructors(source), [(3, "invalid_params".to_owned())]);
}
