//! The checked-in JSON Schema (`protocol/schema/protocol.schema.json`) must match the one generated from the
//! method table, so that a wire change cannot land without its schema. After an intended change, regenerate it
//! with `TROUPE_UPDATE_SCHEMA=1 cargo test -p troupe-protocol --test schema` and commit the result.

use std::path::PathBuf;

use serde_json::Value;
use troupe_protocol::methods::{METHOD_NAMES, NOTIFICATION_NAMES};
use troupe_protocol::schema::protocol_schema;

const UPDATE_VARIABLE: &str = "TROUPE_UPDATE_SCHEMA";

fn snapshot_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("schema/protocol.schema.json")
}

fn rendered_schema() -> String {
    let mut rendered = serde_json::to_string_pretty(&protocol_schema()).expect("the schema encodes");
    rendered.push('\n');
    rendered
}

#[test]
fn checked_in_schema_matches_the_code() {
    let path = snapshot_path();
    let generated = rendered_schema();
    if std::env::var_os(UPDATE_VARIABLE).is_some() {
        std::fs::write(&path, &generated).unwrap_or_else(|error| panic!("cannot write {}: {error}", path.display()));
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    if checked_in != generated {
        let first_difference = checked_in.lines().zip(generated.lines()).position(|(old, new)| old != new).map_or_else(
            || "one file is a prefix of the other".to_owned(),
            |index| format!("first difference at line {}", index + 1),
        );
        panic!(
            "{} is out of date ({first_difference}).\nThe wire types changed; regenerate the schema with\n\n    \
             {UPDATE_VARIABLE}=1 cargo test -p troupe-protocol --test schema\n\nand review the diff.",
            path.display()
        );
    }
}

#[test]
fn schema_lists_every_method_and_notification() {
    let schema = protocol_schema();
    let methods = schema["methods"].as_object().expect("`methods` is an object");
    let notifications = schema["notifications"].as_object().expect("`notifications` is an object");
    for name in METHOD_NAMES {
        let method = methods.get(*name).unwrap_or_else(|| panic!("method `{name}` is missing from the schema"));
        assert!(method.get("params").is_some_and(Value::is_object), "{name}");
        assert!(method.get("result").is_some_and(Value::is_object), "{name}");
    }
    for name in NOTIFICATION_NAMES {
        assert!(notifications.contains_key(*name), "notification `{name}` is missing from the schema");
    }
    assert_eq!(METHOD_NAMES.len(), 32, "protocol 20 has 32 methods");
    assert_eq!(methods.len(), 32, "protocol 20 has 32 methods");
    assert_eq!(NOTIFICATION_NAMES.len(), 6, "protocol 20 has 6 notifications");
    assert_eq!(notifications.len(), 6, "protocol 20 has 6 notifications");
}
