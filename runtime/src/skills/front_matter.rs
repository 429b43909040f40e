//! Parsing one `SKILL.md`: YAML front matter between two `---` lines, then a Markdown body.
//!
//! The keys, all optional except `description`:
//!
//! | key | type | meaning |
//! | --- | --- | --- |
//! | `name` | string | must equal the directory name; defaults to it when absent |
//! | `description` | string | what the skill does; required, not blank |
//! | `when_to_use` / `when-to-use` | string | when the model should use it |
//! | `argument_hint` / `argument-hint` | string | e.g. `<file>` |
//! | `user_invocable` / `user-invocable` | boolean | may a user invoke it directly; default true |
//! | `allowed_tools` / `allowed-tools` | list of strings, or one comma-separated string | tools it needs |
//!
//! The kebab-case spellings are accepted because other agents' skill files use them; a file can then be shared.
//! Any other key is a problem rather than silently ignored, so that a typo (`desciption`) is noticed.
//!
//! YAML errors are reported as "invalid front matter at line L column C: <kind>", with the line counted in the
//! whole file. The parser's own messages may quote the offending value (`invalid type: string "…"`), so they are
//! rebuilt here from their parts: the kind of value found, what was expected, and at most a key name.

use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};

use super::{MAX_SKILL_NAME_CHARS, Skill, SkillSource};

/// The keys [`FrontMatter`] accepts, in their canonical spelling, for the unknown-key message.
const KNOWN_KEYS: &str = "name, description, when_to_use, argument_hint, user_invocable, allowed_tools";

/// The front matter as written. Everything is optional here so that a missing `description` gets our own clear
/// message instead of the parser's, and an empty front matter block is just "no keys".
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FrontMatter {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default, alias = "when-to-use")]
    when_to_use: Option<String>,
    #[serde(default, alias = "argument-hint")]
    argument_hint: Option<String>,
    #[serde(default, alias = "user-invocable")]
    user_invocable: Option<bool>,
    #[serde(default, alias = "allowed-tools", deserialize_with = "tool_list")]
    allowed_tools: Vec<String>,
}

/// Parses the text of a `SKILL.md` found in the directory `directory_name`. The error is a problem reason, safe
/// to show (see the module doc).
pub fn parse_skill_file(
    text: &str,
    directory_name: &str,
    source: SkillSource,
    location: PathBuf,
) -> Result<Skill, String> {
    let (yaml, body) = split_front_matter(text)?;
    let front_matter = parse_yaml(yaml)?;

    let name = front_matter.name.unwrap_or_else(|| directory_name.to_owned());
    if name != directory_name {
        return Err(format!(
            "name `{}` does not match its directory `{}`",
            quote_for_reason(&name),
            quote_for_reason(directory_name)
        ));
    }
    if !is_valid_skill_name(&name) {
        return Err(format!(
            "name `{}` must be 1 to {MAX_SKILL_NAME_CHARS} characters of a-z, 0-9 and -",
            quote_for_reason(&name)
        ));
    }
    let description = match front_matter.description {
        Some(description) if !description.trim().is_empty() => description.trim().to_owned(),
        Some(_) => return Err("front matter key `description` must not be empty".to_owned()),
        None => return Err("front matter is missing the required key `description`".to_owned()),
    };

    Ok(Skill {
        name,
        description,
        when_to_use: non_blank(front_matter.when_to_use),
        argument_hint: non_blank(front_matter.argument_hint),
        user_invocable: front_matter.user_invocable.unwrap_or(true),
        allowed_tools: front_matter.allowed_tools,
        body: body.trim_start_matches(['\r', '\n']).trim_end().to_owned(),
        source,
        location,
    })
}

/// Whether `name` is 1 to 64 characters of `a-z`, `0-9` and `-`.
pub fn is_valid_skill_name(name: &str) -> bool {
    (1..=MAX_SKILL_NAME_CHARS).contains(&name.len())
        && name.bytes().all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-')
}

/// Splits the file into the YAML between the opening and closing `---` lines and the body after them. The YAML
/// starts on the file's second line, which [`parse_yaml`]'s line numbers rely on.
fn split_front_matter(text: &str) -> Result<(&str, &str), String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (first_line, mut rest) = text.split_once('\n').unwrap_or((text, ""));
    if first_line.trim_end() != "---" {
        return Err("does not start with a `---` front matter line".to_owned());
    }
    let yaml_start = rest;
    let mut yaml_len = 0;
    loop {
        if rest.is_empty() {
            return Err("front matter is not closed by a `---` line".to_owned());
        }
        let (line, after) = rest.split_once('\n').unwrap_or((rest, ""));
        if line.trim_end() == "---" {
            return Ok((&yaml_start[..yaml_len], after));
        }
        yaml_len += rest.len() - after.len();
        rest = after;
    }
}

