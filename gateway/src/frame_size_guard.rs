//! Enforces `max_frame_bytes` on the raw inbound bytes, before anything is buffered.
//!
//! actix-http's WebSocket codec checks a frame's length only once the whole frame has arrived, so a client that
//! announces a huge frame makes the server buffer all of it first, and continuation aggregation only counts what
//! it has already buffered. This adapter sits between the socket and the codec: it reads each frame header as it
//! passes (without copying or holding payload bytes) and fails the stream with [`PayloadError::Overflow`] as soon
//! as a header announces a frame, or a fragmented message, longer than the limit. The connection actor turns that
//! error into close code 1009.

use std::pin::Pin;
use std::task::{Context, Poll};

use actix_web::error::PayloadError;
use actix_web::web::Bytes;
use futures::Stream;

/// The longest WebSocket frame header: 2 fixed bytes, an 8-byte extended length and a 4-byte mask.
const MAX_HEADER_BYTES: usize = 14;

/// A byte stream that fails once the WebSocket frames in it exceed a size limit.
pub(crate) struct FrameSizeGuard<St> {
    inner: St,
    scanner: FrameScanner,
    /// Set once the limit was crossed: the bytes before the offending header have been passed on, and the next
    /// poll reports the error. After the error the stream ends.
    state: GuardState,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum GuardState {
    Passing,
    Exceeded,
    Finished,
}

impl<St> FrameSizeGuard<St> {
    pub(crate) fn new(inner: St, max_frame_bytes: usize) -> Self {
        FrameSizeGuard { inner, scanner: FrameScanner::new(max_frame_bytes as u64), state: GuardState::Passing }
    }
}

impl<St> Stream for FrameSizeGuard<St>
where
    St: Stream<Item = Result<Bytes, PayloadError>> + Unpin,
{
    type Item = Result<Bytes, PayloadError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.state {
            GuardState::Finished => return Poll::Ready(None),
            GuardState::Exceeded => {
                self.state = GuardState::Finished;
                return Poll::Ready(Some(Err(PayloadError::Overflow)));
            }
            GuardState::Passing => {}
        }
        let chunk = match Pin::new(&mut self.inner).poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => chunk,
            other => return other,
        };
        match self.scanner.scan(&chunk) {
            None => Poll::Ready(Some(Ok(chunk))),
            Some(offending_header_start) => {
                if offending_header_start == 0 {
                    self.state = GuardState::Finished;
                    return Poll::Ready(Some(Err(PayloadError::Overflow)));
                }
                // The whole frames before the offending one are still delivered, so a request that fit is not
                // lost just because the next frame was too big.
                self.state = GuardState::Exceeded;
                Poll::Ready(Some(Ok(chunk.slice(..offending_header_start))))
            }
        }
    }
}

/// Follows frame boundaries through a byte stream.
struct FrameScanner {
    max: u64,
    /// Header bytes collected so far (a header may be split across chunks).
    header: [u8; MAX_HEADER_BYTES],
    header_len: usize,
    /// Payload bytes of the current frame not seen yet.
    payload_left: u64,
    /// Payload bytes of the current data message so far, across its fragments.
    message_bytes: u64,
}

impl FrameScanner {
    fn new(max: u64) -> Self {
        FrameScanner { max, header: [0; MAX_HEADER_BYTES], header_len: 0, payload_left: 0, message_bytes: 0 }
    }

    /// Scans one chunk. Returns where, in this chunk, the header of the first frame over the limit starts (0
    /// when it started in an earlier chunk).
    fn scan(&mut self, chunk: &[u8]) -> Option<usize> {
        let mut position = 0;
        let mut header_start = 0;
        while position < chunk.len() {
            if self.payload_left > 0 {
                let available = (chunk.len() - position) as u64;
                let skipped = self.payload_left.min(available);
                self.payload_left -= skipped;
                // `skipped` is at most `available`, which came from a `usize`.
                position += skipped as usize;
                continue;
            }
            if self.header_len == 0 {
                header_start = position;
            }
            self.header[self.header_len] = chunk[position];
            self.header_len += 1;
            position += 1;
            if self.header_len < 2 || self.header_len < header_length(&self.header) {
                continue;
            }
            let exceeded = self.complete_header();
            self.header_len = 0;
            if exceeded {
                return Some(header_start);
            }
        }
        None
    }

