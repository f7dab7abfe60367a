//! The monitor helper (`airlock __vm-monitor`) without booting anything: a stand-in QEMU
//! started through it, as a root caller's VM starts, reports what it is and what it can reach.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use airlock_vm::boot::{GuestConfig, GuestUser, BOOT_VERSION};
use airlock_vm::limits::{Host, Limits};
use airlock_vm::machine::{Accel, HostShare, Machine, MachineError, MachineSpec, MonitorExec};

use crate::common::AIRLOCK;

/// The stand-in runs as the monitor's id: only the system python is reachable by it.
const PYTHON: &str = "/usr/bin/python3";

/// What the stand-in does: prints one line (to QEMU's log, which the boot error quotes) with
/// its ids, whether it reads the kernel and the initramfs by the names it was given, whether
/// it writes in the writable share and not in the read-only one, whether a file of another
/// host user is closed to it, and whether its mount namespace is the test's; then exits.
const FAKE: &str = r#"#!/usr/bin/python3
import os, sys
args = sys.argv[1:]
def opt(flag):
    return [args[i + 1] for i, a in enumerate(args) if a == flag]
def path_of(fsdev):
    return [p.split('=', 1)[1] for p in fsdev.split(',') if p.startswith('path=')][0]
status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())
out = ['Uid=' + ' '.join(status['Uid'].split()), 'Gid=' + ' '.join(status['Gid'].split()),
       'Groups=' + ' '.join(status['Groups'].split()), 'NoNewPrivs=' + status['NoNewPrivs'].strip()]
out.append('kernel=' + open(opt('-kernel')[0]).read().strip())
out.append('initrd=' + open(opt('-initrd')[0]).read().strip())
rw, ro = [path_of(f) for f in opt('-fsdev') if 'readonly=on' not in f], [path_of(f) for f in opt('-fsdev') if 'readonly=on' in f]
out.append('rw=' + ','.join(rw) + ' ro=' + ','.join(ro))
with open(os.path.join(rw[0], 'written-by-monitor'), 'w') as f:
    f.write('monitor\n')
os.mkdir(os.path.join(rw[0], 'dir-by-monitor'))
out.append('own=' + str(os.stat(os.path.join(rw[0], 'roots-file')).st_uid))
def denied(fn):
    try:
        fn()
        return 'open'
    except OSError as e:
        return e.strerror.replace(' ', '-')
out.append('other=' + denied(lambda: open(os.path.join(rw[0], 'others-file')).read()))
out.append('ro-write=' + denied(lambda: open(os.path.join(ro[-1], 'x'), 'w')))
out.append('mnt=' + os.readlink('/proc/self/ns/mnt'))
print('report', ' '.join(out), file=sys.stderr, flush=True)
sys.exit(3)
"#;

/// A root caller's monitor through the helper: the stand-in runs as the given id with no
/// groups and `no_new_privs`, in a mount namespace that is not the caller's; it reads the
/// kernel and the initramfs (0600, root's, under a 0700 directory) by name; what it writes in
/// the writable share is root's on the host and root's files appear as its own; a file of
/// another host user stays closed; the read-only share refuses writes; and nothing is left
/// mounted in the caller's namespace.
#[test]
fn the_monitor_helper_runs_qemu_as_the_given_id_with_id_mapped_shares_in_its_own_namespace() {
    if !airlock_testkit::needs_root("the monitor helper switches ids and mounts")
        || !airlock_testkit::needs_tool(PYTHON)
    {
        return;
    }
    let q = airlock_linux::idmap::ROOT_INVOKER_BASE + 0x0fff_0000 + 1000;
    // The stand-in must be reachable by the monitor's id; everything else is root's alone.
    let exe = tempfile::tempdir().unwrap();
    std::fs::set_permissions(exe.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let fake = exe.path().join("fake-qemu");
    std::fs::write(&fake, FAKE).unwrap();
    std::fs::set_permissions(&fake, PermissionsExt::from_mode(0o755)).unwrap();
    let private = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str, mode: u32| {
        let p = private.path().join(rel);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, PermissionsExt::from_mode(mode)).unwrap();
        p
    };
    let kernel = write("vmlinuz", "the-kernel", 0o600);
    let initramfs = write("initramfs.cpio", "the-initramfs", 0o600);
    let ws = private.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let ro = private.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    write("ws/roots-file", "root's", 0o600);
    let others = write("ws/others-file", "another user's", 0o600);
    std::os::unix::fs::chown(&others, Some(4321), Some(4321)).unwrap();
    let vm_dir = tempfile::tempdir().unwrap();
    let share = |tag: &str, host: &Path, writable: bool, id_mapped: bool| HostShare {
        tag: tag.into(),
        host: host.to_path_buf(),
        writable,
        id_mapped,
    };
    let spec = MachineSpec {
        qemu: fake,
        kernel,
        initramfs,
        accel: Accel::Tcg,
        limits: Limits::new(256, Some(1.0), Host::current().unwrap()).unwrap(),
        dir: vm_dir.path().to_path_buf(),
        shares: vec![
            share("usr", Path::new("/usr"), false, false),
            share("s1", &ws, true, true),
            share("s2", &ro, false, true),
        ],
        egress_socket: None,
        monitor: MonitorExec {
            join: Vec::new(),
            identity: Some((q, q)),
            helper: Some(AIRLOCK.into()),
        },
    };
    let config = GuestConfig {
        version: BOOT_VERSION,
        key: String::new(),
        hostname: "h".into(),
        user: GuestUser {
            name: "u".into(),
            uid: q,
            gid: q,
            home: "/".into(),
        },
        env: Vec::new(),
        root_allowed: false,
        usr_tag: "usr".into(),
        image_root: false,
        shares: Vec::new(),
        protect: Vec::new(),
        egress_port: None,
    };
    let err = match Machine::boot(&spec, &config, Instant::now() + Duration::from_secs(60)) {
        Ok(_) => panic!("the stand-in monitor booted"),
        Err(err) => err,
    };
    let MachineError::Exited { log, .. } = &err else {
        panic!("{err}");
    };
    let report = log
        .split(" | ")
        .find(|l| l.starts_with("report "))
        .unwrap_or_else(|| panic!("no report from the stand-in: {log}"));
    let own_mnt = std::fs::read_link("/proc/self/ns/mnt").unwrap();
    for expected in [
        format!("Uid={q} {q} {q} {q}"),
        format!("Gid={q} {q} {q} {q}"),
        "Groups= ".into(),
        "NoNewPrivs=1".into(),
        "kernel=the-kernel".into(),
        "initrd=the-initramfs".into(),
        // Relative names in the helper's directory, /usr as the host has it.
        "rw=s1 ro=/usr,s2".into(),
        format!("own={q}"),
        "other=Permission-denied".into(),
        "ro-write=Read-only-file-system".into(),
    ] {
        assert!(report.contains(&expected), "no {expected:?} in: {report}");
    }
    assert!(
        !report.contains(&format!("mnt={}", own_mnt.display())),
        "the monitor shares the caller's mount namespace: {report}"
    );
    for made in ["written-by-monitor", "dir-by-monitor"] {
        let meta = std::fs::metadata(ws.join(made)).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (0, 0), "{made} is not root's");
    }
    // Nothing of the helper's is mounted where the caller lives.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    for place in [vm_dir.path(), private.path()] {
        assert!(
            !crate::common::mentions(&mounts, place),
            "{} is mounted on in the caller's namespace:\n{mounts}",
            place.display()
        );
    }
    assert_eq!(
        std::fs::read_dir(vm_dir.path()).unwrap().count(),
        2,
        "console.log and qemu.log only"
    );
}
