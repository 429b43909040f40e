//! The provider tests' own helpers: draining a provider's stream. The fake model vendor they talk to is
//! `troupe_test_support::FakeServer`, shared with the e2e suite.

#![allow(dead_code)]

use std::time::Duration;

use futures::StreamExt;
use troupe_runtime::model::{ModelError, ModelStream, StreamEvent};

/// Every await in these tests is bounded by this.
pub const TEST_TIMEOUT: Duration = troupe_test_support::WAIT;

/// Drains a stream under [`TEST_TIMEOUT`].
pub async fn collect(stream: ModelStream) -> Vec<Result<StreamEvent, ModelError>> {
    tokio::time::timeout(TEST_TIMEOUT, stream.collect::<Vec<_>>()).await.expect("the stream finished in time")
}

/// The concatenated text deltas of `events`, and how many there were.
pub fn text_of(events: &[Result<StreamEvent, ModelError>]) -> (String, usize) {
    let deltas: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            Ok(StreamEvent::TextDelta(text)) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    (deltas.concat(), deltas.len())
}
