//! A spinner on stderr while `troupe run` waits for the model or for an approval, on a terminal only. It draws
//! only between whole lines of output (the follower clears it before printing anything), so it never lands in
//! the middle of streamed text, and it never reaches a pipe or a file.

use std::io::{IsTerminal as _, Write as _};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/// What the spinner is waiting for, and whether a frame is on the screen.
#[derive(Default)]
struct State {
    label: Option<&'static str>,
    drawn: bool,
    frame: usize,
    stopped: bool,
}

/// The spinner; inert when stderr is not a terminal.
pub struct Spinner {
    shared: Option<Arc<Mutex<State>>>,
}

impl Spinner {
    /// A spinner on stderr when it is a terminal (and `enabled`), else one that draws nothing.
    pub fn new(enabled: bool) -> Self {
        if !enabled || !std::io::stderr().is_terminal() {
            return Spinner { shared: None };
        }
        let shared = Arc::new(Mutex::new(State::default()));
        let drawing = shared.clone();
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(Duration::from_millis(120));
                let Ok(mut state) = drawing.lock() else { return };
                if state.stopped {
                    return;
                }
                if let Some(label) = state.label {
                    let frame = FRAMES[state.frame % FRAMES.len()];
                    let _ = write!(std::io::stderr(), "\r{frame} {label}\u{1b}[K");
                    state.drawn = true;
                    state.frame += 1;
                }
            }
        });
        Spinner { shared: Some(shared) }
    }

    /// Shows the spinner with `label` (from its next frame).
    pub fn wait_for(&self, label: &'static str) {
        if let Some(shared) = &self.shared
            && let Ok(mut state) = shared.lock()
        {
            state.label = Some(label);
        }
    }

    /// Hides the spinner and erases its frame; returns once the line is clean to print on.
    pub fn clear(&self) {
        self.erase(true);
    }

    /// Erases the frame so a line can be printed; the spinner comes back at its next frame.
    pub fn erase_frame(&self) {
        self.erase(false);
    }

    fn erase(&self, stop: bool) {
        if let Some(shared) = &self.shared
            && let Ok(mut state) = shared.lock()
        {
            if stop {
                state.label = None;
            }
            if state.drawn {
                let _ = write!(std::io::stderr(), "\r\u{1b}[K");
                state.drawn = false;
            }
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.clear();
        if let Some(shared) = &self.shared
            && let Ok(mut state) = shared.lock()
        {
            state.stopped = true;
        }
    }
}
