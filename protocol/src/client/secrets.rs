//! Frames that carry secrets. The params of a method marked [`Method::CARRIES_SECRETS`] are serialized into a
//! buffer of exactly the right size, so that no reallocation leaves an unwipeable copy behind, and that buffer
//! is wiped as soon as the transport has taken its copy of the frame. Every other request is a plain string.
//! Vocabulary, bottom layer: [`OutgoingText`] is every frame the client writes, whoever encodes it.

use serde::Serialize;
use zeroize::{Zeroize, Zeroizing};

use super::error::ClientError;
use crate::jsonrpc::{Id, Method, encode_request};
use crate::transport::{MessageFrame, Transport, TransportError};

/// A serialized request waiting to be written.
pub(super) enum OutgoingText {
    Plain(String),
    /// Carries secrets: wiped once the transport has taken its copy. What the transport does with that copy
    /// (tungstenite's write buffer, the kernel's socket buffer, the other end of an in-process channel) is
    /// outside this crate's control.
    Secret(Zeroizing<String>),
}

impl OutgoingText {
    pub(super) fn encode<M: Method>(id: u64, params: &M::Params) -> Result<OutgoingText, ClientError> {
        let encoded = if M::CARRIES_SECRETS {
            encode_secret_request::<M>(id, params).map(OutgoingText::Secret)
        } else {
            encode_request::<M>(&Id::Number(id.into()), params).map(OutgoingText::Plain)
        };
        encoded.map_err(|error| ClientError::Encode(format!("the params of `{}`: {error}", M::NAME)))
    }

    /// Writes the frame to `transport`, then wipes it if it carries secrets.
    pub(super) async fn send_to<T: Transport>(self, transport: &mut T) -> Result<(), TransportError> {
        match self {
            OutgoingText::Plain(text) => transport.send(MessageFrame::Text(text)).await,
            OutgoingText::Secret(secret) => {
                let sent = transport.send(MessageFrame::Text(secret.as_str().to_owned())).await;
                // The transport has its copy now; ours is wiped here.
                drop(secret);
                sent
            }
        }
    }
}

/// Serializes a request into a buffer of exactly the right size: a growing buffer would leave copies of the
/// secret behind in the memory it frees on each reallocation, which nothing could wipe.
fn encode_secret_request<M: Method>(id: u64, params: &M::Params) -> Result<Zeroizing<String>, serde_json::Error> {
    #[derive(Serialize)]
    struct Envelope<'a, P> {
        jsonrpc: &'static str,
        id: u64,
        method: &'static str,
        params: &'a P,
    }
    let envelope = Envelope { jsonrpc: "2.0", id, method: M::NAME, params };
    let mut buffer = Zeroizing::new(Vec::with_capacity(crate::encoded::encoded_len(&envelope)?));
    serde_json::to_writer(&mut *buffer, &envelope)?;
    match String::from_utf8(std::mem::take(&mut *buffer)) {
        Ok(text) => Ok(Zeroizing::new(text)),
        Err(error) => {
            // serde_json only writes UTF-8; wipe the bytes anyway before reporting.
            error.into_bytes().zeroize();
            Err(serde::ser::Error::custom("the encoded request is not UTF-8"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::methods::method;

    #[test]
    fn secret_requests_are_encoded_like_plain_ones_in_an_exact_buffer() {
        let params = crate::types::common::SessionIdParams { session_id: "s-1".to_owned() };
        let secret = encode_secret_request::<method::SessionGet>(7, &params).unwrap();
        let plain = encode_request::<method::SessionGet>(&Id::Number(7.into()), &params).unwrap();
        assert_eq!(secret.as_str(), plain);
        assert_eq!(secret.capacity(), secret.len());
    }
}
