//! Figure 13: the sandbox's price. Spawn-to-exit of `true` and of `cat small.txt` through troupe's `shell` tool with
//! the default sandbox, called in process exactly as a run's tool call calls it (`Tool::execute` of the built-in
//! `shell` with a `ToolContext` holding the daemon's `Sandbox`, the run's temp dir under the sandbox's temp root and
//! no live output), against baselines measured in the same run: a bare fork/exec of the same command line
//! (`std::process::Command`, stdin `/dev/null`, stdout and stderr piped, as the tool does) and Debian's bubblewrap
//! running it under an equivalent policy. And the same `true` in a cwd whose tree holds a folder with a denied file
//! and 50,000 other entries, where every plan enumerates that folder: once with the plan cached (the steady state
//! of a session) and once right after an entry was added to that folder (which makes the next call plan again).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use serde_json::json;
use troupe_protocol::types::run::ToolResultStatus;
use troupe_runtime::config::{SandboxConfig, SandboxMode};
use troupe_runtime::sandbox::{Sandbox, Support};
use troupe_runtime::tools::{Tool, ToolContext, ToolRegistry};

use crate::Ctx;
use crate::harness::{bench_tmp_root, ms};
use crate::report::{Row, Table, Target, median_p99};

/// Issue 28: troupe's sandboxed spawn no slower than bubblewrap's.
const BWRAP_RATIO: f64 = 1.0;
/// Issue 28: troupe's sandboxed spawn within 2 ms of a bare fork/exec.
const OVER_BARE_MS: f64 = 2.0;
/// Issue 28: a spawn costs no more in a process holding much memory (a daemon with many sessions loaded) than in a
/// small one: the ratio of the two medians, with room for the noise between the two samples.
const MEMORY_RATIO: f64 = 1.25;
/// The file `cat` reads: 200 bytes, like figure 7's.
const SMALL_FILE: &str = "small.txt";
/// The denied file of the large folder, relative to its cwd.
const DENIED_FILE: &str = "vault/key";

/// One way of running a command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Runner {
    Bare,
    Bwrap,
    Troupe,
    /// The shell tool with `[sandbox] mode = "off"`: the tool's own cost, without the sandbox.
    TroupeOff,
}

/// A cwd, the sandbox that runs commands in it, and the run's temp dir.
struct Place {
    cwd: PathBuf,
    sandbox: Arc<Sandbox>,
    temp_dir: PathBuf,
}

impl Place {
    fn new(home: &Path, data_dir: &Path, cwd: PathBuf, config: &SandboxConfig) -> anyhow::Result<Place> {
        let sandbox = Arc::new(Sandbox::new(config, data_dir, Some(home)));
        // As a run does (`RunWorkspace::prepare`): a private folder under the sandbox's temp root.
        let temp_dir = match sandbox.temp_root() {
            Ok(root) => root.join(format!("run-bench-{}", troupe_runtime::clock::new_id())),
            Err(_) => home.join(format!("tmp-{}", troupe_runtime::clock::new_id())),
        };
        std::fs::create_dir_all(&temp_dir)?;
        Ok(Place { cwd, sandbox, temp_dir })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.temp_dir);
    }
}

fn shell() -> anyhow::Result<&'static dyn Tool> {
    static REGISTRY: std::sync::OnceLock<ToolRegistry> = std::sync::OnceLock::new();
    REGISTRY.get_or_init(ToolRegistry::builtin).get("shell").context("no built-in shell tool")
}

