//! A file change (`FileDiff`) as the CLI prints it under an approval or a transcript line: its counts, then the
//! unified diff, every line shown visibly (controls as escapes, as an approval's command is) and cut at limits.

use troupe_protocol::diagnostic::{ShowLimits, show_visibly};
use troupe_protocol::types::changes::FileDiff;
use troupe_runtime::changes::diff::stats;

use crate::style::Style;

/// The lines an approval's diff shows unless `--full`: a screenful.
pub const APPROVAL_DIFF: ShowLimits = ShowLimits { max_lines: 40, max_bytes: 4096 };

/// `diff` under an approval: `change: +1 -2`, then its unified text indented by `indent` and cut at `limits`,
/// with `whole` (how to see it all) when cut. Ends with a newline.
pub fn diff_block(diff: &FileDiff, indent: &str, limits: ShowLimits, whole: &str, style: Style) -> String {
    let mut text = format!("{indent}change: {}", stats(diff));
    if let Some(note) = &diff.note {
        text.push_str(&format!(" ({})", troupe_protocol::diagnostic::visible_line(note, 200)));
    }
    text.push('\n');
    let Some(unified) = &diff.unified else {
        return text;
    };
    let shown = show_visibly(unified, limits);
    for line in &shown.lines {
        let painted = if line.starts_with("+++") || line.starts_with("---") {
            style.bold(line)
        } else if line.starts_with('+') {
            style.green(line)
        } else if line.starts_with('-') {
            style.red(line)
        } else if line.starts_with("@@") {
            style.cyan(line)
        } else {
            line.clone()
        };
        text.push_str(indent);
        text.push_str(&painted);
        text.push('\n');
    }
    if let Some(left_out) = shown.left_out {
        text.push_str(&format!("{indent}… {} of the diff not shown; {whole}\n", left_out.describe()));
    } else if diff.truncated {
        text.push_str(&format!("{indent}… the diff was cut by the daemon\n"));
    }
    text
}

#[cfg(test)]
mod tests {
    use troupe_protocol::types::changes::FileChangeKind;

    use super::*;

    #[test]
    fn a_diff_shows_its_counts_then_its_lines_with_controls_escaped() {
        let diff = FileDiff {
            path: "/w/a".into(),
            kind: FileChangeKind::Modified,
            lines_added: 1,
            lines_removed: 2,
            bytes_before: 8,
            bytes_after: 6,
            binary: false,
            unified: Some("--- a/w/a\n+++ b/w/a\n@@ -1,2 +1 @@\n-one\n-two\n+th\u{1b}[2Jree\n".into()),
            truncated: false,
            note: None,
        };
        let text = diff_block(&diff, "  ", APPROVAL_DIFF, "", Style::plain());
        assert!(text.starts_with("  change: +1 -2\n  --- a/w/a\n"), "{text}");
        assert!(text.contains("  -two\n") && !text.contains('\u{1b}'), "{text}");
        let cut = diff_block(&diff, "", ShowLimits { max_lines: 2, max_bytes: 1000 }, "see --full", Style::plain());
        assert!(cut.ends_with("of the diff not shown; see --full\n"), "{cut}");
    }
}
