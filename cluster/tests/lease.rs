//! Session leases against a real nats-server: exclusive, renewed, taken over once expired, re-acquired at once by a
//! restarted node, released for another node, and given up when NATS is gone.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::time::{Duration, Instant};

use troupe_cluster::lease::{self, CLOCK_MARGIN, LeaseGuard};
use troupe_cluster::{Cluster, ClusterError, ClusterSettings};
use troupe_test_support::NatsServer;
use troupe_test_support::wait::{eventually, eventually_some, within};

const TTL: Duration = Duration::from_secs(3);
const SESSION: &str = "0190c0de-0000-7000-8000-00000000feed";

fn node(url: &str, name: &str) -> Cluster {
    let mut settings = ClusterSettings::plain(url, name);
    settings.lease_ttl = TTL;
    Cluster::connect(settings).expect("connect to nats-server")
}

async fn acquire(cluster: &Cluster) -> Result<LeaseGuard, ClusterError> {
    within("an acquisition", lease::acquire(cluster, SESSION)).await
}

/// The node named in a [`ClusterError::LeaseHeld`], failing on anything else.
fn held_by(result: Result<LeaseGuard, ClusterError>) -> (String, Duration) {
    match result {
        Err(ClusterError::LeaseHeld { node, remaining, session_id }) => {
            assert_eq!(session_id, SESSION);
            (node, remaining)
        }
        Err(error) => panic!("expected LeaseHeld, got {error}"),
        Ok(_) => panic!("expected LeaseHeld, got the lease"),
    }
}

/// Polls until `cluster` takes the lease (another node's refusal is a retry; any other error fails).
async fn taken_by(cluster: &Cluster, timeout: Duration) -> LeaseGuard {
    eventually_some("the lease to be taken", timeout, async || match lease::acquire(cluster, SESSION).await {
        Ok(guard) => Some(guard),
        Err(ClusterError::LeaseHeld { .. }) => None,
        Err(error) => panic!("acquisition failed: {error}"),
    })
    .await
}

#[test]
fn a_lease_is_exclusive_and_renewed_while_held() {
    let server = NatsServer::start();
    let (a, b) = (node(&server.url(), "a"), node(&server.url(), "b"));
    a.block_on(async {
        let guard = acquire(&a).await.expect("a takes a free lease");
        assert!(guard.is_held());
        let (holder, remaining) = held_by(acquire(&b).await);
        assert_eq!(holder, "a");
        assert!(!remaining.is_zero() && remaining <= TTL + CLOCK_MARGIN, "remaining {remaining:?}");
        let info = within("who holds it", lease::holder(&b, SESSION)).await.expect("read").expect("a lease");
        assert_eq!((info.node.as_str(), info.holder, info.is_expired()), ("a", guard.holder(), false));

        // Two ttls later the renewals have kept it: still a's, still refused to b.
        let first_revision = guard.revision();
        tokio::time::sleep(TTL * 2).await;
        assert!(guard.is_held());
        assert!(guard.revision() > first_revision, "the lease was renewed");
        assert_eq!(held_by(acquire(&b).await).0, "a");
    });
}

#[test]
fn a_stalled_holder_gives_up_before_another_node_takes_over() {
    let server = NatsServer::start();
    let (a, b) = (node(&server.url(), "a"), node(&server.url(), "b"));
    a.block_on(async {
        let stalled = acquire(&a).await.expect("a takes a free lease");
        stalled.suspend_renewals();
        let since = Instant::now();
        let taken = taken_by(&b, TTL * 3).await;
        // The last renewal was at most ttl/3 before the stall; the lease lives a ttl (plus margin) after it.
        assert!(since.elapsed() >= TTL / 2, "b took a live lease after {:?}", since.elapsed());
        assert!(!stalled.is_held(), "a still counted the lease as its own when b took it");
        within("a's lost() after the takeover", stalled.lost()).await;
        assert!(taken.is_held());
        let info = within("who holds it", lease::holder(&a, SESSION)).await.expect("read").expect("a lease");
        assert_eq!((info.node.as_str(), info.holder), ("b", taken.holder()));
        // The stalled guard's drop must not remove b's lease.
        drop(stalled);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(held_by(acquire(&a).await).0, "b");
        assert!(taken.is_held());
    });
}

