//! Rendering a skill's body with the arguments a user or the model passed to it.
//!
//! Placeholders, as in a shell script or other agents' skill files:
//!
//! - `$ARGUMENTS` becomes the whole argument string, as given. It is a placeholder only when the next character
//!   cannot continue a name, so `$ARGUMENTS_LIST` stays as written.
//! - `$1` to `$9` become the positional arguments (see [`split_arguments`]); a missing one becomes empty. One
//!   digit only, as in a shell: `$10` is `$1` followed by `0`.
//! - `\$` is a literal `$`, so a body can show `\$1` without it being replaced. No other backslash is special.
//!
//! A body without any placeholder still receives non-blank arguments: they are appended as a final
//! `ARGUMENTS: ...` paragraph, because arguments silently dropped would surprise whoever passed them.

use super::Skill;

/// The body of `skill` with `arguments` substituted (see the module doc).
pub fn render(skill: &Skill, arguments: &str) -> String {
    let positional = split_arguments(arguments);
    let mut rendered = String::with_capacity(skill.body.len() + arguments.len());
    let mut substituted = false;
    let mut rest = skill.body.as_str();

    while let Some(index) = rest.find(['\\', '$']) {
        rendered.push_str(&rest[..index]);
        let tail = &rest[index..];
        if let Some(after) = tail.strip_prefix("\\$") {
            rendered.push('$');
            rest = after;
            continue;
        }
        if let Some(after) = tail.strip_prefix('\\') {
            rendered.push('\\');
            rest = after;
            continue;
        }
        // `tail` starts with `$`.
        let after_dollar = &tail[1..];
        if let Some(after) = after_dollar.strip_prefix("ARGUMENTS")
            && !after.starts_with(|next: char| next.is_ascii_alphanumeric() || next == '_')
        {
            rendered.push_str(arguments);
            substituted = true;
            rest = after;
            continue;
        }
        if let Some(digit @ b'1'..=b'9') = after_dollar.bytes().next() {
            let index = usize::from(digit - b'1');
            rendered.push_str(positional.get(index).map_or("", String::as_str));
            substituted = true;
            rest = &after_dollar[1..];
            continue;
        }
        rendered.push('$');
        rest = after_dollar;
    }
    rendered.push_str(rest);

    if !substituted && !arguments.trim().is_empty() {
        rendered.push_str("\n\nARGUMENTS: ");
        rendered.push_str(arguments);
    }
    rendered
}

/// Splits an argument string into positional arguments the way a shell would for the simple cases:
/// whitespace separates; `"..."` keeps whitespace inside one argument (and may be adjacent to other text, as in
/// `--name="a b"`); inside quotes `\"` and `\\` stand for `"` and `\`; outside quotes `\"` is a literal `"`. An
/// unclosed quote runs to the end. Single quotes are ordinary characters, so that an apostrophe in plain prose
/// (`fix the user's bug`) does not swallow the rest of the line.
pub fn split_arguments(arguments: &str) -> Vec<String> {
    let mut split = Vec::new();
    let mut current = String::new();
    let mut in_argument = false;
    let mut in_quotes = false;
    let mut characters = arguments.chars().peekable();

    while let Some(character) = characters.next() {
        if in_quotes {
            match character {
                '"' => in_quotes = false,
                '\\' if matches!(characters.peek(), Some('"' | '\\')) => {
                    current.extend(characters.next());
                }
                _ => current.push(character),
            }
        } else if character.is_whitespace() {
            if in_argument {
                split.push(std::mem::take(&mut current));
                in_argument = false;
            }
        } else {
            in_argument = true;
            match character {
                '"' => in_quotes = true,
                '\\' if characters.peek() == Some(&'"') => {
                    current.extend(characters.next());
                }
                _ => current.push(character),
            }
        }
    }
    if in_argument {
        split.push(current);
    }
    split
}
