//! How a batch of events is laid out in JetStream messages, and how a stored message reads back as events.
//!
//! One message holds consecutive events: the payload is each event's stored JSON text followed by `\n` (a stored
//! event is one line), and the headers name the first and last event sequence it holds, so that a reader finds an
//! event without parsing every message before it.

use async_nats::HeaderMap;
use bytes::Bytes;
use serde::Deserialize;
use troupe_protocol::types::events::EventJson;
use troupe_runtime::event_log::LogEntry;

use crate::error::ClusterError;

/// The sequence of the first event in a message.
pub(super) const FIRST_SEQ: &str = "Troupe-First-Seq";
/// The sequence of the last event in a message.
pub(super) const LAST_SEQ: &str = "Troupe-Last-Seq";
/// JetStream's de-duplication id (the `async_nats::header::NATS_MESSAGE_ID` name).
pub(super) const MSG_ID: &str = "Nats-Msg-Id";
/// Bytes of a message's size kept for its headers: NATS's `max_payload` bounds headers and payload together. The
/// headers troupe sends (two sequences, the message id with a session id of at most 128 characters, the expected
/// subject sequence) take under 400.
const HEADER_ROOM: usize = 1024;

/// The consecutive events of one message, ready to publish.
#[derive(Debug)]
pub(super) struct Outgoing {
    pub first_seq: u64,
    pub last_seq: u64,
    pub payload: Bytes,
}

/// What a stored message says about itself, before its payload is split into events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct MessageSpan {
    /// The message's sequence in the stream.
    pub stream_seq: u64,
    pub first_seq: u64,
    pub last_seq: u64,
    /// Bytes of payload (event texts and their newlines).
    pub len: usize,
}

/// The largest payload one message may carry on a server whose `max_payload` is `max_payload`.
pub(super) fn payload_budget(max_payload: usize) -> usize {
    max_payload.saturating_sub(HEADER_ROOM)
}

/// Checks that `batch` continues a log whose last event is `last_seq` (consecutive sequences from `last_seq + 1`,
/// each text one line) and cuts it into messages of at most `budget` bytes of payload.
pub(super) fn pack(
    session_id: &str,
    last_seq: u64,
    batch: &[LogEntry],
    budget: usize,
    max_payload: usize,
) -> Result<Vec<Outgoing>, ClusterError> {
    let mut messages = Vec::new();
    let mut payload: Vec<u8> = Vec::new();
    let mut first_seq = last_seq + 1;
    for (index, entry) in batch.iter().enumerate() {
        let expected = last_seq + 1 + index as u64;
        if entry.seq != expected {
            return Err(ClusterError::JetStream {
                what: "append to a session's log",
                detail: format!(
                    "session {session_id}: the batch's event #{index} has seq {}, but the log continues at seq \
                     {expected} (events must be consecutive, the first one seq 1)",
                    entry.seq
                ),
            });
        }
        let text = entry.json.as_str();
        if text.contains('\n') {
            return Err(ClusterError::JetStream {
                what: "append to a session's log",
                detail: format!("session {session_id}: event {} is not one line of JSON", entry.seq),
            });
        }
        if text.len() + 1 > budget {
            return Err(ClusterError::JetStream {
                what: "append to a session's log",
                detail: format!(
                    "session {session_id}: event {} is {} bytes, more than the {budget} bytes one NATS message can \
                     carry (the server's max_payload is {max_payload} bytes; raise `max_payload` in the \
                     nats-server configuration to store larger events)",
                    entry.seq,
                    text.len()
                ),
            });
        }
        if !payload.is_empty() && payload.len() + text.len() + 1 > budget {
            messages.push(Outgoing { first_seq, last_seq: entry.seq - 1, payload: Bytes::from(payload) });
            payload = Vec::new();
            first_seq = entry.seq;
        }
        payload.extend_from_slice(text.as_bytes());
        payload.push(b'\n');
    }
    if !payload.is_empty() {
        messages.push(Outgoing { first_seq, last_seq: last_seq + batch.len() as u64, payload: Bytes::from(payload) });
    }
    Ok(messages)
}

/// Reads a stored message's span from its headers.
pub(super) fn span_of(
    session_id: &str,
    stream_seq: u64,
    headers: &HeaderMap,
    len: usize,
) -> Result<MessageSpan, ClusterError> {
    let header = |name: &str| {
        headers.get(name).and_then(|value| value.as_str().parse::<u64>().ok()).ok_or_else(|| ClusterError::Corrupt {
            what: "a session log message",
            detail: format!("session {session_id}: stream message {stream_seq} has no numeric {name} header"),
        })
    };
    let (first_seq, last_seq) = (header(FIRST_SEQ)?, header(LAST_SEQ)?);
    if first_seq == 0 || last_seq < first_seq {
        return Err(ClusterError::Corrupt {
            what: "a session log message",
            detail: format!("session {session_id}: stream message {stream_seq} claims events {first_seq}..={last_seq}"),
        });
    }
    Ok(MessageSpan { stream_seq, first_seq, last_seq, len })
}

