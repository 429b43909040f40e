//! Usage rollups over the real socket, against the fake OpenAI vendor reporting known token counts for a model
//! with built-in pricing: `session.usage`, `agent.usage`, `usage.global` and `session.tree_usage` equal what the
//! vendor reported, and still do after a restart, counting a session that is never opened again from its
//! `meta.json`, a session whose cache is stale from its log, and a hand-written delegated child in its tree.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use troupe_protocol::client::{Client, ClientError, Deliveries};
use troupe_protocol::method;
use troupe_protocol::types::common::{Empty, SessionIdParams};
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::usage::{
    AgentUsageParams, SessionTreeUsageResult, SessionUsageResult, UsageFigures, UsageRollup,
};
use troupe_runtime::meta_cache;

use super::cli_support::troupe;
use super::support::*;
use troupe_test_support::replies::{models_list, openai_text_reporting};
use troupe_test_support::{FakeResponse, FakeServer};

const MODEL: &str = "openai/gpt-4o-mini";
/// gpt-4o-mini's built-in list prices, USD per token: input, cached input, output.
const INPUT_PRICE: f64 = 0.15e-6;
const CACHED_PRICE: f64 = 0.075e-6;
const OUTPUT_PRICE: f64 = 0.60e-6;

/// What the fake vendor reports for one request.
#[derive(Clone, Copy)]
struct Reported {
    input: u64,
    cached: u64,
    output: u64,
    reasoning: u64,
}

impl Reported {
    fn json(self) -> Value {
        json!({
            "prompt_tokens": self.input, "completion_tokens": self.output,
            "prompt_tokens_details": {"cached_tokens": self.cached},
            "completion_tokens_details": {"reasoning_tokens": self.reasoning},
        })
    }

    fn cost(self) -> f64 {
        (self.input - self.cached) as f64 * INPUT_PRICE
            + self.cached as f64 * CACHED_PRICE
            + self.output as f64 * OUTPUT_PRICE
    }
}

const FIRST: Reported = Reported { input: 1000, cached: 400, output: 200, reasoning: 50 };
const SECOND: Reported = Reported { input: 2500, cached: 0, output: 120, reasoning: 0 };
const OTHER: Reported = Reported { input: 300, cached: 100, output: 30, reasoning: 5 };

/// The child written by hand into the first session's tree: an agent and a priced model of its own.
const CHILD_AGENT: &str = "review";
const CHILD_MODEL: &str = "anthropic/claude-3-5-haiku";
const CHILD_COST: f64 = 0.001_25;

/// One request and its cost (`None` when unpriced).
type Priced = (Reported, Option<f64>);

/// The figures of `requests`, as the daemon should sum them (`cost` is `None` for unpriced requests).
fn figures(requests: &[Priced]) -> UsageFigures {
    let sum = |field: fn(&Reported) -> u64| requests.iter().map(|(request, _)| field(request)).sum::<u64>();
    let input = sum(|r| r.input);
    let cached = sum(|r| r.cached);
    let costs: Vec<f64> = requests.iter().filter_map(|(_, cost)| *cost).collect();
    UsageFigures {
        input_tokens: input,
        output_tokens: sum(|r| r.output),
        reasoning_tokens: sum(|r| r.reasoning),
        cache_read_tokens: cached,
        cache_write_tokens: 0,
        request_count: requests.len() as u64,
        cache_hit_rate: (input > 0).then(|| cached as f64 / input as f64),
        estimated_cost_usd: (!costs.is_empty()).then(|| costs.iter().sum()),
    }
}

/// Compares a rollup with the expected one: counts exactly, rates and costs to a pico-dollar (the daemon sums
/// exact integer pico-USD; the expectation is summed in floating point).
fn assert_rollup(actual: &UsageRollup, expected: &[(&str, Vec<Priced>)], what: &str) {
    let all: Vec<Priced> = expected.iter().flat_map(|(_, requests)| requests.clone()).collect();
    assert_figures(&actual.totals, &figures(&all), &format!("{what}: totals"));
    let models: Vec<&str> = actual.by_model.keys().map(String::as_str).collect();
    let mut expected_models: Vec<&str> = expected.iter().map(|(model, _)| *model).collect();
    expected_models.sort_unstable();
    assert_eq!(models, expected_models, "{what}: models");
    for (model, requests) in expected {
        assert_figures(&actual.by_model[*model], &figures(requests), &format!("{what}: {model}"));
    }
}