fn parse_yaml(yaml: &str) -> Result<FrontMatter, String> {
    // An empty document (or one of comments only) is an end-of-stream error to the parser; to us it is a front
    // matter without keys, which then fails for its missing description.
    let has_content = yaml.lines().map(str::trim).any(|line| !line.is_empty() && !line.starts_with('#'));
    if !has_content {
        return Ok(FrontMatter::default());
    }
    serde_norway::from_str(yaml).map_err(|error| describe_yaml_error(&error))
}

/// Rebuilds a parser error as "invalid front matter at line L column C: <kind>", with the line counted from the
/// start of the file (the YAML begins on line 2) and without any value from the document.
fn describe_yaml_error(error: &serde_norway::Error) -> String {
    let kind = yaml_error_kind(&error.to_string());
    match error.location() {
        Some(location) => {
            format!("invalid front matter at line {} column {}: {kind}", location.line() + 1, location.column())
        }
        None => format!("invalid front matter: {kind}"),
    }
}

/// The safe part of a parser message. Serde's own messages are recognized by their fixed wording and rebuilt;
/// everything else comes from libyaml or serde_norway, whose messages are fixed strings, and is cut before its
/// location (reported separately).
fn yaml_error_kind(message: &str) -> String {
    // A message about a value may start with the path of the key it belongs to, like `allowed_tools[0]: `.
    // Paths are built from keys this struct accepts (unknown keys fail before their values are read), so a
    // recognized path is kept to say which key is wrong.
    let (key, message) = split_known_key_path(message);
    let for_key = key.map(|key| format!(" for key `{key}`")).unwrap_or_default();

    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = message.strip_prefix(prefix) {
            // `rest` is "<unexpected>, expected <expected>[ at line L column C]". The unexpected part may quote
            // the value; only its leading kind word (string, integer, map, ...) is kept. The expected part is
            // written by this code or serde, so the last ", expected " is the real separator.
            let found = rest.split(['`', '"', ',']).next().unwrap_or("").trim();
            let expected = rest.rsplit_once(", expected ").map(|(_, expected)| strip_location(expected));
            let expected = expected.map(|expected| expected.replace("struct FrontMatter", "a mapping of keys"));
            return match expected {
                Some(expected) => format!("{}{found}{for_key}, expected {expected}", prefix),
                None => format!("{}{found}{for_key}", prefix),
            };
        }
    }
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let key = rest.rsplit_once("`, expected").map_or(rest, |(key, _)| key);
        return format!("unknown key `{}` (known keys: {KNOWN_KEYS})", quote_for_reason(key));
    }
    if let Some(rest) = message.strip_prefix("duplicate field `") {
        let key = rest.split('`').next().unwrap_or("");
        return format!("duplicate key `{}`", quote_for_reason(key));
    }
    format!("{}{for_key}", strip_location(message))
}

/// Splits a leading `key: ` or `key[n]: ` path off a message when `key` is one this module accepts.
fn split_known_key_path(message: &str) -> (Option<&str>, &str) {
    const KEYS: [&str; 10] = [
        "name",
        "description",
        "when_to_use",
        "when-to-use",
        "argument_hint",
        "argument-hint",
        "user_invocable",
        "user-invocable",
        "allowed_tools",
        "allowed-tools",
    ];
    if let Some((path, rest)) = message.split_once(": ") {
        let key = path.split('[').next().unwrap_or(path);
        let index_is_plain =
            path[key.len()..].bytes().all(|byte| byte.is_ascii_digit() || byte == b'[' || byte == b']');
        if KEYS.contains(&key) && index_is_plain {
            return (Some(path), rest);
        }
    }
    (None, message)
}

/// Cuts a message before its first " at line " / " at position ", where the parser appends the location.
fn strip_location(message: &str) -> &str {
    let end = [" at line ", " at position "].iter().filter_map(|marker| message.find(marker)).min();
    end.map_or(message, |end| &message[..end])
}

/// A name or key fit to quote in a reason: control characters escaped, at most 64 characters.
fn quote_for_reason(text: &str) -> String {
    let mut quoted: String = text.chars().take(MAX_SKILL_NAME_CHARS).flat_map(char::escape_debug).collect();
    if text.chars().count() > MAX_SKILL_NAME_CHARS {
        quoted.push('…');
    }
    quoted
}

