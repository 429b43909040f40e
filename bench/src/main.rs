//! `troupe-bench`: the real daemon and real WebSocket clients on 127.0.0.1, each figure against a baseline
//! measured in the same run. See `docs/performance.md`.
//!
//! ```sh
//! cargo run --release -p troupe-bench                     # every figure
//! cargo run --release -p troupe-bench -- --only rtt       # one figure: rtt, pipeline, first, fanout, durable,
//!                                                         #   load, scale, runs, history, turn, stream, provider,
//!                                                         #   cluster, sandbox
//! cargo run -p troupe-bench -- --smoke                    # small sizes, correctness only (the test suite runs this)
//! ```

mod echo;
mod fake_openai;
mod figures;
mod harness;
mod report;
mod start_list;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

use harness::DaemonProgram;
use report::Table;

#[derive(Parser, Debug)]
#[command(name = "troupe-bench", version, about = "Benchmarks of the troupe daemon on loopback, with baselines")]
struct Args {
    /// A few iterations at small sizes: checks correctness only (targets are not judged).
    #[arg(long)]
    smoke: bool,
    /// Run only these figures (repeatable or comma-separated): rtt, pipeline, first, fanout, durable, load, scale,
    /// runs, history, turn, stream, provider, cluster, sandbox.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Rounds per figure (default 5; 2 with --smoke).
    #[arg(long)]
    rounds: Option<usize>,
    /// The `troupe` binary for the child-process figures (default: `TROUPE_BIN`, else next to this executable,
    /// else this executable's own `serve-child`).
    #[arg(long)]
    troupe_bin: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Sub>,
}

#[derive(Subcommand, Debug)]
enum Sub {
    /// The daemon, exactly as `troupe serve` starts it (used when no `troupe` binary is at hand).
    #[command(hide = true)]
    ServeChild {
        #[arg(long)]
        listen: std::net::SocketAddr,
        #[arg(long)]
        data_dir: PathBuf,
        #[arg(long)]
        hibernate_after_ms: Option<u64>,
    },
}

pub const FIGURES: [&str; 14] = [
    "rtt", "pipeline", "first", "fanout", "durable", "load", "scale", "runs", "history", "turn", "stream", "provider",
    "cluster", "sandbox",
];

/// What every figure gets.
pub struct Ctx {
    pub smoke: bool,
    pub rounds: usize,
    pub program: DaemonProgram,
}

impl Ctx {
    /// `full` normally, `smoke` with `--smoke`.
    pub fn size(&self, full: usize, smoke: usize) -> usize {
        if self.smoke { smoke } else { full }
    }
}

fn main() {
    let args = Args::parse();
    if let Some(Sub::ServeChild { listen, data_dir, hibernate_after_ms }) = args.command {
        if let Err(error) = serve_child(listen, data_dir, hibernate_after_ms) {
            eprintln!("serve-child: {error:#}");
            std::process::exit(1);
        }
        return;
    }
    match run(args) {
        Ok(()) => {}
        Err(error) => {
            eprintln!("troupe-bench failed: {error:#}");
            std::process::exit(1);
        }
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    for figure in &args.only {
        anyhow::ensure!(FIGURES.contains(&figure.as_str()), "unknown figure {figure:?}; one of {FIGURES:?}");
    }
    let ctx = Ctx {
        smoke: args.smoke,
        rounds: args.rounds.unwrap_or(if args.smoke { 2 } else { 5 }).max(1),
        program: DaemonProgram::find(args.troupe_bin)?,
    };
    let started = Instant::now();
    println!("# troupe-bench{}", if ctx.smoke { " --smoke" } else { "" });
    println!();
    println!("{}", machine_description());
    println!("- build: {}", if cfg!(debug_assertions) { "debug" } else { "release" });
    println!("- rounds: {}", ctx.rounds);
    println!("- child daemon: {}", ctx.program.describe());

    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let mut tables: Vec<Table> = Vec::new();
    for figure in FIGURES {
        if !args.only.is_empty() && !args.only.iter().any(|only| only == figure) {
            continue;
        }
        let figure_started = Instant::now();
        let table = runtime.block_on(figures::run(figure, &ctx))?;
        print!("{}", table.render());
        println!("\n({figure}: {:.1} s)", figure_started.elapsed().as_secs_f64());
        tables.push(table);
    }
    runtime.shutdown_timeout(Duration::from_secs(5));

    let verdicts: Vec<bool> =
        tables.iter().flat_map(|table| table.rows.iter().filter_map(|row| row.verdict())).collect();
    let passed = verdicts.iter().filter(|pass| **pass).count();
    println!();
    if ctx.smoke {
        // Timing targets mean nothing at smoke sizes in a debug build; correctness was asserted above.
        println!("smoke: ok ({} figures, {:.1} s)", tables.len(), started.elapsed().as_secs_f64());
    } else {
        println!(
            "targets: {passed} PASS, {} FAIL ({:.1} s in all)",
            verdicts.len() - passed,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

fn serve_child(listen: std::net::SocketAddr, data_dir: PathBuf, hibernate_after_ms: Option<u64>) -> anyhow::Result<()> {
    use troupe::daemon::{self, DaemonOptions};
    actix_web::rt::System::new().block_on(async move {
        let daemon = daemon::start(DaemonOptions {
            data_dir: troupe_runtime::data_dir::DataDir::new(data_dir),
            listen: Some(listen.into()),
            hibernate_after: hibernate_after_ms.map(Duration::from_millis),
            session_threads: None,
            cluster: Default::default(),
        })
        .await?;
        println!("troupe listening on {}", daemon.url());
        // The parent kills this process, or stops it with SIGTERM as `troupe serve` is stopped; never wait longer
        // than an hour.
        let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(3600)) => {}
            _ = terminate.recv() => {}
        }
        daemon.shutdown().await;
        Ok(())
    })
}

/// `nproc`, the CPU model, the kernel, and the file system and disk of the temp dir the bench writes to.
fn machine_description() -> String {
    let nproc = std::thread::available_parallelism().map_or(0, |count| count.get());
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("model name").map(|rest| rest.trim_start_matches([' ', '\t', ':'])))
        .unwrap_or("unknown")
        .to_owned();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_owned();
    let memory = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .nth(1)
        .and_then(|kib| kib.parse::<u64>().ok())
        .map_or("?".to_owned(), |kib| format!("{:.1} GiB", kib as f64 / 1024.0 / 1024.0));
    let tmp = harness::bench_tmp_root();
    let tmp = tmp.canonicalize().unwrap_or(tmp);
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mount = mounts
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.len() >= 3 && tmp.starts_with(fields[1])).then(|| (fields[0], fields[1], fields[2]))
        })
        .max_by_key(|(_, mount_point, _)| mount_point.len());
    let disk = match mount {
        Some((device, mount_point, fs)) => {
            let name = device.trim_start_matches("/dev/");
            let base: String = name.trim_end_matches(|c: char| c.is_ascii_digit()).to_owned();
            let rotational = std::fs::read_to_string(format!("/sys/block/{base}/queue/rotational"))
                .ok()
                .map(|value| if value.trim() == "1" { "rotational" } else { "non-rotational" })
                .unwrap_or("unknown kind");
            format!("{fs} on {device} ({rotational}), mounted at {mount_point}")
        }
        None => "unknown".to_owned(),
    };
    format!("- machine: nproc {nproc}, CPU {cpu}, {memory} RAM, Linux {kernel}\n- temp dir: {} — {disk}", tmp.display())
}
