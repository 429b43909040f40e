//! Option normalisation for the classifier's allowlist: every argument is read the way the program's option
//! parser reads it, so that a flag cannot hide inside a combined cluster (`-ao` is `-a -o`), an attached value
//! (`-n5`), a long option's `=value` (`--output=x`) or after the end of options (`--`).

/// One argument of a command after quote removal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Argument {
    pub text: String,
    /// An unquoted `*`, `?` or `[`: the shell may replace the word by matching file names.
    pub glob: bool,
}

/// How a program reads a value attached to a short option (`-n5`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Attached {
    /// `getopt`: the rest of the cluster is the value, whatever it is.
    AnyText,
    /// Parsers that may read each letter of a cluster as an option (`tree`, `git`): only digits are accepted as
    /// an attached value, so the two readings agree.
    DigitsOnly,
}

/// The options a program may be given: anything else makes the command not low risk.
#[derive(Clone, Copy, Debug)]
pub(super) struct OptionSpec {
    /// Short options without a value, as one string of letters.
    pub short_flags: &'static str,
    /// Short options that take a value, attached (`-n5`) or as the next word (`-n 5`).
    pub short_valued: &'static str,
    /// Short options whose value is optional and only ever attached (`git status -uno`, `git diff -M50%`).
    pub short_optional: &'static str,
    /// Long options without a value (`--all`).
    pub long_flags: &'static [&'static str],
    /// Long options that take a value, after `=` or as the next word.
    pub long_valued: &'static [&'static str],
    /// Long options whose value is optional and only given after `=` (`--color`, `--color=never`).
    pub long_optional: &'static [&'static str],
    /// Whether `-5` (a count: `head -5`, `git log -3`) is accepted.
    pub numeric: bool,
    pub attached: Attached,
}

impl OptionSpec {
    pub const EMPTY: OptionSpec = OptionSpec {
        short_flags: "",
        short_valued: "",
        short_optional: "",
        long_flags: &[],
        long_valued: &[],
        long_optional: &[],
        numeric: false,
        attached: Attached::AnyText,
    };
}

/// An argument as the program reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Parsed<'a> {
    /// `-x`, `-x VALUE`, `--name` or `--name=VALUE`: `name` keeps its dashes (`-n`, `--lines`).
    Option { name: String, value: Option<&'a str> },
    /// A non-option argument; `after_double_dash` when it follows `--`.
    Operand { argument: &'a Argument, after_double_dash: bool },
}

/// Reads `arguments` with `spec` (options may follow operands, as with GNU `getopt_long`), or `None` when an
/// option is unknown, a value is missing or globbed, or a glob could expand into an option.
pub(super) fn parse_options<'a>(spec: &OptionSpec, arguments: &'a [Argument]) -> Option<Vec<Parsed<'a>>> {
    let mut parsed = Vec::new();
    let mut index = 0;
    let mut options_ended = false;
    // The next word, as an option's value: never a glob, which the shell may replace or multiply.
    let next_value = |index: usize| arguments.get(index).filter(|argument| !argument.glob).map(|a| a.text.as_str());
    while let Some(argument) = arguments.get(index) {
        index += 1;
        let text = argument.text.as_str();
        if options_ended || text == "-" || !text.starts_with('-') {
            // A glob that starts with a pattern character may expand to a file name starting with `-`, which the
            // program would read as an option (a file named `--pre=x` in `rg y *`).
            if argument.glob && !options_ended && text.starts_with(['*', '?', '[']) {
                return None;
            }
            parsed.push(Parsed::Operand { argument, after_double_dash: options_ended });
            continue;
        }
        if argument.glob {
            return None;
        }
        if text == "--" {
            options_ended = true;
            continue;
        }
        if let Some(long) = text.strip_prefix("--") {
            let (name, inline_value) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (long, None),
            };
            let value = if spec.long_flags.contains(&name) && inline_value.is_none() {
                None
            } else if spec.long_optional.contains(&name) {
                inline_value
            } else if spec.long_valued.contains(&name) {
                match inline_value {
                    Some(value) => Some(value),
                    None => {
                        index += 1;
                        Some(next_value(index - 1)?)
                    }
                }
            } else {
                return None;
            };
            parsed.push(Parsed::Option { name: format!("--{name}"), value });
            continue;
        }
        let cluster = text.get(1..).unwrap_or_default();
        if spec.numeric && cluster.chars().all(|c| c.is_ascii_digit()) {
            parsed.push(Parsed::Option { name: "-N".to_owned(), value: Some(cluster) });
            continue;
        }
        for (position, letter) in cluster.char_indices() {
            let rest = cluster.get(position + letter.len_utf8()..).unwrap_or_default();
            let name = format!("-{letter}");
            if spec.short_flags.contains(letter) {
                parsed.push(Parsed::Option { name, value: None });
            } else if spec.short_optional.contains(letter) || spec.short_valued.contains(letter) {
                let value = if !rest.is_empty() {
                    let digits = rest.chars().all(|c| c.is_ascii_digit() || c == '%');
                    let optional_word = spec.short_optional.contains(letter) && rest.chars().all(char::is_alphabetic);
                    if spec.attached == Attached::DigitsOnly && !digits && !optional_word {
                        return None;
                    }
                    Some(rest)
                } else if spec.short_valued.contains(letter) {
                    index += 1;
                    Some(next_value(index - 1)?)
                } else {
                    None
                };
                parsed.push(Parsed::Option { name, value });
                break;
            } else {
                return None;
            }
        }
    }
    Some(parsed)
}

