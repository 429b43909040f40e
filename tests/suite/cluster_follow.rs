//! Following a session from a node that does not host it, through real `troupe serve --cluster … --node …`
//! processes on a real nats-server: `events.subscribe` on node b for node a's session is served from JetStream, and
//! b's client sees every event of runs started on a and through b, in order, once each, exactly what a's own
//! subscriber sees (from no cursor and from one in the middle); replacing or closing the subscription stops its
//! follower (its JetStream consumer goes); and when a dies and b takes the session over, b's follower goes on with
//! b's own events.

use std::time::Duration;

use troupe_cluster::{Cluster, ClusterSettings, names};
use troupe_protocol::client::{Client, ClientDelivery, Deliveries, ReplayReason};
use troupe_protocol::method;
use troupe_protocol::types::events::StoredEvent;
use troupe_protocol::types::session::SessionListParams;

use super::cluster::{Loopback, start_run_once_hosted};
use super::support::*;

/// Waits until `client`'s node lists `session_id` as hosted by `node`.
pub(super) async fn listed_on(client: &Client, session_id: &str, node: &str) {
    eventually_some("the session is listed with its node", WAIT, || async {
        let listed = client.call::<method::SessionList>(SessionListParams::default()).await.expect("list");
        listed.sessions.into_iter().find(|meta| meta.session_id == session_id && meta.node.as_deref() == Some(node))
    })
    .await;
}

/// Events delivered until `stop` holds for one (included), failing on any re-subscription after the first (a gap
/// or a reconnect would mean the subscription was not kept whole).
pub(super) async fn whole_until(
    deliveries: &mut Deliveries,
    mut stop: impl FnMut(&StoredEvent) -> bool,
) -> Vec<StoredEvent> {
    let mut events = Vec::new();
    within("events", async {
        loop {
            match deliveries.next().await.expect("deliveries open") {
                ClientDelivery::Live(event) | ClientDelivery::ReplayEvent(event) => {
                    let done = stop(&event);
                    events.push(event);
                    if done {
                        return;
                    }
                }
                ClientDelivery::ReplayStart { reason, .. } if reason != ReplayReason::Subscribe => {
                    panic!("the subscription was re-made ({reason:?}) after {} events", events.len())
                }
                _ => {}
            }
        }
    })
    .await;
    events
}

pub(super) fn ends_run(run_id: &str) -> impl FnMut(&StoredEvent) -> bool + '_ {
    move |event| event.run_id.as_deref() == Some(run_id) && is_terminal(event)
}

pub(super) fn seqs(events: &[StoredEvent]) -> Vec<u64> {
    events.iter().map(|event| event.seq).collect()
}

