//! The daemon's metrics: one registry of `troupe_*` families, served by the gateway as `GET /metrics` in the
//! OpenMetrics text format (which Prometheus scrapes as is).
//!
//! [`Metrics`] is a cheap `Arc`: the engine creates one and hands clones to what counts (the protocol layer
//! through [`ServerObserver`], the session actors' event logs, the run actors). No global: two daemons in one
//! process (the test suite) count apart.
//!
//! Counting is an atomic add on a family member found by a label set of `&'static str` and typed enums, so the
//! hot paths (requests, appended events, fsyncs) allocate nothing; the label sets that carry a provider or tool
//! name allocate once per model request or tool call, which are not hot. The gauges of state other actors own
//! (connections, sessions, active runs, pending approvals) are not maintained event by event: whoever serves a
//! scrape reads them from their owners, as `daemon.status` does, and [`Metrics::set_state`]s that view first, so
//! they cannot drift.
//!
//! The list of metrics, with their labels, is in `docs/metrics.md`.

mod labels;

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use troupe_protocol::RpcError;
use troupe_protocol::server::{DroppedNotification, HandshakeOutcome, ServerObserver};
use troupe_protocol::types::daemon::DaemonStatusResult;
use troupe_protocol::types::run::ToolResultStatus;

pub use labels::{DropKind, HandshakeResult, RpcOutcome, RunOutcome, SnapshotOutcome, ToolStatus};
use labels::{
    DropLabels, HandshakeLabels, MethodLabels, ModelErrorLabels, ProviderLabels, RequestLabels, RunEndLabels,
    SessionLoadLabels, ToolCallLabels,
};

use crate::model::ModelErrorKind;

/// The content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Histogram buckets, in seconds.
#[derive(Clone, Copy)]
struct Buckets {
    start: f64,
    count: u16,
}

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(exponential_buckets(self.start, 2.0, self.count))
    }
}

/// Requests: 0.5 ms to about 16 s.
const REQUEST_BUCKETS: Buckets = Buckets { start: 0.0005, count: 16 };
/// fdatasync: 0.1 ms to about 3.3 s.
const FSYNC_BUCKETS: Buckets = Buckets { start: 0.0001, count: 16 };
/// A session's load (for 100k events, about 5 ms through a snapshot and 130 ms without): 0.1 ms to about 13 s.
const LOAD_BUCKETS: Buckets = Buckets { start: 0.0001, count: 18 };
/// Model requests (a whole streamed turn): 50 ms to about 100 s.
const MODEL_BUCKETS: Buckets = Buckets { start: 0.05, count: 12 };

/// The daemon's metric families. Cloning is cheap; every clone counts into the same registry.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Families>,
}

