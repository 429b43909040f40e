//! Rendering a skill's body with arguments: `$ARGUMENTS`, positional arguments with quotes, escapes, and the
//! appended arguments for a body without placeholders.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::path::PathBuf;

use troupe_runtime::skills::{Skill, SkillSource, render, split_arguments};

fn skill(body: &str) -> Skill {
    Skill {
        name: "demo".into(),
        description: "Demo.".into(),
        when_to_use: None,
        argument_hint: None,
        user_invocable: true,
        allowed_tools: Vec::new(),
        body: body.into(),
        source: SkillSource::Project,
        location: PathBuf::from("/tmp/demo/SKILL.md"),
    }
}

#[test]
fn arguments_placeholder_takes_the_whole_string() {
    let rendered = render(&skill("Review: $ARGUMENTS.\nAgain: $ARGUMENTS"), "src/lib.rs  \"x y\"");
    assert_eq!(rendered, "Review: src/lib.rs  \"x y\".\nAgain: src/lib.rs  \"x y\"");
}

#[test]
fn arguments_placeholder_needs_a_name_boundary() {
    assert_eq!(render(&skill("$ARGUMENTS_LIST and $ARGUMENTS!"), "a"), "$ARGUMENTS_LIST and a!");
}

#[test]
fn positional_arguments_honour_double_quotes() {
    let rendered = render(&skill("file=$1 message=$2 flag=$3"), "src/main.rs \"fix the bug\" --fast");
    assert_eq!(rendered, "file=src/main.rs message=fix the bug flag=--fast");
}

#[test]
fn missing_positional_arguments_become_empty() {
    assert_eq!(render(&skill("[$1] [$2] [$9]"), "only"), "[only] [] []");
    assert_eq!(render(&skill("[$1]"), ""), "[]");
}

#[test]
fn only_one_digit_is_a_positional_placeholder() {
    assert_eq!(render(&skill("$10 $0"), "a b"), "a0 $0");
}

#[test]
fn an_escaped_dollar_is_literal_and_not_a_placeholder() {
    assert_eq!(
        render(&skill(r"Costs \$5; shell uses \$1 and \$ARGUMENTS; got $1"), "x"),
        "Costs $5; shell uses $1 and $ARGUMENTS; got x"
    );
    assert_eq!(render(&skill(r"C:\path\$"), ""), r"C:\path$");
    assert_eq!(render(&skill(r"a \ b"), ""), r"a \ b");
}

#[test]
fn a_body_without_placeholders_gets_the_arguments_appended() {
    assert_eq!(render(&skill("Do the thing."), "carefully please"), "Do the thing.\n\nARGUMENTS: carefully please");
    // Escaped placeholders do not count as placeholders.
    assert_eq!(render(&skill(r"Price \$1"), "z"), "Price $1\n\nARGUMENTS: z");
    // A lone dollar sign is not a placeholder either.
    assert_eq!(render(&skill("Costs $ 5"), "z"), "Costs $ 5\n\nARGUMENTS: z");
}

#[test]
fn empty_or_blank_arguments_are_not_appended() {
    assert_eq!(render(&skill("Do the thing."), ""), "Do the thing.");
    assert_eq!(render(&skill("Do the thing."), "  \n"), "Do the thing.");
}

#[test]
fn a_placeholder_with_empty_arguments_renders_empty() {
    assert_eq!(render(&skill("Args: <$ARGUMENTS>"), ""), "Args: <>");
}

#[test]
fn arguments_split_like_a_shell() {
    assert_eq!(split_arguments("  a   b\tc\n"), ["a", "b", "c"]);
    assert_eq!(split_arguments(r#""a b" c"#), ["a b", "c"]);
    assert_eq!(split_arguments(r#"--name="a b" x"#), ["--name=a b", "x"]);
    assert_eq!(split_arguments(r#""" x"#), ["", "x"]);
    assert_eq!(split_arguments(r#""say \"hi\" \\ ok""#), [r#"say "hi" \ ok"#]);
    assert_eq!(split_arguments(r#"a\"b"#), [r#"a"b"#]);
    assert_eq!(split_arguments(r#""unclosed rest  "#), ["unclosed rest  "]);
    assert_eq!(split_arguments("fix the user's bug"), ["fix", "the", "user's", "bug"]);
    assert_eq!(split_arguments(r"C:\dir\file"), [r"C:\dir\file"]);
    assert!(split_arguments("").is_empty());
}