/// The number of JetStream consumers on the event stream (each follower of another node's session has one).
async fn event_consumers(nats_url: &str) -> usize {
    let url = nats_url.to_owned();
    within(
        "count the event stream's consumers",
        tokio::task::spawn_blocking(move || {
            let cluster = Cluster::connect(ClusterSettings::plain(&url, "observer")).expect("connect to NATS");
            cluster.block_on(async {
                let mut stream = cluster.jetstream().get_stream(names::EVENT_STREAM).await.expect("event stream");
                stream.info().await.expect("stream info").state.consumer_count
            })
        }),
    )
    .await
    .expect("the counting thread")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_on_another_node_follows_a_session_whole_and_goes_on_after_a_takeover() {
    let cluster = Loopback::start();
    let project = &cluster.project;
    let mut a = cluster.node("a");
    let b = cluster.node("b");
    let (client_a, mut deliveries_a) = a.client().await;
    let session_id = create_session_in(&client_a, project).await.session_id;
    within("subscribe on a", client_a.subscribe(&session_id, None)).await.expect("subscribe on a");
    let first = run_in_subscribed(&client_a, &mut deliveries_a, &session_id, "local/echo", "first").await;
    let middle = first[first.len() / 2].seq;

    let (client_b, _) = b.client().await;
    listed_on(&client_b, &session_id, "a").await;
    let (follower, mut followed) = b.client().await;
    within("subscribe on b", follower.subscribe(&session_id, None)).await.expect("subscribe on b from the start");
    let (late, mut late_followed) = b.client().await;
    within("subscribe on b", late.subscribe(&session_id, Some(middle))).await.expect("subscribe on b mid-way");

    // One run after the other (the second waits for the first to end), and a's own subscriber sees both.
    let on_a = start_run(&client_a, &session_id, echo_selection(), "started on a").await;
    let mut on_a_node = events_until(&mut deliveries_a, ends_run(&on_a)).await;
    let through_b = start_run(&client_b, &session_id, echo_selection(), "started through b").await;
    on_a_node.extend(events_until(&mut deliveries_a, ends_run(&through_b)).await);
    let whole = whole_until(&mut followed, ends_run(&through_b)).await;
    let from_middle = whole_until(&mut late_followed, ends_run(&through_b)).await;
    let history = {
        let (reader, mut replayed) = a.client().await;
        within("subscribe on a", reader.subscribe(&session_id, None)).await.expect("subscribe on a again");
        whole_until(&mut replayed, ends_run(&through_b)).await
    };
    assert_eq!(seqs(&history), (1..=history.len() as u64).collect::<Vec<_>>(), "a's log: every seq once");
    assert_eq!(whole, history, "b's follower from no cursor sees exactly a's log");
    assert_eq!(from_middle.as_slice(), &history[middle as usize..], "b's follower from seq {middle}");
    let a_saw: Vec<StoredEvent> = first.iter().chain(&on_a_node).cloned().collect();
    assert_eq!(a_saw, history, "a's own subscriber saw the same events");
    assert!(whole.iter().any(|event| event.run_id.as_deref() == Some(on_a.as_str())));

    // Node a dies; b takes the session over, and its follower (served from JetStream) goes on with b's events.
    a.kill();
    let after_takeover = start_run_once_hosted(&client_b, &session_id, "after the takeover").await;
    let more = whole_until(&mut followed, ends_run(&after_takeover)).await;
    let next = whole.last().expect("events").seq + 1;
    assert_eq!(seqs(&more), (next..next + more.len() as u64).collect::<Vec<_>>(), "in order, none missing");
    assert!(more.iter().any(|event| event.run_id.as_deref() == Some(after_takeover.as_str())));
    let replayed_on_b = {
        let (reader, mut replayed) = b.client().await;
        within("subscribe on b", reader.subscribe(&session_id, Some(next - 1))).await.expect("subscribe on b, local");
        whole_until(&mut replayed, ends_run(&after_takeover)).await
    };
    assert_eq!(more, replayed_on_b, "the follower saw what b's own log holds");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_or_closing_a_remote_subscription_stops_its_follower() {
    let cluster = Loopback::start();
    let project = &cluster.project;
    let a = cluster.node("a");
    let b = cluster.node("b");
    let (client_a, _) = a.client().await;
    let session_id = create_session_in(&client_a, project).await.session_id;
    let (follower, mut followed) = b.client().await;
    listed_on(&follower, &session_id, "a").await;

    let cursor = within("subscribe on b", follower.subscribe(&session_id, None)).await.expect("subscribe on b");
    eventually_some("one follower's consumer", WAIT, || async {
        (event_consumers(&cluster.nats.url()).await == 1).then_some(())
    })
    .await;
    // Subscribing again on the same connection replaces the subscription: its follower stops, the new one runs.
    within("subscribe again", follower.subscribe(&session_id, Some(cursor))).await.expect("subscribe again");
    let run_id = start_run(&client_a, &session_id, echo_selection(), "once").await;
    let events = whole_until(&mut followed, ends_run(&run_id)).await;
    // The first subscription's reply (through `cursor`), then the second's events: each once.
    assert_eq!(seqs(&events), (1..=events.len() as u64).collect::<Vec<_>>(), "each event once");
    assert!(events.len() as u64 > cursor);
    eventually_some("the replaced follower's consumer is gone", WAIT, || async {
        (event_consumers(&cluster.nats.url()).await == 1).then_some(())
    })
    .await;
    let quiet = events_during(&mut followed, Duration::from_millis(500)).await;
    assert!(quiet.is_empty(), "nothing more after the run's end: {quiet:?}");

    follower.close().await;
    eventually_some("the closed subscription's consumer is gone", WAIT, || async {
        (event_consumers(&cluster.nats.url()).await == 0).then_some(())
    })
    .await;
}
