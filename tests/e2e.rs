//! End-to-end tests: the real daemon on 127.0.0.1:0 with a temporary data directory, driven over real
//! WebSockets by the shared protocol client or by raw frames where the wire itself is under test.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

mod suite;