/// Runs `command` once through `runner` and returns the spawn-to-exit time, checking that it succeeded and (for
/// `expect`) printed what it should.
async fn once(runner: Runner, place: &Place, command: &str, expect: Option<&str>) -> anyhow::Result<Duration> {
    match runner {
        Runner::Bare | Runner::Bwrap => {
            let mut process = match runner {
                Runner::Bare => Command::new("/bin/sh"),
                _ => bwrap_command(place),
            };
            if runner == Runner::Bare {
                process.current_dir(&place.cwd);
            } else {
                process.arg("/bin/sh");
            }
            process.arg("-c").arg(command).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
            let started = Instant::now();
            let output = tokio::task::block_in_place(|| process.output())?;
            let elapsed = started.elapsed();
            ensure!(
                output.status.success(),
                "{runner:?} `{command}` failed: {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
            if let Some(expect) = expect {
                ensure!(
                    String::from_utf8_lossy(&output.stdout).contains(expect),
                    "{runner:?} `{command}` printed no {expect:?}"
                );
            }
            Ok(elapsed)
        }
        Runner::Troupe | Runner::TroupeOff => {
            let mut context = ToolContext::new(&place.cwd);
            context.sandbox = Arc::clone(&place.sandbox);
            context.temp_dir = Some(place.temp_dir.clone());
            let started = Instant::now();
            let result =
                tokio::time::timeout(Duration::from_secs(60), shell()?.execute(json!({"command": command}), context))
                    .await
                    .context("the shell call did not end within 60 s")?;
            let elapsed = started.elapsed();
            ensure!(result.status == ToolResultStatus::Ok, "{runner:?} `{command}` failed: {}", result.output);
            if let Some(expect) = expect {
                ensure!(
                    result.output.contains(expect),
                    "{runner:?} `{command}` printed no {expect:?}: {}",
                    result.output
                );
            }
            Ok(elapsed)
        }
    }
}

/// `bwrap` with the policy troupe's default sandbox enforces, as far as bubblewrap can state it: new PID and mount
/// namespaces, the whole file system bound read-only, a private `/proc`, a minimal `/dev`, the cwd and the temp dir
/// writable, the denied paths hidden (an empty tmpfs over a folder, `/dev/null` over a file), a session of its own,
/// killed with its parent.
fn bwrap_command(place: &Place) -> Command {
    let mut command = Command::new("bwrap");
    command.args(["--unshare-pid", "--die-with-parent", "--new-session", "--ro-bind", "/", "/"]);
    command.args(["--dev", "/dev", "--proc", "/proc"]);
    for denied in place.sandbox.denied() {
        if denied.is_dir() {
            command.arg("--tmpfs").arg(denied);
        } else if denied.exists() {
            command.arg("--ro-bind").arg("/dev/null").arg(denied);
        }
    }
    for writable in [&place.cwd, &place.temp_dir] {
        command.arg("--bind").arg(writable).arg(writable);
    }
    if !place.sandbox.network() {
        command.arg("--unshare-net");
    }
    command.arg("--chdir").arg(&place.cwd);
    command
}

/// `bwrap --version` runs: bubblewrap is installed.
fn bwrap_available() -> bool {
    Command::new("bwrap")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// `iterations` runs of each runner per round, the runners interleaved in each round so that they see the same load.
async fn sample(
    ctx: &Ctx,
    runners: &[Runner],
    places: &[&Place],
    command: &str,
    expect: Option<&str>,
    iterations: usize,
) -> anyhow::Result<Vec<Vec<f64>>> {
    let mut samples = vec![Vec::new(); runners.len()];
    for _ in 0..ctx.rounds {
        for (index, runner) in runners.iter().enumerate() {
            // One warm-up call each round: caches (the plan, the page cache, the dynamic loader's) as a session has them.
            once(*runner, places[index], command, expect).await?;
            for _ in 0..iterations {
                samples[index].push(ms(once(*runner, places[index], command, expect).await?));
            }
        }
    }
    Ok(samples)
}

/// `bytes` of memory with every page written, so the process's page tables map them all.
fn touched(bytes: usize) -> Vec<u8> {
    let mut ballast = vec![0u8; bytes];
    for page in ballast.chunks_mut(4096) {
        page[0] = 1;
    }
    std::hint::black_box(ballast)
}

/// A folder `vault` in `cwd` holding the denied file and `siblings` other files.
fn large_folder(cwd: &Path, siblings: usize) -> anyhow::Result<()> {
    let vault = cwd.join("vault");
    std::fs::create_dir_all(&vault)?;
    std::fs::write(cwd.join(DENIED_FILE), "secret")?;
    for index in 0..siblings {
        std::fs::write(vault.join(format!("f{index:05}")), "")?;
    }
    Ok(())
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Table> {
    let iterations = ctx.size(100, 3);
    let siblings = ctx.size(50_000, 500);
    let root = tempfile::tempdir_in(bench_tmp_root())?;
    // A home holding the data directory, as by default (`~/.troupe`), and the project the session works in.
    let home = root.path().join("home");
    let data_dir = home.join(".troupe");
    std::fs::create_dir_all(data_dir.join("daemon"))?;
    std::fs::write(data_dir.join("daemon").join("token"), "bench-token")?;
    let project = home.join("project");
    std::fs::create_dir_all(&project)?;
    std::fs::write(project.join(SMALL_FILE), "x".repeat(199) + "\n")?;
    let large = home.join("large");
    std::fs::create_dir_all(&large)?;
    large_folder(&large, siblings)?;
    let (home, data_dir, project, large) =
        (home.canonicalize()?, data_dir.canonicalize()?, project.canonicalize()?, large.canonicalize()?);

    let default = SandboxConfig::default();
    let place = Place::new(&home, &data_dir, project.clone(), &default)?;
    if let Support::Unavailable { reason } = place.sandbox.support() {
        return Ok(Table {
            figure: "13. The sandbox's price".into(),
            note: format!("skipped: this kernel cannot enforce the sandbox ({reason})"),
            rows: Vec::new(),
        });
    }
    let off =
        Place::new(&home, &data_dir, project.clone(), &SandboxConfig { mode: SandboxMode::Off, ..default.clone() })?;
    let denied_config =
        SandboxConfig { deny_read: vec![large.join(DENIED_FILE).display().to_string()], ..default.clone() };
    let large_place = Place::new(&home, &data_dir, large.clone(), &denied_config)?;
    let bwrap = bwrap_available();
    let rules = |place: &Place| -> anyhow::Result<usize> {
        let prepared = tokio::task::block_in_place(|| place.sandbox.prepare(&place.cwd, &place.temp_dir, &[]));
        Ok(prepared.map_err(anyhow::Error::msg)?.map_or(0, |prepared| prepared.rules().count()))
    };
    let (default_rules, large_rules) = (rules(&place)?, rules(&large_place)?);

    let mut rows = Vec::new();
    let mut bare_true = f64::NAN;
    for (label, command, expect) in [("`true`", "true", None), ("`cat small.txt`", "cat small.txt", Some("xxxx\n"))] {
        let mut runners = vec![Runner::Bare, Runner::Troupe, Runner::TroupeOff];
        let mut places = vec![&place, &place, &off];
        if bwrap {
            runners.push(Runner::Bwrap);
            places.push(&place);
        }
        let samples = sample(ctx, &runners, &places, command, expect, iterations).await?;
        let (bare, bare_p99) = median_p99(&samples[0]);
        let (troupe, troupe_p99) = median_p99(&samples[1]);
        let (unconfined, unconfined_p99) = median_p99(&samples[2]);
        if command == "true" {
            bare_true = bare;
        }
        rows.push(Row::new(format!("bare fork/exec, {label}"), "ms", bare, bare_p99));
        if bwrap {
            let (bwrap_median, bwrap_p99) = median_p99(&samples[3]);
            rows.push(Row::new(format!("bwrap, {label}"), "ms", bwrap_median, bwrap_p99).cost(bare));
            rows.push(
                Row::new(format!("troupe shell tool, {label}, against bwrap"), "ms", troupe, troupe_p99)
                    .cost(bwrap_median)
                    .target(Target::RatioAtMost(BWRAP_RATIO)),
            );
        } else {
            rows.push(Row::new(
                format!("bwrap, {label}: skipped, not installed (`apt-get install -y bubblewrap`)"),
                "ms",
                f64::NAN,
                f64::NAN,
            ));
        }
        rows.push(
            Row::new(
                format!("troupe shell tool, {label}, over bare fork/exec"),
                "ms",
                troupe - bare,
                troupe_p99 - bare,
            )
            .target(Target::MedianAtMost(OVER_BARE_MS)),
        );
        rows.push(
            Row::new(format!("troupe shell tool, sandbox off, {label}"), "ms", unconfined, unconfined_p99).cost(bare),
        );
    }

    // The same call in a process holding much more memory, as a daemon with many sessions loaded does: a fork would
    // copy its page tables on every spawn; the tool's clone shares them.
    // Each round samples the call without, then with the memory, so that both see the same load.
    let ballast_bytes = ctx.size(1 << 30, 64 << 20);
    let (mut light, mut heavy) = (Vec::new(), Vec::new());
    for _ in 0..ctx.rounds {
        once(Runner::Troupe, &place, "true", None).await?;
        for _ in 0..iterations {
            light.push(ms(once(Runner::Troupe, &place, "true", None).await?));
        }
        let ballast = touched(ballast_bytes);
        once(Runner::Troupe, &place, "true", None).await?;
        for _ in 0..iterations {
            heavy.push(ms(once(Runner::Troupe, &place, "true", None).await?));
        }
        drop(ballast);
    }
    let ((light, _), (heavy, heavy_p99)) = (median_p99(&light), median_p99(&heavy));
    rows.push(
        Row::new(
            format!("troupe shell tool, `true`, with {} MiB more memory in use, against without", ballast_bytes >> 20),
            "ms",
            heavy,
            heavy_p99,
        )
        .cost(light)
        .target(Target::RatioAtMost(MEMORY_RATIO)),
    );

    // 50,000 entries beside a denied path: the steady state, and the call right after the folder changed.
    let cached = sample(ctx, &[Runner::Troupe], &[&large_place], "true", None, iterations.min(ctx.size(50, 3))).await?;
    let (steady, steady_p99) = median_p99(&cached[0]);
    let mut replans = Vec::new();
    for round in 0..ctx.rounds * ctx.size(2, 1) {
        // A new entry changes the folder's mtime: the plan must be made again, and must hold the new entry.
        std::fs::write(large.join("vault").join(format!("new-{round}")), "")?;
        replans.push(ms(once(Runner::Troupe, &large_place, "true", None).await?));
    }
    let (replan, replan_p99) = median_p99(&replans);
    rows.push(
        Row::new(
            format!("troupe, `true`, {siblings} entries beside a denied file, plan cached"),
            "ms",
            steady,
            steady_p99,
        )
        .cost(bare_true),
    );
    rows.push(
        Row::new(
            format!("troupe, `true`, {siblings} entries beside a denied file, after a new entry"),
            "ms",
            replan,
            replan_p99,
        )
        .cost(bare_true),
    );

    Ok(Table {
        figure: "13. The sandbox's price".into(),
        note: format!(
            "Spawn-to-exit of `/bin/sh -c <command>`, {iterations} calls per runner per round after one warm-up call, \
             the runners interleaved, {} rounds. troupe: the built-in `shell` tool called in process as a run calls it \
             (default `[sandbox]`: workspace-write, Landlock, PID and mount namespaces with a private /proc, process \
             group recorded; the run's temp dir), from the call to its result. Baselines: a bare fork/exec of the same \
             command line (std::process::Command, stdin /dev/null, stdout and stderr piped) and bubblewrap with an \
             equivalent policy (`--unshare-pid --ro-bind / / --dev /dev --proc /proc`, the cwd and temp dir bound \
             writable, the denied paths covered). Targets (issue 28): troupe ≤ bwrap (ratio ≤ {BWRAP_RATIO}), and troupe \
             − bare ≤ {OVER_BARE_MS} ms (that row's median is the difference of the medians). Then `true` again while the \
             process holds {} MiB more memory, every page touched: a fork would copy its page tables, the tool's clone \
             does not (target: ratio ≤ {MEMORY_RATIO} against the same call without, sampled just before in each round). Last rows: a cwd holding a \
             folder with a denied file (`deny_read`) and {siblings} other entries. The plans have {default_rules} and \
             {large_rules} rules (a folder holding a denied path gets a rule per entry: here `/`, the bench's temp \
             dir and the home).",
            ctx.rounds,
            ballast_bytes >> 20,
        ),
        rows,
    })
}
