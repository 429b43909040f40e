//! Bounded waits: a test never sleeps to let something happen, it polls for the thing with a deadline and fails
//! with what it was waiting for.

use std::time::{Duration, Instant};

/// The usual bound of a single wait in the suites. Generous: CI machines are shared and slow.
pub const WAIT: Duration = Duration::from_secs(20);

/// How often the `eventually` family asks again.
const POLL: Duration = Duration::from_millis(10);

/// Awaits `future`, failing the test with `what` after [`WAIT`].
pub async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(WAIT, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {WAIT:?} waiting for {what}"),
    }
}

/// Polls `condition` until it holds, failing the test with `what` once `timeout` has passed.
pub async fn eventually(what: &str, timeout: Duration, condition: impl FnMut() -> bool) {
    if !holds_within(timeout, condition).await {
        panic!("timed out after {timeout:?} waiting for {what}");
    }
}

/// Polls `condition` until it holds (true) or `timeout` has passed (false), for a caller that says more than
/// [`eventually`] when it fails (e.g. the state it last saw).
pub async fn holds_within(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let polling = async {
        while !condition() {
            tokio::time::sleep(POLL).await;
        }
    };
    tokio::time::timeout(timeout, polling).await.is_ok()
}

/// Polls `probe` (which may itself await, e.g. a request to the daemon, and may borrow mutably what it captured:
/// an `async ||` closure) until it returns `Some`, and returns that value; fails the test with `what` once
/// `timeout` has passed. A probe that hangs counts against the deadline too.
pub async fn eventually_some<T>(what: &str, timeout: Duration, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let polling = async {
        loop {
            if let Some(value) = probe().await {
                return value;
            }
            tokio::time::sleep(POLL).await;
        }
    };
    match tokio::time::timeout(timeout, polling).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {timeout:?} waiting for {what}"),
    }
}

/// [`eventually`] for code without a runtime (blocking the calling thread between polls).
pub fn eventually_blocking(what: &str, timeout: Duration, condition: impl FnMut() -> bool) {
    assert!(holds_within_blocking(timeout, condition), "timed out after {timeout:?} waiting for {what}");
}

/// [`holds_within`] for code without a runtime.
pub fn holds_within_blocking(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test]
    async fn eventually_returns_once_the_condition_holds() {
        let calls = AtomicU32::new(0);
        eventually("the third call", WAIT, || calls.fetch_add(1, Ordering::Relaxed) >= 2).await;
        assert_eq!(calls.load(Ordering::Relaxed), 3);
    }

    #[tokio::test]
    #[should_panic(expected = "waiting for something that never happens")]
    async fn eventually_fails_with_what_it_waited_for() {
        eventually("something that never happens", Duration::from_millis(50), || false).await;
    }

    #[tokio::test]
    async fn eventually_some_returns_the_value() {
        let mut count = 0;
        let value = eventually_some("a value", WAIT, || {
            count += 1;
            let ready = count == 3;
            async move { ready.then_some(count) }
        })
        .await;
        assert_eq!(value, 3);
    }

    #[tokio::test]
    async fn holds_within_says_whether_the_condition_held() {
        assert!(holds_within(WAIT, || true).await);
        assert!(!holds_within(Duration::from_millis(30), || false).await);
        assert!(holds_within_blocking(WAIT, || true));
        assert!(!holds_within_blocking(Duration::from_millis(30), || false));
    }

    #[test]
    #[should_panic(expected = "waiting for a blocked condition")]
    fn eventually_blocking_fails_after_its_timeout() {
        eventually_blocking("a blocked condition", Duration::from_millis(50), || false);
    }
}