struct Families {
    registry: Registry,
    connections_open: Gauge,
    handshakes: Family<HandshakeLabels, Counter>,
    requests: Family<RequestLabels, Counter>,
    request_duration: Family<MethodLabels, Histogram, Buckets>,
    sessions_live: Gauge,
    sessions_hibernated: Gauge,
    session_loads: Family<SessionLoadLabels, Counter>,
    session_load_duration: Family<SessionLoadLabels, Histogram, Buckets>,
    runs_active: Gauge,
    runs_ended: Family<RunEndLabels, Counter>,
    events_appended: Counter,
    fsync_duration: Histogram,
    outbound_dropped: Family<DropLabels, Counter>,
    gaps_sent: Counter,
    model_request_duration: Family<ProviderLabels, Histogram, Buckets>,
    model_errors: Family<ModelErrorLabels, Counter>,
    tool_calls: Family<ToolCallLabels, Counter>,
    approvals_pending: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Metrics {
    /// A registry with every family registered. A family with labels appears in a scrape once it has a series:
    /// those of a fixed label set (handshakes, runs ended, drops, session loads) from the start at 0, those
    /// labelled by method, provider or tool from their first count.
    pub fn new() -> Self {
        let mut f = Families {
            registry: Registry::with_prefix("troupe"),
            connections_open: Gauge::default(),
            handshakes: Family::default(),
            requests: Family::default(),
            request_duration: Family::new_with_constructor(REQUEST_BUCKETS),
            sessions_live: Gauge::default(),
            sessions_hibernated: Gauge::default(),
            session_loads: Family::default(),
            session_load_duration: Family::new_with_constructor(LOAD_BUCKETS),
            runs_active: Gauge::default(),
            runs_ended: Family::default(),
            events_appended: Counter::default(),
            fsync_duration: FSYNC_BUCKETS.new_metric(),
            outbound_dropped: Family::default(),
            gaps_sent: Counter::default(),
            model_request_duration: Family::new_with_constructor(MODEL_BUCKETS),
            model_errors: Family::default(),
            tool_calls: Family::default(),
            approvals_pending: Gauge::default(),
        };
        let registry = &mut f.registry;
        registry.register("connections_open", "WebSocket connections open now", f.connections_open.clone());
        registry.register("handshakes", "Handshake requests, by outcome (ok or refused)", f.handshakes.clone());
        registry.register(
            "requests",
            "JSON-RPC requests answered, by method and outcome (ok or the error code's name)",
            f.requests.clone(),
        );
        registry.register_with_unit(
            "request_duration",
            "Time a request's handler took, by method",
            Unit::Seconds,
            f.request_duration.clone(),
        );
        registry.register("sessions_live", "Sessions with a loaded actor", f.sessions_live.clone());
        registry.register(
            "sessions_hibernated",
            "Sessions known on disk without a loaded actor",
            f.sessions_hibernated.clone(),
        );
        registry.register(
            "session_loads",
            "Session logs loaded by a starting session actor (a fork's too), by what the load made of the \
             projection snapshot (used, missing or refused)",
            f.session_loads.clone(),
        );
        registry.register_with_unit(
            "session_load_duration",
            "Time a session's load took on the blocking pool, by what it made of the projection snapshot",
            Unit::Seconds,
            f.session_load_duration.clone(),
        );
        registry.register("runs_active", "Runs (and compactions) in flight", f.runs_active.clone());
        registry.register("runs_ended", "Runs ended, by terminal outcome", f.runs_ended.clone());
        registry.register("events_appended", "Events made durable in session logs", f.events_appended.clone());
        registry.register_with_unit(
            "event_log_fsync_duration",
            "fdatasync of one group commit of a session log",
            Unit::Seconds,
            f.fsync_duration.clone(),
        );
        registry.register(
            "outbound_dropped",
            "Notifications without room in a connection's outbound queue, by kind (event: the subscription got \
             a gap; transient: live tool output)",
            f.outbound_dropped.clone(),
        );
        registry.register("gaps_sent", "Gap notices written to slow subscribers", f.gaps_sent.clone());
        registry.register_with_unit(
            "model_request_duration",
            "One model request from its start to the end of its stream, by provider",
            Unit::Seconds,
            f.model_request_duration.clone(),
        );
        registry.register("model_errors", "Failed model requests, by provider and error kind", f.model_errors.clone());
        registry.register("tool_calls", "Tool calls ended, by tool and status", f.tool_calls.clone());
        registry.register("approvals_pending", "Approvals waiting for an answer", f.approvals_pending.clone());
        // Series of a fixed label set exist at 0 from the start, so that `rate()` sees their first increment.
        for outcome in [HandshakeResult::Ok, HandshakeResult::Refused] {
            drop(f.handshakes.get_or_create(&HandshakeLabels { outcome }));
        }
        for outcome in [RunOutcome::Completed, RunOutcome::Failed, RunOutcome::Cancelled, RunOutcome::Interrupted] {
            drop(f.runs_ended.get_or_create(&RunEndLabels { outcome }));
        }
        for kind in [DropKind::Event, DropKind::Transient] {
            drop(f.outbound_dropped.get_or_create(&DropLabels { kind }));
        }
        for snapshot in [SnapshotOutcome::Used, SnapshotOutcome::Missing, SnapshotOutcome::Refused] {
            drop(f.session_loads.get_or_create(&SessionLoadLabels { snapshot }));
        }
        Metrics { inner: Arc::new(f) }
    }

    /// The whole registry in the OpenMetrics text format ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut text = String::with_capacity(16 * 1024);
        // Writing into a String cannot fail.
        let _ = encode(&mut text, &self.inner.registry);
        text
    }

