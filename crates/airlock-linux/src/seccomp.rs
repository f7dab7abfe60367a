//! The seccomp filter every sandbox process runs under (PRODUCT I6), as data.
//!
//! [`RULES`] is the policy: one row per denied syscall (or syscall + argument pattern), with
//! the errno it gets and the reason, citing the CVE or kernel document that motivates it.
//! [`sandbox_filter`] compiles the table into one BPF program for the native architecture
//! (x86_64 or aarch64): a binary search on the syscall number, then each named syscall's own
//! argument checks ([`assemble`]); the tests compare its every verdict with the table compiled
//! by `seccompiler` the way it used to be.
//!
//! Design decisions:
//! - **Default allow, explicit deny.** The sandbox already runs in its own user, mount, pid, net,
//!   ipc, uts and cgroup namespaces with every capability dropped; the filter removes the kernel
//!   surface that namespaces do *not* isolate (keyrings, bpf, perf, io_uring, kernel modules) and
//!   the calls that would undo the setup (mount, new user namespaces). An allowlist would break
//!   arbitrary developer tooling for little extra safety on top of that.
//! - **`EPERM`, not kill.** A denied call fails the way a missing privilege fails, so programs
//!   that probe for features (systemd-detect-virt, language runtimes probing io_uring, `keyctl`
//!   users such as Kerberos) degrade gracefully instead of dying with `SIGSYS`.
//! - **`clone3` gets `ENOSYS`.** Its flags live in a struct in user memory, which BPF cannot
//!   read, so `CLONE_NEWUSER` cannot be filtered there. `ENOSYS` makes glibc and musl fall back to
//!   `clone`, whose flags are a register argument the filter inspects.
//! - **Foreign ABIs are refused.** The program starts with an audit-arch check that
//!   returns `SECCOMP_RET_KILL_PROCESS` for any other architecture (a 32-bit `int 0x80` call from
//!   a 64-bit process reports `AUDIT_ARCH_I386`): the 32-bit syscall table would bypass every
//!   rule keyed on 64-bit numbers. On x86_64 the x32 ABI shares `AUDIT_ARCH_X86_64` but sets bit
//!   30 of the syscall number, so a guard placed right after the arch check answers
//!   every `nr >= 0x40000000` with `ENOSYS` before any rule runs.
//! - **`ptrace` is allowed.** Debuggers and `strace` are ordinary development tools. Since Linux
//!   4.8 seccomp runs again after a tracer changes a syscall, so ptrace cannot be used to skip the
//!   filter; the pid namespace holds only sandbox processes; the guest's PID 1 is non-dumpable
//!   and sandbox processes hold no `CAP_SYS_PTRACE`, so they cannot attach to it. Docker's default
//!   profile makes the same choice on kernels >= 4.8.
//!
//! Order of operations (in `sys::process`, per sandbox process): `setsid`, identity,
//! capabilities dropped, `no_new_privs`, this filter, `execve`. The mount family is denied, so
//! the filter must be the last step after all mounts are done.
#[cfg(test)]
use std::collections::BTreeMap;

use seccompiler::{sock_filter, BpfProgram, TargetArch};
#[cfg(test)]
use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};

/// Errors building the sandbox filter.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("unsupported architecture {arch} for the seccomp filter")]
    UnsupportedArch { arch: &'static str },
    #[error("seccomp rule for {syscall} is invalid: {source}")]
    InvalidRule {
        syscall: &'static str,
        source: seccompiler::BackendError,
    },
    #[error("compiling the {action} seccomp filter failed: {source}")]
    Compile {
        action: &'static str,
        source: seccompiler::BackendError,
    },
    #[error("the combined seccomp program has {len} instructions (kernel limit 4096)")]
    TooLarge { len: usize },
    #[error("a jump at instruction {at} of the seccomp program is out of reach")]
    JumpTooFar { at: usize },
}

/// What a matching rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deny {
    /// Fail with `EPERM`, as for a missing privilege.
    Eperm,
    /// Fail with `ENOSYS`, as for a syscall this kernel does not have (lets libc fall back).
    Enosys,
    /// Fail with `EAFNOSUPPORT`, as for an address family this kernel was built without.
    Eafnosupport,
}

impl Deny {
    fn errno(self) -> u32 {
        match self {
            Deny::Eperm => libc::EPERM as u32,
            Deny::Enosys => libc::ENOSYS as u32,
            Deny::Eafnosupport => libc::EAFNOSUPPORT as u32,
        }
    }
}

/// When a rule matches its syscall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Every call.
    Always,
    /// Argument `arg` (64-bit) has all bits of `bits` set.
    ArgHasBits { arg: u8, bits: u64 },
    /// The low 32 bits of argument `arg` equal `value`. 32-bit on purpose: the kernel truncates
    /// `int`-typed arguments (ioctl's `cmd`), so a 64-bit compare could be dodged with high bits
    /// (CVE-2019-10063, flatpak's TIOCSTI filter).
    Arg32Eq { arg: u8, value: u32 },
    /// The low 32 bits of argument `arg` have all bits of `bits` set and are not `except`.
    Arg32HasBitsExcept { arg: u8, bits: u32, except: u32 },
    /// The low 32 bits of argument `arg` have all bits of `bits` set (`mode_t` and `int`
    /// arguments are truncated to 32 bits by the kernel).
    Arg32HasBits { arg: u8, bits: u32 },
    /// The low 32 bits of argument `arg` are none of `allowed`.
    Arg32NotIn { arg: u8, allowed: &'static [u32] },
    /// The low 32 bits of argument `arg` have all bits of `bits` set and those of argument
    /// `if_arg` all bits of `if_bits` (a mode that counts only with a flag: open's mode is read
    /// only with `O_CREAT` or `O_TMPFILE`).
    Arg32HasBitsIf {
        arg: u8,
        bits: u32,
        if_arg: u8,
        if_bits: u32,
    },
}

/// One row of the policy.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub syscall: &'static str,
    pub nr: i64,
    pub when: When,
    pub deny: Deny,
    pub reason: &'static str,
}

const fn rule(syscall: &'static str, nr: i64, reason: &'static str) -> Rule {
    Rule {
        syscall,
        nr,
        when: When::Always,
        deny: Deny::Eperm,
        reason,
    }
}

const fn rule_when(syscall: &'static str, nr: i64, when: When, reason: &'static str) -> Rule {
    Rule {
        syscall,
        nr,
        when,
        deny: Deny::Eperm,
        reason,
    }
}

const fn deny_mode_bit(
    syscall: &'static str,
    nr: i64,
    arg: u8,
    bits: u32,
    reason: &'static str,
) -> Rule {
    rule_when(syscall, nr, When::Arg32HasBits { arg, bits }, reason)
}

/// Creating a file whose mode has `bits`: open and openat read their mode only when the flags
/// ask for a new file (`O_CREAT`, or `O_TMPFILE`'s own bit), and otherwise it is whatever the
/// caller's register held (`syscall(SYS_open, path, O_RDONLY)` from jemalloc), so a rule on the
/// mode alone refused ordinary opens at random.
const fn deny_create_mode_bit(
    syscall: &'static str,
    nr: i64,
    flags_arg: u8,
    create: u32,
    bits: u32,
    reason: &'static str,
) -> Rule {
    let when = When::Arg32HasBitsIf {
        arg: flags_arg + 1,
        bits,
        if_arg: flags_arg,
        if_bits: create,
    };
    rule_when(syscall, nr, when, reason)
}

const fn socket_rule(syscall: &'static str, nr: i64) -> Rule {
    Rule {
        syscall,
        nr,
        when: When::Arg32NotIn { arg: 0, allowed: ALLOWED_SOCKET_FAMILIES },
        deny: Deny::Eafnosupport,
        reason: "only Unix, IPv4, IPv6 and netlink sockets; every other family is listed with its reason in DENIED_SOCKET_FAMILIES",
    }
}

const CLONE_NEWUSER: u64 = libc::CLONE_NEWUSER as u64;
/// `S_ISUID` and `S_ISGID`: a file carrying either runs with its owner's (group's) identity.
const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;
/// `fchmodat2` (Linux 6.6) has the same number on every architecture.
const SYS_FCHMODAT2: i64 = 452;
/// The flags of open and openat that make the kernel read the mode (`WILL_CREATE` in
/// fs/open.c): `O_CREAT`, and `__O_TMPFILE` (`O_TMPFILE` without `O_DIRECTORY`).
const O_CREAT: u32 = libc::O_CREAT as u32;
const O_TMPFILE_BIT: u32 = (libc::O_TMPFILE & !libc::O_DIRECTORY) as u32;
const CREATE_SETUID: &str = "creating a file with the setuid bit (O_CREAT or O_TMPFILE: without either the kernel ignores the mode, which may then be garbage)";
const CREATE_SETGID: &str = "creating a file with the setgid bit (O_CREAT or O_TMPFILE; without either the mode is ignored)";
const SETID_REASON: &str = "setuid/setgid bits would reach the host through workspaces and mounts (a root invoker's sandbox left a setuid-root shell); the bit is refused on every file";
const PERSONALITY_QUERY: u32 = 0xffff_ffff;
const ADDR_NO_RANDOMIZE: u32 = 0x004_0000;
const MMAP_PAGE_ZERO: u32 = 0x010_0000;
const ADDR_COMPAT_LAYOUT: u32 = 0x020_0000;
const READ_IMPLIES_EXEC: u32 = 0x040_0000;