    /// Reads the complete header in `self.header`. Returns whether the frame crosses the limit.
    fn complete_header(&mut self) -> bool {
        let first = self.header[0];
        let is_final = first & 0x80 != 0;
        let opcode = first & 0x0f;
        let length = payload_length(&self.header);
        self.payload_left = length;
        let is_control = opcode & 0x08 != 0;
        if is_control {
            // Control frames (ping, pong, close) are at most 125 bytes, may interleave with fragments, and do not
            // count towards the message they interrupt.
            return length > self.max;
        }
        if opcode == 0 {
            self.message_bytes = self.message_bytes.saturating_add(length);
        } else {
            self.message_bytes = length;
        }
        let exceeded = self.message_bytes > self.max;
        if is_final {
            self.message_bytes = 0;
        }
        exceeded
    }
}

/// The full length of a header, given at least its first two bytes.
fn header_length(header: &[u8; MAX_HEADER_BYTES]) -> usize {
    let masked = header[1] & 0x80 != 0;
    let extended = match header[1] & 0x7f {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    2 + extended + if masked { 4 } else { 0 }
}

/// The payload length announced by a complete header.
fn payload_length(header: &[u8; MAX_HEADER_BYTES]) -> u64 {
    match header[1] & 0x7f {
        126 => u64::from(u16::from_be_bytes([header[2], header[3]])),
        127 => {
            u64::from_be_bytes([header[2], header[3], header[4], header[5], header[6], header[7], header[8], header[9]])
        }
        short => u64::from(short),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A masked client frame with `length` payload bytes (the payload itself is zeros).
    fn frame(first_byte: u8, length: usize) -> Vec<u8> {
        let mut out = vec![first_byte];
        if length < 126 {
            out.push(0x80 | length as u8);
        } else if length <= usize::from(u16::MAX) {
            out.push(0x80 | 126);
            out.extend_from_slice(&(length as u16).to_be_bytes());
        } else {
            out.push(0x80 | 127);
            out.extend_from_slice(&(length as u64).to_be_bytes());
        }
        out.extend_from_slice(&[1, 2, 3, 4]);
        out.extend(std::iter::repeat_n(0, length));
        out
    }

    const FINAL_TEXT: u8 = 0x81;
    const FIRST_TEXT: u8 = 0x01;
    const CONTINUATION: u8 = 0x00;
    const FINAL_CONTINUATION: u8 = 0x80;
    const PING: u8 = 0x89;

    #[test]
    fn frames_within_the_limit_pass_in_any_chunking() {
        let mut bytes = frame(FINAL_TEXT, 100);
        bytes.extend(frame(FINAL_TEXT, 1000));
        bytes.extend(frame(PING, 4));
        bytes.extend(frame(FINAL_TEXT, 1000));
        for chunk_size in [1, 2, 3, 7, 64, bytes.len()] {
            let mut scanner = FrameScanner::new(1000);
            for chunk in bytes.chunks(chunk_size) {
                assert_eq!(scanner.scan(chunk), None, "chunk size {chunk_size}");
            }
        }
    }

    #[test]
    fn an_oversized_header_is_caught_before_its_payload() {
        let small = frame(FINAL_TEXT, 10);
        let mut bytes = small.clone();
        bytes.extend(&frame(FINAL_TEXT, 70_000)[..20]);
        let mut scanner = FrameScanner::new(1000);
        assert_eq!(scanner.scan(&bytes), Some(small.len()));

        let mut scanner = FrameScanner::new(1000);
        assert_eq!(scanner.scan(&bytes[..small.len() + 1]), None);
        assert_eq!(scanner.scan(&bytes[small.len() + 1..]), Some(0));
    }

    #[test]
    fn fragments_count_towards_their_message() {
        let mut bytes = frame(FIRST_TEXT, 600);
        bytes.extend(frame(PING, 4));
        bytes.extend(frame(CONTINUATION, 300));
        let mut scanner = FrameScanner::new(1000);
        assert_eq!(scanner.scan(&bytes), None);
        let last = frame(FINAL_CONTINUATION, 200);
        assert_eq!(scanner.scan(&last), Some(0));

        // A finished message resets the count.
        let mut scanner = FrameScanner::new(1000);
        let mut bytes = frame(FIRST_TEXT, 600);
        bytes.extend(frame(FINAL_CONTINUATION, 300));
        bytes.extend(frame(FINAL_TEXT, 900));
        assert_eq!(scanner.scan(&bytes), None);
    }
}
