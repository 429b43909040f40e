//! `troupe serve`: the daemon in the foreground until a signal stops it.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use troupe::daemon::{self, DaemonOptions};
use troupe_runtime::data_dir::DataDir;

/// `troupe serve`: starts the daemon, prints where it listens and its token file, and stops it on SIGTERM or
/// SIGINT.
pub(crate) fn serve(
    listen: Option<troupe_runtime::config::Listen>,
    data_dir: Option<PathBuf>,
    hibernate_after_ms: Option<u64>,
    cluster: daemon::ClusterFlags,
) -> anyhow::Result<()> {
    let explicit_data_dir = data_dir.is_some();
    let data_dir = DataDir::resolve(data_dir)?;
    let data_dir_display = data_dir.root().display().to_string();
    actix_web::rt::System::new().block_on(async move {
        let daemon = daemon::start(DaemonOptions {
            data_dir,
            listen,
            hibernate_after: hibernate_after_ms.map(Duration::from_millis),
            session_threads: None,
            cluster,
        })
        .await
        .map_err(|error| with_config_hint(error, &data_dir_display))?;
        // Machine-readable first line: tests and scripts read the bound address from it. Written whether or not
        // stdout can take it (a full disk): the daemon serves either way.
        troupe::logging::print_line(format_args!("troupe listening on {}", daemon.url()));
        let data_dir_flag = if explicit_data_dir { format!(" --data-dir {}", data_dir_display) } else { String::new() };
        let token_path = daemon.token_path.display();
        troupe::logging::print_line(format_args!("token: {token_path} (print it with `troupe token{data_dir_flag}`)"));
        print_console_link(&daemon, &data_dir_flag).await;
        wait_for_shutdown_signal().await.context("installing signal handlers")?;
        tracing::info!("shutting down");
        daemon.shutdown().await;
        Ok(())
    })
}

/// On a terminal, a one-time sign-in link for the web console; elsewhere (a service's journal) only how to get one,
/// so no usable code is written to a log.
async fn print_console_link(daemon: &daemon::RunningDaemon, data_dir_flag: &str) {
    use std::io::IsTerminal as _;
    let url = if std::io::stdout().is_terminal() { daemon.console_sign_in_url().await } else { None };
    if let Some(url) = url {
        troupe::logging::print_line(format_args!(
            "console: {url} (signs in one browser, within 5 minutes; `troupe open` prints another)"
        ));
    } else if daemon.has_console() {
        troupe::logging::print_line(format_args!(
            "console: run `troupe open{data_dir_flag}` for a one-time sign-in link"
        ));
    }
}

async fn wait_for_shutdown_signal() -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    Ok(())
}

/// A daemon refused for its `config.toml` names the first problem only: the hint names the command that lists
/// every one at once.
fn with_config_hint(error: anyhow::Error, data_dir: &str) -> anyhow::Error {
    use troupe_runtime::RuntimeError;
    let config_problem = error.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<RuntimeError>(),
            Some(RuntimeError::ConfigSyntax { .. } | RuntimeError::ConfigInvalid { .. })
        )
    });
    if !config_problem {
        return error;
    }
    anyhow::anyhow!(
        "{error:#}\n  hint: `troupe config check --data-dir {data_dir}` lists every problem of the file at once"
    )
}