/// The options among `parsed`.
pub(super) fn options<'p, 'a>(parsed: &'p [Parsed<'a>]) -> impl Iterator<Item = (&'p str, Option<&'a str>)> {
    parsed.iter().filter_map(|item| match item {
        Parsed::Option { name, value } => Some((name.as_str(), *value)),
        Parsed::Operand { .. } => None,
    })
}

/// The operands among `parsed`.
pub(super) fn operands<'p, 'a>(parsed: &'p [Parsed<'a>]) -> impl Iterator<Item = &'a Argument> + 'p {
    parsed.iter().filter_map(|item| match item {
        Parsed::Operand { argument, .. } => Some(*argument),
        Parsed::Option { .. } => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arguments(words: &[&str]) -> Vec<Argument> {
        words.iter().map(|word| Argument { text: (*word).to_owned(), glob: word.contains('*') }).collect()
    }

    const SPEC: OptionSpec = OptionSpec {
        short_flags: "ab",
        short_valued: "n",
        short_optional: "u",
        long_flags: &["all"],
        long_valued: &["lines"],
        long_optional: &["color"],
        numeric: true,
        attached: Attached::AnyText,
    };

    fn names(words: &[&str]) -> Option<Vec<String>> {
        let arguments = arguments(words);
        let parsed = parse_options(&SPEC, &arguments)?;
        Some(
            parsed
                .iter()
                .map(|item| match item {
                    Parsed::Option { name, value } => format!("{name}={}", value.unwrap_or("")),
                    Parsed::Operand { argument, after_double_dash } => {
                        format!("{}{}", argument.text, after_double_dash)
                    }
                })
                .collect(),
        )
    }

    #[test]
    fn clusters_attached_values_and_double_dash_are_normalised() {
        assert_eq!(names(&["-ab", "x"]).unwrap(), ["-a=", "-b=", "xfalse"]);
        assert_eq!(names(&["-an5", "-n", "3"]).unwrap(), ["-a=", "-n=5", "-n=3"]);
        assert_eq!(names(&["--lines=4", "--lines", "5", "--color"]).unwrap(), ["--lines=4", "--lines=5", "--color="]);
        assert_eq!(names(&["-uno", "-7"]).unwrap(), ["-u=no", "-N=7"]);
        assert_eq!(names(&["--", "-o", "--all"]).unwrap(), ["-otrue", "--alltrue"]);
        for refused in [&["-ao"][..], &["--output=x"], &["--al"], &["--all=x"], &["-n"], &["*.rs"], &["-n", "*"]] {
            assert_eq!(names(refused), None, "{refused:?}");
        }
        assert!(names(&["--", "*.rs"]).is_some());
        assert!(names(&["src/*.rs"]).is_some());
    }

    #[test]
    fn digits_only_refuses_letters_after_a_valued_short_option() {
        let spec = OptionSpec { attached: Attached::DigitsOnly, ..SPEC };
        let words = arguments(&["-n5"]);
        assert!(parse_options(&spec, &words).is_some());
        let words = arguments(&["-no"]);
        assert!(parse_options(&spec, &words).is_none());
    }
}
