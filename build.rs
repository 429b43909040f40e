//! Link settings of the `troupe` executable.
//!
//! - Its relative relocations are packed (`-z pack-relative-relocs`, `DT_RELR`): a position-independent executable
//!   carries a relocation for every pointer in its read-only data, and the dynamic loader reads all of them at start.
//!   Packed, the 46,000 of a release build take 14 KB instead of 1.1 MB, and the daemon's idle RSS
//!   (docs/performance.md, figure 6) falls by about 0.9 MiB of the binary's pages (15.0 to 14.1 MiB). Needs GNU ld
//!   2.38 or later and glibc 2.36 or later (Debian 12 and newer); only set for Linux with glibc.
//! - The functions a start runs are placed together (`--symbol-ordering-file=build/startup-symbols.txt`, which
//!   `scripts/startup-symbols` writes). A start faults in the pages of the code it runs, and the kernel maps a whole
//!   page-cache folio, often many pages, at each fault: scattered over the 23 MB of code, the start's 1,400
//!   functions made the idle daemon map about half of it. Only some linkers read that file (LLD, which rustc uses
//!   by default on x86_64 Linux since 1.90; not GNU ld or mold), so it is passed only when a test link of an empty
//!   program, with the same rustc, flags and linker, accepts it; `TROUPE_NO_SYMBOL_ORDER=1` leaves it out. Names
//!   the list has and a build lacks are skipped. A list made by another rustc matches almost nothing (symbol names
//!   carry the compiler's version), so the build warns then.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

const ORDER_FILE: &str = "build/startup-symbols.txt";

fn main() {
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let target_env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={ORDER_FILE}");
    println!("cargo:rerun-if-env-changed=TROUPE_NO_SYMBOL_ORDER");
    if target_os != "linux" || target_env != "gnu" {
        return;
    }
    println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    if std::env::var_os("TROUPE_NO_SYMBOL_ORDER").is_some_and(|value| value == "1") {
        return;
    }
    let Ok(order) = std::fs::canonicalize(ORDER_FILE) else { return };
    let flags = [format!("-Wl,--symbol-ordering-file={}", order.display()), "-Wl,--no-warn-symbol-ordering".to_owned()];
    if !linker_accepts(&flags) {
        println!(
            "cargo:warning=the linker does not take --symbol-ordering-file: the start's functions are not placed \
             together (the daemon works the same; its idle memory is larger, docs/performance.md finding 8)"
        );
        return;
    }
    for flag in &flags {
        println!("cargo:rustc-link-arg-bins={flag}");
    }
    warn_if_made_by_another_rustc(&order);
}

/// Whether linking an empty program with this build's rustc, target, flags and linker succeeds with `link_args`.
fn linker_accepts(link_args: &[String]) -> bool {
    let (Some(out_dir), Ok(target)) = (std::env::var_os("OUT_DIR"), std::env::var("TARGET")) else { return false };
    let out_dir = PathBuf::from(out_dir);
    let source = out_dir.join("symbol_order_probe.rs");
    if std::fs::write(&source, "fn main() {}\n").is_err() {
        return false;
    }
    let mut command = Command::new(rustc());
    command.arg("--crate-type=bin").arg("--target").arg(&target).arg("-o").arg(out_dir.join("symbol_order_probe"));
    // The flags cargo gives this build's crates (`RUSTFLAGS`, `target.<triple>.rustflags`), and the linker it chose
    // (`target.<triple>.linker`), so the probe links the way the executable will.
    let encoded = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    command.args(encoded.split('\u{1f}').filter(|flag| !flag.is_empty()));
    if let Some(linker) = std::env::var_os("RUSTC_LINKER") {
        let mut flag = OsString::from("linker=");
        flag.push(linker);
        command.arg("-C").arg(flag);
    }
    for arg in link_args {
        command.arg("-C").arg(format!("link-arg={arg}"));
    }
    command.arg(&source);
    command.output().is_ok_and(|output| output.status.success())
}

/// Warns when the list was made by another rustc than this build's: its names would match almost nothing.
fn warn_if_made_by_another_rustc(order: &Path) {
    let Ok(output) = Command::new(rustc()).arg("--version").output() else { return };
    let version = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let Ok(list) = std::fs::read_to_string(order) else { return };
    if let Some(made_by) = list.lines().find_map(|line| line.strip_prefix("# Made by ")).map(str::trim)
        && made_by != version
    {
        println!(
            "cargo:warning={ORDER_FILE} was made by {made_by}, this build uses {version}: run scripts/startup-symbols \
             again to place the start's functions together"
        );
    }
}

/// The rustc cargo builds with.
fn rustc() -> OsString {
    std::env::var_os("RUSTC").unwrap_or_else(|| OsString::from("rustc"))
}
