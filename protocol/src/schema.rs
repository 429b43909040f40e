//! The JSON Schema of the whole protocol, generated from the method table. A copy is checked in at
//! `protocol/schema/protocol.schema.json`, and a test fails when the code and that copy drift apart.

use serde_json::{Value, json};

use crate::methods::{methods_schema, notifications_schema};

/// The schema document: every method's params and result, every notification's params, the typed error codes
/// (`data.code`), the origins of events (`origin`), and the shared definitions they reference.
pub fn protocol_schema() -> Value {
    let mut generator = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    let methods = methods_schema(&mut generator);
    let notifications = notifications_schema(&mut generator);
    let error_codes = generator.subschema_for::<crate::error_code::ErrorCode>();
    let origins = generator.subschema_for::<crate::types::origin::Origin>();
    let definitions = generator.take_definitions(true);
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "troupe protocol 20",
        "methods": methods,
        "notifications": notifications,
        "error_codes": error_codes,
        "origins": origins,
        "$defs": definitions,
    })
}
