//! The session directory against a real nats-server, across two nodes: publish, get, list (also of a directory of
//! a thousand sessions), watch from the current contents on, and remove.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::time::{Duration, Instant};

use serde_json::json;
use troupe_cluster::directory::{self, DirectoryChange, DirectoryEntry, DirectoryWatch};
use troupe_cluster::{Cluster, ClusterSettings};
use troupe_test_support::NatsServer;
use troupe_test_support::wait::within;

fn node(url: &str, name: &str) -> Cluster {
    Cluster::connect(ClusterSettings::plain(url, name)).expect("connect to nats-server")
}

fn session(n: u32) -> String {
    format!("0190c0de-0000-7000-8000-{n:012}")
}

async fn next(watch: &mut DirectoryWatch) -> DirectoryChange {
    within("a directory change", watch.recv()).await.expect("the watch goes on").expect("a readable change")
}

fn owners(entries: &[DirectoryEntry]) -> Vec<(String, String)> {
    let mut owners: Vec<(String, String)> =
        entries.iter().map(|entry| (entry.session_id.clone(), entry.owner.clone())).collect();
    owners.sort();
    owners
}

#[test]
fn sessions_published_by_two_nodes_are_listed_watched_and_removed_on_both() {
    let server = NatsServer::start();
    let (a, b) = (node(&server.url(), "a"), node(&server.url(), "b"));
    a.block_on(async {
        assert_eq!(within("an empty list", directory::list(&a)).await.expect("list"), vec![]);
        let mut early = within("a watch of the empty directory", directory::watch(&b)).await.expect("watch");
        assert_eq!(next(&mut early).await, DirectoryChange::CaughtUp);

        let meta_one = json!({ "title": "one", "status": "idle" });
        within("a publish", directory::publish(&a, &session(1), "a", &meta_one)).await.expect("publish");
        within("a publish", directory::publish(&b, &session(2), "b", &json!({ "title": "two" })))
            .await
            .expect("publish");
        for expected in [session(1), session(2)] {
            match next(&mut early).await {
                DirectoryChange::Put(entry) => assert_eq!(entry.session_id, expected),
                other => panic!("expected a put of {expected}, got {other:?}"),
            }
        }

        let listed = within("the list", directory::list(&b)).await.expect("list");
        assert_eq!(owners(&listed), vec![(session(1), "a".to_owned()), (session(2), "b".to_owned())]);
        let one = within("a get", directory::get(&b, &session(1))).await.expect("get").expect("session 1");
        assert_eq!((one.owner.as_str(), &one.meta), ("a", &meta_one));
        assert_eq!(within("a get", directory::get(&b, &session(9))).await.expect("get"), None);

        // A watch started now reports the current contents, then that it caught up, then changes.
        let mut late = within("a watch", directory::watch(&a)).await.expect("watch");
        let mut current = Vec::new();
        loop {
            match next(&mut late).await {
                DirectoryChange::Put(entry) => current.push(entry),
                DirectoryChange::CaughtUp => break,
                other => panic!("a removal among the current contents: {other:?}"),
            }
        }
        assert_eq!(owners(&current), owners(&listed));

        // A new owner (the session moved to b), then a removal.
        within("a republish", directory::publish(&b, &session(1), "b", &meta_one)).await.expect("publish");
        within("a removal", directory::remove(&b, &session(2))).await.expect("remove");
        for watch in [&mut early, &mut late] {
            match next(watch).await {
                DirectoryChange::Put(entry) => {
                    assert_eq!((entry.session_id, entry.owner), (session(1), "b".to_owned()))
                }
                other => panic!("expected session 1's new owner, got {other:?}"),
            }
            match next(watch).await {
                DirectoryChange::Removed { session_id, .. } => assert_eq!(session_id, session(2)),
                other => panic!("expected session 2's removal, got {other:?}"),
            }
        }
        let listed = within("the list", directory::list(&a)).await.expect("list");
        assert_eq!(owners(&listed), vec![(session(1), "b".to_owned())]);
        assert_eq!(within("a get", directory::get(&a, &session(2))).await.expect("get"), None);
        within("removing what is gone", directory::remove(&a, &session(2))).await.expect("a second removal is fine");
    });
}

#[test]
fn a_directory_of_a_thousand_sessions_lists_in_one_pass() {
    const SESSIONS: u32 = 1000;
    let server = NatsServer::start();
    let a = node(&server.url(), "a");
    a.block_on(async {
        for chunk in (0..SESSIONS).collect::<Vec<_>>().chunks(100) {
            let publishes = chunk.iter().map(|n| {
                let id = session(*n);
                let a = a.clone();
                async move { directory::publish(&a, &id, "a", &json!({ "n": n })).await }
            });
            within("a hundred publishes", futures::future::try_join_all(publishes)).await.expect("publish");
        }
        within("a removal", directory::remove(&a, &session(7))).await.expect("remove");
        let since = Instant::now();
        let listed = within("the list", directory::list(&a)).await.expect("list");
        let took = since.elapsed();
        assert_eq!(listed.len(), SESSIONS as usize - 1);
        assert!(listed.iter().all(|entry| entry.session_id != session(7) && entry.owner == "a"));
        assert!(took < Duration::from_secs(3), "listing {SESSIONS} sessions took {took:?}");
    });
}
