//! Link settings of the `troupe` executable.
//!
//! Its relative relocations are packed (`-z pack-relative-relocs`, `DT_RELR`): a position-independent executable
//! carries a relocation for every pointer in its read-only data, and the dynamic loader reads all of them at start.
//! Packed, the 46,000 of a release build take 14 KB instead of 1.1 MB, and the daemon's idle RSS (docs/performance.md,
//! figure 6) falls by about 0.9 MiB of the binary's pages (15.0 to 14.1 MiB). Needs GNU ld 2.38 or later and glibc
//! 2.36 or later (Debian 12 and newer); only set for Linux with glibc.

fn main() {
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let target_env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if target_os == "linux" && target_env == "gnu" {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
