//! The bench's smoke mode is part of the normal test run: small sizes, every figure, correctness asserted
//! (ordering and completeness of fan-out, loads, run completion), timing targets not judged.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn smoke_mode_runs_every_figure() {
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_troupe-bench"))
        .arg("--smoke")
        .env("RUST_LOG", "warn")
        .output()
        .expect("run troupe-bench --smoke");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "troupe-bench --smoke failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("smoke: ok (14 figures"), "no success line\nstdout:\n{stdout}\nstderr:\n{stderr}");
    for figure in [
        "1. RPC round trip",
        "2. Pipelined",
        "3. Fan-out",
        "4. Durable",
        "5. Cold load",
        "6. Scale",
        "7. Run overhead",
        "8. Bounded history",
        "9. One-turn text run",
        "10. Streaming",
        "11. The cluster",
        "12. A client's first seconds",
        "13. The sandbox's price",
        "14. Tool turns through a real provider",
    ] {
        assert!(stdout.contains(figure), "figure {figure:?} missing\nstdout:\n{stdout}");
    }
    assert!(started.elapsed() < Duration::from_secs(120), "the smoke run took {:?}", started.elapsed());
}