#[derive(Deserialize)]
struct SeqOnly {
    seq: u64,
}

/// Splits a message's payload into its events, checking that they are exactly the span's sequences.
pub(super) fn events_of(session_id: &str, span: &MessageSpan, payload: &[u8]) -> Result<Vec<LogEntry>, ClusterError> {
    let corrupt = |detail: String| ClusterError::Corrupt {
        what: "a session log message",
        detail: format!("session {session_id}: stream message {}: {detail}", span.stream_seq),
    };
    let text = std::str::from_utf8(payload).map_err(|error| corrupt(format!("not UTF-8: {error}")))?;
    let body = text.strip_suffix('\n').ok_or_else(|| corrupt("its payload does not end with a newline".to_owned()))?;
    let mut entries = Vec::with_capacity((span.last_seq - span.first_seq + 1) as usize);
    for (index, line) in body.split('\n').enumerate() {
        let expected = span.first_seq + index as u64;
        let seq = serde_json::from_str::<SeqOnly>(line)
            .map_err(|error| corrupt(format!("line {} is not an event with a seq: {error}", index + 1)))?
            .seq;
        if seq != expected || seq > span.last_seq {
            return Err(corrupt(format!(
                "line {} holds seq {seq} where events {}..={} say {expected}",
                index + 1,
                span.first_seq,
                span.last_seq
            )));
        }
        let json = EventJson::from_json(line.to_owned())
            .map_err(|error| corrupt(format!("line {} is not JSON: {error}", index + 1)))?;
        entries.push(LogEntry { seq, json });
    }
    if entries.last().map(|entry| entry.seq) != Some(span.last_seq) {
        return Err(corrupt(format!(
            "it holds {} events where its headers say {}..={}",
            entries.len(),
            span.first_seq,
            span.last_seq
        )));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, filler: usize) -> LogEntry {
        let json = format!(r#"{{"seq":{seq},"text":"{}"}}"#, "x".repeat(filler));
        LogEntry { seq, json: EventJson::from_json(json).unwrap() }
    }

    #[test]
    fn a_batch_packs_into_messages_within_the_budget_and_reads_back() {
        let batch: Vec<LogEntry> = (4..=13).map(|seq| entry(seq, 100)).collect();
        let messages = pack("s", 3, &batch, 350, 2000).unwrap();
        assert!(messages.len() > 1 && messages.iter().all(|message| message.payload.len() <= 350));
        let mut read = Vec::new();
        let mut next = 4;
        for (index, message) in messages.iter().enumerate() {
            assert_eq!(message.first_seq, next);
            let span = MessageSpan {
                stream_seq: index as u64 + 1,
                first_seq: message.first_seq,
                last_seq: message.last_seq,
                len: message.payload.len(),
            };
            read.extend(events_of("s", &span, &message.payload).unwrap());
            next = message.last_seq + 1;
        }
        assert_eq!(next, 14);
        let texts = |entries: &[LogEntry]| entries.iter().map(|e| e.json.as_str().to_owned()).collect::<Vec<_>>();
        assert_eq!(texts(&read), texts(&batch));
    }

    #[test]
    fn gaps_and_oversized_events_are_refused() {
        let gap = pack("s", 0, &[entry(1, 1), entry(3, 1)], 1000, 2000).unwrap_err();
        assert!(gap.to_string().contains("continues at seq 2"), "{gap}");
        let late_start = pack("s", 0, &[entry(2, 1)], 1000, 2000).unwrap_err();
        assert!(late_start.to_string().contains("continues at seq 1"), "{late_start}");
        let big = pack("s", 0, &[entry(1, 5000)], 1000, 2000).unwrap_err();
        assert!(big.to_string().contains("max_payload is 2000"), "{big}");
    }

    #[test]
    fn a_line_with_the_wrong_seq_is_corrupt() {
        let span = MessageSpan { stream_seq: 9, first_seq: 5, last_seq: 6, len: 0 };
        let payload = format!("{}\n{}\n", entry(5, 1).json.as_str(), entry(7, 1).json.as_str());
        let error = events_of("s", &span, payload.as_bytes()).unwrap_err();
        assert!(matches!(error, ClusterError::Corrupt { .. }), "{error}");
        let short = format!("{}\n", entry(5, 1).json.as_str());
        assert!(events_of("s", &span, short.as_bytes()).is_err());
    }
}
