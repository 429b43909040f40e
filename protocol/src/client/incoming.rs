//! Reading the daemon's frames. A batch is taken member by member; each message is parsed once, with its
//! `result` and `params` kept as raw JSON, and then routed: a response to the request it answers (see
//! `calls`), a notification by its method into the delivery stream (`events.subscription` through the
//! subscription bookkeeping in `subscriptions`, the others through the `outbox`, which decides what a congested
//! stream drops). Whatever cannot be decoded is logged and skipped: one bad frame
//! must not end a connection that otherwise works.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::outbox::ToolOutput;
use super::task::ConnectionTask;
use crate::error::RpcError;
use crate::jsonrpc::{Id, Notification};
use crate::methods::notification;
use crate::transport::{MessageFrame, Transport};
use crate::types::runtime::RuntimeChangedParams;

impl<T: Transport> ConnectionTask<T> {
    pub(super) fn handle_frame(&mut self, frame: MessageFrame) {
        let text = frame.into_text();
        if text.trim_start().starts_with('[') {
            // The client sends no batches, but a batch reply is valid JSON-RPC: take it member by member.
            match serde_json::from_str::<Vec<&RawValue>>(&text) {
                Ok(members) => {
                    for member in members {
                        self.handle_message(member.get());
                    }
                }
                Err(error) => tracing::debug!(%error, "ignoring an undecodable batch frame"),
            }
        } else {
            self.handle_message(&text);
        }
    }

    fn handle_message(&mut self, text: &str) {
        /// One message, with `result` and `params` kept as raw JSON so each is parsed once, into its own type.
        #[derive(Deserialize)]
        struct Incoming<'a> {
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
        let incoming: Incoming<'_> = match serde_json::from_str(text) {
            Ok(incoming) => incoming,
            Err(error) => {
                tracing::debug!(%error, "ignoring an undecodable frame");
                return;
            }
        };
        match (incoming.method, incoming.id) {
            (Some(method), None) => self.handle_notification(&method, incoming.params),
            (Some(method), Some(_)) => {
                tracing::debug!(%method, "ignoring a request from the daemon; the client serves none")
            }
            (None, Some(Id::Number(number))) if number.as_u64().is_some() => {
                let id = number.as_u64().unwrap_or_default();
                let outcome = match (incoming.error, incoming.result) {
                    (Some(error), _) => Err(error),
                    (None, Some(result)) => Ok(result.get()),
                    // `"result": null` reads as a missing member through `Option`.
                    (None, None) => Ok("null"),
                };
                self.handle_response(id, outcome);
            }
            (None, id) => match incoming.error {
                Some(error) => {
                    tracing::warn!(?id, code = error.code, "the daemon reported an error it could not address")
                }
                None => tracing::debug!(?id, "ignoring a response to an id this client never used"),
            },
        }
    }

    fn handle_notification(&mut self, method: &str, params: Option<&RawValue>) {
        let params = params.map_or("{}", RawValue::get);
        match method {
            notification::EventsSubscription::NAME => self.subscription_notice(params),
            notification::RuntimeChanged::NAME => match serde_json::from_str::<RuntimeChangedParams>(params) {
                Ok(changed) => self.outbox.runtime_changed(changed),
                Err(error) => tracing::warn!(%error, "ignoring an undecodable runtime.changed"),
            },
            notification::ToolOutputDelta::NAME => self.tool_output(method, params, ToolOutput::Delta),
            notification::ToolOutputSnapshot::NAME => self.tool_output(method, params, ToolOutput::Snapshot),
            notification::ToolOutputGap::NAME => self.tool_output(method, params, ToolOutput::Gap),
            notification::ToolOutputEnd::NAME => match serde_json::from_str::<Value>(params) {
                Ok(value) => self.outbox.tool_output_end(value),
                Err(error) => tracing::warn!(%method, %error, "ignoring an undecodable notification"),
            },
            notification::EventsPlugin::NAME => match serde_json::from_str::<Value>(params) {
                Ok(value) => self.outbox.plugin_event(value),
                Err(error) => tracing::warn!(%method, %error, "ignoring an undecodable notification"),
            },
            other => tracing::debug!(method = %other, "ignoring an unknown notification"),
        }
    }

    fn tool_output(&mut self, method: &str, params: &str, wrap: fn(Value) -> ToolOutput) {
        match serde_json::from_str::<Value>(params) {
            Ok(value) => self.outbox.tool_output(wrap(value)),
            Err(error) => tracing::warn!(%method, %error, "ignoring an undecodable notification"),
        }
    }
}
