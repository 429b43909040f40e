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
//! A second filter, on every confined command whatever the ABI ([`install_setid_filter`]), refuses the set-user-ID
//! bit, and the set-group-ID bit on what it creates: Landlock does not govern a file's mode, and a command could
//! otherwise leave a program behind that runs as the daemon's user (as root, when the daemon is) for anyone who
//! starts it. It also refuses `io_uring_setup`, whose submissions could create files past it.
//!
//! Installed between fork and exec, after `PR_SET_NO_NEW_PRIVS`; the programs are made before the fork (the first
//! is a constant), so installing them allocates nothing.

use std::io;

/// `struct sock_filter` of `<linux/filter.h>`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(super) struct SockFilter {
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
/// `BPF_JMP | BPF_JA`: jump `k` instructions ahead.
const BPF_JMP_JA: u16 = 0x05;

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
    install(&PROGRAM)
}

/// On other architectures the filter is not written; refusing to start is the safe answer.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(super) fn install_unix_socket_filter() -> io::Result<()> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

/// The set-id bits of a mode: `S_ISUID | S_ISGID`.
const SET_ID_BITS: u32 = 0o6000;

/// `fchmodat2` (Linux 6.6), the same number on every architecture.
const SYS_FCHMODAT2: libc::c_long = 452;

/// Where a call that can set a file's mode takes it, for [`install_setid_filter`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum ModeCall {
    /// A mode changed (`chmod`), argument `n` (from 0): the set-user-ID bit is refused. The set-group-ID bit is
    /// not: GNU `chmod`, `cp -a` and git's shared repositories pass it on for folders, where it only makes new
    /// entries take the folder's group.
    Change(u32),
    /// A file or node created with a mode, argument `n`: both bits are refused.
    Create(u32),
    /// The mode is where the filter cannot read it (`openat2`'s `how`, an `io_uring` submission): the call is
    /// refused with `ENOSYS`, as on kernels without it, and callers fall back to the plain calls.
    Unreadable,
}

impl ModeCall {
    /// The argument the program loads for this call and the test it jumps to; `None` when it reads no mode.
    fn load(self) -> Option<(u32, Test)> {
        match self {
            ModeCall::Change(argument) => Some((argument, Test::Change)),
            ModeCall::Create(argument) => Some((argument, Test::Create)),
            ModeCall::Unreadable => None,
        }
    }
}

/// The calls that set a mode: changing one, or creating a file or node with one.
#[cfg(target_arch = "x86_64")]
const MODE_CALLS: [(libc::c_long, ModeCall); 11] = [
    (libc::SYS_chmod, ModeCall::Change(1)),
    (libc::SYS_fchmod, ModeCall::Change(1)),
    (libc::SYS_fchmodat, ModeCall::Change(2)),
    (SYS_FCHMODAT2, ModeCall::Change(2)),
    (libc::SYS_creat, ModeCall::Create(1)),
    (libc::SYS_open, ModeCall::Create(2)),
    (libc::SYS_openat, ModeCall::Create(3)),
    (libc::SYS_mknod, ModeCall::Create(1)),
    (libc::SYS_mknodat, ModeCall::Create(2)),
    (libc::SYS_openat2, ModeCall::Unreadable),
    (libc::SYS_io_uring_setup, ModeCall::Unreadable),
];

/// The calls that set a mode (aarch64 has only the `*at` forms).
#[cfg(target_arch = "aarch64")]
const MODE_CALLS: [(libc::c_long, ModeCall); 7] = [
    (libc::SYS_fchmod, ModeCall::Change(1)),
    (libc::SYS_fchmodat, ModeCall::Change(2)),
    (SYS_FCHMODAT2, ModeCall::Change(2)),
    (libc::SYS_openat, ModeCall::Create(3)),
    (libc::SYS_mknodat, ModeCall::Create(2)),
    (libc::SYS_openat2, ModeCall::Unreadable),
    (libc::SYS_io_uring_setup, ModeCall::Unreadable),
];

/// What the program tests a mode for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Test {
    /// The set-user-ID bit ([`ModeCall::Change`]).
    Change,
    /// Either set-id bit ([`ModeCall::Create`]).
    Create,
}

/// The argument loads of the program (the argument, and the test that follows), each followed by a jump to its
/// test. Every [`ModeCall::Change`] and [`ModeCall::Create`] of [`MODE_CALLS`] has one.
const LOADS: [(u32, Test); 5] =
    [(1, Test::Change), (2, Test::Change), (1, Test::Create), (2, Test::Create), (3, Test::Create)];

/// The set-id program is short enough for every jump to fit a `u8`.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const SHORT: () = assert!(2 * LOADS.len() + 12 + MODE_CALLS.len() < 256);

