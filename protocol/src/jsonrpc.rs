//! JSON-RPC 2.0 envelope: ids, responses, notifications, and the traits that bind a method or notification name
//! to its types.
//!
//! Only this crate knows JSON-RPC framing. Encoding is done by hand around pre-encoded parts where it saves a
//! copy on hot paths (a result is encoded once; an event's JSON is embedded as it was stored).

use std::borrow::Cow;

use bytestring::ByteString;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
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

/// The id of an incoming request exactly as the client wrote it: a JSON string, number or null, kept as its raw
/// text so that the reply echoes it byte for byte (`12345678901234567890123456789`, `1.0e400` and `-0` included,
/// which a round trip through `serde_json::Value` would change).
#[derive(Clone, Debug)]
pub struct RawId(Box<RawValue>);

impl RawId {
    /// The `null` id of replies to requests whose id could not be read.
    pub fn null() -> RawId {
        RawId(RawValue::NULL.to_owned())
    }

    /// The id `raw` if it is a string, a number or null (JSON-RPC 2.0 allows nothing else).
    pub fn from_raw(raw: &RawValue) -> Option<RawId> {
        match raw.get().as_bytes().first() {
            Some(b'"' | b'-' | b'0'..=b'9' | b'n') => Some(RawId(raw.to_owned())),
            _ => None,
        }
    }

    /// The id's JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }
}

impl PartialEq for RawId {
    fn eq(&self, other: &RawId) -> bool {
        self.get() == other.get()
    }
}

impl Eq for RawId {}

impl From<&Id> for RawId {
    fn from(id: &Id) -> RawId {
        RawId(serde_json::value::to_raw_value(id).unwrap_or_else(|_| RawValue::NULL.to_owned()))
    }
}

