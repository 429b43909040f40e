//! JSON-RPC 2.0 envelope: ids, responses, notifications, and the traits that bind a method or notification name
//! to its types.
//!
//! Only this crate knows JSON-RPC framing. Encoding is done by hand around pre-encoded parts where it saves a
//! copy on hot paths (a result is encoded once; an event's JSON is embedded as it was stored).

use bytestring::ByteString;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::error::RpcError;

/// A request id: a string, a number, or null (which JSON-RPC allows but discourages).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Id {
    Number(serde_json::Number),
    String(String),
    Null,
}

impl Id {
    fn encode(&self) -> String {
        // Encoding a string, a number or null into JSON cannot fail.
        serde_json::to_string(self).unwrap_or_else(|_| "null".to_owned())
    }
}

/// A method of the protocol: its wire name and the types of its params and result.
pub trait Method {
    const NAME: &'static str;
    type Params: Serialize + DeserializeOwned + JsonSchema + Send + 'static;
    type Result: Serialize + DeserializeOwned + JsonSchema + Send + 'static;
    /// Whether serialized params carry secrets (provider credentials): the client wipes such frames after
    /// sending them.
    const CARRIES_SECRETS: bool = false;
}

/// A server-to-client notification: its wire name and params type.
pub trait Notification {
    const NAME: &'static str;
    type Params: Serialize + DeserializeOwned + JsonSchema + Send + 'static;
}

/// `{"jsonrpc":"2.0","id":..,"result":..}` around an already-encoded result.
pub fn encode_result_response(id: &Id, result: &RawValue) -> String {
    let id = id.encode();
    let result = result.get();
    let mut out = String::with_capacity(id.len() + result.len() + 32);
    out.push_str(r#"{"jsonrpc":"2.0","id":"#);
    out.push_str(&id);
    out.push_str(r#","result":"#);
    out.push_str(result);
    out.push('}');
    out
}

/// `{"jsonrpc":"2.0","id":..,"error":{..}}`.
pub fn encode_error_response(id: &Id, error: &RpcError) -> String {
    let error =
        serde_json::to_string(error).unwrap_or_else(|_| r#"{"code":-32603,"message":"Internal error"}"#.to_owned());
    format!(r#"{{"jsonrpc":"2.0","id":{},"error":{}}}"#, id.encode(), error)
}

/// `{"jsonrpc":"2.0","method":..,"params":..}`.
pub fn encode_notification<N: Notification>(params: &N::Params) -> Result<ByteString, serde_json::Error> {
    #[derive(Serialize)]
    struct Envelope<'a, P> {
        jsonrpc: &'static str,
        method: &'static str,
        params: &'a P,
    }
    let text = serde_json::to_string(&Envelope { jsonrpc: "2.0", method: N::NAME, params })?;
    Ok(ByteString::from(text))
}

/// `{"jsonrpc":"2.0","method":..,"params":..,"id":..}`: a request as a client sends it.
pub fn encode_request<M: Method>(id: &Id, params: &M::Params) -> Result<String, serde_json::Error> {
    #[derive(Serialize)]
    struct Envelope<'a, P> {
        jsonrpc: &'static str,
        id: &'a Id,
        method: &'static str,
        params: &'a P,
    }
    serde_json::to_string(&Envelope { jsonrpc: "2.0", id, method: M::NAME, params })
}

/// Decodes a method's params, turning serde's message into a -32602 detail.
pub(crate) fn decode_params<P: DeserializeOwned>(method: &str, params: Value) -> Result<P, RpcError> {
    serde_json::from_value(params)
        .map_err(|error| RpcError::invalid_params(&format!("invalid params for `{method}`: {error}")))
}

/// Encodes a result once; the envelope embeds it without re-encoding.
pub(crate) fn encode_result<R: Serialize>(result: &R) -> Result<Box<RawValue>, RpcError> {
    serde_json::value::to_raw_value(result)
        .map_err(|error| RpcError::internal(&format!("failed to encode the result: {error}")))
}

/// One incoming message from a server's point of view: what the envelope says, validated.
#[derive(Debug)]
pub(crate) struct IncomingRequest {
    /// `None` for a notification.
    pub id: Option<Id>,
    pub method: String,
    pub params: Value,
}

/// Validates one request object. The error is already addressed (id or null) and ready to send.
pub(crate) fn parse_request(value: Value) -> Result<IncomingRequest, (Id, RpcError)> {
    let Value::Object(mut object) = value else {
        return Err((Id::Null, RpcError::invalid_request("a request must be a JSON object")));
    };
    let id = match object.remove("id") {
        None => None,
        Some(Value::Null) => Some(Id::Null),
        Some(Value::Number(number)) => Some(Id::Number(number)),
        Some(Value::String(text)) => Some(Id::String(text)),
        Some(_) => {
            return Err((Id::Null, RpcError::invalid_request("`id` must be a string, a number or null")));
        }
    };
    let reply_id = id.clone().unwrap_or(Id::Null);
    match object.remove("jsonrpc") {
        Some(Value::String(version)) if version == "2.0" => {}
        _ => {
            return Err((reply_id, RpcError::invalid_request(r#"`jsonrpc` must be exactly "2.0""#)));
        }
    }
    let method = match object.remove("method") {
        Some(Value::String(method)) => method,
        Some(_) => {
            return Err((reply_id, RpcError::invalid_request("`method` must be a string")));
        }
        None => return Err((reply_id, RpcError::invalid_request("`method` is missing"))),
    };
    let params = match object.remove("params") {
        None => Value::Object(Default::default()),
        Some(params @ Value::Object(_)) => params,
        Some(Value::Array(_)) => {
            return Err((
                reply_id,
                RpcError::invalid_params("params must be an object; positional params are not supported"),
            ));
        }
        Some(_) => {
            return Err((reply_id, RpcError::invalid_request("`params` must be an object or an array")));
        }
    };
    if let Some(unexpected) = object.keys().next() {
        let detail = format!("unexpected member `{unexpected}` in the request object");
        return Err((reply_id, RpcError::invalid_request(&detail)));
    }
    Ok(IncomingRequest { id, method, params })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_without_id_is_a_notification() {
        let request = parse_request(json!({"jsonrpc": "2.0", "method": "x"})).unwrap();
        assert_eq!(request.id, None);
        assert_eq!(request.params, json!({}));
    }

    #[test]
    fn invalid_members_are_reported_with_the_id_when_it_was_readable() {
        let (id, error) = parse_request(json!({"jsonrpc": "1.0", "method": "x", "id": 4})).unwrap_err();
        assert_eq!(id, Id::Number(4.into()));
        assert_eq!(error.code, crate::error::codes::INVALID_REQUEST);
        let (id, _) = parse_request(json!({"jsonrpc": "2.0", "method": 1, "params": "bar"})).unwrap_err();
        assert_eq!(id, Id::Null);
    }

    #[test]
    fn responses_embed_the_encoded_result() {
        let raw = serde_json::value::to_raw_value(&json!({"a": 1})).unwrap();
        assert_eq!(
            encode_result_response(&Id::String("x".into()), &raw),
            r#"{"jsonrpc":"2.0","id":"x","result":{"a":1}}"#
        );
    }
}