    /// Sets the gauges of state other parts own from the `daemon.status` view read just before a scrape is
    /// encoded, so the two always report the same counts.
    pub fn set_state(&self, state: &DaemonStatusResult) {
        let f = &self.inner;
        f.connections_open.set(gauge_value(state.connections));
        f.sessions_live.set(gauge_value(state.sessions_live));
        f.sessions_hibernated.set(gauge_value(state.sessions_hibernated));
        f.runs_active.set(gauge_value(state.runs_active));
        f.approvals_pending.set(gauge_value(state.approvals_pending));
    }

    /// A group commit made `events` events durable; its fdatasync took `fsync`.
    pub fn log_committed(&self, events: usize, fsync: Duration) {
        self.inner.events_appended.inc_by(events as u64);
        self.inner.fsync_duration.observe(fsync.as_secs_f64());
    }

    /// A session's log was loaded (its actor started from it) in `elapsed`, through its snapshot or not.
    pub fn session_loaded(&self, snapshot: SnapshotOutcome, elapsed: Duration) {
        let labels = SessionLoadLabels { snapshot };
        self.inner.session_loads.get_or_create(&labels).inc();
        self.inner.session_load_duration.get_or_create(&labels).observe(elapsed.as_secs_f64());
    }

    /// A run ended (its terminal event durable, or lost).
    pub fn run_ended(&self, outcome: RunOutcome) {
        self.inner.runs_ended.get_or_create(&RunEndLabels { outcome }).inc();
    }

    /// A model request of `provider` ended after `elapsed`, failed with `error` when it did.
    pub fn model_request(&self, provider: &str, elapsed: Duration, error: Option<ModelErrorKind>) {
        let provider = provider.to_owned();
        if let Some(kind) = error {
            self.inner.model_errors.get_or_create(&ModelErrorLabels { provider: provider.clone(), kind }).inc();
        }
        self.inner.model_request_duration.get_or_create(&ProviderLabels { provider }).observe(elapsed.as_secs_f64());
    }

    /// A tool call ended with `status`. `tool` must be a tool the run offered (or `unknown`), never a name taken
    /// from the model unchecked.
    pub fn tool_call(&self, tool: &str, status: ToolResultStatus) {
        let labels = ToolCallLabels { tool: tool.to_owned(), status: status.into() };
        self.inner.tool_calls.get_or_create(&labels).inc();
    }
}

impl ServerObserver for Metrics {
    fn handshake(&self, outcome: HandshakeOutcome) {
        let outcome = match outcome {
            HandshakeOutcome::Accepted => HandshakeResult::Ok,
            HandshakeOutcome::Refused => HandshakeResult::Refused,
        };
        self.inner.handshakes.get_or_create(&HandshakeLabels { outcome }).inc();
    }

    fn request_finished(&self, method: &'static str, result: Result<(), &RpcError>, elapsed: Option<Duration>) {
        let outcome = RpcOutcome::of(result);
        self.inner.requests.get_or_create(&RequestLabels { method, outcome }).inc();
        if let Some(elapsed) = elapsed {
            self.inner.request_duration.get_or_create(&MethodLabels { method }).observe(elapsed.as_secs_f64());
        }
    }

    fn notification_dropped(&self, kind: DroppedNotification) {
        let kind = match kind {
            DroppedNotification::Event => DropKind::Event,
            DroppedNotification::Transient => DropKind::Transient,
        };
        self.inner.outbound_dropped.get_or_create(&DropLabels { kind }).inc();
    }

    fn gap_sent(&self) {
        self.inner.gaps_sent.inc();
    }
}

fn gauge_value(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
