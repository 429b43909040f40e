//! Provider credentials: `provider.connect` and `provider.disconnect`.
//!
//! Both are idempotent by their client ID: repeating a request with the same `client_connect_id` or
//! `client_request_id` returns the first answer with `replayed: true`. Connect params carry secrets, so their
//! `Debug` output redacts the credential values and the method is declared with `secrets = true`, which makes the
//! client wipe the serialized frame after sending it.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::types::runtime::{AuthState, RuntimeSnapshot};

/// `provider.connect` params. `Debug` prints the keys of `auth_values` but never their values.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderConnectParams {
    /// `openai` or `anthropic`.
    pub provider_id: String,
    /// The catalog revision the client last saw; the connect is rejected when the catalog moved on. Send null to
    /// skip the check (the key is part of the contract, but a missing key is read as null).
    pub expected_catalog_revision: Option<u64>,
    /// Non-secret settings, such as `base_url`; may be empty.
    pub setup_values: BTreeMap<String, String>,
    /// `api_key` or `none` (a local server such as Ollama).
    pub auth_method: String,
    /// Secret values for `auth_method`, such as `api_key`; empty for `none`.
    pub auth_values: BTreeMap<String, String>,
    /// Idempotency key: 1..=256 bytes, no control characters.
    pub client_connect_id: String,
}

impl fmt::Debug for ProviderConnectParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        /// Shows which credentials were supplied without showing them.
        struct RedactedValues<'a>(&'a BTreeMap<String, String>);

        impl fmt::Debug for RedactedValues<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_map().entries(self.0.keys().map(|key| (key, "<redacted>"))).finish()
            }
        }

        f.debug_struct("ProviderConnectParams")
            .field("provider_id", &self.provider_id)
            .field("expected_catalog_revision", &self.expected_catalog_revision)
            .field("setup_values", &self.setup_values)
            .field("auth_method", &self.auth_method)
            .field("auth_values", &RedactedValues(&self.auth_values))
            .field("client_connect_id", &self.client_connect_id)
            .finish()
    }
}

/// The durable record of a provider connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DurableConnection {
    pub provider_id: String,
    /// The provider's connection generation after this connect; matches `ProviderInfo.generation`.
    pub generation: u64,
    /// RFC 3339 UTC.
    pub connected_at: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProviderConnectResult {
    pub durable_connection: DurableConnection,
    /// Where the credentials now in effect come from: the `auth_method` that was stored (`api_key` or `none`).
    pub effective_auth_source: String,
    /// The runtime snapshot right after the connect, including the provider's models.
    pub snapshot: RuntimeSnapshot,
    /// True when this answers a repeated `client_connect_id` with the first answer.
    pub replayed: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderDisconnectParams {
    pub provider_id: String,
    /// Reject unless the runtime snapshot still has this revision. Send null to skip the check (a missing key is
    /// read as null).
    pub expected_runtime_revision: Option<u64>,
    /// Reject unless the provider's connection generation is still this one. Send null to skip the check (a
    /// missing key is read as null).
    pub expected_connection_generation: Option<u64>,
    /// Idempotency key: 1..=256 bytes, no control characters.
    pub client_request_id: String,
}

/// The durable record of a disconnect.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DisconnectReceipt {
    pub provider_id: String,
    /// The provider's connection generation after this disconnect.
    pub generation: u64,
    /// RFC 3339 UTC.
    pub disconnected_at: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProviderDisconnectResult {
    pub durable_receipt: DisconnectReceipt,
    /// False when the provider had no stored connection (the receipt still records the request).
    pub disconnected: bool,
    /// The provider's auth state after the disconnect.
    pub effective_auth_state: AuthState,
    /// The runtime snapshot right after the disconnect.
    pub snapshot: RuntimeSnapshot,
    /// True when this answers a repeated `client_request_id` with the first answer.
    pub replayed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> ProviderConnectParams {
        ProviderConnectParams {
            provider_id: "openai".into(),
            expected_catalog_revision: Some(3),
            setup_values: BTreeMap::from([("base_url".into(), "http://127.0.0.1:11434/v1".into())]),
            auth_method: "api_key".into(),
            auth_values: BTreeMap::from([("api_key".into(), "sk-very-secret".into())]),
            client_connect_id: "c-1".into(),
        }
    }

    #[test]
    fn debug_redacts_auth_values_but_shows_their_keys() {
        let debug = format!("{:?}", params());
        assert!(!debug.contains("sk-very-secret"), "{debug}");
        assert!(debug.contains(r#""api_key": "<redacted>""#), "{debug}");
        assert!(debug.contains("base_url"), "{debug}");
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let mut value = serde_json::to_value(params()).unwrap();
        value["api_key"] = "oops".into();
        let error = serde_json::from_value::<ProviderConnectParams>(value).unwrap_err();
        assert!(error.to_string().contains("unknown field `api_key`"), "{error}");
    }

    #[test]
    fn required_nullable_revisions_round_trip_as_null() {
        let json = serde_json::json!({
            "provider_id": "openai",
            "expected_runtime_revision": null,
            "expected_connection_generation": 2,
            "client_request_id": "d-1"
        });
        let params: ProviderDisconnectParams = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(params.expected_runtime_revision, None);
        assert_eq!(serde_json::to_value(&params).unwrap(), json);
    }
}
