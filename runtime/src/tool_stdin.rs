//! The queue between `run.tool_stdin` and a running shell call's stdin, bounded in bytes.
//!
//! Input waits here until the child reads it (its pipe holds only what the kernel buffers), so a child that never
//! reads its stdin would otherwise make the daemon hold every byte clients send it. The queue counts the bytes of
//! each input from when it is queued until it is written to the pipe (or dropped with the call), and refuses input
//! that would take it past its bound, saying how much waits: the client retries once the child reads, or ends the
//! input. End of input is never refused for room.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::mpsc;

use crate::tools::StdinInput;

/// The most stdin bytes that may wait unread for one tool call.
pub const MAX_QUEUED_STDIN_BYTES: usize = 4 * 1024 * 1024;

/// Why input was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StdinRefused {
    /// The call no longer takes input: it ended, its input was ended, or the child closed its stdin.
    #[error("the tool call no longer reads its stdin")]
    Closed,
    /// Queuing the input would leave more than `max_bytes` waiting for the child to read.
    #[error("{queued_bytes} bytes of stdin already wait unread; at most {max_bytes} may")]
    Full { queued_bytes: usize, max_bytes: usize },
}

/// A queue for one call's stdin that holds at most `max_bytes` of unread input.
pub fn stdin_queue(max_bytes: usize) -> (StdinSender, StdinReceiver) {
    let (sender, receiver) = mpsc::unbounded_channel();
    let queued = Arc::new(AtomicUsize::new(0));
    (StdinSender { sender, queued, max_bytes }, StdinReceiver { receiver })
}

/// The sending side, held by the run while the call runs.
#[derive(Debug)]
pub struct StdinSender {
    // Unbounded in items because it is bounded in bytes (an input is at least one byte, or the end).
    sender: mpsc::UnboundedSender<QueuedInput>,
    queued: Arc<AtomicUsize>,
    max_bytes: usize,
}

impl StdinSender {
    /// Queues `input` unless it would leave more than the bound waiting, or the call no longer takes input. An
    /// input larger than the bound is taken when nothing waits (a request may carry up to `[limits]
    /// max_input_bytes`, which an operator may set higher), so what waits is at most the larger of the two.
    pub fn try_send(&self, input: StdinInput) -> Result<(), StdinRefused> {
        let bytes = match &input {
            StdinInput::Data(data) => data.len(),
            StdinInput::Eof => 0,
        };
        let max_bytes = self.max_bytes;
        self.queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
                queued.checked_add(bytes).filter(|total| *total <= max_bytes || bytes == 0 || queued == 0)
            })
            .map_err(|queued_bytes| StdinRefused::Full { queued_bytes, max_bytes })?;
        let release = Release { queued: self.queued.clone(), bytes };
        self.sender.send(QueuedInput { input, _release: release }).map_err(|_| StdinRefused::Closed)
    }

    /// Bytes queued and not yet written to the child.
    pub fn queued_bytes(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }
}

/// The receiving side, read by the call as it writes to the child's stdin.
#[derive(Debug)]
pub struct StdinReceiver {
    receiver: mpsc::UnboundedReceiver<QueuedInput>,
}

impl StdinReceiver {
    /// The next input; `None` once the sender is gone (which is end of input too).
    pub async fn recv(&mut self) -> Option<QueuedInput> {
        self.receiver.recv().await
    }
}

/// An input taken from the queue. Its bytes count as waiting until it is dropped: drop it once they are written.
#[derive(Debug)]
pub struct QueuedInput {
    pub input: StdinInput,
    _release: Release,
}

/// Gives an input's bytes back to the queue's bound when dropped.
#[derive(Debug)]
struct Release {
    queued: Arc<AtomicUsize>,
    bytes: usize,
}

impl Drop for Release {
    fn drop(&mut self) {
        self.queued.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn unread_input_is_bounded_in_bytes_until_it_is_written() {
        let (sender, mut receiver) = stdin_queue(10);
        sender.try_send(StdinInput::Data(vec![b'a'; 6])).unwrap();
        assert_eq!(
            sender.try_send(StdinInput::Data(vec![b'b'; 5])),
            Err(StdinRefused::Full { queued_bytes: 6, max_bytes: 10 })
        );
        sender.try_send(StdinInput::Data(vec![b'c'; 4])).unwrap();
        // The end is never refused for room.
        sender.try_send(StdinInput::Eof).unwrap();
        let first = receiver.recv().await.unwrap();
        assert_eq!(first.input, StdinInput::Data(vec![b'a'; 6]));
        assert_eq!(sender.queued_bytes(), 10, "taken but not yet written: still counted");
        drop(first);
        assert_eq!(sender.queued_bytes(), 4);
        sender.try_send(StdinInput::Data(vec![b'd'; 6])).unwrap();
        drop(receiver);
        assert_eq!(sender.queued_bytes(), 0, "what a finished call never read is given back");
        assert_eq!(sender.try_send(StdinInput::Data(vec![b'e'])), Err(StdinRefused::Closed));
    }

    #[tokio::test]
    async fn an_input_larger_than_the_bound_is_taken_only_when_nothing_waits() {
        let (sender, _receiver) = stdin_queue(10);
        sender.try_send(StdinInput::Data(vec![b'a'; 12])).unwrap();
        assert_eq!(
            sender.try_send(StdinInput::Data(vec![b'b'])),
            Err(StdinRefused::Full { queued_bytes: 12, max_bytes: 10 })
        );
    }
}
