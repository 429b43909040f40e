//! How the CLI prints for a person: short ids, relative times, colours only on a terminal (`NO_COLOR` honoured),
//! and untrusted text (model answers, tool output, file contents) cleaned of terminal control sequences.

use std::io::IsTerminal as _;
use std::time::{Duration, SystemTime};

/// The first 8 characters of an id, for a glance. Not unique: UUIDv7 ids created within a minute share them, so
/// where ids must be told apart use [`unique_prefix_len`] and [`id_prefix`].
pub fn short_id(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// How many leading characters tell each of `ids` apart from the others, at least 8 (git's abbreviated hashes,
/// for ids). Ids are UUIDv7, whose first 12 hex digits are the creation time in milliseconds, so two sessions
/// created within the same minute share their first 8 characters: a listing must print longer prefixes then. An
/// id given twice is one id.
pub fn unique_prefix_len<'a>(ids: impl IntoIterator<Item = &'a str>) -> usize {
    let mut ids: Vec<&str> = ids.into_iter().collect();
    ids.sort_unstable();
    ids.dedup();
    let longest_shared = ids
        .windows(2)
        .map(|pair| pair[0].bytes().zip(pair[1].bytes()).take_while(|(a, b)| a == b).count())
        .max()
        .unwrap_or(0);
    (longest_shared + 1).max(8)
}

/// The first `len` characters of `id` (all of it when shorter).
pub fn id_prefix(id: &str, len: usize) -> &str {
    id.get(..len).unwrap_or(id)
}

/// Untrusted text made safe to print: escape sequences, control and bidi characters removed, newlines and tabs
/// kept. A model or a command could otherwise clear the screen, retitle the terminal or hide text.
pub fn clean(untrusted: &str) -> String {
    troupe_protocol::diagnostic::strip_terminal_controls(untrusted)
}

/// `"just now"`, `"5 min ago"`, `"3 h ago"`, `"2 days ago"` for an RFC 3339 time; the time itself when it
/// cannot be read or lies in the future.
pub fn relative_time(rfc3339: &str) -> String {
    let Ok(at) = humantime::parse_rfc3339_weak(rfc3339) else {
        return rfc3339.to_owned();
    };
    match SystemTime::now().duration_since(at) {
        Ok(ago) => describe_ago(ago),
        Err(_) => rfc3339.to_owned(),
    }
}

fn describe_ago(ago: Duration) -> String {
    let seconds = ago.as_secs();
    match seconds {
        0..=44 => "just now".to_owned(),
        45..=3_599 => format!("{} min ago", (seconds + 30) / 60),
        3_600..=86_399 => format!("{} h ago", seconds / 3_600),
        86_400..=172_799 => "yesterday".to_owned(),
        _ => format!("{} days ago", seconds / 86_400),
    }
}

/// Colours for one output stream: on only when it is a terminal and `NO_COLOR` is unset or empty.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    color: bool,
}

impl Style {
    pub fn stdout() -> Self {
        Self { color: colors_wanted(std::io::stdout().is_terminal()) }
    }

    pub fn stderr() -> Self {
        Self { color: colors_wanted(std::io::stderr().is_terminal()) }
    }

    /// Never colours (for tests and `--json`).
    pub fn plain() -> Self {
        Self { color: false }
    }

    pub fn is_colored(self) -> bool {
        self.color
    }

    pub fn bold(self, text: &str) -> String {
        self.paint("1", text)
    }

    pub fn dim(self, text: &str) -> String {
        self.paint("2", text)
    }

    pub fn red(self, text: &str) -> String {
        self.paint("31", text)
    }

    pub fn green(self, text: &str) -> String {
        self.paint("32", text)
    }

    pub fn yellow(self, text: &str) -> String {
        self.paint("33", text)
    }

    pub fn cyan(self, text: &str) -> String {
        self.paint("36", text)
    }

    fn paint(self, sgr: &str, text: &str) -> String {
        if self.color { format!("\u{1b}[{sgr}m{text}\u{1b}[0m") } else { text.to_owned() }
    }
}

fn colors_wanted(is_terminal: bool) -> bool {
    is_terminal && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_ids_are_cut_where_they_differ() {
        let ids = ["01937a1b-0001-7aaa-8000-000000000001", "01937a1b-0002-7bbb-8000-000000000002", "0200"];
        assert_eq!(unique_prefix_len(ids), 13);
        assert_eq!(id_prefix(ids[0], 13), "01937a1b-0001");
        assert_eq!(unique_prefix_len(["01937a1b-x", "01947a1b-x"]), 8);
        assert_eq!(unique_prefix_len([]), 8);
        // The same id twice (a tree's pending approvals, and its root among the sessions) is one id.
        assert_eq!(unique_prefix_len(["01937a1b-0001", "01937a1b-0001", "01947a1b-x"]), 8);
    }

    #[test]
    fn ages_read_like_a_person_says_them() {
        assert_eq!(describe_ago(Duration::from_secs(3)), "just now");
        assert_eq!(describe_ago(Duration::from_secs(5 * 60)), "5 min ago");
        assert_eq!(describe_ago(Duration::from_secs(3 * 3600 + 5)), "3 h ago");
        assert_eq!(describe_ago(Duration::from_secs(30 * 3600)), "yesterday");
        assert_eq!(describe_ago(Duration::from_secs(5 * 86_400)), "5 days ago");
    }

    #[test]
    fn unreadable_times_are_printed_as_they_are() {
        assert_eq!(relative_time("not a time"), "not a time");
        let now = humantime::format_rfc3339_millis(SystemTime::now() - Duration::from_secs(600)).to_string();
        assert_eq!(relative_time(&now), "10 min ago");
    }

    #[test]
    fn plain_style_adds_nothing_and_clean_strips_escapes() {
        assert_eq!(Style::plain().red("x"), "x");
        assert_eq!(clean("a\u{1b}]0;pwned\u{7}b\u{1b}[2Jc"), "abc");
        assert_eq!(short_id("0123456789abcdef"), "01234567");
        assert_eq!(short_id("abc"), "abc");
    }
}
