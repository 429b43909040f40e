//! A seccomp filter for kernels whose Landlock cannot govern Unix sockets (ABI below 9): without it, a tool
//! process could connect to any socket file its user may write (a Docker socket, the session bus with
//! `systemd-run --user`, an ssh or gpg agent) and have something outside the sandbox run for it.
//!
//! The filter refuses creating `AF_UNIX` sockets with `socket()` (`EACCES`), and datagram socket pairs, whose ends
//! can `sendto` any socket path; stream socket pairs, which only connect a process to its own children, stay
//! allowed. It also refuses `io_uring_setup` (`ENOSYS`, as on kernels that
//! lack it), which could create sockets past the filter, and any system call of another ABI than the daemon's
//! (x32, or 32-bit calls), which would bypass a filter written for this one.
//!
//! Installed between fork and exec, after `PR_SET_NO_NEW_PRIVS`; the program is a constant, so installing it
//! allocates nothing.

use std::io;

/// `struct sock_filter` of `<linux/filter.h>`.
#[repr(C)]
#[derive(Clone, Copy)]
struct SockFilter {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

/// `struct sock_fprog` of `<linux/filter.h>`.
#[repr(C)]
struct SockFprog {
    len: u16,
    filter: *const SockFilter,
}

/// `BPF_LD | BPF_W | BPF_ABS`: load the 32-bit word at an offset of `struct seccomp_data`.
const BPF_LD_W_ABS: u16 = 0x20;
/// `BPF_JMP | BPF_JEQ | BPF_K`.
const BPF_JMP_JEQ_K: u16 = 0x15;
/// `BPF_JMP | BPF_JGE | BPF_K`.
const BPF_JMP_JGE_K: u16 = 0x35;
/// `BPF_RET | BPF_K`.
const BPF_RET_K: u16 = 0x06;
/// `BPF_ALU | BPF_AND | BPF_K`.
const BPF_ALU_AND_K: u16 = 0x54;

/// The socket type in `socketpair`'s second argument, without `SOCK_NONBLOCK` and `SOCK_CLOEXEC`.
const SOCKET_TYPE_MASK: u32 = 0xf;

const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const SECCOMP_MODE_FILTER: libc::c_ulong = 2;

/// Offsets in `struct seccomp_data`: the call number, the architecture, the low halves of the first two arguments.
const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;
const OFFSET_ARG0_LOW: u32 = 16;
const OFFSET_ARG1_LOW: u32 = 24;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// x32 calls on x86_64 carry this bit in their number.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

const fn statement(code: u16, k: u32) -> SockFilter {
    SockFilter { code, jt: 0, jf: 0, k }
}

const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> SockFilter {
    SockFilter { code, jt, jf, k }
}

/// The program; jump offsets count the instructions skipped after the jump.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const PROGRAM: [SockFilter; 16] = [
    /* 0 */ statement(BPF_LD_W_ABS, OFFSET_ARCH),
    /* 1 */ jump(BPF_JMP_JEQ_K, AUDIT_ARCH, 0, 13), // another ABI: 15
    /* 2 */ statement(BPF_LD_W_ABS, OFFSET_NR),
    /* 3 */ jump(BPF_JMP_JGE_K, X32_SYSCALL_BIT, 11, 0), // x32: 15
    /* 4 */ jump(BPF_JMP_JEQ_K, libc::SYS_io_uring_setup as u32, 9, 0), // 14
    /* 5 */ jump(BPF_JMP_JEQ_K, libc::SYS_socket as u32, 1, 0), // socket(): 7
    /* 6 */ jump(BPF_JMP_JEQ_K, libc::SYS_socketpair as u32, 2, 5), // socketpair(): 9, else 12
    /* 7 */ statement(BPF_LD_W_ABS, OFFSET_ARG0_LOW),
    /* 8 */ jump(BPF_JMP_JEQ_K, libc::AF_UNIX as u32, 4, 3), // AF_UNIX: 13, else 12
    /* 9 */ statement(BPF_LD_W_ABS, OFFSET_ARG1_LOW),
    /* 10 */ statement(BPF_ALU_AND_K, SOCKET_TYPE_MASK),
    /* 11 */ jump(BPF_JMP_JEQ_K, libc::SOCK_DGRAM as u32, 1, 0), // a datagram pair: 13
    /* 12 */ statement(BPF_RET_K, SECCOMP_RET_ALLOW),
    /* 13 */ statement(BPF_RET_K, SECCOMP_RET_ERRNO | libc::EACCES as u32),
    /* 14 */ statement(BPF_RET_K, SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
    /* 15 */ statement(BPF_RET_K, SECCOMP_RET_ERRNO | libc::EPERM as u32),
];

/// Installs the filter on the calling thread (the single thread of a forked child). Needs `no_new_privs` (or
/// `CAP_SYS_ADMIN`).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(super) fn install_unix_socket_filter() -> io::Result<()> {
    let program = SockFprog { len: PROGRAM.len() as u16, filter: PROGRAM.as_ptr() };
    // SAFETY: `program` points at a valid, 'static filter of `len` instructions that the kernel copies.
    let outcome = unsafe { libc::prctl(libc::PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program as *const SockFprog, 0, 0) };
    if outcome == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// On other architectures the filter is not written; refusing to start is the safe answer.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(super) fn install_unix_socket_filter() -> io::Result<()> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}