fn assert_figures(actual: &UsageFigures, expected: &UsageFigures, what: &str) {
    let close = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => (a - b).abs() < 1e-12,
        (None, None) => true,
        _ => false,
    };
    let counts = |figures: &UsageFigures| {
        let UsageFigures {
            input_tokens, output_tokens, reasoning_tokens, cache_read_tokens, cache_write_tokens, ..
        } = figures;
        (
            *input_tokens,
            *output_tokens,
            *reasoning_tokens,
            *cache_read_tokens,
            *cache_write_tokens,
            figures.request_count,
        )
    };
    assert_eq!(counts(actual), counts(expected), "{what}: counts");
    assert!(close(actual.cache_hit_rate, expected.cache_hit_rate), "{what}: {actual:?} vs {expected:?}");
    assert!(close(actual.estimated_cost_usd, expected.estimated_cost_usd), "{what}: {actual:?} vs {expected:?}");
}

async fn session_usage(client: &Client, session_id: &str) -> Result<SessionUsageResult, ClientError> {
    let params = SessionIdParams { session_id: session_id.to_owned() };
    within("session.usage", client.call::<method::SessionUsage>(params)).await
}

async fn tree_usage(client: &Client, session_id: &str) -> Result<SessionTreeUsageResult, ClientError> {
    let params = SessionIdParams { session_id: session_id.to_owned() };
    within("session.tree_usage", client.call::<method::SessionTreeUsage>(params)).await
}

async fn agent_usage(client: &Client, agent: &str) -> UsageRollup {
    let params = AgentUsageParams { agent_id: agent.to_owned() };
    let result = within("agent.usage", client.call::<method::AgentUsage>(params)).await.expect("agent.usage");
    assert_eq!(result.agent_id, agent);
    result.usage
}

async fn global_usage(client: &Client) -> UsageRollup {
    within("usage.global", client.call::<method::UsageGlobal>(Empty {})).await.expect("usage.global").usage
}

fn typed_code(error: ClientError) -> String {
    match error {
        ClientError::Rpc(error) => error.typed_code().unwrap_or("").to_owned(),
        other => format!("{other:?}"),
    }
}