/// The set-id filter: a mode change ([`ModeCall::Change`]) with the set-user-ID bit, or a creation
/// ([`ModeCall::Create`]) with either set-id bit, is refused with `EPERM` (what `chmod u+s` meets on a file it does
/// not own); `openat2` and `io_uring_setup` with `ENOSYS`; a call of another ABI with `EPERM`. Made once, before
/// any fork.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(super) fn setid_program() -> &'static [SockFilter] {
    static PROGRAM: std::sync::OnceLock<Vec<SockFilter>> = std::sync::OnceLock::new();
    PROGRAM.get_or_init(|| {
        let () = SHORT;
        // The layout: the checks of the ABI (0-3), one test per call, allow; one load of each argument that holds a
        // mode with a jump to its test (two instructions each); the two tests (two each); the three answers.
        let allow = 4 + MODE_CALLS.len();
        let load_at = |load: (u32, Test)| allow + 1 + 2 * LOADS.iter().position(|known| *known == load).unwrap_or(0);
        let test_change = allow + 1 + 2 * LOADS.len();
        let test_create = test_change + 2;
        let (allowed, refused, unknown) = (test_create + 2, test_create + 3, test_create + 4);
        // Every jump lands within the program (below 256 instructions: `SHORT`).
        let offset = |from: usize, to: usize| (to - from - 1) as u8;
        let mut program = vec![
            statement(BPF_LD_W_ABS, OFFSET_ARCH),
            jump(BPF_JMP_JEQ_K, AUDIT_ARCH, 0, offset(1, refused)),
            statement(BPF_LD_W_ABS, OFFSET_NR),
            jump(BPF_JMP_JGE_K, X32_SYSCALL_BIT, offset(3, refused), 0),
        ];
        for (number, call) in MODE_CALLS {
            let at = program.len();
            let target = call.load().map_or(unknown, load_at);
            program.push(jump(BPF_JMP_JEQ_K, number as u32, offset(at, target), 0));
        }
        program.push(statement(BPF_RET_K, SECCOMP_RET_ALLOW));
        for (argument, test) in LOADS {
            let test = match test {
                Test::Change => test_change,
                Test::Create => test_create,
            };
            program.push(statement(BPF_LD_W_ABS, OFFSET_ARG0_LOW + 8 * argument));
            let at = program.len();
            program.push(statement(BPF_JMP_JA, u32::from(offset(at, test))));
        }
        for (bits, at) in [(libc::S_ISUID, test_change), (SET_ID_BITS, test_create)] {
            debug_assert_eq!(program.len(), at);
            program.push(statement(BPF_ALU_AND_K, bits));
            let at = program.len();
            program.push(jump(BPF_JMP_JEQ_K, 0, offset(at, allowed), offset(at, refused)));
        }
        program.push(statement(BPF_RET_K, SECCOMP_RET_ALLOW));
        program.push(statement(BPF_RET_K, SECCOMP_RET_ERRNO | libc::EPERM as u32));
        program.push(statement(BPF_RET_K, SECCOMP_RET_ERRNO | libc::ENOSYS as u32));
        debug_assert_eq!(program.len(), unknown + 1);
        program
    })
}

/// Installs the set-id filter ([`setid_program`], made before the fork) on the calling thread. Needs
/// `no_new_privs` (or `CAP_SYS_ADMIN`).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(super) fn install_setid_filter(program: &'static [SockFilter]) -> io::Result<()> {
    install(program)
}

/// On other architectures the filter is not written; refusing to start is the safe answer.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(super) fn install_setid_filter(_program: &'static [SockFilter]) -> io::Result<()> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(super) fn setid_program() -> &'static [SockFilter] {
    &[]
}

fn install(program: &[SockFilter]) -> io::Result<()> {
    let program = SockFprog { len: program.len() as u16, filter: program.as_ptr() };
    // SAFETY: `program` points at a valid filter of `len` instructions, alive for the call; the kernel copies it.
    let outcome = unsafe { libc::prctl(libc::PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program as *const SockFprog, 0, 0) };
    if outcome == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

#[cfg(all(test, any(target_arch = "x86_64", target_arch = "aarch64")))]
mod tests {
    use super::*;

    #[test]
    fn every_mode_call_has_its_argument_load() {
        for (number, call) in MODE_CALLS {
            if let Some(load) = call.load() {
                assert!(LOADS.contains(&load), "call {number} has no load for its mode");
            }
        }
        assert!(MODE_CALLS.iter().any(|(_, call)| call.load().is_none()), "the unreadable calls are tested too");
        assert!(setid_program().len() < 256);
    }
}
