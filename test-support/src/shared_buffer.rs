//! [`SharedBuffer`]: an in-memory writer whose clones share one buffer, for tests that capture what a logger (a
//! `tracing_subscriber::fmt()` writer: `.with_writer(move || buffer.clone())`) or any other writer printed.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// Bytes written through any clone, read back with [`text`](Self::text).
#[derive(Clone, Debug, Default)]
pub struct SharedBuffer(Arc<Mutex<Vec<u8>>>);

impl SharedBuffer {
    /// Everything written so far, as text (panics on bytes that are not UTF-8).
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).expect("the captured output is not UTF-8")
    }
}

impl Write for SharedBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