async fn run(client: &Client, deliveries: &mut Deliveries, session_id: &str, input: &str) -> Vec<StoredEvent> {
    let run_id = start_run(client, session_id, selection_of("default", MODEL), input).await;
    events_until(deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await
}

/// Waits until the session's `meta.json` describes its whole log (the actor wrote it when it hibernated).
async fn cache_is_fresh(data_dir: &Path, session_id: &str) {
    let dir = data_dir.join("sessions").join(session_id);
    eventually("the session's meta.json is written", || {
        meta_cache::read(&dir)
            .is_some_and(|cached| Some(cached.log_len_bytes) == meta_cache::log_len(&dir) && !cached.usage.is_empty())
    })
    .await;
}

/// A delegated child of `parent` whose log records one request of another agent and model.
fn write_child(data_dir: &Path, parent: &str, child: &str) {
    let origin = json!({"type": "delegated", "root_session_id": parent, "parent_session_id": parent,
        "parent_run_id": "r-parent", "parent_tool_call_id": "call-1", "depth": 1});
    let usage = json!({"session_id": child, "run_id": "r-child", "seq": 2, "timestamp": "2026-01-01T00:00:01.000Z",
        "payload": {"type": "model_usage_recorded", "attempt_id": "a1", "model": CHILD_MODEL, "agent": CHILD_AGENT,
            "input_tokens": OTHER.input, "output_tokens": OTHER.output, "reasoning_tokens": OTHER.reasoning,
            "cache_read_tokens": OTHER.cached, "cache_write_tokens": 0, "estimated_cost_usd": CHILD_COST}});
    // The trailing empty line ends the last event (an unterminated line would be a torn tail).
    write_session_log(data_dir, child, &[session_created_line(child, origin), usage.to_string(), String::new()]);
}

#[tokio::test]
async fn usage_rollups_equal_what_the_vendor_reported_and_survive_a_restart() {
    let vendor = FakeServer::start(vec![
        models_list(&["gpt-4o-mini"]),
        openai_text_reporting("answer one", FIRST.json()),
        openai_text_reporting("answer two", SECOND.json()),
        openai_text_reporting("answer other", OTHER.json()),
    ])
    .await;
    let daemon = TestDaemon::start_with(DaemonSetup {
        hibernate_after: Some(Duration::from_millis(200)),
        ..DaemonSetup::default()
    });
    let (client, mut deliveries) = daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some("sk-test"))
        .await
        .expect("connect the fake vendor");
    let first = daemon.create_session(&client).await.session_id;
    let other = daemon.create_session(&client).await.session_id;
    client.subscribe(&first, None).await.expect("subscribe");
    client.subscribe(&other, None).await.expect("subscribe");
    let events = run(&client, &mut deliveries, &first, "question one").await;
    // The cost stamped on the event is the built-in price applied.
    let stamped = events.iter().find_map(|event| match &event.payload {
        EventPayload::ModelUsageRecorded { estimated_cost_usd, model, .. } => {
            Some((model.clone(), *estimated_cost_usd))
        }
        _ => None,
    });
    let (stamped_model, stamped_cost) = stamped.expect("a usage event");
    assert_eq!(stamped_model, MODEL);
    assert!((stamped_cost.expect("priced") - FIRST.cost()).abs() < 1e-15, "{stamped_cost:?}");
    run(&client, &mut deliveries, &first, "question two").await;
    run(&client, &mut deliveries, &other, "question three").await;

    let first_requests = vec![(FIRST, Some(FIRST.cost())), (SECOND, Some(SECOND.cost()))];
    let other_requests = vec![(OTHER, Some(OTHER.cost()))];
    let both: Vec<_> = first_requests.iter().chain(&other_requests).copied().collect();
    check_sessions(&client, &first, &other, &first_requests, &other_requests).await;
    assert_rollup(&global_usage(&client).await, &[(MODEL, both.clone())], "usage.global");
    assert_rollup(&agent_usage(&client, "default").await, &[(MODEL, both.clone())], "agent.usage");
    let tree = tree_usage(&client, &other).await.expect("session.tree_usage");
    assert_eq!((tree.session_id.as_str(), tree.session_count), (other.as_str(), 1));
    assert_rollup(&tree.usage, &[(MODEL, other_requests.clone())], "session.tree_usage");

    // An agent without usage has an empty rollup; unknown sessions are typed errors.
    assert_eq!(agent_usage(&client, "nobody").await, UsageRollup::empty());
    assert_eq!(typed_code(session_usage(&client, "no-such-session").await.unwrap_err()), "session_not_found");
    assert_eq!(typed_code(tree_usage(&client, "no-such-session").await.unwrap_err()), "session_not_found");

    // Without subscribers the sessions hibernate and write their caches.
    drop(client);
    drop(deliveries);
    cache_is_fresh(daemon.data_path(), &first).await;
    cache_is_fresh(daemon.data_path(), &other).await;
    let data_dir = daemon.stop();

    // The first session's cache goes stale (a log length that does not match, usage wiped), as a crash leaves it: the
    // next start must read its log. The other's cache stays as it was, and the session is never opened again. A
    // delegated child of the first session appears on disk with no cache at all. A crashed daemon leaves no session
    // index (the clean stop's, which would give the start both sessions without their caches, is removed).
    std::fs::remove_file(data_dir.path().join("daemon").join("session-index.jsonl")).expect("a clean stop's index");
    let first_dir = data_dir.path().join("sessions").join(&first);
    let mut cached: Value = serde_json::from_slice(&std::fs::read(first_dir.join("meta.json")).unwrap()).unwrap();
    cached["log_len_bytes"] = json!(1);
    cached["usage"] = json!({});
    std::fs::write(first_dir.join("meta.json"), serde_json::to_vec(&cached).unwrap()).unwrap();
    let child = "child-of-first";
    write_child(data_dir.path(), &first, child);

    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..DaemonSetup::default() });
    let (client, _deliveries) = daemon.client().await;
    let child_requests = vec![(OTHER, Some(CHILD_COST))];
    let all_default: Vec<_> = both.clone();
    assert_rollup(
        &global_usage(&client).await,
        &[(MODEL, all_default.clone()), (CHILD_MODEL, child_requests.clone())],
        "usage.global after the restart",
    );
    assert!(!daemon.engine().is_live(&other), "the other session was counted from its cache, not opened");
    assert!(!daemon.engine().is_live(&first), "the stale one was read by the start's scan, not opened");
    assert_rollup(&agent_usage(&client, "default").await, &[(MODEL, all_default)], "agent.usage after the restart");
    assert_rollup(
        &agent_usage(&client, CHILD_AGENT).await,
        &[(CHILD_MODEL, child_requests.clone())],
        "the child's agent",
    );
    let tree = tree_usage(&client, &first).await.expect("session.tree_usage");
    assert_eq!(tree.session_count, 2);
    assert_rollup(
        &tree.usage,
        &[(MODEL, first_requests.clone()), (CHILD_MODEL, child_requests.clone())],
        "session.tree_usage with the child",
    );
    check_sessions(&client, &first, &other, &first_requests, &other_requests).await;
    // The start's scan rewrote the stale cache.
    let rebuilt = meta_cache::read(&first_dir).expect("a cache");
    assert_eq!(Some(rebuilt.log_len_bytes), meta_cache::log_len(&first_dir));
    assert!(!rebuilt.usage.is_empty());
}

