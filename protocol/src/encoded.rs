//! [`Encoded`]: a result a server encodes once and serves to many requests as the same bytes.
//!
//! A handler whose answer changes rarely and is read often (`session.get` of a live session) keeps its encoding
//! and shares it: each reply embeds the JSON as it is, without cloning the value or serializing it again. The type
//! parameter records what the JSON encodes, so a method can only serve an encoding of its own result type.

use std::marker::PhantomData;
use std::sync::Arc;

use serde::Serialize;
use serde_json::value::RawValue;

/// The JSON encoding of a `T`, shared. Cloning it clones a reference count.
pub struct Encoded<T> {
    json: Arc<RawValue>,
    encodes: PhantomData<fn() -> T>,
}

impl<T: Serialize> Encoded<T> {
    /// Encodes `value`.
    pub fn new(value: &T) -> Result<Self, serde_json::Error> {
        let json = serde_json::value::to_raw_value(value)?;
        Ok(Encoded { json: Arc::from(json), encodes: PhantomData })
    }
}

impl<T> Encoded<T> {
    /// The JSON text.
    pub fn get(&self) -> &str {
        self.json.get()
    }
}

impl<T> Clone for Encoded<T> {
    fn clone(&self) -> Self {
        Encoded { json: self.json.clone(), encodes: PhantomData }
    }
}

impl<T> std::fmt::Debug for Encoded<T> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_tuple("Encoded").field(&self.json.get()).finish()
    }
}

/// Writes the JSON as it was encoded.
impl<T> Serialize for Encoded<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.json.serialize(serializer)
    }
}

/// The length of `value`'s compact JSON encoding (what `serde_json::to_string` would return), counted by a writer
/// that keeps no bytes: for sizing a buffer exactly, or for an estimate that needs only the size.
pub fn encoded_len<T: Serialize + ?Sized>(value: &T) -> Result<usize, serde_json::Error> {
    struct ByteCounter(usize);
    impl std::io::Write for ByteCounter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = ByteCounter(0);
    serde_json::to_writer(&mut counter, value)?;
    Ok(counter.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::{RawId, encode_result_for};

    #[test]
    fn a_reply_embeds_the_encoding_as_it_is() {
        let encoded = Encoded::new(&serde_json::json!({"session": {"seq": 3, "title": "t\u{e9}"}})).unwrap();
        let id = RawId::from(&crate::jsonrpc::Id::Number(7.into()));
        let reply = encode_result_for(&id, &encoded.clone()).unwrap();
        assert_eq!(reply, r#"{"jsonrpc":"2.0","id":7,"result":{"session":{"seq":3,"title":"té"}}}"#);
        assert_eq!(encoded.get(), r#"{"session":{"seq":3,"title":"té"}}"#);
    }

    #[test]
    fn encoded_len_is_the_length_of_the_encoding() {
        let value = serde_json::json!({"path": "notes \"1\".txt", "lines": [1, 2], "title": "t\u{e9}\n"});
        assert_eq!(encoded_len(&value).unwrap(), value.to_string().len());
        assert_eq!(encoded_len("").unwrap(), 2);
    }
}
