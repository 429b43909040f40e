//! Reading the daemon's frames (a part of the connection task). A batch is taken member by member; each message
//! is parsed once, with its `result` and `params` kept as raw JSON, and turned into an [`Incoming`]: a response
//! to the request it answers, or a notification decoded as far as the task routes it (an `events.subscribe`
//! result is decoded here too, once the task knows it is one). Whatever cannot be decoded is logged and skipped:
//! one bad frame must not end a connection that otherwise works. What each message means is the task's to
//! decide.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::error::ClientError;
use crate::error::RpcError;
use crate::jsonrpc::{Id, Notification};
use crate::methods::notification;
use crate::types::events::StoredEvent;
use crate::types::runtime::RuntimeChangedParams;

/// One message of the daemon's, borrowed from the frame's text.
pub(super) enum Incoming<'a> {
    /// The answer to request `id`: the raw text of its result, or its error.
    Response {
        id: u64,
        outcome: Result<&'a str, RpcError>,
    },
    /// `events.subscription` params, as raw JSON (parsed only for a followed session).
    Subscription(&'a str),
    RuntimeChanged(RuntimeChangedParams),
    ToolOutput(ToolOutput),
    /// `events.tool_output_end` params.
    ToolOutputEnd(Value),
    /// `events.plugin` params.
    PluginEvent(Value),
}

/// A live tool-output notification, decoded just enough to account for it.
pub(super) enum ToolOutput {
    Delta(Value),
    Snapshot(Value),
    Gap(Value),
}

/// Hands each message of `text` (one frame) to `each`, in order.
pub(super) fn read_frame<'a>(text: &'a str, mut each: impl FnMut(Incoming<'a>)) {
    if text.trim_start().starts_with('[') {
        // The client sends no batches, but a batch reply is valid JSON-RPC: take it member by member.
        match serde_json::from_str::<Vec<&RawValue>>(text) {
            Ok(members) => {
                for member in members {
                    if let Some(message) = read_message(member.get()) {
                        each(message);
                    }
                }
            }
            Err(error) => tracing::debug!(%error, "ignoring an undecodable batch frame"),
        }
    } else if let Some(message) = read_message(text) {
        each(message);
    }
}

fn read_message(text: &str) -> Option<Incoming<'_>> {
    /// One message, with `result` and `params` kept as raw JSON so each is parsed once, into its own type.
    #[derive(Deserialize)]
    struct Message<'a> {
        #[serde(default)]
        id: Option<Id>,
        #[serde(default, borrow)]
        method: Option<Cow<'a, str>>,
        #[serde(default, borrow)]
        params: Option<&'a RawValue>,
        #[serde(default, borrow)]
        result: Option<&'a RawValue>,
        #[serde(default)]
        error: Option<RpcError>,
    }
    let message: Message<'_> = match serde_json::from_str(text) {
        Ok(message) => message,
        Err(error) => {
            tracing::debug!(%error, "ignoring an undecodable frame");
            return None;
        }
    };
    match (message.method, message.id) {
        (Some(method), None) => read_notification(&method, message.params),
        (Some(method), Some(_)) => {
            tracing::debug!(%method, "ignoring a request from the daemon; the client serves none");
            None
        }
        (None, Some(Id::Number(number))) if number.as_u64().is_some() => {
            let id = number.as_u64().unwrap_or_default();
            let outcome = match (message.error, message.result) {
                (Some(error), _) => Err(error),
                (None, Some(result)) => Ok(result.get()),
                // `"result": null` reads as a missing member through `Option`.
                (None, None) => Ok("null"),
            };
            Some(Incoming::Response { id, outcome })
        }
        (None, id) => {
            match message.error {
                Some(error) => {
                    tracing::warn!(?id, code = error.code, "the daemon reported an error it could not address")
                }
                None => tracing::debug!(?id, "ignoring a response to an id this client never used"),
            }
            None
        }
    }
}