/// The policy, native syscall numbers. Reasons are shown by `docs/security.md`.
pub const RULES: &[Rule] = &[
    rule("add_key", libc::SYS_add_key, "kernel keyrings are not namespaced: keys of the host user are reachable; CVE-2016-0728"),
    rule("request_key", libc::SYS_request_key, "kernel keyrings are not namespaced; request_key can run host upcalls"),
    rule("keyctl", libc::SYS_keyctl, "kernel keyrings are not namespaced (CVE-2016-0728, keyrings.rst)"),
    rule("bpf", libc::SYS_bpf, "eBPF verifier bugs are a recurring privilege-escalation path (CVE-2021-3490, CVE-2022-23222)"),
    rule("perf_event_open", libc::SYS_perf_event_open, "perf exposes kernel addresses and has a long CVE history (CVE-2013-2094, CVE-2023-6931)"),
    rule("kexec_load", libc::SYS_kexec_load, "replacing the running kernel"),
    rule("kexec_file_load", libc::SYS_kexec_file_load, "replacing the running kernel"),
    rule("init_module", libc::SYS_init_module, "loading kernel code"),
    rule("finit_module", libc::SYS_finit_module, "loading kernel code"),
    rule("delete_module", libc::SYS_delete_module, "unloading kernel code"),
    rule("open_by_handle_at", libc::SYS_open_by_handle_at, "opens host files by handle, bypassing the mount tree (the 2014 'shocker' container escape)"),
    rule("name_to_handle_at", libc::SYS_name_to_handle_at, "produces handles for open_by_handle_at; leaks host inode identities"),
    rule("userfaultfd", libc::SYS_userfaultfd, "makes kernel race exploits reliable (used in CVE-2016-5195-style races; vm.unprivileged_userfaultfd)"),
    rule_when("unshare", libc::SYS_unshare, When::ArgHasBits { arg: 0, bits: CLONE_NEWUSER }, "a new user namespace regains every capability over a huge kernel surface (CVE-2022-0185, CVE-2023-32233)"),
    rule_when("clone", libc::SYS_clone, When::ArgHasBits { arg: 0, bits: CLONE_NEWUSER }, "new user namespaces, as for unshare (flags are argument 0 on x86_64 and aarch64)"),
    Rule { syscall: "clone3", nr: libc::SYS_clone3, when: When::Always, deny: Deny::Enosys, reason: "flags live in user memory BPF cannot read; ENOSYS makes libc fall back to clone, which is filtered" },
    rule("setns", libc::SYS_setns, "joining other namespaces; nothing inside the sandbox needs it"),
    rule("mount", libc::SYS_mount, "the mount tree is fixed after setup; remounting could expose or unmask host paths"),
    rule("umount2", libc::SYS_umount2, "unmounting could reveal what a mask covers"),
    rule("pivot_root", libc::SYS_pivot_root, "the root is fixed after setup"),
    rule("move_mount", libc::SYS_move_mount, "new mount API (mount after setup)"),
    rule("open_tree", libc::SYS_open_tree, "new mount API (mount after setup)"),
    rule("fsopen", libc::SYS_fsopen, "new mount API; fsconfig heap overflow CVE-2022-0185"),
    rule("fsmount", libc::SYS_fsmount, "new mount API (mount after setup)"),
    rule("fsconfig", libc::SYS_fsconfig, "new mount API; CVE-2022-0185"),
    rule("fspick", libc::SYS_fspick, "new mount API (reconfigure an existing mount)"),
    rule("mount_setattr", libc::SYS_mount_setattr, "could clear read-only or nosuid flags of sandbox mounts"),
    rule_when("ioctl", libc::SYS_ioctl, When::Arg32Eq { arg: 1, value: libc::TIOCSTI as u32 }, "TIOCSTI injects input into a terminal (CVE-2017-5226, bubblewrap); compared on 32 bits (CVE-2019-10063)"),
    rule_when("ioctl", libc::SYS_ioctl, When::Arg32Eq { arg: 1, value: libc::TIOCLINUX as u32 }, "TIOCLINUX can paste into a virtual console like TIOCSTI (CVE-2023-1523 class)"),
    rule_when("ioctl", libc::SYS_ioctl, When::Arg32Eq { arg: 1, value: libc::TIOCSETD as u32 }, "changing a terminal's line discipline can autoload rarely used, vulnerable kernel modules (CVE-2017-2636, n_hdlc)"),
    rule("io_uring_setup", libc::SYS_io_uring_setup, "io_uring bypasses syscall filtering for the operations it performs and had many CVEs (CVE-2022-29582, CVE-2023-2598)"),
    rule("io_uring_enter", libc::SYS_io_uring_enter, "io_uring (see io_uring_setup)"),
    rule("io_uring_register", libc::SYS_io_uring_register, "io_uring (see io_uring_setup)"),
    rule("reboot", libc::SYS_reboot, "rebooting the host (pid-namespace reboot is not useful inside)"),
    rule("swapon", libc::SYS_swapon, "host swap configuration"),
    rule("swapoff", libc::SYS_swapoff, "host swap configuration"),
    rule("acct", libc::SYS_acct, "host process accounting"),
    rule("settimeofday", libc::SYS_settimeofday, "the clock is not namespaced"),
    rule("clock_settime", libc::SYS_clock_settime, "the clock is not namespaced"),
    rule("clock_adjtime", libc::SYS_clock_adjtime, "the clock is not namespaced"),
    rule("adjtimex", libc::SYS_adjtimex, "the clock is not namespaced"),
    rule("syslog", libc::SYS_syslog, "the kernel log is not namespaced and leaks kernel addresses (kernel.dmesg_restrict)"),
    rule("quotactl", libc::SYS_quotactl, "host filesystem quotas"),
    rule("lookup_dcookie", libc::SYS_lookup_dcookie, "profiling interface that resolves host paths"),
    rule("vhangup", libc::SYS_vhangup, "hangs up the controlling terminal of other processes"),
    rule_when("personality", libc::SYS_personality, When::Arg32HasBitsExcept { arg: 0, bits: ADDR_NO_RANDOMIZE, except: PERSONALITY_QUERY }, "disables ASLR for exploits (Docker default profile)"),
    rule_when("personality", libc::SYS_personality, When::Arg32HasBitsExcept { arg: 0, bits: READ_IMPLIES_EXEC, except: PERSONALITY_QUERY }, "makes every readable mapping executable"),
    rule_when("personality", libc::SYS_personality, When::Arg32HasBitsExcept { arg: 0, bits: MMAP_PAGE_ZERO, except: PERSONALITY_QUERY }, "maps page zero: turns kernel NULL dereferences into exploits"),
    rule_when("personality", libc::SYS_personality, When::Arg32HasBitsExcept { arg: 0, bits: ADDR_COMPAT_LAYOUT, except: PERSONALITY_QUERY }, "legacy predictable address-space layout"),
    deny_mode_bit("fchmod", libc::SYS_fchmod, 1, S_ISUID, SETID_REASON),
    deny_mode_bit("fchmod", libc::SYS_fchmod, 1, S_ISGID, SETID_REASON),
    deny_mode_bit("fchmodat", libc::SYS_fchmodat, 2, S_ISUID, SETID_REASON),
    deny_mode_bit("fchmodat", libc::SYS_fchmodat, 2, S_ISGID, SETID_REASON),
    deny_mode_bit("fchmodat2", SYS_FCHMODAT2, 2, S_ISUID, SETID_REASON),
    deny_mode_bit("fchmodat2", SYS_FCHMODAT2, 2, S_ISGID, SETID_REASON),
    deny_create_mode_bit("openat", libc::SYS_openat, 2, O_CREAT, S_ISUID, CREATE_SETUID),
    deny_create_mode_bit("openat", libc::SYS_openat, 2, O_TMPFILE_BIT, S_ISUID, CREATE_SETUID),
    deny_create_mode_bit("openat", libc::SYS_openat, 2, O_CREAT, S_ISGID, CREATE_SETGID),
    deny_create_mode_bit("openat", libc::SYS_openat, 2, O_TMPFILE_BIT, S_ISGID, CREATE_SETGID),
    deny_mode_bit("mknodat", libc::SYS_mknodat, 2, S_ISUID, "creating a node with the setuid bit"),
    deny_mode_bit("mknodat", libc::SYS_mknodat, 2, S_ISGID, "creating a node with the setgid bit"),
    Rule { syscall: "openat2", nr: libc::SYS_openat2, when: When::Always, deny: Deny::Enosys, reason: "its mode lives in a struct in user memory BPF cannot read; ENOSYS makes callers fall back to openat, which is filtered" },
    socket_rule("socket", libc::SYS_socket),
    socket_rule("socketpair", libc::SYS_socketpair),
    #[cfg(target_arch = "x86_64")]
    deny_mode_bit("chmod", libc::SYS_chmod, 1, S_ISUID, SETID_REASON),
    #[cfg(target_arch = "x86_64")]
    deny_mode_bit("chmod", libc::SYS_chmod, 1, S_ISGID, SETID_REASON),
    #[cfg(target_arch = "x86_64")]
    deny_create_mode_bit("open", libc::SYS_open, 1, O_CREAT, S_ISUID, CREATE_SETUID),
    #[cfg(target_arch = "x86_64")]
    deny_create_mode_bit("open", libc::SYS_open, 1, O_TMPFILE_BIT, S_ISUID, CREATE_SETUID),
    #[cfg(target_arch = "x86_64")]
    deny_create_mode_bit("open", libc::SYS_open, 1, O_CREAT, S_ISGID, CREATE_SETGID),
    #[cfg(target_arch = "x86_64")]
    deny_create_mode_bit("open", libc::SYS_open, 1, O_TMPFILE_BIT, S_ISGID, CREATE_SETGID),
    #[cfg(target_arch = "x86_64")]
    deny_mode_bit("creat", libc::SYS_creat, 1, S_ISUID, "creating a file with the setuid bit"),
    #[cfg(target_arch = "x86_64")]
    deny_mode_bit("creat", libc::SYS_creat, 1, S_ISGID, "creating a file with the setgid bit"),
    #[cfg(target_arch = "x86_64")]
    deny_mode_bit("mknod", libc::SYS_mknod, 1, S_ISUID, "creating a node with the setuid bit"),
    #[cfg(target_arch = "x86_64")]
    deny_mode_bit("mknod", libc::SYS_mknod, 1, S_ISGID, "creating a node with the setgid bit"),
    #[cfg(target_arch = "x86_64")]
    rule("iopl", libc::SYS_iopl, "raw I/O port access"),
    #[cfg(target_arch = "x86_64")]
    rule("ioperm", libc::SYS_ioperm, "raw I/O port access"),
    #[cfg(target_arch = "x86_64")]
    rule("uselib", libc::SYS_uselib, "obsolete a.out loader with a CVE history (CVE-2004-1235)"),
];

