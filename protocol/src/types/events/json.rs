//! An event kept as the exact JSON text it was stored as ([`EventJson`]).

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::StoredEvent;

/// A stored event kept as the exact JSON text it was stored as.
///
/// The engine encodes each event once, when it appends it, and shares those bytes with every reader: the log,
/// replies to `events.subscribe` and every subscriber's notification. Cloning is a reference-count increment.
#[derive(Clone, Debug)]
pub struct EventJson(Arc<RawValue>);

impl EventJson {
    /// Wraps already-encoded JSON. Fails when `json` is not one valid JSON value.
    pub fn from_json(json: String) -> Result<Self, serde_json::Error> {
        Ok(EventJson(Arc::from(RawValue::from_string(json)?)))
    }

    /// Encodes `event`.
    pub fn encode(event: &StoredEvent) -> Result<Self, serde_json::Error> {
        // Most events are a few hundred bytes: a buffer of this size takes them without growing (serde_json's own
        // starts at 128 bytes and doubles, so a rename's event grew twice).
        const USUAL_EVENT_BYTES: usize = 512;
        let mut json = Vec::with_capacity(USUAL_EVENT_BYTES);
        serde_json::to_writer(&mut json, event)?;
        let json = String::from_utf8(json).map_err(<serde_json::Error as serde::ser::Error>::custom)?;
        Self::from_json(json)
    }

    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// Parses the typed event.
    pub fn decode(&self) -> Result<StoredEvent, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }
}

impl PartialEq for EventJson {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Serialize for EventJson {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for EventJson {
    /// Goes through `Value` so that it also works from an already-parsed `Value` (in-process transports), where
    /// a borrowed raw value is not available.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        let json = serde_json::to_string(&value).map_err(serde::de::Error::custom)?;
        EventJson::from_json(json).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for EventJson {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        StoredEvent::schema_name()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        StoredEvent::json_schema(generator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::events::EventPayload;

    #[test]
    fn unknown_kinds_decode_as_unknown_and_raw_json_is_kept() {
        let line = r#"{"session_id":"s","run_id":"r","seq":7,"timestamp":"2026-01-01T00:00:00Z","payload":{"type":"some_future_kind","goal_id":"g"}}"#;
        let raw = EventJson::from_json(line.to_owned()).unwrap();
        assert_eq!(raw.decode().unwrap().payload, EventPayload::Unknown);
        assert_eq!(serde_json::to_string(&raw).unwrap(), line);
    }

    #[test]
    fn event_json_deserializes_from_a_parsed_value() {
        let value = serde_json::json!({"session_id":"s","run_id":null,"seq":1,"timestamp":"t",
            "payload":{"type":"session_reverted","through_seq":1}});
        let raw: EventJson = serde_json::from_value(value).unwrap();
        assert_eq!(raw.decode().unwrap().payload, EventPayload::SessionReverted { through_seq: 1 });
    }
}
