//! Reading one output stream of the child: every chunk goes live to the run loop, and a bounded head and tail of
//! it is kept for the result.

use std::collections::VecDeque;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;
use troupe_protocol::types::tool_output::OutputStream;

use crate::tools::context::OutputChunk;

/// Size of one read, and so the largest live chunk.
const READ_CHUNK_BYTES: usize = 8 * 1024;

/// The start and the end of a stream, at most `limit` bytes in all; what lies between is only counted.
///
/// Both ends matter: the head shows what a command was doing, the tail how it ended (the error, the summary).
#[derive(Debug)]
pub(crate) struct CapturedOutput {
    head: Vec<u8>,
    head_limit: usize,
    tail: VecDeque<u8>,
    tail_limit: usize,
    total: u64,
}

impl CapturedOutput {
    pub(crate) fn new(limit: usize) -> Self {
        let head_limit = limit / 2;
        Self { head: Vec::new(), head_limit, tail: VecDeque::new(), tail_limit: limit - head_limit, total: 0 }
    }

    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    pub(crate) fn push(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        let head_room = self.head_limit - self.head.len();
        if head_room > 0 {
            let taken = head_room.min(data.len());
            self.head.extend_from_slice(&data[..taken]);
            data = &data[taken..];
        }
        if data.len() >= self.tail_limit {
            self.tail.clear();
            self.tail.extend(&data[data.len() - self.tail_limit..]);
            return;
        }
        let overflow = (self.tail.len() + data.len()).saturating_sub(self.tail_limit);
        self.tail.drain(..overflow);
        self.tail.extend(data);
    }

    /// The kept bytes as text (invalid UTF-8 replaced), with a marker where bytes were dropped.
    pub(crate) fn render(&self) -> String {
        let kept = (self.head.len() + self.tail.len()) as u64;
        let elided = self.total - kept;
        let (first, second) = self.tail.as_slices();
        let mut tail = Vec::with_capacity(self.tail.len());
        tail.extend_from_slice(first);
        tail.extend_from_slice(second);
        if elided == 0 {
            let mut all = self.head.clone();
            all.extend_from_slice(&tail);
            return String::from_utf8_lossy(&all).into_owned();
        }
        format!("{}…[{elided} bytes elided]…{}", String::from_utf8_lossy(&self.head), String::from_utf8_lossy(&tail))
    }
}

/// Reads `reader` to its end, streaming each chunk with its offset and keeping a capture. Stops streaming, but
/// keeps reading, once the live channel is closed, so the child never blocks on a full pipe.
pub(crate) async fn pump(
    mut reader: impl AsyncRead + Unpin,
    stream: OutputStream,
    mut live: Option<mpsc::Sender<OutputChunk>>,
    capture: &mut CapturedOutput,
) {
    let mut buffer = vec![0u8; READ_CHUNK_BYTES];
    loop {
        let read = match reader.read(&mut buffer).await {
            Ok(0) => return,
            Ok(read) => read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            // A broken pipe read is the end of the stream as far as the result is concerned.
            Err(_) => return,
        };
        let data = &buffer[..read];
        let offset = capture.total();
        capture.push(data);
        if let Some(sender) = &live {
            let chunk = OutputChunk { stream, offset, data: Bytes::copy_from_slice(data) };
            if sender.send(chunk).await.is_err() {
                live = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_output_is_kept_whole() {
        let mut capture = CapturedOutput::new(10);
        capture.push(b"abc");
        capture.push(b"de");
        assert_eq!(capture.render(), "abcde");
    }

    #[test]
    fn large_output_keeps_head_and_tail_and_counts_the_rest() {
        let mut capture = CapturedOutput::new(6);
        for chunk in [&b"0123"[..], b"456", b"789ab"] {
            capture.push(chunk);
        }
        assert_eq!(capture.total(), 12);
        assert_eq!(capture.render(), "012…[6 bytes elided]…9ab");
    }

    #[test]
    fn one_chunk_larger_than_the_tail_keeps_its_end() {
        let mut capture = CapturedOutput::new(4);
        capture.push(b"abcdefghij");
        assert_eq!(capture.render(), "ab…[6 bytes elided]…ij");
    }
}