/// `session.usage` of both sessions (which loads them).
async fn check_sessions(
    client: &Client,
    first: &str,
    other: &str,
    first_requests: &[Priced],
    other_requests: &[Priced],
) {
    let usage = session_usage(client, first).await.expect("session.usage");
    assert_eq!(usage.session_id, first);
    assert_rollup(&usage.usage, &[(MODEL, first_requests.to_vec())], "session.usage");
    assert_eq!(usage.spent, usage.usage, "nothing was reverted");
    let usage = session_usage(client, other).await.expect("session.usage");
    assert_rollup(&usage.spent, &[(MODEL, other_requests.to_vec())], "session.usage of the other");
    assert_eq!(usage.spent, usage.usage);
}

#[tokio::test]
async fn troupe_usage_prints_tables_and_the_raw_results() {
    let vendor =
        FakeServer::start(vec![models_list(&["gpt-4o-mini"]), openai_text_reporting("one", FIRST.json())]).await;
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some("sk-test"))
        .await
        .expect("connect the fake vendor");
    let session = daemon.create_session(&client).await.session_id;
    client.subscribe(&session, None).await.expect("subscribe");
    run(&client, &mut deliveries, &session, "question one").await;

    // FIRST's cost is $0.00024: 4 decimals.
    let global = troupe(&daemon, &["usage"]).await.ok();
    let lines: Vec<&str> = global.lines().collect();
    assert_eq!(lines[0], "All sessions", "{global}");
    let row = lines.iter().find(|line| line.trim_start().starts_with(MODEL)).expect("a row of the model");
    for cell in ["1,000", "400", "200", "50", "40.0%", "$0.0002"] {
        assert!(row.split_whitespace().any(|word| word == cell), "{cell} in {row:?}");
    }
    assert!(lines.last().unwrap().trim_start().starts_with("total"), "{global}");

    let of_session = troupe(&daemon, &["usage", "--session", &session]).await.ok();
    assert!(of_session.starts_with(&format!("Session {session}, visible conversation\n")), "{of_session}");
    assert!(!of_session.contains("Spent in all"), "nothing was reverted: {of_session}");
    let of_agent = troupe(&daemon, &["usage", "--agent", "default"]).await.ok();
    assert!(of_agent.starts_with("Agent default, all sessions\n") && of_agent.contains("$0.0002"), "{of_agent}");
    let nobody = troupe(&daemon, &["usage", "--agent", "nobody"]).await.ok();
    assert_eq!(nobody, "Agent nobody, all sessions\n  no model requests recorded\n");
    let tree = troupe(&daemon, &["usage", "--tree", &session]).await.ok();
    assert!(tree.starts_with(&format!("Session {session} and no delegated sessions\n")), "{tree}");

    // --json prints the daemon's result as it is.
    let json: Value = serde_json::from_str(&troupe(&daemon, &["usage", "--json"]).await.ok()).expect("JSON");
    let wire =
        serde_json::to_value(within("usage.global", client.call::<method::UsageGlobal>(Empty {})).await.unwrap());
    assert_eq!(json, wire.unwrap());
    let json: Value =
        serde_json::from_str(&troupe(&daemon, &["usage", "--tree", &session, "--json"]).await.ok()).expect("JSON");
    assert_eq!((json["session_count"].as_u64(), json["usage"]["input_tokens"].as_u64()), (Some(1), Some(1000)));

    // An unknown session is an error a person can read; two scopes at once are refused by the parser.
    let refused = troupe(&daemon, &["usage", "--session", "no-such-session"]).await.refused();
    assert!(refused.contains("no-such-session"), "{refused}");
    let both = troupe(&daemon, &["usage", "--session", &session, "--agent", "default"]).await;
    assert_eq!(both.code, Some(2), "{both:?}");
}

