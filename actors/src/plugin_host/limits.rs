//! The bounds on `plugin/emit`: payload size, name length, and per plugin and session 40 events a second and
//! 4 MiB a minute. Over a bound the plugin gets a clear error; nothing is written.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use troupe_protocol::types::plugin::{MAX_EMIT_NAME_CHARS, MAX_EMIT_PAYLOAD_BYTES};

pub const MAX_EVENTS_PER_SECOND: usize = 40;
pub const MAX_BYTES_PER_MINUTE: usize = 4 * 1024 * 1024;
/// Sessions tracked at once; the oldest windows are forgotten first (they are empty after a minute anyway).
const MAX_TRACKED_SESSIONS: usize = 4096;

pub use crate::error::EmitRefusal;

/// Checks the name and the size, which need no state.
pub fn check_shape(name: &str, payload_bytes: usize) -> Result<(), EmitRefusal> {
    if name.is_empty() || name.chars().count() > MAX_EMIT_NAME_CHARS {
        return Err(EmitRefusal::Name { max_chars: MAX_EMIT_NAME_CHARS });
    }
    if payload_bytes > MAX_EMIT_PAYLOAD_BYTES {
        return Err(EmitRefusal::PayloadTooLarge { bytes: payload_bytes, max_bytes: MAX_EMIT_PAYLOAD_BYTES });
    }
    Ok(())
}

/// One plugin's emit windows, by session.
#[derive(Default)]
pub struct EmitLimiter {
    sessions: HashMap<String, Window>,
}

#[derive(Default)]
struct Window {
    /// Emits of the last second.
    events: VecDeque<Instant>,
    /// Emits of the last minute with their payload sizes, and their sum.
    bytes: VecDeque<(Instant, usize)>,
    total: usize,
}

impl EmitLimiter {
    /// Admits an emit of `bytes` for `session_id` at `now`, counting it, or refuses it without counting.
    pub fn admit(&mut self, session_id: &str, bytes: usize, now: Instant) -> Result<(), EmitRefusal> {
        if self.sessions.len() >= MAX_TRACKED_SESSIONS && !self.sessions.contains_key(session_id) {
            self.sessions.retain(|_, window| {
                window.expire(now);
                window.total > 0 || !window.events.is_empty()
            });
        }
        let window = self.sessions.entry(session_id.to_owned()).or_default();
        window.expire(now);
        if window.events.len() >= MAX_EVENTS_PER_SECOND {
            return Err(EmitRefusal::TooManyEvents { per_second: MAX_EVENTS_PER_SECOND });
        }
        if window.total + bytes > MAX_BYTES_PER_MINUTE {
            return Err(EmitRefusal::TooManyBytes { per_minute_bytes: MAX_BYTES_PER_MINUTE });
        }
        window.events.push_back(now);
        window.bytes.push_back((now, bytes));
        window.total += bytes;
        Ok(())
    }
}

impl Window {
    fn expire(&mut self, now: Instant) {
        while self.events.front().is_some_and(|at| now.duration_since(*at) >= Duration::from_secs(1)) {
            self.events.pop_front();
        }
        while let Some((at, bytes)) = self.bytes.front().copied() {
            if now.duration_since(at) < Duration::from_secs(60) {
                break;
            }
            self.bytes.pop_front();
            self.total -= bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forty_events_a_second_per_session_then_refused_until_the_second_passes() {
        let mut limiter = EmitLimiter::default();
        let start = Instant::now();
        for _ in 0..MAX_EVENTS_PER_SECOND {
            limiter.admit("s1", 10, start).unwrap();
        }
        assert_eq!(
            limiter.admit("s1", 10, start),
            Err(EmitRefusal::TooManyEvents { per_second: MAX_EVENTS_PER_SECOND })
        );
        limiter.admit("s2", 10, start).unwrap();
        limiter.admit("s1", 10, start + Duration::from_secs(1)).unwrap();
    }

    #[test]
    fn four_mib_a_minute_per_session() {
        let mut limiter = EmitLimiter::default();
        let start = Instant::now();
        for second in 0..16 {
            limiter.admit("s", 256 * 1024, start + Duration::from_secs(second)).unwrap();
        }
        let refused = limiter.admit("s", 1, start + Duration::from_secs(20));
        assert_eq!(refused, Err(EmitRefusal::TooManyBytes { per_minute_bytes: MAX_BYTES_PER_MINUTE }));
        limiter.admit("s", 256 * 1024, start + Duration::from_secs(60)).unwrap();
    }

    #[test]
    fn shape_checks_name_and_payload() {
        assert_eq!(check_shape("", 1), Err(EmitRefusal::Name { max_chars: MAX_EMIT_NAME_CHARS }));
        assert_eq!(check_shape(&"n".repeat(129), 1), Err(EmitRefusal::Name { max_chars: MAX_EMIT_NAME_CHARS }));
        check_shape(&"é".repeat(128), MAX_EMIT_PAYLOAD_BYTES).unwrap();
        let refused = check_shape("n", MAX_EMIT_PAYLOAD_BYTES + 1).unwrap_err();
        let answer = troupe_protocol::RpcError::from(crate::error::EngineError::EmitRefused(refused));
        assert_eq!(answer.error_code(), Some(troupe_protocol::error_code::ErrorCode::PayloadTooLarge));
    }
}
