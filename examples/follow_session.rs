//! follow_session: follow one troupe session's events live, with the shared Rust client.
//!
//! What it does:
//!
//! 1. connects to the daemon over WebSocket with the bearer token and handshakes (protocol 20);
//! 2. creates a session (agent `default`, model `local/echo`, in the current directory) unless a session id is
//!    given on the command line;
//! 3. subscribes to the session: its stored events are replayed first, then new ones arrive live;
//! 4. renames the session once, from a separate task, so that you see a `session_title_committed` event arrive
//!    live;
//! 5. prints every event until you press Ctrl-C. It reconnects by itself if the daemon restarts, and resumes after
//!    the last event it printed (nothing is printed twice or skipped).
//!
//! How to run it, from the repository root (CI runs the first `cargo run --example` line, from `examples/README.md`):
//!
//! ```sh
//! cargo run --release -- serve                     # terminal 1: the daemon on ws://127.0.0.1:7419/ws
//! export TROUPE_TOKEN=$(cargo run --release --quiet -- token)   # terminal 2
//! cargo run --example follow_session               # creates a session and follows it
//! cargo run --example follow_session -- <session-id>   # follows an existing session
//! ```
//!
//! `TROUPE_URL` selects another daemon (default `ws://127.0.0.1:7419/ws`); `TROUPE_TOKEN` is required;
//! `TROUPE_CA_CERT` names a PEM file of one more CA to trust for a `wss://` URL, as the CLI's `--ca-cert` does.
//! While it runs, `cargo run --release -- rename <session-id> "Another title"` in a third terminal shows one more
//! event.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use troupe_protocol::client::{Client, ClientDelivery, ClientOptions, ReconnectPolicy, ReplayReason};
use troupe_protocol::method;
use troupe_protocol::types::common::{ModelSelection, RunSelection};
use troupe_protocol::types::events::StoredEvent;
use troupe_protocol::types::session::{SessionCreateParams, SessionRenameParams, TitleChange};

const DEFAULT_URL: &str = "ws://127.0.0.1:7419/ws";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("TROUPE_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    let token = std::env::var("TROUPE_TOKEN")
        .context("set TROUPE_TOKEN to the daemon's token (`cargo run --release -- token` prints it)")?;
    let session_arg = std::env::args().nth(1);

    // With a reconnect policy the client dials again after the connection drops, handshakes and re-subscribes
    // from the last event it delivered. `ca_cert`: as the CLI, one more CA to trust for `wss://`.
    let options = ClientOptions {
        reconnect: Some(ReconnectPolicy::default()),
        ca_cert: std::env::var_os("TROUPE_CA_CERT").map(Into::into),
        ..ClientOptions::default()
    };
    let (client, mut deliveries) =
        Client::connect_websocket(&url, &token, options).await.with_context(|| format!("connecting to {url}"))?;
    println!("connected to {url}");

    let session_id = match session_arg {
        Some(session_id) => session_id,
        None => {
            let cwd = std::env::current_dir()?.to_string_lossy().into_owned();
            let created = client
                .call::<method::SessionCreate>(SessionCreateParams {
                    selection: RunSelection {
                        agent: "default".to_owned(),
                        model: ModelSelection { model: "local/echo".to_owned(), variant: None },
                        preset: None,
                    },
                    cwd: Some(cwd),
                })
                .await
                .context("session.create")?;
            println!("created session {}", created.session.session_id);
            created.session.session_id
        }
    };

    // `None`: replay the session from its first event. Pass the last `seq` you processed to skip what you have.
    let last_seq = client.subscribe(&session_id, None).await.with_context(|| format!("subscribing to {session_id}"))?;
    println!("subscribed to {session_id} (last stored seq {last_seq}); Ctrl-C stops");

    // Rename on another task: the client applies back-pressure by not reading the socket while the delivery
    // stream is full, so a call must never wait on the same task that drains `deliveries`.
    let renamer = client.clone();
    let rename_target = session_id.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let stamp = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let renamed = renamer
            .call::<method::SessionRename>(SessionRenameParams {
                session_id: rename_target,
                // An idempotency key: repeating a rename with the same key does not record it twice.
                client_rename_id: format!("follow-session-{}-{}", std::process::id(), stamp.as_nanos()),
                change: TitleChange::Set {
                    title: format!("Renamed by follow_session at unix time {}", stamp.as_secs()),
                },
            })
            .await;
        match renamed {
            Ok(result) => eprintln!("[renamed: the title is now {:?}]", result.session.title.unwrap_or_default()),
            Err(error) => eprintln!("[rename failed: {error}]"),
        }
    });

    loop {
        let delivery = tokio::select! {
            delivery = deliveries.next() => delivery,
            _ = tokio::signal::ctrl_c() => break,
        };
        let Some(delivery) = delivery else {
            bail!("the connection to the daemon ended");
        };
        match delivery {
            ClientDelivery::ReplayStart { after_seq, reason, .. } => {
                let why = match reason {
                    ReplayReason::Subscribe => "stored events",
                    ReplayReason::Gap => "catching up after falling behind",
                    ReplayReason::Reconnect => "catching up after reconnecting",
                };
                println!("-- replay after #{after_seq} ({why})");
            }
            ClientDelivery::ReplayEvent(event) => println!("{}", describe(&event, "replay")),
            ClientDelivery::ReplayEnd { last_seq, .. } => {
                println!("-- replay done through #{last_seq}; live events follow")
            }
            ClientDelivery::Live(event) => println!("{}", describe(&event, "live")),
            ClientDelivery::RuntimeChanged(changed) => println!(
                "-- runtime revision {} ({} providers, {} models, {} agents)",
                changed.snapshot.revision,
                changed.snapshot.providers.len(),
                changed.snapshot.models.len(),
                changed.snapshot.agents.len()
            ),
            ClientDelivery::Disconnected { detail } => {
                eprintln!("[disconnected: {detail}; reconnecting]")
            }
            ClientDelivery::Reconnected => eprintln!("[reconnected]"),
            ClientDelivery::RecoveryFailed { detail, .. } => {
                bail!("could not resume the subscription: {detail}")
            }
            // Live tool output and plugin events (not produced by this daemon yet), and any delivery kinds added
            // later.
            _ => {}
        }
    }
    client.close().await;
    Ok(())
}

/// One line per event: `#seq  time  [replay|live]  kind  payload`.
fn describe(event: &StoredEvent, how: &str) -> String {
    let kind = event.payload.kind().unwrap_or("(unknown kind)");
    let payload = serde_json::to_string(&event.payload).unwrap_or_default();
    format!("#{:<4} {}  [{how}]  {kind}  {payload}", event.seq, event.timestamp)
}
