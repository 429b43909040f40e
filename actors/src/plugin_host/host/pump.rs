//! The reader of one plugin process's stdout.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::oneshot;

use super::{Exited, FromPlugin, Garbage, MAX_IN_FLIGHT, PluginHost};
use crate::plugin_host::peer::Peer;
use crate::plugin_host::process::Line;

/// Reads the plugin's stdout for one process: answers resolve requests, other messages go to the host, at most
/// [`MAX_IN_FLIGHT`] unanswered at a time. At end of file, or when told to kill, it waits for the process and
/// reports its exit.
pub(super) async fn pump(
    host: Addr<PluginHost>,
    generation: u64,
    peer: Peer,
    mut child: tokio::process::Child,
    mut stdout: tokio::sync::mpsc::Receiver<Line>,
    mut killed: oneshot::Receiver<()>,
) {
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    let mut kill = false;
    loop {
        tokio::select! {
            biased;
            _ = &mut killed => { kill = true; break; }
            line = stdout.recv() => match line {
                Some(Line::Text(text)) => {
                    if text.trim().is_empty() {
                        continue;
                    }
                    if let Some(incoming) = peer.accept(&text) {
                        // Waiting for a permit (the plugin's earlier requests not yet answered, e.g. because it
                        // does not read its stdin) must not hide a kill.
                        let permit = tokio::select! {
                            biased;
                            _ = &mut killed => { kill = true; break; }
                            permit = permits.clone().acquire_owned() => match permit {
                                Ok(permit) => permit,
                                Err(_) => break,
                            },
                        };
                        host.do_send(FromPlugin { generation, incoming, permit });
                    }
                }
                Some(Line::Garbage(reason)) => {
                    host.do_send(Garbage { generation, reason: reason.to_owned() });
                }
                None => break,
            }
        }
    }
    // Nothing waits on this process any more.
    peer.close();
    if !kill {
        // Stdout closed: the process is exiting, or closed stdout and lingers; it gets a moment, then SIGKILL.
        kill = tokio::time::timeout(Duration::from_secs(2), child.wait()).await.is_err();
    }
    if kill {
        let _ = child.start_kill();
    }
    let status = match child.wait().await {
        Ok(status) => status.to_string(),
        Err(error) => format!("unknown ({error})"),
    };
    host.do_send(Exited { generation, status });
}