/// `{"jsonrpc":"2.0","id":..,"error":{..}}`.
pub fn encode_error_response(id: &RawId, error: &RpcError) -> String {
    let error =
        serde_json::to_string(error).unwrap_or_else(|_| r#"{"code":-32603,"message":"Internal error"}"#.to_owned());
    format!(r#"{{"jsonrpc":"2.0","id":{},"error":{}}}"#, id.get(), error)
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

/// Decodes a method's params (`{}` when the request had none), turning serde's message into a -32602 detail.
pub(crate) fn decode_params<P: DeserializeOwned>(method: &str, params: Option<&RawValue>) -> Result<P, RpcError> {
    serde_json::from_str(params.map_or("{}", RawValue::get)).map_err(|error| {
        // The position would count from the start of `params`, not of the frame the client sent: left out.
        let mut message = error.to_string();
        if error.line() > 0 {
            let position = format!(" at line {} column {}", error.line(), error.column());
            if message.ends_with(&position) {
                message.truncate(message.len() - position.len());
            }
        }
        RpcError::invalid_params(&format!("invalid params for `{method}`: {message}"))
    })
}

/// `{"jsonrpc":"2.0","id":..,"result":..}`, the result encoded once, straight into the response.
pub(crate) fn encode_result_for<R: Serialize>(id: &RawId, result: &R) -> Result<String, RpcError> {
    #[derive(Serialize)]
    struct Envelope<'a, R> {
        jsonrpc: &'static str,
        id: &'a RawValue,
        result: &'a R,
    }
    // Most results are a few hundred bytes: one allocation instead of a string grown from 128 bytes.
    let mut out = Vec::with_capacity(REPLY_CAPACITY);
    serde_json::to_writer(&mut out, &Envelope { jsonrpc: "2.0", id: &id.0, result })
        .map_err(|error| RpcError::internal(&format!("failed to encode the result: {error}")))?;
    String::from_utf8(out).map_err(|error| RpcError::internal(&format!("the encoded result is not UTF-8: {error}")))
}

/// The room a reply is encoded into at first: most replies fit, and it stays below glibc's large requests (chunks
/// of 1,024 bytes and up). Its per-thread cache holds only seven chunks of a size, so a burst of replies asks
/// `malloc` itself for most of theirs, and a large request there first consolidates every small chunk freed since:
/// with 1,024 bytes, that happened for nearly every reply under load (docs/performance.md, figure 4).
const REPLY_CAPACITY: usize = 1000;

/// One inbound frame: a single message, not read yet, or a batch of them, validated as JSON and each kept as raw
/// text.
pub(crate) enum Frame<'a> {
    /// The frame's text without the whitespace around it; [`parse_request`] reads it, and tells a frame that is
    /// not JSON (-32700) from one that is no request.
    Single(&'a str),
    Batch(Vec<&'a RawValue>),
}

/// Reads a frame's structure: a batch's members are found (-32700 when it is not JSON), a single message is left
/// to [`parse_request`], so that a request's text is read once before its params are.
pub(crate) fn parse_frame(text: &str) -> Result<Frame<'_>, RpcError> {
    let text = text.trim_matches(JSON_WHITESPACE);
    if text.starts_with('[') {
        Ok(Frame::Batch(serde_json::from_str(text).map_err(not_json)?))
    } else {
        Ok(Frame::Single(text))
    }
}

/// The whitespace JSON allows around a value.
const JSON_WHITESPACE: [char; 4] = [' ', '\t', '\n', '\r'];

fn not_json(error: serde_json::Error) -> RpcError {
    RpcError::parse_error(&format!("the frame is not valid JSON: {error}"))
}

/// One incoming message from a server's point of view: what the envelope says, validated.
#[derive(Debug)]
pub(crate) struct IncomingRequest {
    /// `None` for a notification.
    pub id: Option<RawId>,
    /// The method as the client wrote it: the table's own name when it is one (no copy), else the client's text.
    pub method: Cow<'static, str>,
    /// The params object as the client wrote it (`None` when it sent none); each method decodes it into its type.
    pub params: Option<Box<RawValue>>,
}

impl IncomingRequest {
    /// The method's name in the table, or `unknown` (what logs and metrics label the request with).
    pub fn method_label(&self) -> &'static str {
        match self.method {
            Cow::Borrowed(name) => name,
            Cow::Owned(_) => "unknown",
        }
    }
}

/// Validates one request object (a batch's member, or a single frame's text, which may not be JSON at all). The
/// error is already addressed (its id, or null) and ready to send.
pub(crate) fn parse_request(member: &str) -> Result<IncomingRequest, (RawId, RpcError)> {
    // A text that is not JSON is a parse error, whatever else is wrong with it: checked only once the text failed
    // as a request, so that a request is read once.
    let refused = |error: RpcError| match serde_json::from_str::<serde::de::IgnoredAny>(member) {
        Err(not) => (RawId::null(), not_json(not)),
        Ok(_) => (RawId::null(), error),
    };
    if !member.starts_with('{') {
        return Err(refused(RpcError::invalid_request("a request must be a JSON object")));
    }
    // Members stay raw: the id is echoed as written, and each other member is decoded into its own type.
    let members: Members<'_> = serde_json::from_str(member)
        .map_err(|error| refused(RpcError::invalid_request(&format!("unreadable request object: {error}"))))?;
    let id = match members.id {
        None => None,
        Some(raw) => match RawId::from_raw(raw) {
            Some(id) => Some(id),
            None => {
                return Err((RawId::null(), RpcError::invalid_request("`id` must be a string, a number or null")));
            }
        },
    };
    let reply_id = || id.clone().unwrap_or_else(RawId::null);
    let version_is_2 = members.jsonrpc.is_some_and(|raw| {
        raw.get() == r#""2.0""# || serde_json::from_str::<String>(raw.get()).is_ok_and(|version| version == "2.0")
    });
    if !version_is_2 {
        return Err((reply_id(), RpcError::invalid_request(r#"`jsonrpc` must be exactly "2.0""#)));
    }
    let method = match members.method {
        Some(raw) => match method_name(raw) {
            Some(method) => method,
            None => return Err((reply_id(), RpcError::invalid_request("`method` must be a string"))),
        },
        None => return Err((reply_id(), RpcError::invalid_request("`method` is missing"))),
    };
    let params = match members.params {
        None => None,
        Some(raw) if raw.get().starts_with('{') => Some(raw.to_owned()),
        Some(raw) if raw.get().starts_with('[') => {
            return Err((
                reply_id(),
                RpcError::invalid_params("params must be an object; positional params are not supported"),
            ));
        }
        Some(_) => {
            return Err((reply_id(), RpcError::invalid_request("`params` must be an object or an array")));
        }
    };
    if let Some(unexpected) = members.unexpected {
        let detail = format!("unexpected member `{unexpected}` in the request object");
        return Err((reply_id(), RpcError::invalid_request(&detail)));
    }
    Ok(IncomingRequest { id, method, params })
}

/// The method named by the raw string `raw`: the table's own name when it is one, else the decoded text; `None`
/// when `raw` is no string.
fn method_name(raw: &RawValue) -> Option<Cow<'static, str>> {
    let text = raw.get();
    // A string without escapes is its JSON text in quotes (a name of the table always is): read without a copy.
    let plain = text.strip_prefix('"').and_then(|text| text.strip_suffix('"')).filter(|text| !text.contains('\\'));
    let name = match plain {
        Some(name) => Cow::Borrowed(name),
        None => Cow::Owned(serde_json::from_str::<String>(text).ok()?),
    };
    Some(crate::methods::table_name(&name).map_or_else(|| Cow::Owned(name.into_owned()), Cow::Borrowed))
}

/// A request object's members, each borrowed raw from the frame (a repeated member: its last value), and the
/// first member that JSON-RPC does not define.
#[derive(Default)]
struct Members<'a> {
    id: Option<&'a RawValue>,
    jsonrpc: Option<&'a RawValue>,
    method: Option<&'a RawValue>,
    params: Option<&'a RawValue>,
    unexpected: Option<String>,
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Object;
        impl<'de> serde::de::Visitor<'de> for Object {
            type Value = Members<'de>;

            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("a JSON-RPC request object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members = Members::default();
                while let Some(key) = map.next_key::<Member>()? {
                    let value: &'de RawValue = map.next_value()?;
                    match key {
                        Member::Id => members.id = Some(value),
                        Member::Jsonrpc => members.jsonrpc = Some(value),
                        Member::Method => members.method = Some(value),
                        Member::Params => members.params = Some(value),
                        Member::Other(name) => {
                            members.unexpected.get_or_insert(name);
                        }
                    }
                }
                Ok(members)
            }
        }
        deserializer.deserialize_map(Object)
    }
}

/// The name of a request object's member.
enum Member {
    Id,
    Jsonrpc,
    Method,
    Params,
    Other(String),
}

impl<'de> Deserialize<'de> for Member {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Name;
        impl serde::de::Visitor<'_> for Name {
            type Value = Member;

            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("a member name")
            }

            fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<Member, E> {
                Ok(match name {
                    "id" => Member::Id,
                    "jsonrpc" => Member::Jsonrpc,
                    "method" => Member::Method,
                    "params" => Member::Params,
                    other => Member::Other(other.to_owned()),
                })
            }
        }
        deserializer.deserialize_identifier(Name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(text: &str) -> Result<IncomingRequest, (RawId, RpcError)> {
        parse_request(text)
    }

    fn raw_id(text: &str) -> RawId {
        RawId::from_raw(&RawValue::from_string(text.to_owned()).unwrap()).unwrap()
    }

    #[test]
    fn a_request_without_id_is_a_notification() {
        let request = parse(r#"{"jsonrpc": "2.0", "method": "x"}"#).unwrap();
        assert_eq!(request.id, None);
        assert!(request.params.is_none());
    }

    #[test]
    fn invalid_members_are_reported_with_the_id_when_it_was_readable() {
        let (id, error) = parse(r#"{"jsonrpc": "1.0", "method": "x", "id": 4}"#).unwrap_err();
        assert_eq!(id, raw_id("4"));
        assert_eq!(error.code, crate::error::codes::INVALID_REQUEST);
        let (id, _) = parse(r#"{"jsonrpc": "2.0", "method": 1, "params": "bar"}"#).unwrap_err();
        assert_eq!(id, RawId::null());
        let (id, error) = parse(r#"{"jsonrpc": "2.0", "method": "x", "id": [1]}"#).unwrap_err();
        assert_eq!((id, error.code), (RawId::null(), crate::error::codes::INVALID_REQUEST));
        let (id, error) = parse(r#"{"jsonrpc": "2.0", "method": "x", "id": "a", "extra": 1}"#).unwrap_err();
        assert_eq!((id.get(), error.code), (r#""a""#, crate::error::codes::INVALID_REQUEST));
    }

    #[test]
    fn ids_are_kept_as_written() {
        for written in ["12345678901234567890123456789", "1.0e400", "-0", "1.5e300", r#""x\u00e9""#, "null"] {
            let request = parse(&format!(r#"{{"jsonrpc":"2.0","method":"x","id": {written} }}"#)).unwrap();
            assert_eq!(request.id.as_ref().map(RawId::get), Some(written));
        }
        for refused in ["true", "{}", "[]"] {
            assert!(RawId::from_raw(&RawValue::from_string(refused.to_owned()).unwrap()).is_none(), "{refused}");
        }
    }

    #[test]
    fn responses_embed_the_encoded_result_and_the_id_as_written() {
        let result = json!({"a": 1});
        let encoded = encode_result_for(&raw_id(r#""x""#), &result).unwrap();
        assert_eq!(encoded, r#"{"jsonrpc":"2.0","id":"x","result":{"a":1}}"#);
        let encoded = encode_result_for(&raw_id("1.0e400"), &result).unwrap();
        assert_eq!(encoded, r#"{"jsonrpc":"2.0","id":1.0e400,"result":{"a":1}}"#);
        assert_eq!(RawId::from(&Id::Number(7.into())), raw_id("7"));
    }

    #[test]
    fn frames_are_single_messages_or_batches_and_not_json_is_a_parse_error() {
        assert!(matches!(parse_frame(r#" {"a":1} "#), Ok(Frame::Single(_))));
        assert!(matches!(parse_frame(r#"[{"a":1}, 2]"#), Ok(Frame::Batch(members)) if members.len() == 2));
        let error = parse_frame("[{").err().unwrap();
        assert_eq!(error.code, crate::error::codes::PARSE_ERROR);
        // A single message is read once, by `parse_request`, which still tells text that is not JSON apart.
        assert!(matches!(parse_frame(" {"), Ok(Frame::Single("{"))));
        for not_json in ["{", r#"{"jsonrpc": "2.0", "method": "x"} }"#, "hello", r#"{"a": tru}"#] {
            let (id, error) = parse(not_json).unwrap_err();
            assert_eq!((id, error.code), (RawId::null(), crate::error::codes::PARSE_ERROR), "{not_json}");
        }
        for no_request in ["5", r#""x""#, "{}", r#"{"jsonrpc": "2.0", "method": "x", "params": 1}"#] {
            let (_, error) = parse(no_request).unwrap_err();
            assert_eq!(error.code, crate::error::codes::INVALID_REQUEST, "{no_request}");
        }
    }

    #[test]
    fn reading_a_request_allocates_only_what_it_keeps() {
        // A rename as clients send it: its params and id are kept (two boxes), and reading the params' extent
        // takes serde's one scratch buffer. Reading the frame whole first and copying the method's name made five.
        let frame = r#"{"jsonrpc":"2.0","id":17,"method":"session.rename","params":{"session_id":"0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","client_rename_id":"r-17","change":{"set":{"title":"A title of some length"}}}}"#;
        let (request, made) = crate::allocations::counted(|| match parse_frame(frame) {
            Ok(Frame::Single(text)) => parse_request(text),
            _ => panic!("a single request"),
        });
        let request = request.unwrap();
        assert_eq!(request.method_label(), "session.rename");
        assert!(made <= 3, "reading a rename made {made} allocations");
    }

    #[test]
    fn a_method_of_the_table_is_borrowed_from_it() {
        let request = parse(r#"{"jsonrpc": "2.0", "method": "session.rename", "id": 1}"#).unwrap();
        assert!(matches!(request.method, Cow::Borrowed("session.rename")));
        assert_eq!(request.method_label(), "session.rename");
        let escaped = parse(r#"{"jsonrpc": "2.0", "method": "session\u002erename", "id": 1}"#).unwrap();
        assert!(matches!(escaped.method, Cow::Borrowed("session.rename")));
        let unknown = parse(r#"{"jsonrpc": "2.0", "method": "made.up\n", "id": 1}"#).unwrap();
        assert_eq!((unknown.method.as_ref(), unknown.method_label()), ("made.up\n", "unknown"));
    }
}