fn non_blank(value: Option<String>) -> Option<String> {
    value.map(|value| value.trim().to_owned()).filter(|value| !value.is_empty())
}

/// `allowed_tools` as a YAML list of strings, or as one string of comma-separated names (the form other agents
/// write, e.g. `Read, Grep, Bash(git status:*)`). Commas rather than spaces separate, because tool patterns may
/// contain spaces.
fn tool_list<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    struct ToolList;

    impl<'de> Visitor<'de> for ToolList {
        type Value = Vec<String>;

        fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
            formatter.write_str("a list of tool names or a comma-separated string")
        }

        fn visit_str<E: de::Error>(self, value: &str) -> Result<Self::Value, E> {
            Ok(value.split(',').map(str::trim).filter(|tool| !tool.is_empty()).map(str::to_owned).collect())
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut sequence: A) -> Result<Self::Value, A::Error> {
            let mut tools = Vec::new();
            while let Some(tool) = sequence.next_element::<String>()? {
                let tool = tool.trim();
                if !tool.is_empty() {
                    tools.push(tool.to_owned());
                }
            }
            Ok(tools)
        }
    }

    deserializer.deserialize_any(ToolList)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Skill, String> {
        parse_skill_file(text, "demo", SkillSource::Project, PathBuf::from("demo/SKILL.md"))
    }

    #[test]
    fn the_body_follows_the_closing_line() {
        let skill = parse("---\nname: demo\ndescription: Does it.\n---\n\n# Title\nText.\n\n").unwrap();
        assert_eq!(skill.body, "# Title\nText.");
        assert_eq!(skill.description, "Does it.");
        assert!(skill.user_invocable);
    }

    #[test]
    fn crlf_and_a_byte_order_mark_are_accepted() {
        let skill = parse("\u{feff}---\r\ndescription: Does it.\r\n---\r\nBody\r\n").unwrap();
        assert_eq!(skill.name, "demo");
        assert_eq!(skill.body, "Body");
    }

    #[test]
    fn an_unclosed_or_absent_front_matter_is_reported() {
        assert_eq!(parse("# Just Markdown\n").unwrap_err(), "does not start with a `---` front matter line");
        assert_eq!(parse("---\ndescription: x\n").unwrap_err(), "front matter is not closed by a `---` line");
    }

    #[test]
    fn a_wrong_type_names_the_kind_and_the_key_but_not_the_value() {
        let error = parse("---\ndescription: ok\nuser_invocable: \"secret value\"\n---\n").unwrap_err();
        assert!(!error.contains("secret"), "{error}");
        assert!(error.starts_with("invalid front matter at line 3 column "), "{error}");
        assert!(error.contains("for key `user_invocable`"), "{error}");
        assert!(error.contains("expected a boolean"), "{error}");
    }

    #[test]
    fn a_front_matter_that_is_not_a_mapping_is_reported_without_its_value() {
        let error = parse("---\nsecret text\n---\n").unwrap_err();
        assert!(!error.contains("secret"), "{error}");
        assert!(error.contains("expected a mapping of keys"), "{error}");
    }

    #[test]
    fn a_syntax_error_has_a_file_line_and_column() {
        let error = parse("---\ndescription: ok\nname: [unclosed\n---\n").unwrap_err();
        assert!(error.starts_with("invalid front matter at line "), "{error}");
        assert!(!error.contains("unclosed"), "{error}");
    }

    #[test]
    fn allowed_tools_accepts_a_list_or_a_comma_separated_string() {
        let listed = parse("---\ndescription: x\nallowed_tools: [Read, \" Grep \"]\n---\n").unwrap();
        assert_eq!(listed.allowed_tools, ["Read", "Grep"]);
        let written = parse("---\ndescription: x\nallowed-tools: Read, Bash(git status:*)\n---\n").unwrap();
        assert_eq!(written.allowed_tools, ["Read", "Bash(git status:*)"]);
    }

    #[test]
    fn names_are_checked_for_their_characters() {
        let error =
            parse_skill_file("---\ndescription: x\n---\n", "My Skill", SkillSource::User, PathBuf::new()).unwrap_err();
        assert_eq!(error, "name `My Skill` must be 1 to 64 characters of a-z, 0-9 and -");
        assert!(is_valid_skill_name("code-review-2"));
        assert!(!is_valid_skill_name(""));
        assert!(!is_valid_skill_name(&"a".repeat(65)));
    }
}
