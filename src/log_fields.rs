//! The fields of text log lines, with control characters escaped.
//!
//! Log fields carry text the daemon does not control: a provider's error body, a script's error message, a
//! plugin's reason. tracing-subscriber's text format writes a `%`-field's value as it is, so a newline in such a
//! text would start what reads as a log line of its own, forged by whoever wrote the text. [`EscapedFields`]
//! formats every field (the message too, and the fields of spans) as the default format does, but writes each
//! control character escaped (`\n`, `\u{1b}`), so one event is always one line. The JSON format escapes by itself.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

/// The text format's field formatter: `message field=value field="str"`, control characters escaped.
#[derive(Clone, Copy, Debug, Default)]
pub struct EscapedFields;

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = Escaping { writer, first: true, result: Ok(()) };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct Escaping<'writer> {
    writer: Writer<'writer>,
    first: bool,
    result: fmt::Result,
}

impl Escaping<'_> {
    fn write(&mut self, field: &Field, value: &str) {
        let name = field.name();
        // Fields that tracing-log adds to bridged `log` records, which the default format leaves out too.
        if self.result.is_err() || name.starts_with("log.") {
            return;
        }
        let separator = if std::mem::take(&mut self.first) { "" } else { " " };
        self.result = write!(self.writer, "{separator}");
        if name != "message" {
            self.result = self.result.and_then(|()| write!(self.writer, "{}=", name.trim_start_matches("r#")));
        }
        for character in value.chars() {
            self.result = self.result.and_then(|()| match character.is_control() {
                true => write!(self.writer, "{}", character.escape_default()),
                false => self.writer.write_char(character),
            });
        }
    }
}

impl Visit for Escaping<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        // As the default format: the message as it is, other strings quoted (Debug escapes them already).
        match field.name() {
            "message" => self.write(field, value),
            _ => self.write(field, &format!("{value:?}")),
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // A `%`-field arrives here as a value whose Debug is its Display: unescaped text.
        self.write(field, &format!("{value:?}"))
    }
}

#[cfg(test)]
mod tests {
    use troupe_test_support::SharedBuffer;

    use super::EscapedFields;

    #[test]
    fn untrusted_text_in_a_field_or_the_message_stays_on_the_events_line() {
        let buffer = SharedBuffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .fmt_fields(EscapedFields)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let forged = "slow down\n2026-01-01T00:00:00Z  INFO troupe: token accepted \u{1b}[2J";
            let span = tracing::info_span!("run", run_id = %"r1\nINFO fake");
            let _entered = span.enter();
            tracing::warn!(kind = "rate_limited", error = %forged, "a model request failed: {}", "x\ny");
        });
        let printed = buffer.text();
        assert_eq!(printed.lines().count(), 1, "{printed}");
        assert!(printed.contains("run{run_id=r1\\nINFO fake}"), "{printed}");
        assert!(printed.contains("a model request failed: x\\ny"), "{printed}");
        assert!(printed.contains("kind=\"rate_limited\""), "{printed}");
        assert!(printed.contains("error=slow down\\n2026-01-01T00:00:00Z  INFO troupe: token accepted \\u{1b}[2J"));
    }
}