/// The socket families sandbox processes may create (argument 0 of `socket`/`socketpair`).
pub const ALLOWED_SOCKET_FAMILIES: &[u32] = &[
    libc::AF_UNIX as u32,
    libc::AF_INET as u32,
    libc::AF_INET6 as u32,
    libc::AF_NETLINK as u32,
];

/// One socket family the filter refuses, and why (documentation; the rule itself refuses every
/// number outside [`ALLOWED_SOCKET_FAMILIES`], including families newer than this table).
#[derive(Debug, Clone, Copy)]
pub struct DeniedFamily {
    pub name: &'static str,
    pub family: u32,
    pub reason: &'static str,
}

const fn fam(name: &'static str, family: u32, reason: &'static str) -> DeniedFamily {
    DeniedFamily {
        name,
        family,
        reason,
    }
}

const LEGACY: &str =
    "legacy protocol stack, rarely built, with a history of kernel bugs and no development use";

/// Every family Linux defines (up to `AF_MCTP`, 45) except the allowed four, with its reason.
pub const DENIED_SOCKET_FAMILIES: &[DeniedFamily] = &[
    fam("AF_UNSPEC", 0, "no family; the kernel refuses it too"),
    fam("AF_AX25", 3, LEGACY),
    fam("AF_IPX", 4, LEGACY),
    fam("AF_APPLETALK", 5, LEGACY),
    fam("AF_NETROM", 6, LEGACY),
    fam("AF_BRIDGE", 7, "bridge configuration is host network administration"),
    fam("AF_ATMPVC", 8, LEGACY),
    fam("AF_X25", 9, LEGACY),
    fam("AF_ROSE", 11, LEGACY),
    fam("AF_DECnet", 12, LEGACY),
    fam("AF_NETBEUI", 13, LEGACY),
    fam("AF_SECURITY", 14, "pseudo family, never a socket"),
    fam("AF_KEY", 15, "PF_KEY manages IPsec security associations; a kernel attack surface with past CVEs (CVE-2017-7184 class)"),
    fam("AF_PACKET", 17, "raw link-layer frames bypass the TCP/IP stack the proxy governs; CVE-2016-8655, CVE-2017-7308, CVE-2020-14386"),
    fam("AF_ASH", 18, LEGACY),
    fam("AF_ECONET", 19, LEGACY),
    fam("AF_ATMSVC", 20, LEGACY),
    fam("AF_RDS", 21, "Reliable Datagram Sockets: repeated local privilege escalations (CVE-2010-3904, CVE-2019-11815)"),
    fam("AF_SNA", 22, LEGACY),
    fam("AF_IRDA", 23, LEGACY),
    fam("AF_PPPOX", 24, "PPP over Ethernet/L2TP: kernel bugs (CVE-2017-7184 class, CVE-2022-20409 class) and no development use"),
    fam("AF_WANPIPE", 25, LEGACY),
    fam("AF_LLC", 26, LEGACY),
    fam("AF_IB", 27, "InfiniBand: talks to host hardware, not namespaced"),
    fam("AF_MPLS", 28, "MPLS routing is host network administration"),
    fam("AF_CAN", 29, "CAN bus: host hardware; CVE-2021-3609, CVE-2023-2166"),
    fam("AF_TIPC", 30, "TIPC: cluster IPC with remote-exploitable bugs (CVE-2021-43267, CVE-2022-0435)"),
    fam("AF_BLUETOOTH", 31, "Bluetooth: host radios are not namespaced; CVE-2020-12351 (BleedingTooth)"),
    fam("AF_IUCV", 32, LEGACY),
    fam("AF_RXRPC", 33, "AFS RPC transport: rarely used kernel surface (CVE-2022-31107 class)"),
    fam("AF_ISDN", 34, LEGACY),
    fam("AF_PHONET", 35, LEGACY),
    fam("AF_IEEE802154", 36, "low-power radio stack: host hardware"),
    fam("AF_CAIF", 37, LEGACY),
    fam("AF_ALG", 38, "kernel crypto API: a large surface with exploited bugs (CVE-2015-8970, CVE-2017-17805)"),
    fam("AF_NFC", 39, "NFC: host radios; CVE-2021-23134"),
    fam("AF_VSOCK", 40, "vsock is not network-namespaced: on a VM host it reaches the hypervisor's services and bypasses the proxy (Docker denies it too); CVE-2021-26708"),
    fam("AF_KCM", 41, "kernel connection multiplexor: rarely used, past memory-safety bugs"),
    fam("AF_QIPCRTR", 42, "Qualcomm IPC router: host hardware"),
    fam("AF_SMC", 43, "shared-memory communications over RDMA: host hardware, past CVEs (CVE-2023-2156 class)"),
    fam("AF_XDP", 44, "XDP sockets read and inject raw frames on host interfaces (with bpf); no development use"),
    fam("AF_MCTP", 45, "management component transport: host hardware"),
];

/// The x32 ABI marker in the syscall number (arch/x86/include/uapi/asm/unistd.h).
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

fn native_arch() -> Result<TargetArch, SeccompError> {
    match std::env::consts::ARCH {
        "x86_64" => Ok(TargetArch::x86_64),
        "aarch64" => Ok(TargetArch::aarch64),
        other => Err(SeccompError::UnsupportedArch { arch: other }),
    }
}

#[cfg(test)]
fn conditions(rule: &Rule) -> Result<Vec<SeccompCondition>, seccompiler::BackendError> {
    use SeccompCmpArgLen::{Dword, Qword};
    use SeccompCmpOp::{Eq, MaskedEq, Ne};
    match rule.when {
        When::Always => Ok(Vec::new()),
        When::ArgHasBits { arg, bits } => Ok(vec![SeccompCondition::new(
            arg,
            Qword,
            MaskedEq(bits),
            bits,
        )?]),
        When::Arg32Eq { arg, value } => Ok(vec![SeccompCondition::new(
            arg,
            Dword,
            Eq,
            u64::from(value),
        )?]),
        When::Arg32HasBitsExcept { arg, bits, except } => Ok(vec![
            SeccompCondition::new(arg, Dword, MaskedEq(u64::from(bits)), u64::from(bits))?,
            SeccompCondition::new(arg, Dword, Ne, u64::from(except))?,
        ]),
        When::Arg32HasBits { arg, bits } => Ok(vec![SeccompCondition::new(
            arg,
            Dword,
            MaskedEq(u64::from(bits)),
            u64::from(bits),
        )?]),
        When::Arg32NotIn { arg, allowed } => allowed
            .iter()
            .map(|v| SeccompCondition::new(arg, Dword, Ne, u64::from(*v)))
            .collect(),
        When::Arg32HasBitsIf {
            arg,
            bits,
            if_arg,
            if_bits,
        } => Ok(vec![
            SeccompCondition::new(
                if_arg,
                Dword,
                MaskedEq(u64::from(if_bits)),
                u64::from(if_bits),
            )?,
            SeccompCondition::new(arg, Dword, MaskedEq(u64::from(bits)), u64::from(bits))?,
        ]),
    }
}

