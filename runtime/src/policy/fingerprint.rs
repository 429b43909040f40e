//! The operation fingerprint: a digest of exactly what an approval would let run.

use serde_json::Value;
use sha2::{Digest, Sha256};
use troupe_protocol::types::approval::PermissionAction;

use crate::tools::PermissionRequest;

/// Names the fingerprint's layout, so that a future change of layout can never collide with this one.
const DOMAIN: &str = "troupe.operation_fingerprint.v1";

/// `sha256:` followed by 64 lowercase hex digits, over the tool, the action, the resource and the canonical JSON
/// of the arguments (object keys sorted by their UTF-8 bytes, no whitespace, serde_json's escaping and number
/// formatting). The summary is left out: it is for humans and changes nothing about what runs. The value is the
/// same on every build and platform, whatever order the arguments' keys arrived in.
pub fn operation_fingerprint(tool: &str, request: &PermissionRequest, arguments: &Value) -> String {
    let action = match request.action {
        PermissionAction::Read => "read",
        PermissionAction::Write => "write",
        PermissionAction::Execute => "execute",
        PermissionAction::Network => "network",
    };
    let mut canonical = String::new();
    canonical.push_str("{\"action\":");
    write_canonical(&Value::from(action), &mut canonical);
    canonical.push_str(",\"arguments\":");
    write_canonical(arguments, &mut canonical);
    canonical.push_str(",\"resource\":");
    write_canonical(&Value::from(request.resource.as_str()), &mut canonical);
    canonical.push_str(",\"tool\":");
    write_canonical(&Value::from(tool), &mut canonical);
    canonical.push('}');

    let mut hasher = Sha256::new();
    hasher.update(DOMAIN.as_bytes());
    hasher.update([0]);
    hasher.update(canonical.as_bytes());
    let digest = hasher.finalize();
    let mut fingerprint = String::with_capacity(7 + 64);
    fingerprint.push_str("sha256:");
    for byte in digest {
        fingerprint.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
        fingerprint.push(char::from(b"0123456789abcdef"[usize::from(byte & 0x0f)]));
    }
    fingerprint
}

/// Writes `value` as compact JSON with object keys sorted, independent of serde_json's map ordering feature.
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        // Scalars and strings use serde_json's own, deterministic formatting and escaping.
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => out.push_str(&value.to_string()),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|left, right| left.0.as_bytes().cmp(right.0.as_bytes()));
            out.push('{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&Value::from(key.as_str()).to_string());
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let mut out = String::new();
        write_canonical(&json!({"b": [1, {"z": null, "a": "é\n"}], "a": true, "c": 1.5}), &mut out);
        assert_eq!(out, r#"{"a":true,"b":[1,{"a":"é\n","z":null}],"c":1.5}"#);
    }
}