fn read_notification<'a>(method: &str, params: Option<&'a RawValue>) -> Option<Incoming<'a>> {
    let params = params.map_or("{}", RawValue::get);
    let decoded = match method {
        notification::EventsSubscription::NAME => return Some(Incoming::Subscription(params)),
        notification::RuntimeChanged::NAME => {
            return match serde_json::from_str::<RuntimeChangedParams>(params) {
                Ok(changed) => Some(Incoming::RuntimeChanged(changed)),
                Err(error) => {
                    tracing::warn!(%error, "ignoring an undecodable runtime.changed");
                    None
                }
            };
        }
        notification::ToolOutputDelta::NAME => {
            serde_json::from_str(params).map(|value| Incoming::ToolOutput(ToolOutput::Delta(value)))
        }
        notification::ToolOutputSnapshot::NAME => {
            serde_json::from_str(params).map(|value| Incoming::ToolOutput(ToolOutput::Snapshot(value)))
        }
        notification::ToolOutputGap::NAME => {
            serde_json::from_str(params).map(|value| Incoming::ToolOutput(ToolOutput::Gap(value)))
        }
        notification::ToolOutputEnd::NAME => serde_json::from_str(params).map(Incoming::ToolOutputEnd),
        notification::EventsPlugin::NAME => serde_json::from_str(params).map(Incoming::PluginEvent),
        other => {
            tracing::debug!(method = %other, "ignoring an unknown notification");
            return None;
        }
    };
    decoded.map_err(|error| tracing::warn!(%method, %error, "ignoring an undecodable notification")).ok()
}

/// Decodes an `events.subscribe` result straight from its raw text: each event is parsed once, into a
/// [`StoredEvent`], without the intermediate `Value` that decoding through `EventJson` would build.
pub(super) fn decode_subscribe_result(raw: &str) -> Result<(Vec<StoredEvent>, u64), ClientError> {
    #[derive(Deserialize)]
    struct Reply<'a> {
        #[serde(borrow)]
        events: Vec<&'a RawValue>,
        last_seq: u64,
    }
    let reply: Reply<'_> = serde_json::from_str(raw)
        .map_err(|error| ClientError::Decode(format!("the result of `events.subscribe`: {error}")))?;
    let mut events = Vec::with_capacity(reply.events.len());
    for event in reply.events {
        match serde_json::from_str::<StoredEvent>(event.get()) {
            Ok(event) => events.push(event),
            // One unreadable record must not cost the whole session; live events are treated the same way.
            Err(error) => tracing::warn!(%error, "skipping an undecodable event in a replay"),
        }
    }
    Ok((events, reply.last_seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Vec<String> {
        let mut seen = Vec::new();
        read_frame(text, |message| {
            seen.push(match message {
                Incoming::Response { id, outcome: Ok(result) } => format!("response {id} {result}"),
                Incoming::Response { id, outcome: Err(error) } => format!("error {id} {}", error.code),
                Incoming::Subscription(params) => format!("subscription {params}"),
                Incoming::RuntimeChanged(_) => "runtime.changed".to_owned(),
                Incoming::ToolOutput(ToolOutput::Delta(params)) => format!("delta {params}"),
                Incoming::ToolOutput(ToolOutput::Snapshot(_) | ToolOutput::Gap(_)) => "other output".to_owned(),
                Incoming::ToolOutputEnd(_) => "end".to_owned(),
                Incoming::PluginEvent(params) => format!("plugin {params}"),
            })
        });
        seen
    }

    #[test]
    fn a_batch_is_read_member_by_member_and_what_cannot_be_read_is_skipped() {
        let batch = r#"[{"jsonrpc":"2.0","id":3,"result":{"a":1}},
            {"jsonrpc":"2.0","id":4,"result":null},
            {"jsonrpc":"2.0","id":5,"error":{"code":-32601,"message":"Method not found"}},
            {"jsonrpc":"2.0","id":"text","result":1},
            {"jsonrpc":"2.0","method":"session.get","id":9,"params":{}},
            {"jsonrpc":"2.0","method":"events.plugin","params":{"x":1}},
            {"jsonrpc":"2.0","method":"no.such_notification","params":{}},
            "garbage"]"#;
        assert_eq!(read(batch), [r#"response 3 {"a":1}"#, "response 4 null", "error 5 -32601", r#"plugin {"x":1}"#,]);
        assert_eq!(
            read(r#"{"jsonrpc":"2.0","method":"events.subscription","params":{"type":"gap"}}"#),
            [r#"subscription {"type":"gap"}"#]
        );
        assert!(read("not json").is_empty());
    }

    #[test]
    fn a_subscribe_result_keeps_the_events_it_can_read() {
        let (events, last_seq) = decode_subscribe_result(r#"{"events":[{"not":"an event"}],"last_seq":4}"#).unwrap();
        assert!(events.is_empty());
        assert_eq!(last_seq, 4);
        assert!(matches!(decode_subscribe_result("[]"), Err(ClientError::Decode(_))));
    }
}