/// A streamed OpenAI answer that calls `delegate {agent, task}` and reports `usage`.
fn delegate_call_reporting(agent: &str, task: &str, usage: Reported) -> FakeResponse {
    let arguments = json!({"agent": agent, "task": task}).to_string();
    let chunk = |value: Value| format!("data: {value}\n\n");
    FakeResponse::Sse {
        pieces: vec![
            chunk(json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1",
                "type": "function", "function": {"name": "delegate", "arguments": arguments}}]},
                "finish_reason": "tool_calls"}]})),
            chunk(json!({"choices": [], "usage": usage.json()})),
            "data: [DONE]\n\n".to_owned(),
        ],
    }
}

#[tokio::test]
async fn a_delegated_child_and_a_compaction_are_counted_by_attribution() {
    const CALL: Reported = Reported { input: 800, cached: 0, output: 40, reasoning: 0 };
    const CHILD: Reported = Reported { input: 500, cached: 200, output: 60, reasoning: 10 };
    const FINAL: Reported = Reported { input: 1200, cached: 800, output: 90, reasoning: 0 };
    const SUMMARY: Reported = Reported { input: 1500, cached: 0, output: 70, reasoning: 0 };
    let vendor = FakeServer::start(vec![
        models_list(&["gpt-4o-mini"]),
        delegate_call_reporting("helper", "count the files", CALL),
        openai_text_reporting("three files", CHILD.json()),
        openai_text_reporting("the helper counted three files", FINAL.json()),
        openai_text_reporting("SUMMARY: files were counted", SUMMARY.json()),
    ])
    .await;
    let config = format!("[agents.helper]\nmodels = [\"{MODEL}\"]\n");
    let daemon = TestDaemon::start_with(DaemonSetup { config_toml: Some(config), ..DaemonSetup::default() });
    let (client, mut deliveries) = daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some("sk-test"))
        .await
        .expect("connect the fake vendor");
    let root = daemon.create_session(&client).await.session_id;
    set_mode(&client, &root, troupe_protocol::types::session::PermissionMode::Yolo).await;
    client.subscribe(&root, None).await.expect("subscribe");
    let events = run(&client, &mut deliveries, &root, "count the files with a helper").await;
    let child = events
        .iter()
        .find_map(|event| match &event.payload {
            EventPayload::DelegateStarted { child_session_id, .. } => Some(child_session_id.clone()),
            _ => None,
        })
        .expect("a delegation");
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCompleted { .. }), "{:?}", kinds(&events));
    let compacted = within(
        "session.compact",
        client.call::<method::SessionCompact>(troupe_protocol::types::session::SessionCompactParams {
            session_id: root.clone(),
            focus: None,
        }),
    )
    .await
    .expect("session.compact");
    assert!(compacted.compacted, "{compacted:?}");

    let priced = |request: Reported| (request, Some(request.cost()));
    let root_requests = vec![priced(CALL), priced(FINAL), priced(SUMMARY)];
    let child_requests = vec![priced(CHILD)];
    let everything: Vec<Priced> = root_requests.iter().chain(&child_requests).copied().collect();
    // The compaction's summary is attributed to the session's agent; the child's turn to the delegated agent.
    // The index hears of the compaction's usage once its batch is durable, just after the answer.
    let global = eventually_some("the index to count the four requests", WAIT, || async {
        let global = global_usage(&client).await;
        (global.totals.request_count == 4).then_some(global)
    })
    .await;
    assert_rollup(&global, &[(MODEL, everything.clone())], "usage.global");
    assert_rollup(&agent_usage(&client, "default").await, &[(MODEL, root_requests.clone())], "agent.usage default");
    assert_rollup(&agent_usage(&client, "helper").await, &[(MODEL, child_requests.clone())], "agent.usage helper");
    let of_root = session_usage(&client, &root).await.expect("session.usage of the root");
    assert_rollup(&of_root.usage, &[(MODEL, root_requests)], "session.usage of the root");
    let of_child = session_usage(&client, &child).await.expect("session.usage of the child");
    assert_rollup(&of_child.usage, &[(MODEL, child_requests.clone())], "session.usage of the child");
    let tree = tree_usage(&client, &root).await.expect("session.tree_usage");
    assert_eq!(tree.session_count, 2);
    assert_rollup(&tree.usage, &[(MODEL, everything)], "session.tree_usage of the root");
    let below = tree_usage(&client, &child).await.expect("session.tree_usage of the child");
    assert_eq!(below.session_count, 1);
    assert_rollup(&below.usage, &[(MODEL, child_requests)], "session.tree_usage of the child");
}

