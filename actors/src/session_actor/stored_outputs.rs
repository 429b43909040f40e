//! The whole outputs of loud tool calls, stored so that a result's `output_ref` can name them
//! (`troupe_runtime::stored_output` has the layout and the reader).
//!
//! Each running call's masked output passes through here after it was published live. Until one of its streams
//! has produced more than `[tools] max_output_bytes` (what the result keeps whole) the bytes are only buffered:
//! a quiet call costs no file. Past that, the call gets an `output_ref` and a writer on a blocking thread, which
//! takes the buffered bytes and then every later chunk through a bounded channel; a full channel makes the chunk's
//! `RunOutput` wait, and so the tool, as the live stream already does. When the run appends the call's
//! `tool_call_terminated`, the session first waits for the writer to finish (files and directories synced), then
//! appends the result with `output_ref` set: a client never holds a reference the disk does not have. A call that
//! ends any other way drops its writer, which removes what it wrote.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use troupe_protocol::types::tool_output::OutputStream;
use troupe_runtime::stored_output::{StoredOutputWriter, new_output_ref};

/// Chunks that may wait for the writer before a `RunOutput` waits for room.
const WRITER_QUEUE_CHUNKS: usize = 16;

/// When whole outputs are stored, and how much of each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredOutputLimits {
    /// A call whose stream produced more than this many bytes had its result cut (`[tools] max_output_bytes`), so
    /// its whole output is stored.
    pub store_after_bytes: u64,
    /// Bytes of each stream stored (`[tools] max_stored_output_bytes`); 0 stores nothing.
    pub max_stored_bytes: u64,
}

impl Default for StoredOutputLimits {
    fn default() -> Self {
        StoredOutputLimits { store_after_bytes: 64 * 1024, max_stored_bytes: 8 * 1024 * 1024 }
    }
}

enum WriterCommand {
    Write(OutputStream, Bytes),
    Finish(oneshot::Sender<std::io::Result<()>>),
}

/// A call whose output is being stored.
struct Writer {
    output_ref: String,
    commands: mpsc::Sender<WriterCommand>,
}

/// One running call's output as far as storing it goes.
#[derive(Default)]
struct CallOutput {
    /// Bytes produced by each stream so far.
    totals: HashMap<OutputStream, u64>,
    /// The chunks so far, while no writer exists.
    buffered: Vec<(OutputStream, Bytes)>,
    writer: Option<Writer>,
}

pub(super) struct StoredOutputs {
    session_dir: PathBuf,
    limits: StoredOutputLimits,
    calls: HashMap<String, CallOutput>,
}

impl StoredOutputs {
    pub(super) fn new(session_dir: PathBuf, limits: StoredOutputLimits) -> Self {
        StoredOutputs { session_dir, limits, calls: HashMap::new() }
    }

    /// Takes one chunk of a running call. Returns what the chunk's sender must wait for when the call's writer
    /// has no room for it.
    pub(super) fn record(
        &mut self,
        tool_call_id: &str,
        stream: OutputStream,
        data: &Bytes,
    ) -> Option<impl Future<Output = ()> + use<>> {
        if self.limits.max_stored_bytes == 0 {
            return None;
        }
        let call = self.calls.entry(tool_call_id.to_owned()).or_default();
        let total = call.totals.entry(stream).or_default();
        *total += data.len() as u64;
        let past_cut = *total > self.limits.store_after_bytes;
        match &call.writer {
            Some(writer) => {
                let commands = writer.commands.clone();
                let command = WriterCommand::Write(stream, data.clone());
                match commands.try_send(command) {
                    Ok(()) => None,
                    // A writer that is gone failed; it answers the finish with its error.
                    Err(mpsc::error::TrySendError::Closed(_)) => None,
                    Err(mpsc::error::TrySendError::Full(command)) => Some(async move {
                        let _ = commands.send(command).await;
                    }),
                }
            }
            None => {
                call.buffered.push((stream, data.clone()));
                if past_cut {
                    let buffered = std::mem::take(&mut call.buffered);
                    call.writer = Some(start_writer(self.session_dir.clone(), self.limits.max_stored_bytes, buffered));
                }
                None
            }
        }
    }

    /// The call ended with a result: its `output_ref` and what makes the stored output durable, if it has one.
    /// Either way the call is forgotten.
    pub(super) fn finish(
        &mut self,
        tool_call_id: &str,
    ) -> Option<(String, impl Future<Output = std::io::Result<()>> + use<>)> {
        let writer = self.calls.remove(tool_call_id)?.writer?;
        let finishing = async move {
            let (answer, answered) = oneshot::channel();
            let gone = || std::io::Error::other("the output writer stopped");
            writer.commands.send(WriterCommand::Finish(answer)).await.map_err(|_| gone())?;
            answered.await.map_err(|_| gone())?
        };
        Some((writer.output_ref, finishing))
    }

    /// Forgets a call that ended without a result that could name its output; its writer removes what it wrote.
    pub(super) fn forget(&mut self, tool_call_id: &str) {
        self.calls.remove(tool_call_id);
    }

    /// Forgets every call: the run ended.
    pub(super) fn forget_all(&mut self) {
        self.calls.clear();
    }
}

/// Starts storing a call's output on a blocking thread, with the chunks it produced so far.
fn start_writer(session_dir: PathBuf, max_stored_bytes: u64, buffered: Vec<(OutputStream, Bytes)>) -> Writer {
    let output_ref = new_output_ref();
    let (commands, mut received) = mpsc::channel(WRITER_QUEUE_CHUNKS);
    let target = output_ref.clone();
    tokio::task::spawn_blocking(move || {
        let mut writer = StoredOutputWriter::create(&session_dir, &target, max_stored_bytes);
        for (stream, data) in buffered {
            write(&mut writer, stream, &data);
        }
        while let Some(command) = received.blocking_recv() {
            match command {
                WriterCommand::Write(stream, data) => write(&mut writer, stream, &data),
                WriterCommand::Finish(answer) => {
                    let _ = answer.send(writer.and_then(StoredOutputWriter::finish));
                    return;
                }
            }
        }
        // Nobody will reference this output.
        if let Ok(writer) = writer {
            writer.discard();
        }
    });
    Writer { output_ref, commands }
}

/// Writes a chunk; the first failure ends the writing and is what the finish answers.
fn write(writer: &mut std::io::Result<StoredOutputWriter>, stream: OutputStream, data: &[u8]) {
    if let Ok(open) = writer
        && let Err(error) = open.write(stream, data)
    {
        tracing::warn!(%error, "storing a tool call's whole output failed; its result will have no output_ref");
        if let Ok(failed) = std::mem::replace(writer, Err(error)) {
            failed.discard();
        }
    }
}