#[test]
fn acquire_waiting_takes_a_lease_once_it_expires_and_gives_up_after_its_bound() {
    let server = NatsServer::start();
    let (a, b) = (node(&server.url(), "a"), node(&server.url(), "b"));
    a.block_on(async {
        let live = acquire(&a).await.expect("a takes a free lease");
        let since = Instant::now();
        let refused = within("a bounded wait", lease::acquire_waiting(&b, SESSION, Duration::from_millis(700))).await;
        assert_eq!(held_by(refused).0, "a");
        assert!(since.elapsed() >= Duration::from_millis(700));

        live.suspend_renewals();
        let taken = within("a wait for the expiry", lease::acquire_waiting(&b, SESSION, TTL * 3))
            .await
            .expect("b takes the lease once it expires");
        assert!(taken.is_held() && !live.is_held());
    });
}

#[test]
fn a_restarted_node_takes_its_lease_back_at_once_and_the_old_guard_learns_it() {
    let server = NatsServer::start();
    let before = node(&server.url(), "a");
    let old = before.block_on(acquire(&before)).expect("a takes a free lease");
    let after = node(&server.url(), "a");
    let b = node(&server.url(), "b");
    after.block_on(async {
        let new = acquire(&after).await.expect("the restarted node takes its own lease at once");
        assert_ne!(new.holder(), old.holder());
        // The old guard's next renewal (within ttl/3) finds another holder; its deadline alone would take longer.
        eventually("the old guard to lose the lease", TTL / 2, || !old.is_held()).await;
        within("the old guard's lost()", old.lost()).await;
        assert!(new.is_held());
        assert_eq!(held_by(acquire(&b).await).0, "a");
        drop(old);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(new.is_held(), "the old guard's drop released the new lease");
        assert_eq!(held_by(acquire(&b).await).0, "a");
    });
}

#[test]
fn a_released_or_dropped_lease_is_free_at_once() {
    let server = NatsServer::start();
    let (a, b) = (node(&server.url(), "a"), node(&server.url(), "b"));
    a.block_on(async {
        let guard = acquire(&a).await.expect("a takes a free lease");
        let lost = guard.lost();
        within("the release", guard.release()).await.expect("released");
        within("lost() after the release", lost).await;
        assert_eq!(within("who holds it", lease::holder(&b, SESSION)).await.expect("read"), None);
        let guard = acquire(&b).await.expect("b takes a released lease at once");

        // Dropped: released without waiting, long before the ttl.
        drop(guard);
        let since = Instant::now();
        let again = taken_by(&a, TTL).await;
        assert!(since.elapsed() < TTL, "the dropped lease was not released");
        assert!(again.is_held());
    });
}

#[test]
fn a_holder_cut_off_from_nats_stops_counting_the_lease_as_its_own_within_the_ttl() {
    let mut server = NatsServer::start();
    let a = node(&server.url(), "a");
    let guard = a.block_on(acquire(&a)).expect("a takes a free lease");
    server.kill();
    let killed = Instant::now();
    // Its last renewal was at most ttl/3 ago: the lease is still its own for a while.
    assert!(guard.is_held());
    a.block_on(async {
        eventually("the lease to be given up", TTL + Duration::from_secs(1), || !guard.is_held()).await;
        assert!(killed.elapsed() >= TTL / 2, "given up after only {:?}", killed.elapsed());
        within("lost() once cut off", guard.lost()).await;
    });
}

#[test]
fn leases_and_the_directory_work_on_a_three_server_cluster_with_three_replicas() {
    let servers = troupe_test_support::NatsCluster::start(3);
    let on = |index: usize, name: &str| {
        let mut settings = ClusterSettings::plain(&servers.servers[index].url(), name);
        settings.lease_ttl = TTL;
        settings.replicas = 3;
        Cluster::connect(settings).expect("connect to the nats cluster")
    };
    let (a, b) = (on(0, "a"), on(2, "b"));
    a.block_on(async {
        let guard = acquire(&a).await.expect("a takes a free lease");
        assert_eq!(held_by(acquire(&b).await).0, "a");
        tokio::time::sleep(TTL).await;
        assert!(guard.is_held(), "renewals through a replicated bucket");
        within("the release", guard.release()).await.expect("released");
        // A replica may answer b's read before it applied the release (the bucket allows direct gets): b then
        // waits for the lease's expiry instead, which compare-and-set keeps safe. Bounded by that.
        let taken = taken_by(&b, TTL * 3).await;
        assert!(taken.is_held());

        let meta = serde_json::json!({ "title": "replicated" });
        within("a publish", troupe_cluster::directory::publish(&a, SESSION, "b", &meta)).await.expect("publish");
        let listed = eventually_some("b to list the session", TTL, async || {
            let listed = troupe_cluster::directory::list(&b).await.expect("list");
            (!listed.is_empty()).then_some(listed)
        })
        .await;
        assert_eq!((listed[0].session_id.as_str(), listed[0].owner.as_str()), (SESSION, "b"));
    });
}