#[tokio::test]
async fn after_a_revert_session_usage_shows_the_visible_branch_and_everything_spent() {
    let vendor = FakeServer::start(vec![
        models_list(&["gpt-4o-mini"]),
        openai_text_reporting("answer one", FIRST.json()),
        openai_text_reporting("answer two", SECOND.json()),
    ])
    .await;
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some("sk-test"))
        .await
        .expect("connect the fake vendor");
    let session = daemon.create_session(&client).await.session_id;
    client.subscribe(&session, None).await.expect("subscribe");
    let end_of_first = run(&client, &mut deliveries, &session, "question one").await.last().unwrap().seq;
    run(&client, &mut deliveries, &session, "question two").await;
    let params =
        troupe_protocol::types::session::SessionRevertParams { session_id: session.clone(), through_seq: end_of_first };
    within("session.revert", client.call::<method::SessionRevert>(params)).await.expect("session.revert");

    let visible = vec![(FIRST, Some(FIRST.cost()))];
    let spent = vec![(FIRST, Some(FIRST.cost())), (SECOND, Some(SECOND.cost()))];
    let check = async |client: &Client, when: &str| {
        let usage = session_usage(client, &session).await.expect("session.usage");
        assert_rollup(&usage.usage, &[(MODEL, visible.clone())], &format!("the visible branch {when}"));
        assert_rollup(&usage.spent, &[(MODEL, spent.clone())], &format!("spent {when}"));
        assert_rollup(&global_usage(client).await, &[(MODEL, spent.clone())], &format!("usage.global {when}"));
        let tree = tree_usage(client, &session).await.expect("session.tree_usage");
        assert_rollup(&tree.usage, &[(MODEL, spent.clone())], &format!("session.tree_usage {when}"));
    };
    check(&client, "after the revert").await;
    let table = troupe(&daemon, &["usage", "--session", &session]).await.ok();
    assert!(table.contains("Spent in all, turns hidden by a revert included"), "{table}");

    drop(client);
    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(daemon.stop()), ..DaemonSetup::default() });
    let (client, _deliveries) = daemon.client().await;
    check(&client, "after a restart").await;
}

/// A live session leaves its spending for the rollups instead of sending it on every model turn; when it stops
/// (here, it hibernates) with nothing asked meanwhile, it sends what it left, and the rollups count it without
/// loading it again.
#[tokio::test]
async fn a_session_that_hibernates_before_any_rollup_is_still_counted() {
    let vendor =
        FakeServer::start(vec![models_list(&["gpt-4o-mini"]), openai_text_reporting("answer", FIRST.json())]).await;
    let daemon = TestDaemon::start_with(DaemonSetup {
        hibernate_after: Some(Duration::from_millis(100)),
        ..DaemonSetup::default()
    });
    let (client, _client_deliveries) = daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some("sk-test"))
        .await
        .expect("connect the fake vendor");
    let session = daemon.create_session(&client).await.session_id;
    // The watcher's subscription keeps the session awake until the run is over, then goes with its connection.
    let (watcher, mut deliveries) = daemon.client().await;
    watcher.subscribe(&session, None).await.expect("subscribe");
    run(&client, &mut deliveries, &session, "question").await;
    drop(deliveries);
    drop(watcher);
    eventually("the session hibernates", || !daemon.engine().is_live(&session)).await;

    let requests = vec![(FIRST, Some(FIRST.cost()))];
    assert_rollup(&global_usage(&client).await, &[(MODEL, requests.clone())], "usage.global");
    assert_rollup(&agent_usage(&client, "default").await, &[(MODEL, requests.clone())], "agent.usage");
    let tree = tree_usage(&client, &session).await.expect("session.tree_usage");
    assert_rollup(&tree.usage, &[(MODEL, requests)], "session.tree_usage");
    assert!(!daemon.engine().is_live(&session), "counted from the index, not by loading the session");
}
