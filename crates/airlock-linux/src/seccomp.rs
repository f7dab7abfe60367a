//! The seccomp filter every sandbox process runs under (PRODUCT I6), as data.
//!
//! [`RULES`] is the policy: one row per denied syscall (or syscall + argument pattern), with
//! the errno it gets and the reason, citing the CVE or kernel document that motivates it.
//! [`sandbox_filter`] compiles the table with `seccompiler` into one BPF program for the native
//! architecture (x86_64 or aarch64).
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
//! - **Foreign ABIs are refused.** `seccompiler` starts the program with an audit-arch check that
//!   returns `SECCOMP_RET_KILL_PROCESS` for any other architecture (a 32-bit `int 0x80` call from
//!   a 64-bit process reports `AUDIT_ARCH_I386`): the 32-bit syscall table would bypass every
//!   rule keyed on 64-bit numbers. On x86_64 the x32 ABI shares `AUDIT_ARCH_X86_64` but sets bit
//!   30 of the syscall number, so a hand-written guard placed right after the arch check answers
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
use std::collections::BTreeMap;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
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
}

/// What a matching rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deny {
    /// Fail with `EPERM`, as for a missing privilege.
    Eperm,
    /// Fail with `ENOSYS`, as for a syscall this kernel does not have (lets libc fall back).
    Enosys,
}

impl Deny {
    fn errno(self) -> u32 {
        match self {
            Deny::Eperm => libc::EPERM as u32,
            Deny::Enosys => libc::ENOSYS as u32,
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

const CLONE_NEWUSER: u64 = libc::CLONE_NEWUSER as u64;
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
    #[cfg(target_arch = "x86_64")]
    rule("iopl", libc::SYS_iopl, "raw I/O port access"),
    #[cfg(target_arch = "x86_64")]
    rule("ioperm", libc::SYS_ioperm, "raw I/O port access"),
    #[cfg(target_arch = "x86_64")]
    rule("uselib", libc::SYS_uselib, "obsolete a.out loader with a CVE history (CVE-2004-1235)"),
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
    }
}

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

/// The compiled sandbox filter for the native architecture.
pub fn sandbox_filter() -> Result<BpfProgram, SeccompError> {
    let arch = native_arch()?;
    let mut guard = x32_guard(arch);
    // The guard falls through on allow; give it an explicit `RET ALLOW` so `chain` links it.
    if !guard.is_empty() {
        guard.push(sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: SECCOMP_RET_ALLOW,
        });
    }
    let mut stages = Vec::new();
    if !guard.is_empty() {
        stages.push(guard);
    }
    stages.push(compile(Deny::Eperm, arch)?);
    stages.push(compile(Deny::Enosys, arch)?);
    chain(stages)
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
                    eval(&program, arch, rule.nr as u32, [0; 6]),
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
