//! How long to wait before asking the same model again.
//!
//! Pure arithmetic, so the run loop owns the sleeping (and its cancellation) and tests need no clock.

use std::time::Duration;

/// Exponential backoff for [`crate::model::FailurePolicy::RetrySameModel`], overridden by the vendor's
/// `Retry-After` when it gives one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts per chain entry, the first included; past it the run loop moves to the next model.
    pub max_attempts_per_model: u32,
    /// The wait after the first failed attempt; each further one doubles it.
    pub base_delay: Duration,
    /// No wait is longer, not even one the vendor asks for: a vendor asking for minutes is better served by
    /// the next model in the chain.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    /// Three attempts, 100 ms then 200 ms apart, as upstream; at most 10 s.
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_attempts_per_model: 3,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// The wait after failed attempt number `attempt` (1 for the first attempt), before the next one.
    ///
    /// The vendor's `retry_after_ms`, when present, replaces the backoff; either is capped at `max_delay`.
    pub fn delay_for(&self, attempt: u32, retry_after_ms: Option<u64>) -> Duration {
        let delay = match retry_after_ms {
            Some(milliseconds) => Duration::from_millis(milliseconds),
            None => {
                // Attempt 1 waits base_delay, attempt 2 twice that, ...; the shift is bounded so that a huge
                // attempt number saturates instead of overflowing.
                let doublings = attempt.saturating_sub(1).min(30);
                self.base_delay.saturating_mul(1u32 << doublings)
            }
        };
        delay.min(self.max_delay)
    }

    /// Whether another attempt at the same model is allowed after `attempts_made` attempts.
    pub fn allows_another_attempt(&self, attempts_made: u32) -> bool {
        attempts_made < self.max_attempts_per_model
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_retry_after_wins_up_to_the_cap() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.delay_for(1, None), Duration::from_millis(100));
        assert_eq!(policy.delay_for(2, None), Duration::from_millis(200));
        assert_eq!(policy.delay_for(3, None), Duration::from_millis(400));
        assert_eq!(policy.delay_for(200, None), Duration::from_secs(10));
        assert_eq!(policy.delay_for(1, Some(2000)), Duration::from_secs(2));
        assert_eq!(policy.delay_for(1, Some(600_000)), Duration::from_secs(10));
        assert!(policy.allows_another_attempt(2));
        assert!(!policy.allows_another_attempt(3));
    }
}
