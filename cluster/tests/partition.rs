//! A partitioned owner cannot append after its lease is taken: node a hosts a session through the cluster's replica,
//! its connection to NATS is cut (a TCP proxy between them stops), node b takes the session over once a's lease has
//! expired and appends; when a's connection comes back, a's next append is refused and nothing of it is stored.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

mod log_common;

use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use log_common::event;
use parking_lot::Mutex;
use troupe_cluster::{Cluster, ClusterSettings, JetStreamReplica};
use troupe_runtime::event_log::{LogReplica, ReplicaFailure};
use troupe_test_support::NatsServer;

/// A TCP proxy to `upstream` that can be cut (every connection closed, new ones refused) and healed.
struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let streams: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (accept_cut, accept_streams) = (cut.clone(), streams.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                if accept_cut.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else { continue };
                accept_streams.lock().extend([client.try_clone().unwrap(), server.try_clone().unwrap()]);
                for (mut from, mut to) in [(client.try_clone().unwrap(), server.try_clone().unwrap()), (server, client)]
                {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(Shutdown::Both);
                    });
                }
            }
        });
        Proxy { port, cut, streams }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for stream in self.streams.lock().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

fn node(url: &str, name: &str) -> Cluster {
    let mut settings = ClusterSettings::plain(url, name);
    settings.lease_ttl = Duration::from_secs(3);
    Cluster::connect(settings).unwrap()
}

#[test]
fn a_partitioned_owner_cannot_append_after_its_lease_is_taken() {
    let nats = NatsServer::start();
    let proxy = Proxy::start(nats.client_port());
    let a = JetStreamReplica::new(node(&format!("nats://127.0.0.1:{}", proxy.port), "a"));
    let b = JetStreamReplica::new(node(&nats.url(), "b"));
    let dirs = tempfile::tempdir().unwrap();
    let session_id = "partitioned-session";
    // Seeded from a local log, as a fork's copy is: the replica stores it before anything is appended.
    for node in ["a", "b"] {
        std::fs::create_dir_all(dirs.path().join(node).join("sessions")).unwrap();
    }
    let a_dir = dirs.path().join("a").join("sessions").join(session_id);
    drop(troupe_runtime::event_log::LogWriter::create(&a_dir, &log_common::session_created(session_id)).unwrap());
    let mut writer_a = a.open(&a_dir).unwrap();
    writer_a.append_batch(&[event(2)]).unwrap();

    proxy.cut();
    let b_dir = dirs.path().join("b").join("sessions").join(session_id);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut writer_b = loop {
        match b.open(&b_dir) {
            Ok(writer) => break writer,
            Err(error) if error.failure == ReplicaFailure::HostedElsewhere { node: "a".into() } => {
                assert!(Instant::now() < deadline, "b never took the session over: {error}");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(error) => panic!("{error}"),
        }
    };
    writer_b.append_batch(&[event(3)]).unwrap();
    proxy.heal();

    let refused = writer_a.append_batch(&[event(3)]).expect_err("the old owner must not append");
    assert_eq!(refused.failure, ReplicaFailure::Fenced, "{refused}");
    writer_b.append_batch(&[event(4)]).unwrap();
    let reader = troupe_cluster::log::LogReader::new(b.cluster(), session_id);
    let stored = reader.read_range(0, u64::MAX, usize::MAX).unwrap();
    assert_eq!(log_common::seqs(&stored), vec![1, 2, 3, 4]);
    assert_eq!(stored[2].json.as_str(), event(3).json.as_str(), "b's event, not a's");
}