#[cfg(test)]
/// Compiles the rules with action `deny` into a program that answers `deny` or allows.
fn compile(deny: Deny, arch: TargetArch) -> Result<BpfProgram, SeccompError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for rule in RULES.iter().filter(|r| r.deny == deny) {
        let conds = conditions(rule).map_err(|source| SeccompError::InvalidRule {
            syscall: rule.syscall,
            source,
        })?;
        let chain = rules.entry(rule.nr).or_default();
        if !conds.is_empty() {
            let r = SeccompRule::new(conds).map_err(|source| SeccompError::InvalidRule {
                syscall: rule.syscall,
                source,
            })?;
            chain.push(r);
        }
    }
    let action = match deny {
        Deny::Eperm => "EPERM",
        Deny::Enosys => "ENOSYS",
        Deny::Eafnosupport => "EAFNOSUPPORT",
    };
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(deny.errno()),
        arch,
    )
    .map_err(|source| SeccompError::Compile { action, source })?;
    BpfProgram::try_from(filter).map_err(|source| SeccompError::Compile { action, source })
}

/// Kernel limit on classic BPF program length (BPF_MAXINSNS).
const BPF_MAX_LEN: usize = 4096;
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JA: u16 = 0x05;
const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
const BPF_RET_K: u16 = 0x06;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;

