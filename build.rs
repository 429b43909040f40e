//! Link settings of the `troupe` executable.
//!
//! - Its relative relocations are packed (`-z pack-relative-relocs`, `DT_RELR`): a position-independent executable
//!   carries a relocation for every pointer in its read-only data, and the dynamic loader reads all of them at start.
//!   Packed, the 46,000 of a release build take 14 KB instead of 1.1 MB, and the daemon's idle RSS
//!   (docs/performance.md, figure 6) falls by about 0.9 MiB of the binary's pages (15.0 to 14.1 MiB). Needs GNU ld
//!   2.38 or later and glibc 2.36 or later (Debian 12 and newer); only set for Linux with glibc.
//! - The functions a start runs are placed together (`--symbol-ordering-file=build/startup-symbols.txt`, which
//!   `scripts/startup-symbols` writes). A start faults in the pages of the code it runs, and the kernel maps a whole
//!   page-cache folio, often many pages, at each fault: scattered over the 23 MB of code, the start's few thousand
//!   functions made the idle daemon map about half of it. Only LLD reads that file, so it is passed only where
//!   rustc links with its own LLD by default (x86_64 Linux with glibc, Rust 1.90 and later) and nothing chose
//!   another linker; `TROUPE_NO_SYMBOL_ORDER=1` leaves it out. Names the list has that a build lacks are skipped.

use std::path::Path;
use std::process::Command;

fn main() {
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let target_env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if target_os == "linux" && target_env == "gnu" {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    let order = Path::new("build/startup-symbols.txt");
    if target_os == "linux"
        && target_env == "gnu"
        && links_with_rust_lld()
        && let Ok(order) = std::fs::canonicalize(order)
    {
        println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}", order.display());
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build/startup-symbols.txt");
    println!("cargo:rerun-if-env-changed=TROUPE_NO_SYMBOL_ORDER");
}

/// Whether the executable is linked by rustc's own LLD: the default on `x86_64-unknown-linux-gnu` since Rust 1.90,
/// unless a linker was chosen (`-C linker`, `-C linker-features`, or cargo's `target.<triple>.linker`).
fn links_with_rust_lld() -> bool {
    if std::env::var_os("TROUPE_NO_SYMBOL_ORDER").is_some_and(|value| value == "1") {
        return false;
    }
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() != Ok("x86_64") {
        return false;
    }
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if flags.contains("linker") {
        return false;
    }
    let target = std::env::var("TARGET").unwrap_or_default();
    let linker_variable = format!("CARGO_TARGET_{}_LINKER", target.to_uppercase().replace(['-', '.'], "_"));
    if std::env::var_os(linker_variable).is_some() {
        return false;
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let Ok(output) = Command::new(rustc).arg("--version").output() else { return false };
    // "rustc 1.95.0 (59807616e 2026-04-14)"
    let version = String::from_utf8_lossy(&output.stdout);
    let minor = version.split_whitespace().nth(1).and_then(|number| number.split('.').nth(1)?.parse::<u32>().ok());
    minor.is_some_and(|minor| minor >= 90)
}
