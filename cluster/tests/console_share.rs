//! The web console's shared sign-ins against a real nats-server, across two nodes: a code is taken once however
//! many nodes race for it, a session recorded on one node is read and followed on the other, and its end reaches
//! the other node's follow.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use troupe_cluster::{Cluster, ClusterSettings, NatsConsoleShare};
use troupe_gateway::{ConsoleShare, Digest, ShareChange, SharedSession};
use troupe_test_support::NatsServer;
use troupe_test_support::wait::{WAIT, eventually_some, within};

/// The gateway's scope of one token's sign-ins: 16 hex digits.
const SCOPE: &str = "0123456789abcdef";

fn node(url: &str, name: &str) -> Cluster {
    Cluster::connect(ClusterSettings::plain(url, name)).expect("connect to nats-server")
}

fn in_an_hour() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() + 3600
}

#[test]
fn a_code_is_taken_once_however_many_nodes_race_for_it() {
    let server = NatsServer::start();
    let (a, b) = (node(&server.url(), "a"), node(&server.url(), "b"));
    let (share_a, share_b) = (NatsConsoleShare::new(a.clone()), NatsConsoleShare::new(b));
    a.block_on(async {
        for round in 0..3u8 {
            let code = Digest::of(&[round]);
            within("record a code", share_a.add_code(SCOPE, code, in_an_hour())).await.expect("recorded");
            let races = (0..8).flat_map(|_| [share_a.take_code(SCOPE, code), share_b.take_code(SCOPE, code)]);
            let taken = within("the race", futures::future::join_all(races)).await;
            let winners: Vec<u64> = taken.into_iter().filter_map(|outcome| outcome.expect("answered")).collect();
            assert_eq!(winners.len(), 1, "round {round}: exactly one of 16 takes won: {winners:?}");
            assert!(within("again", share_b.take_code(SCOPE, code)).await.expect("answered").is_none());
        }
        let unknown = within("an unknown code", share_b.take_code(SCOPE, Digest::of(b"never minted"))).await;
        assert!(unknown.expect("answered").is_none());
    });
}

#[test]
fn a_session_recorded_on_one_node_is_read_and_followed_on_the_other_until_it_ends() {
    let server = NatsServer::start();
    let (a, b) = (node(&server.url(), "a"), node(&server.url(), "b"));
    let (share_a, share_b) = (NatsConsoleShare::new(a.clone()), NatsConsoleShare::new(b));
    let heard: Arc<Mutex<Vec<ShareChange>>> = Arc::default();
    let sink = heard.clone();
    share_b.follow(SCOPE, Arc::new(move |change| sink.lock().unwrap().push(change)));
    a.block_on(async {
        let session = Digest::of(b"a cookie value");
        let live = SharedSession { key: Digest::of(b"a page key"), expires_unix: in_an_hour() };
        within("record a session", share_a.add_session(SCOPE, session, live)).await.expect("recorded");
        let read = within("read it on b", share_b.session(SCOPE, session)).await.expect("answered");
        assert_eq!(read, Some(live));
        let other_scope = within("another token's scope", share_b.session("fedcba9876543210", session)).await;
        assert_eq!(other_scope.expect("answered"), None, "another token shares nothing");
        let started = ShareChange::Started { session, live };
        eventually_some("b's follow hears of the sign-in", WAIT, || async {
            heard.lock().unwrap().contains(&started).then_some(())
        })
        .await;

        within("end it on a", share_a.end_session(SCOPE, session, in_an_hour())).await.expect("ended");
        eventually_some("b's follow hears of the sign-out", Duration::from_secs(2), || async {
            heard.lock().unwrap().contains(&ShareChange::Ended { session }).then_some(())
        })
        .await;
        assert_eq!(within("read it again", share_b.session(SCOPE, session)).await.expect("answered"), None);
    });
}