#[cfg(test)]
/// `nr >= 0x40000000` answers `ENOSYS` (x86_64 only; emitted after seccompiler's arch check
/// would be too late to share, so it repeats the arch check itself).
fn x32_guard(arch: TargetArch) -> Vec<sock_filter> {
    if arch != TargetArch::x86_64 {
        return Vec::new();
    }
    const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
    let ins = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    vec![
        ins(BPF_LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        ins(0x05 | 0x10, 1, 0, AUDIT_ARCH_X86_64),
        ins(BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),
        ins(BPF_LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        ins(BPF_JMP_JGE_K, 0, 1, X32_SYSCALL_BIT),
        ins(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
    ]
}

#[cfg(test)]
/// Joins programs: every `RET ALLOW` of a stage jumps to the start of the next stage, so a
/// call is allowed only if every stage allows it, and the first stage that denies decides.
fn chain(stages: Vec<Vec<sock_filter>>) -> Result<BpfProgram, SeccompError> {
    let mut out: BpfProgram = Vec::new();
    let count = stages.len();
    for (i, mut stage) in stages.into_iter().enumerate() {
        if i + 1 < count {
            let len = stage.len();
            for (pos, ins) in stage.iter_mut().enumerate() {
                if ins.code == BPF_RET_K && ins.k == SECCOMP_RET_ALLOW {
                    *ins = sock_filter {
                        code: BPF_JMP_JA,
                        jt: 0,
                        jf: 0,
                        k: (len - pos - 1) as u32,
                    };
                }
            }
        }
        out.extend(stage);
    }
    if out.len() > BPF_MAX_LEN {
        return Err(SeccompError::TooLarge { len: out.len() });
    }
    Ok(out)
}

/// The compiled sandbox filter for the native architecture (see [`assemble`]).
pub fn sandbox_filter() -> Result<BpfProgram, SeccompError> {
    assemble(native_arch()?, RULES)
}

/// The previous layout of the filter, kept as the reference the tests compare [`assemble`]'s
/// program with, verdict by verdict: the x32 guard (x86_64), a prefilter (a binary search that
/// allows every syscall no rule names), then one `seccompiler` program per errno, chained
/// (each a linear chain of syscall numbers with the argument checks of each).
#[cfg(test)]
fn reference_filter(arch: TargetArch) -> Result<BpfProgram, SeccompError> {
    let (guard, rules) = stages(arch)?;
    let mut tail = prefilter(arch, &named_syscalls(RULES))?;
    tail.extend(chain(rules)?);
    let mut joined = Vec::new();
    joined.extend(guard);
    joined.push(tail);
    chain(joined)
}

const BPF_ALU_AND_K: u16 = 0x04 | 0x50;
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
const BPF_JMP_JSET_K: u16 = 0x05 | 0x40;
/// Offsets in `struct seccomp_data`: `nr`, `arch`, then `args[6]` (u64 each, the low word
/// first on the little-endian architectures supported here).
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;

fn arg_low(arg: u8) -> u32 {
    16 + 8 * u32::from(arg)
}

fn arg_high(arg: u8) -> u32 {
    arg_low(arg) + 4
}

/// A jump target of [`Asm`], bound to an instruction index by [`Asm::bind`].
#[derive(Debug, Clone, Copy)]
struct Label(usize);

/// An instruction whose jumps name labels.
enum Op {
    /// `LD W ABS k`: a word of `seccomp_data`.
    Load(u32),
    /// `ALU AND K`.
    And(u32),
    /// `JMP JEQ K`: to `jt` when the accumulator equals `k`, else to `jf`.
    Eq { k: u32, jt: Label, jf: Label },
    /// `JMP JGE K`.
    Ge { k: u32, jt: Label, jf: Label },
    /// `JMP JSET K`: to `jt` when the accumulator has a bit of `k` set.
    Set { k: u32, jt: Label, jf: Label },
    /// `JMP JA`.
    Always(Label),
    /// `RET K`.
    Ret(u32),
}

/// A classic BPF program under construction; jumps go forward, to labels.
#[derive(Default)]
struct Asm {
    ops: Vec<Op>,
    labels: Vec<Option<usize>>,
}

impl Asm {
    fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// The next instruction is `label`'s target.
    fn bind(&mut self, label: Label) {
        self.labels[label.0] = Some(self.ops.len());
    }

    fn push(&mut self, op: Op) {
        self.ops.push(op);
    }

    fn finish(self) -> Result<BpfProgram, SeccompError> {
        let len = self.ops.len();
        if len > BPF_MAX_LEN {
            return Err(SeccompError::TooLarge { len });
        }
        let ins = |code, jt, jf, k| sock_filter { code, jt, jf, k };
        let mut out = Vec::with_capacity(len);
        for (at, op) in self.ops.iter().enumerate() {
            let too_far = SeccompError::JumpTooFar { at };
            let skip = |label: Label| {
                self.labels[label.0]
                    .and_then(|to| to.checked_sub(at + 1))
                    .ok_or(SeccompError::JumpTooFar { at })
            };
            let short = |label: Label| {
                skip(label)
                    .and_then(|n| u8::try_from(n).map_err(|_| SeccompError::JumpTooFar { at }))
            };
            out.push(match *op {
                Op::Load(k) => ins(BPF_LD_W_ABS, 0, 0, k),
                Op::And(k) => ins(BPF_ALU_AND_K, 0, 0, k),
                Op::Eq { k, jt, jf } => ins(BPF_JMP_JEQ_K, short(jt)?, short(jf)?, k),
                Op::Ge { k, jt, jf } => ins(BPF_JMP_JGE_K, short(jt)?, short(jf)?, k),
                Op::Set { k, jt, jf } => ins(BPF_JMP_JSET_K, short(jt)?, short(jf)?, k),
                Op::Always(to) => ins(
                    BPF_JMP_JA,
                    0,
                    0,
                    u32::try_from(skip(to)?).map_err(|_| too_far)?,
                ),
                Op::Ret(k) => ins(BPF_RET_K, 0, 0, k),
            });
        }
        Ok(out)
    }
}

/// One comparison of a rule's condition: the word at `word` of `seccomp_data` (masked with
/// `mask`, if any) equals `k` (`equal`), or does not; with `any`, the word has one of the bits
/// of `mask` set (`JSET`: for a single bit, the same as "has all of them").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Test {
    word: u32,
    mask: Option<u32>,
    k: u32,
    equal: bool,
    any: bool,
}

impl Test {
    /// `(a OR b)` as one test where both are "one of these bits" on the same word.
    fn either(self, other: Test) -> Option<Test> {
        let bits = |t: Test| t.mask.filter(|_| t.any && t.equal);
        let (mine, theirs) = (bits(self)?, bits(other)?);
        (self.word == other.word).then_some(Test {
            mask: Some(mine | theirs),
            k: mine | theirs,
            ..self
        })
    }
}

/// The comparisons that must all hold for `when` to match (none: every call matches). The
/// meaning of the `seccompiler` conditions the table used to compile to: a 64-bit compare
/// checks both words, a 32-bit one only the low word (the kernel truncates `int` arguments).
fn tests(when: When) -> Vec<Test> {
    let masked = |word, bits: u32| Test {
        word,
        mask: Some(bits),
        k: bits,
        equal: true,
        any: bits.count_ones() == 1,
    };
    let eq = |word, k, equal| Test {
        word,
        mask: None,
        k,
        equal,
        any: false,
    };
    match when {
        When::Always => Vec::new(),
        When::ArgHasBits { arg, bits } => {
            let (high, low) = ((bits >> 32) as u32, bits as u32);
            let mut out = Vec::new();
            if high != 0 {
                out.push(masked(arg_high(arg), high));
            }
            if low != 0 {
                out.push(masked(arg_low(arg), low));
            }
            out
        }
        When::Arg32Eq { arg, value } => vec![eq(arg_low(arg), value, true)],
        When::Arg32HasBitsExcept { arg, bits, except } => {
            vec![eq(arg_low(arg), except, false), masked(arg_low(arg), bits)]
        }
        When::Arg32HasBits { arg, bits } => vec![masked(arg_low(arg), bits)],
        When::Arg32NotIn { arg, allowed } => allowed
            .iter()
            .map(|value| eq(arg_low(arg), *value, false))
            .collect(),
        When::Arg32HasBitsIf {
            arg,
            bits,
            if_arg,
            if_bits,
        } => vec![masked(arg_low(if_arg), if_bits), masked(arg_low(arg), bits)],
    }
}

/// The order in which the errno classes are judged: the first rule that matches decides, as
/// when the filter was one program per errno, chained.
const DENY_ORDER: [Deny; 3] = [Deny::Eperm, Deny::Enosys, Deny::Eafnosupport];

/// The filter as one program: the architecture check (`KILL_PROCESS` for a foreign ABI), on
/// x86_64 the x32 guard (`ENOSYS`), a binary search over the syscall numbers some rule names
/// (every other number is allowed after a handful of comparisons), and for each named one its
/// rules' argument checks, `EPERM` rules first, then `ENOSYS`, then `EAFNOSUPPORT`, each in
/// table order; every verdict is one shared `RET`.
///
/// One program of ~150 instructions rather than three `seccompiler` programs behind a
/// prefilter (~600, [`reference_filter`] in the tests): the kernel converts and JIT-compiles
/// the whole program at each `seccomp(2)`, about 0.3 us per instruction here, and every
/// sandbox process pays that load before its `execve`; and a named syscall (`openat`, `ioctl`,
/// `socket`, `clone`) walked a linear chain of syscall numbers per errno, where it now runs
/// only its own checks.
fn assemble(arch: TargetArch, rules: &[Rule]) -> Result<BpfProgram, SeccompError> {
    let mut a = Asm::default();
    let (allow, kill) = (a.label(), a.label());
    let deny = DENY_ORDER.map(|d| (d, a.label()));
    let verdict = |d: Deny| {
        deny.iter()
            .find(|(x, _)| *x == d)
            .map_or(allow, |(_, label)| *label)
    };

    a.push(Op::Load(DATA_ARCH));
    let native = a.label();
    a.push(Op::Eq {
        k: audit_arch(arch),
        jt: native,
        jf: kill,
    });
    a.bind(native);
    a.push(Op::Load(DATA_NR));
    if arch == TargetArch::x86_64 {
        let not_x32 = a.label();
        a.push(Op::Ge {
            k: X32_SYSCALL_BIT,
            jt: verdict(Deny::Enosys),
            jf: not_x32,
        });
        a.bind(not_x32);
    }

    // Where each named syscall goes: straight to its verdict when its first rule (in judging
    // order) matches every call, else to a block of argument checks.
    let named = named_syscalls(rules);
    let mut blocks = Vec::new();
    let mut targets = Vec::new();
    for nr in &named {
        let rules = ordered_rules(rules, *nr);
        match rules.first() {
            Some(rule) if tests(rule.when).is_empty() => targets.push(verdict(rule.deny)),
            _ => {
                let block = a.label();
                targets.push(block);
                blocks.push((block, rules));
            }
        }
    }
    dispatch(&mut a, &named, &targets, allow);

    for (block, rules) in blocks {
        a.bind(block);
        let mut acc: Option<u32> = None;
        for (deny, tests) in alternatives(&rules) {
            if tests.is_empty() {
                a.push(Op::Always(verdict(deny)));
                break;
            }
            let fail = a.label();
            let count = tests.len();
            for (i, t) in tests.into_iter().enumerate() {
                if acc != Some(t.word) {
                    a.push(Op::Load(t.word));
                    acc = Some(t.word);
                }
                let pass = if i + 1 == count {
                    verdict(deny)
                } else {
                    a.label()
                };
                let (jt, jf) = if t.equal { (pass, fail) } else { (fail, pass) };
                match t.mask {
                    Some(k) if t.any => a.push(Op::Set { k, jt, jf }),
                    Some(mask) => {
                        a.push(Op::And(mask));
                        acc = None;
                        a.push(Op::Eq { k: t.k, jt, jf });
                    }
                    None => a.push(Op::Eq { k: t.k, jt, jf }),
                }
                if i + 1 < count {
                    a.bind(pass);
                }
            }
            a.bind(fail);
            // Reached from several comparisons: what the accumulator holds is not known.
            acc = None;
        }
        a.push(Op::Always(allow));
    }

    a.bind(allow);
    a.push(Op::Ret(SECCOMP_RET_ALLOW));
    a.bind(kill);
    a.push(Op::Ret(SECCOMP_RET_KILL_PROCESS));
    for (d, label) in deny {
        a.bind(label);
        a.push(Op::Ret(SECCOMP_RET_ERRNO | d.errno()));
    }
    a.finish()
}

/// The rules of one syscall as alternatives in judging order, each a verdict and the tests that
/// must all hold for it (none: always). Neighbours with the same verdict whose tests differ
/// only in one "one of these bits" test on the same word are one alternative with the bits
/// joined: `(A and bit x) or (A and bit y)` is `A and one of x, y` (setuid or setgid in a mode
/// argument, `O_CREAT` or `O_TMPFILE` with it, each of personality's flags).
fn alternatives(rules: &[&Rule]) -> Vec<(Deny, Vec<Test>)> {
    let mut out: Vec<(Deny, Vec<Test>)> = Vec::new();
    for rule in rules {
        let mut next = (rule.deny, tests(rule.when));
        while let Some(last) = out.last() {
            match join(last, &next) {
                Some(joined) => {
                    next = joined;
                    out.pop();
                }
                None => break,
            }
        }
        out.push(next);
    }
    out
}

/// `a or b` as one alternative, where they differ in one joinable test only.
fn join(a: &(Deny, Vec<Test>), b: &(Deny, Vec<Test>)) -> Option<(Deny, Vec<Test>)> {
    if a.0 != b.0 || a.1.len() != b.1.len() || a.1.is_empty() {
        return None;
    }
    let differ: Vec<usize> = (0..a.1.len()).filter(|i| a.1[*i] != b.1[*i]).collect();
    match differ[..] {
        [] => Some(a.clone()),
        [i] => {
            let mut tests = a.1.clone();
            tests[i] = a.1[i].either(b.1[i])?;
            Some((a.0, tests))
        }
        _ => None,
    }
}

/// The rules naming `nr`, in judging order (errno class, then table order).
fn ordered_rules(rules: &[Rule], nr: u32) -> Vec<&Rule> {
    DENY_ORDER
        .iter()
        .flat_map(|d| {
            rules
                .iter()
                .filter(move |r| r.nr as u32 == nr && r.deny == *d)
        })
        .collect()
}

/// The binary search over `named` (sorted; the accumulator holds the syscall number): a hit
/// jumps to its target, a miss to `allow`.
fn dispatch(a: &mut Asm, named: &[u32], targets: &[Label], allow: Label) {
    if named.len() <= 3 {
        for (i, (nr, target)) in named.iter().zip(targets).enumerate() {
            let last = i + 1 == named.len();
            let miss = if last { allow } else { a.label() };
            a.push(Op::Eq {
                k: *nr,
                jt: *target,
                jf: miss,
            });
            if !last {
                a.bind(miss);
            }
        }
        if named.is_empty() {
            a.push(Op::Always(allow));
        }
        return;
    }
    let mid = named.len() / 2;
    let (low, high) = (a.label(), a.label());
    a.push(Op::Ge {
        k: named[mid],
        jt: high,
        jf: low,
    });
    a.bind(low);
    dispatch(a, &named[..mid], &targets[..mid], allow);
    a.bind(high);
    dispatch(a, &named[mid..], &targets[mid..], allow);
}

/// The x32 guard (x86_64 only, with an explicit `RET ALLOW` so [`chain`] links it) and the
/// three rule programs.
#[cfg(test)]
type Stages = (Option<Vec<sock_filter>>, Vec<Vec<sock_filter>>);

#[cfg(test)]
fn stages(arch: TargetArch) -> Result<Stages, SeccompError> {
    let mut guard = x32_guard(arch);
    // The guard falls through on allow; give it an explicit `RET ALLOW` so `chain` links it.
    let guard = (!guard.is_empty()).then(|| {
        guard.push(sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: SECCOMP_RET_ALLOW,
        });
        guard
    });
    let rules = vec![
        compile(Deny::Eperm, arch)?,
        compile(Deny::Enosys, arch)?,
        compile(Deny::Eafnosupport, arch)?,
    ];
    Ok((guard, rules))
}

/// Every syscall number some rule names, sorted, once each.
fn named_syscalls(rules: &[Rule]) -> Vec<u32> {
    let mut nrs: Vec<u32> = rules.iter().map(|r| r.nr as u32).collect();
    nrs.sort_unstable();
    nrs.dedup();
    nrs
}

fn audit_arch(arch: TargetArch) -> u32 {
    const LE64: u32 = 0x8000_0000 | 0x4000_0000;
    match arch {
        TargetArch::x86_64 => 62 | LE64,
        TargetArch::aarch64 => 183 | LE64,
        TargetArch::riscv64 => 243 | LE64,
    }
}

/// Where a prefilter comparison goes.
#[cfg(test)]
#[derive(Clone, Copy)]
enum To {
    /// Skip this many instructions of the tree.
    Skip(usize),
    /// The final `RET ALLOW`: no rule names the syscall.
    Allow,
    /// The rule programs, right after the prefilter.
    Rules,
}

#[cfg(test)]
/// The prefilter: a foreign architecture is killed (as the rule programs would), then a binary
/// search over `named` (sorted) sends a named syscall on to the rule programs placed right
/// after it and allows every other one.
fn prefilter(arch: TargetArch, named: &[u32]) -> Result<Vec<sock_filter>, SeccompError> {
    let ins = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    let mut out = vec![
        ins(BPF_LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        ins(BPF_JMP_JEQ_K, 1, 0, audit_arch(arch)),
        ins(BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),
        ins(BPF_LD_W_ABS, 0, 0, 0), // seccomp_data.nr
    ];
    let tree = search(named);
    let allow_at = out.len() + tree.len();
    let too_far = || SeccompError::TooLarge { len: allow_at + 1 };
    for (i, (code, k, jt, jf)) in tree.into_iter().enumerate() {
        let at = out.len();
        let offset = |to: To| {
            let skip = match to {
                To::Skip(n) => n,
                To::Allow => allow_at - at - 1,
                To::Rules => allow_at - at,
            };
            u8::try_from(skip).map_err(|_| too_far())
        };
        debug_assert_eq!(at, 4 + i);
        out.push(ins(code, offset(jt)?, offset(jf)?, k));
    }
    out.push(ins(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW));
    Ok(out)
}

#[cfg(test)]
/// The comparisons of the binary search over `named` (accumulator: the syscall number).
fn search(named: &[u32]) -> Vec<(u16, u32, To, To)> {
    if named.len() <= 3 {
        let last = named.len().saturating_sub(1);
        let mut out: Vec<_> = named
            .iter()
            .enumerate()
            .map(|(i, nr)| {
                let miss = if i == last { To::Allow } else { To::Skip(0) };
                (BPF_JMP_JEQ_K, *nr, To::Rules, miss)
            })
            .collect();
        if out.is_empty() {
            // Nothing is named: always allow (`JA 0` falls through to `RET ALLOW`).
            out.push((BPF_JMP_JA, 0, To::Skip(0), To::Skip(0)));
        }
        return out;
    }
    let mid = named.len() / 2;
    let (low, high) = (search(&named[..mid]), search(&named[mid..]));
    let mut out = vec![(BPF_JMP_JGE_K, named[mid], To::Skip(low.len()), To::Skip(0))];
    out.extend(low);
    out.extend(high);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::filter_check::{syscalls_under_filter, syscalls_unfiltered, SyscallAttempt};

    #[test]
    fn sandbox_filter_compiles_within_the_kernel_limit() {
        let program = sandbox_filter().expect("filter compiles");
        assert!(program.len() > RULES.len(), "every rule emits instructions");
        assert!(program.len() <= BPF_MAX_LEN);
    }

    #[test]
    fn every_syscall_named_by_i6_is_in_the_table() {
        let required = [
            "add_key",
            "request_key",
            "keyctl",
            "bpf",
            "perf_event_open",
            "kexec_load",
            "kexec_file_load",
            "init_module",
            "finit_module",
            "delete_module",
            "open_by_handle_at",
            "name_to_handle_at",
            "userfaultfd",
            "unshare",
            "clone",
            "clone3",
            "mount",
            "umount2",
            "pivot_root",
            "move_mount",
            "open_tree",
            "fsopen",
            "fsmount",
            "fsconfig",
            "fspick",
            "mount_setattr",
            "ioctl",
            "io_uring_setup",
            "io_uring_enter",
            "io_uring_register",
            "reboot",
            "swapon",
            "swapoff",
            "acct",
            "settimeofday",
            "clock_settime",
            "adjtimex",
            "syslog",
            "personality",
        ];
        for name in required {
            assert!(
                RULES.iter().any(|r| r.syscall == name),
                "{name} missing from RULES"
            );
        }
        let ioctl_cmds: Vec<When> = RULES
            .iter()
            .filter(|r| r.syscall == "ioctl")
            .map(|r| r.when)
            .collect();
        assert!(ioctl_cmds.contains(&When::Arg32Eq {
            arg: 1,
            value: libc::TIOCSTI as u32
        }));
        assert!(ioctl_cmds.contains(&When::Arg32Eq {
            arg: 1,
            value: libc::TIOCLINUX as u32
        }));
    }

    #[test]
    fn no_syscall_mixes_unconditional_and_conditional_rules() {
        // seccompiler treats an empty rule chain as "always"; mixing would silently narrow it.
        for r in RULES.iter().filter(|r| r.when == When::Always) {
            let others = RULES
                .iter()
                .filter(|o| o.nr == r.nr && o.when != When::Always)
                .count();
            assert_eq!(others, 0, "{} has both kinds of rules", r.syscall);
        }
    }

    #[test]
    fn security_doc_lists_every_denied_syscall() {
        let doc = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/security.md");
        let text = std::fs::read_to_string(doc).expect("docs/security.md exists");
        for r in RULES {
            assert!(
                text.contains(&format!("`{}`", r.syscall)),
                "docs/security.md does not mention `{}`",
                r.syscall
            );
        }
    }

    #[test]
    fn every_rule_states_a_reason() {
        for r in RULES {
            assert!(r.reason.len() > 10, "{} needs a reason", r.syscall);
        }
    }

    fn result_of(attempts: &[SyscallAttempt], name: &str) -> Result<i64, i32> {
        attempts
            .iter()
            .find(|a| a.name == name)
            .map(|a| a.result)
            .expect(name)
    }

    #[test]
    fn filtered_process_gets_eperm_for_dangerous_syscalls_and_keeps_working() {
        let program = sandbox_filter().expect("filter compiles");
        let attempts = syscalls_under_filter(&program).expect("child ran");
        assert!(matches!(result_of(&attempts, "getpid"), Ok(pid) if pid > 0));
        for name in [
            "keyctl(KEYCTL_GET_KEYRING_ID)",
            "add_key",
            "bpf(invalid command)",
            "perf_event_open(NULL)",
            "unshare(CLONE_NEWUSER)",
            "ioctl(TIOCSTI)",
            "ioctl(TIOCSTI with high bits set)",
            "ioctl(TIOCLINUX)",
            "ioctl(TIOCSETD)",
            "mount",
            "umount2",
            "userfaultfd",
            "open_by_handle_at",
            "io_uring_setup",
            "personality(ADDR_NO_RANDOMIZE)",
        ] {
            assert_eq!(result_of(&attempts, name), Err(libc::EPERM), "{name}");
        }
        assert_eq!(result_of(&attempts, "clone3"), Err(libc::ENOSYS));
        for name in ["fchmodat(04755)", "fchmod(02755)", "openat(O_CREAT, 04755)"] {
            assert_eq!(result_of(&attempts, name), Err(libc::EPERM), "{name}");
        }
        for name in [
            "openat(O_RDONLY, stray mode 04755)",
            "open(O_RDONLY, stray mode 06755)",
        ] {
            assert_eq!(result_of(&attempts, name), Ok(0), "{name}");
        }
        assert_eq!(result_of(&attempts, "openat2"), Err(libc::ENOSYS));
        for name in ["socket(AF_VSOCK)", "socketpair(AF_ALG)"] {
            assert_eq!(
                result_of(&attempts, name),
                Err(libc::EAFNOSUPPORT),
                "{name}"
            );
        }
        assert_eq!(result_of(&attempts, "socket(AF_INET)"), Ok(0));
        assert!(
            result_of(&attempts, "personality(query)").is_ok(),
            "querying the persona stays allowed"
        );
        #[cfg(target_arch = "x86_64")]
        assert_eq!(result_of(&attempts, "x32 getpid"), Err(libc::ENOSYS));
    }

    #[test]
    fn without_the_filter_the_same_calls_are_not_eperm() {
        // Proves the filtered test above measures the filter, not the kernel's own refusals.
        let attempts = syscalls_unfiltered().expect("child ran");
        for name in [
            "unshare(CLONE_NEWUSER)",
            "ioctl(TIOCSTI)",
            "ioctl(TIOCSTI with high bits set)",
            "clone3",
            "fchmodat(04755)",
            "fchmod(02755)",
            "openat(O_CREAT, 04755)",
            "openat2",
        ] {
            let r = result_of(&attempts, name);
            assert!(
                r != Err(libc::EPERM) && r != Err(libc::ENOSYS),
                "{name}: {r:?}"
            );
        }
    }

    /// A classic-BPF interpreter for the opcodes `seccompiler` and `x32_guard` emit, so the
    /// compiled program can be checked against the table on any kernel and for inputs the
    /// running kernel cannot produce (foreign architectures, x32 on kernels without it).
    fn eval(program: &[sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        let word = |off: u32| -> u32 {
            match off {
                0 => nr,
                4 => arch,
                16..=63 => {
                    let arg = args[((off - 16) / 8) as usize];
                    if off & 7 == 0 {
                        arg as u32
                    } else {
                        (arg >> 32) as u32
                    }
                }
                other => panic!("load from unexpected seccomp_data offset {other}"),
            }
        };
        let (mut acc, mut pc) = (0u32, 0usize);
        loop {
            let ins = &program[pc];
            let jump = |cond: bool| pc + 1 + usize::from(if cond { ins.jt } else { ins.jf });
            pc = match ins.code {
                0x20 => {
                    acc = word(ins.k);
                    pc + 1
                }
                0x54 => {
                    acc &= ins.k;
                    pc + 1
                }
                0x05 => pc + 1 + ins.k as usize,
                0x15 => jump(acc == ins.k),
                0x25 => jump(acc > ins.k),
                0x35 => jump(acc >= ins.k),
                0x45 => jump(acc & ins.k != 0),
                0x06 => return ins.k,
                other => panic!("unexpected BPF opcode {other:#x} at {pc}"),
            };
        }
    }

    fn native_audit_arch() -> u32 {
        match native_arch().unwrap() {
            TargetArch::x86_64 => 62 | 0x8000_0000 | 0x4000_0000,
            TargetArch::aarch64 => 183 | 0x8000_0000 | 0x4000_0000,
            TargetArch::riscv64 => 243 | 0x8000_0000 | 0x4000_0000,
        }
    }

    /// Arguments that make `rule` match.
    fn matching_args(rule: &Rule) -> [u64; 6] {
        let mut args = [0u64; 6];
        match rule.when {
            When::Always => {}
            When::ArgHasBits { arg, bits } => args[arg as usize] = bits | 0x11,
            When::Arg32Eq { arg, value } => args[arg as usize] = u64::from(value),
            When::Arg32HasBitsExcept { arg, bits, .. } => args[arg as usize] = u64::from(bits),
            // Other bits set too (a whole mode such as 04755), and high bits the kernel ignores.
            When::Arg32HasBits { arg, bits } => {
                args[arg as usize] = u64::from(bits | 0o755) | 0xdead_0000_0000
            }
            When::Arg32NotIn { arg, .. } => args[arg as usize] = u64::from(libc::AF_VSOCK as u32),
            When::Arg32HasBitsIf {
                arg,
                bits,
                if_arg,
                if_bits,
            } => {
                args[arg as usize] = u64::from(bits | 0o755) | 0xdead_0000_0000;
                args[if_arg as usize] = u64::from(if_bits | libc::O_WRONLY as u32);
            }
        }
        args
    }

    /// Arguments that do not make `rule` match (for conditional rules).
    fn non_matching_args(rule: &Rule) -> [u64; 6] {
        let mut args = [0u64; 6];
        match rule.when {
            When::Arg32NotIn { arg, allowed } => args[arg as usize] = u64::from(allowed[0]),
            When::Arg32HasBits { arg, .. } => args[arg as usize] = 0o1777,
            // The mode has the bit, but no flag asks for a new file.
            When::Arg32HasBitsIf { arg, bits, .. } => args[arg as usize] = u64::from(bits),
            When::Always
            | When::ArgHasBits { .. }
            | When::Arg32Eq { .. }
            | When::Arg32HasBitsExcept { .. } => {}
        }
        args
    }

    const ALLOW: u32 = SECCOMP_RET_ALLOW;

    #[test]
    fn compiled_program_denies_every_rule_with_its_errno_and_allows_the_rest() {
        let program = sandbox_filter().unwrap();
        let arch = native_audit_arch();
        for rule in RULES {
            let got = eval(&program, arch, rule.nr as u32, matching_args(rule));
            assert_eq!(
                got,
                SECCOMP_RET_ERRNO | rule.deny.errno(),
                "{} {:?}",
                rule.syscall,
                rule.when
            );
            if rule.when != When::Always {
                assert_eq!(
                    eval(&program, arch, rule.nr as u32, non_matching_args(rule)),
                    ALLOW,
                    "{} without its condition",
                    rule.syscall
                );
            }
        }
        for nr in [
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_getpid,
            libc::SYS_execve,
            libc::SYS_ptrace,
        ] {
            assert_eq!(
                eval(&program, arch, nr as u32, [0; 6]),
                ALLOW,
                "syscall {nr}"
            );
        }
    }

    /// Every call that takes a mode, with the names and argument positions of the table.
    fn mode_calls() -> Vec<(&'static str, i64, usize)> {
        let mut calls = vec![
            ("fchmod", libc::SYS_fchmod, 1),
            ("fchmodat", libc::SYS_fchmodat, 2),
            ("fchmodat2", SYS_FCHMODAT2, 2),
            ("openat", libc::SYS_openat, 3),
            ("mknodat", libc::SYS_mknodat, 2),
        ];
        #[cfg(target_arch = "x86_64")]
        calls.extend([
            ("chmod", libc::SYS_chmod, 1),
            ("open", libc::SYS_open, 2),
            ("creat", libc::SYS_creat, 1),
            ("mknod", libc::SYS_mknod, 1),
        ]);
        calls
    }

    #[test]
    fn setuid_and_setgid_modes_are_refused_by_every_call_that_sets_or_creates_a_mode() {
        let program = sandbox_filter().unwrap();
        let arch = native_audit_arch();
        let eperm = SECCOMP_RET_ERRNO | libc::EPERM as u32;
        for (name, nr, pos) in mode_calls() {
            let with = |mode: u64| {
                let mut args = [0u64; 6];
                args[pos] = mode;
                // Flags of open/openat (O_CREAT, O_TMPFILE) do not matter: the mode alone does.
                if name.starts_with("open") {
                    args[pos - 1] = (libc::O_TMPFILE | libc::O_RDWR) as u64;
                }
                eval(&program, arch, nr as u32, args)
            };
            for mode in [0o4755, 0o2755, 0o6777, 0o4000, 0o2000 | 0xffff_0000_0000] {
                assert_eq!(with(mode), eperm, "{name} with mode {mode:o}");
            }
            for mode in [0o755, 0o1777, 0o644, 0] {
                assert_eq!(with(mode), ALLOW, "{name} with mode {mode:o}");
            }
        }
        let openat2 = eval(&program, arch, libc::SYS_openat2 as u32, [0; 6]);
        assert_eq!(openat2, SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
    }

    #[test]
    fn open_without_a_create_flag_is_allowed_whatever_its_mode_argument_holds() {
        // The kernel reads the mode of open/openat only with O_CREAT or O_TMPFILE; without them
        // the register is whatever the caller left there. jemalloc (rustc's allocator) calls
        // `syscall(SYS_open, "/proc/sys/vm/overcommit_memory", O_RDONLY | O_CLOEXEC)`: refusing
        // it for a stray setuid bit made rustc fall back to committing memory by `mmap`.
        let program = sandbox_filter().unwrap();
        let arch = native_audit_arch();
        let eperm = SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let tmpfile_bit = (libc::O_TMPFILE & !libc::O_DIRECTORY) as u64;
        for (name, nr, pos) in mode_calls() {
            if !name.starts_with("open") {
                continue;
            }
            let with = |flags: u64, mode: u64| {
                let mut args = [0u64; 6];
                args[pos - 1] = flags;
                args[pos] = mode;
                eval(&program, arch, nr as u32, args)
            };
            let not_creating = [
                libc::O_RDONLY | libc::O_CLOEXEC,
                libc::O_WRONLY | libc::O_TRUNC | libc::O_APPEND,
                libc::O_RDWR | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                libc::O_PATH,
                libc::O_DIRECTORY,
            ];
            for flags in not_creating {
                for mode in [0o4755, 0o2755, 0o6777, 0xffff_ffff, u64::MAX] {
                    assert_eq!(
                        with(flags as u64, mode),
                        ALLOW,
                        "{name} flags {flags:#o} mode {mode:#o}"
                    );
                }
            }
            let creating = [
                libc::O_CREAT as u64,
                (libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY) as u64,
                (libc::O_TMPFILE | libc::O_RDWR) as u64,
                tmpfile_bit,
                // The kernel truncates flags to an int: high bits change nothing.
                libc::O_CREAT as u64 | 0xdead_0000_0000,
            ];
            for flags in creating {
                for mode in [0o4755, 0o2755, 0o6777, 0o4000 | 0xffff_0000_0000] {
                    assert_eq!(
                        with(flags, mode),
                        eperm,
                        "{name} flags {flags:#o} mode {mode:#o}"
                    );
                }
                assert_eq!(with(flags, 0o755), ALLOW, "{name} flags {flags:#o}");
            }
        }
    }

    #[test]
    fn only_unix_inet_inet6_and_netlink_sockets_can_be_created() {
        let program = sandbox_filter().unwrap();
        let arch = native_audit_arch();
        let refused = SECCOMP_RET_ERRNO | libc::EAFNOSUPPORT as u32;
        for nr in [libc::SYS_socket, libc::SYS_socketpair] {
            for family in (0u64..=300).chain([u64::from(u32::MAX), 40 | (1 << 32)]) {
                let got = eval(&program, arch, nr as u32, [family, 1, 0, 0, 0, 0]);
                let allowed = ALLOWED_SOCKET_FAMILIES.contains(&(family as u32));
                let want = if allowed { ALLOW } else { refused };
                assert_eq!(got, want, "syscall {nr} family {family:#x}");
            }
        }
    }

    #[test]
    fn every_linux_socket_family_is_allowed_or_denied_with_a_reason() {
        const AF_MCTP: u32 = 45;
        for family in 0..=AF_MCTP {
            let denied: Vec<_> = DENIED_SOCKET_FAMILIES
                .iter()
                .filter(|f| f.family == family)
                .collect();
            let allowed = ALLOWED_SOCKET_FAMILIES.contains(&family);
            assert_eq!(
                denied.len() + usize::from(allowed),
                1,
                "family {family} must be allowed or listed exactly once"
            );
        }
        for f in DENIED_SOCKET_FAMILIES {
            assert!(f.reason.len() > 10, "{} needs a reason", f.name);
        }
        for (name, nr) in [
            ("AF_VSOCK", libc::AF_VSOCK),
            ("AF_PACKET", libc::AF_PACKET),
            ("AF_ALG", libc::AF_ALG),
            ("AF_KEY", libc::AF_KEY),
            ("AF_TIPC", libc::AF_TIPC),
            ("AF_RDS", libc::AF_RDS),
            ("AF_XDP", libc::AF_XDP),
        ] {
            let row = DENIED_SOCKET_FAMILIES
                .iter()
                .find(|f| f.name == name)
                .expect(name);
            assert_eq!(row.family, nr as u32, "{name}");
        }
    }

    #[test]
    fn security_doc_lists_every_denied_socket_family() {
        let doc = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/security.md");
        let text = std::fs::read_to_string(doc).expect("docs/security.md exists");
        for f in DENIED_SOCKET_FAMILIES {
            assert!(
                text.contains(&format!("`{}`", f.name)),
                "docs/security.md does not mention `{}`",
                f.name
            );
        }
    }

    #[test]
    fn ioctl_commands_with_high_bits_set_are_still_denied() {
        let program = sandbox_filter().unwrap();
        let args = [
            0,
            u64::from(libc::TIOCSTI as u32) | 0xdead_0000_0000,
            0,
            0,
            0,
            0,
        ];
        let got = eval(&program, native_audit_arch(), libc::SYS_ioctl as u32, args);
        assert_eq!(got, SECCOMP_RET_ERRNO | libc::EPERM as u32);
    }

    #[test]
    fn personality_query_stays_allowed_while_aslr_disabling_is_denied() {
        let program = sandbox_filter().unwrap();
        let nr = libc::SYS_personality as u32;
        let arch = native_audit_arch();
        assert_eq!(
            eval(&program, arch, nr, [0xffff_ffff, 0, 0, 0, 0, 0]),
            ALLOW
        );
        assert_eq!(eval(&program, arch, nr, [0, 0, 0, 0, 0, 0]), ALLOW);
        let no_aslr = u64::from(ADDR_NO_RANDOMIZE);
        assert_eq!(
            eval(&program, arch, nr, [no_aslr, 0, 0, 0, 0, 0]),
            SECCOMP_RET_ERRNO | libc::EPERM as u32
        );
    }

    /// Counts the instructions [`eval`] runs (same opcodes).
    fn steps(program: &[sock_filter], arch: u32, nr: u32) -> usize {
        (1..=program.len())
            .find(|budget| walk(program, arch, nr, *budget).is_some())
            .unwrap_or(usize::MAX)
    }

    /// [`eval`] limited to `budget` instructions: the verdict if one was reached.
    fn walk(program: &[sock_filter], arch: u32, nr: u32, budget: usize) -> Option<u32> {
        let (mut acc, mut pc) = (0u32, 0usize);
        for _ in 0..budget {
            let ins = &program[pc];
            let jump = |cond: bool| pc + 1 + usize::from(if cond { ins.jt } else { ins.jf });
            pc = match ins.code {
                0x20 if ins.k == 0 => {
                    acc = nr;
                    pc + 1
                }
                0x20 if ins.k == 4 => {
                    acc = arch;
                    pc + 1
                }
                0x05 => pc + 1 + ins.k as usize,
                0x15 => jump(acc == ins.k),
                0x35 => jump(acc >= ins.k),
                0x06 => return Some(ins.k),
                // Argument checks: only named syscalls get there, and they are not counted.
                _ => return Some(u32::MAX),
            };
        }
        None
    }

    /// Argument vectors that exercise every condition of the table: each rule's matching and
    /// non-matching arguments, alone and with every other rule's, and words that are all ones,
    /// all zeros, or only high bits.
    fn argument_cases() -> Vec<[u64; 6]> {
        let mut cases: Vec<[u64; 6]> = vec![[0; 6], [u64::MAX; 6], [0xffff_ffff_0000_0000; 6]];
        let per_rule: Vec<[u64; 6]> = RULES
            .iter()
            .flat_map(|r| [matching_args(r), non_matching_args(r)])
            .collect();
        cases.extend(per_rule.iter().copied());
        // A rule's flag argument without its mode, and its mode without the flag.
        for rule in RULES {
            if let When::Arg32HasBitsIf { arg, if_arg, .. } = rule.when {
                let mut only_flag = matching_args(rule);
                only_flag[arg as usize] = 0o755;
                let mut only_mode = matching_args(rule);
                only_mode[if_arg as usize] = libc::O_RDWR as u64;
                cases.extend([only_flag, only_mode]);
            }
            if let When::Arg32HasBitsExcept { arg, except, .. } = rule.when {
                let mut query = [0u64; 6];
                query[arg as usize] = u64::from(except);
                cases.push(query);
            }
        }
        for family in 0..=64u64 {
            cases.push([family, 1, 0, 0, 0, 0]);
        }
        cases
    }

    #[test]
    fn the_program_judges_every_syscall_as_the_reference_compilation_of_the_table() {
        // The seccompiler programs (one per errno, chained behind the prefilter) are the
        // reference: a rule `assemble` dropped, narrowed or widened changes a verdict here.
        let arch = native_arch().unwrap();
        let reference = reference_filter(arch).unwrap();
        let program = sandbox_filter().unwrap();
        assert!(
            program.len() * 3 < reference.len(),
            "{} instructions, the reference has {}",
            program.len(),
            reference.len()
        );
        let named = named_syscalls(RULES);
        let native = native_audit_arch();
        let cases = argument_cases();
        for nr in (0..=1023).chain([X32_SYSCALL_BIT, X32_SYSCALL_BIT | 39, u32::MAX]) {
            for a in &cases {
                for audit in [native, 3 | 0x4000_0000, 40 | 0x4000_0000] {
                    assert_eq!(
                        eval(&program, audit, nr, *a),
                        eval(&reference, audit, nr, *a),
                        "syscall {nr} arch {audit:#x} args {a:?}"
                    );
                }
            }
            if !named.contains(&nr) && nr < X32_SYSCALL_BIT {
                let n = steps(&program, native, nr);
                assert!(n <= 24, "syscall {nr} takes {n} instructions to allow");
            }
        }
    }

    /// The first input (syscall number, arguments) where `program` and `reference` disagree.
    fn first_difference(
        program: &[sock_filter],
        reference: &[sock_filter],
    ) -> Option<(u32, [u64; 6])> {
        let native = native_audit_arch();
        let cases = argument_cases();
        (0..=470u32).find_map(|nr| {
            cases
                .iter()
                .find(|a| eval(program, native, nr, **a) != eval(reference, native, nr, **a))
                .map(|a| (nr, *a))
        })
    }

    #[test]
    fn the_comparison_notices_any_single_rule_left_out() {
        // What makes the comparison above a guard: a program built without any one row of the
        // table disagrees with the reference somewhere in the inputs it tries.
        let arch = native_arch().unwrap();
        let reference = reference_filter(arch).unwrap();
        assert_eq!(
            first_difference(&sandbox_filter().unwrap(), &reference),
            None
        );
        for (i, rule) in RULES.iter().enumerate() {
            let fewer: Vec<Rule> = RULES
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, r)| *r)
                .collect();
            let program = assemble(arch, &fewer).unwrap();
            assert!(
                first_difference(&program, &reference).is_some(),
                "{} {:?} left out goes unnoticed",
                rule.syscall,
                rule.when
            );
        }
    }

    #[test]
    fn syscalls_of_a_foreign_architecture_kill_the_process() {
        const AUDIT_ARCH_I386: u32 = 3 | 0x4000_0000;
        const AUDIT_ARCH_ARM: u32 = 40 | 0x4000_0000;
        let program = sandbox_filter().unwrap();
        for arch in [AUDIT_ARCH_I386, AUDIT_ARCH_ARM] {
            // 20 is getpid on i386: harmless there, but the 64-bit rules cannot judge it.
            assert_eq!(eval(&program, arch, 20, [0; 6]), SECCOMP_RET_KILL_PROCESS);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x32_syscalls_get_enosys_even_for_numbers_the_rules_allow() {
        let program = sandbox_filter().unwrap();
        let x32_getpid = X32_SYSCALL_BIT | libc::SYS_getpid as u32;
        assert_eq!(
            eval(&program, native_audit_arch(), x32_getpid, [0; 6]),
            SECCOMP_RET_ERRNO | libc::ENOSYS as u32
        );
    }
}
