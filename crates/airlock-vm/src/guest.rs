//! PID 1 of the VM: the `airlock` executable as the initramfs's `/init`.
//!
//! Order: mount `/dev`, `/proc`, `/sys` in the initramfs; load the modules listed in
//! `/airlock/modules` (`finit_module`, dependencies first); find the virtio-serial port named
//! [`CHANNEL_PORT`] and open it (a port has one opener, so no later process can take it); say
//! [`Hello`] and read the [`GuestConfig`]; build the new root (tmpfs, the host's `/usr`
//! read-only over 9p — or an image's root read-only over 9p under a tmpfs overlay layer —,
//! a generated `/etc`, the shares at their paths, a fresh `/dev`) and
//! switch to it; then run the same guest as the `linux` backend (`airlock_guest::pid1`) with
//! streams arriving through the [`Mux`]. When the host closes the port, PID 1 ends its
//! processes and the VM powers off (QEMU runs with `-no-reboot`, so a restart ends it).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use airlock_guest::{GuestOptions, SandboxUser};
use airlock_linux::sys::process::Confinement;
use rustix::fs::{FileType, Mode};
use rustix::mount::{MountFlags, MountPropagationFlags};

use crate::boot::{GuestConfig, Hello, BOOT_VERSION, CHANNEL_PORT, MAX_BOOT_MESSAGE};
use crate::initramfs::MODULES_LIST;
use crate::mux::{bridge, read_frame, write_frame, Kind, Mux, Side};

/// Why the VM's PID 1 could not start the guest (printed on the VM console).
#[derive(Debug, thiserror::Error)]
pub enum VmGuestError {
    #[error("{what} {path}: {source}")]
    Setup {
        what: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no virtio-serial port named {CHANNEL_PORT} appeared within {0:?}")]
    NoPort(Duration),
    #[error("the host's boot message: {0}")]
    Boot(String),
    #[error("the seccomp filter: {0}")]
    Seccomp(String),
}

fn setup<E: Into<std::io::Error>>(
    what: &'static str,
    path: &str,
) -> impl FnOnce(E) -> VmGuestError {
    let path = path.to_owned();
    move |e| VmGuestError::Setup {
        what,
        path,
        source: e.into(),
    }
}

/// Whether this process is the VM's init: PID 1 started as `/init` by the kernel.
pub fn is_vm_init(args: &[std::ffi::OsString]) -> bool {
    args.len() == 1 && args[0] == "/init" && rustix::process::getpid().is_init()
}

/// Runs PID 1 of the VM; never returns (the VM powers off).
pub fn main() -> ! {
    if let Err(err) = run() {
        eprintln!("airlock vm guest: {err}");
    }
    rustix::fs::sync();
    let _ = rustix::system::reboot(rustix::system::RebootCommand::Restart);
    // Nothing else to do if even that failed: PID 1 exiting panics the kernel, which with
    // `panic=-1` and `-no-reboot` ends the VM too.
    std::process::exit(70)
}

fn run() -> Result<(), VmGuestError> {
    mount_early()?;
    load_modules()?;
    let mut port = open_port(Duration::from_secs(30))?;
    let config = exchange(&mut port)?;
    build_root(&config)?;
    let options = options(&config)?;
    serve(port, options, config.egress_port);
    Ok(())
}

fn mount_early() -> Result<(), VmGuestError> {
    let none = MountFlags::empty();
    rustix::mount::mount("devtmpfs", "/dev", "devtmpfs", none, None)
        .map_err(setup("mount", "/dev"))?;
    rustix::mount::mount("proc", "/proc", "proc", none, None).map_err(setup("mount", "/proc"))?;
    rustix::mount::mount("sysfs", "/sys", "sysfs", none, None).map_err(setup("mount", "/sys"))?;
    Ok(())
}

fn load_modules() -> Result<(), VmGuestError> {
    let list_path = format!("/{MODULES_LIST}");
    let list = std::fs::read_to_string(&list_path).map_err(setup("read", &list_path))?;
    for module in list.lines().filter(|l| !l.is_empty()) {
        let file = File::open(module).map_err(setup("open", module))?;
        match rustix::system::finit_module(&file, c"", 0) {
            // Built in after all, or loaded as another module's dependency.
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(setup("finit_module", module)(e)),
        }
    }
    Ok(())
}

/// The `/dev` node of the port named [`CHANNEL_PORT`], once the driver made it.
fn open_port(wait: Duration) -> Result<File, VmGuestError> {
    let deadline = Instant::now() + wait;
    loop {
        if let Ok(entries) = std::fs::read_dir("/sys/class/virtio-ports") {
            for entry in entries.flatten() {
                let name = std::fs::read_to_string(entry.path().join("name")).unwrap_or_default();
                if name.trim() == CHANNEL_PORT {
                    let dev = Path::new("/dev").join(entry.file_name());
                    let shown = dev.display().to_string();
                    return File::options()
                        .read(true)
                        .write(true)
                        .open(&dev)
                        .map_err(setup("open", &shown));
                }
            }
        }
        if Instant::now() > deadline {
            return Err(VmGuestError::NoPort(wait));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn exchange(port: &mut File) -> Result<GuestConfig, VmGuestError> {
    let hello = Hello {
        version: BOOT_VERSION,
        kernel: rustix::system::uname()
            .release()
            .to_string_lossy()
            .into_owned(),
        uptime_ms: uptime_ms(),
    };
    let bytes = serde_json::to_vec(&hello).map_err(|e| VmGuestError::Boot(e.to_string()))?;
    write_frame(port, 0, Kind::Hello, &bytes).map_err(setup("write", "the channel port"))?;
    let frame = read_frame(port, MAX_BOOT_MESSAGE)
        .map_err(setup("read", "the channel port"))?
        .ok_or_else(|| VmGuestError::Boot("the port closed before the configuration".into()))?;
    if frame.stream != 0 || frame.kind != Kind::Config {
        return Err(VmGuestError::Boot(format!(
            "expected the configuration, got {:?}",
            frame.kind
        )));
    }
    let config: GuestConfig =
        serde_json::from_slice(&frame.payload).map_err(|e| VmGuestError::Boot(e.to_string()))?;
    if config.version != BOOT_VERSION {
        return Err(VmGuestError::Boot(format!(
            "boot version {} (this guest speaks {BOOT_VERSION})",
            config.version
        )));
    }
    Ok(config)
}

fn uptime_ms() -> u64 {
    let text = std::fs::read_to_string("/proc/uptime").unwrap_or_default();
    let secs: f64 = text
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.0);
    (secs * 1000.0) as u64
}

const NEW_ROOT: &str = "/mnt/root";
/// An image's root filesystem (the 9p share, read-only) and the tmpfs holding the writable
/// layer over it, both in the initramfs: unreachable once the new root is entered.
const IMAGE_LOWER: &str = "/mnt/lower";
const IMAGE_RW: &str = "/mnt/rw";

fn build_root(config: &GuestConfig) -> Result<(), VmGuestError> {
    let nosuid = MountFlags::NOSUID | MountFlags::NODEV;
    let at = |p: &str| format!("{NEW_ROOT}{p}");
    if config.image_root {
        image_root(&config.usr_tag)?;
    } else {
        host_root(&config.usr_tag)?;
    }
    for dir in [
        "/etc", "/dev", "/proc", "/sys", "/tmp", "/run", "/var/tmp", "/root",
    ] {
        target_dir(config, dir)?;
    }
    for sticky in ["/tmp", "/var/tmp"] {
        std::fs::set_permissions(
            at(sticky),
            std::os::unix::fs::PermissionsExt::from_mode(0o1777),
        )
        .map_err(setup("chmod", sticky))?;
    }
    write_etc(config, &at("/etc"))?;
    populate_dev(&at("/dev"))?;
    rustix::mount::mount(
        "proc",
        at("/proc").as_str(),
        "proc",
        nosuid | MountFlags::NOEXEC,
        None,
    )
    .map_err(setup("mount", "/proc"))?;
    rustix::mount::mount(
        "sysfs",
        at("/sys").as_str(),
        "sysfs",
        nosuid | MountFlags::NOEXEC | MountFlags::RDONLY,
        None,
    )
    .map_err(setup("mount", "/sys"))?;
    let home = target_dir(config, &config.user.home)?;
    rustix::fs::chown(
        home.as_str(),
        Some(rustix::fs::Uid::from_raw(config.user.uid)),
        Some(rustix::fs::Gid::from_raw(config.user.gid)),
    )
    .map_err(setup("chown", &config.user.home))?;
    for share in &config.shares {
        let target = target_dir(config, &share.path)?;
        mount_9p(&share.tag, &target, share.writable)?;
    }
    protect(config, &at)?;
    switch_root(config)
}

/// The host image: a tmpfs root with the host's `/usr` read-only over 9p (share `usr_tag`)
/// and Debian's merged-`/usr` links; what is written outside the shares stays in the tmpfs.
fn host_root(usr_tag: &str) -> Result<(), VmGuestError> {
    let nosuid = MountFlags::NOSUID | MountFlags::NODEV;
    rustix::mount::mount("root", NEW_ROOT, "tmpfs", nosuid, Some(c"mode=0755"))
        .map_err(setup("mount", NEW_ROOT))?;
    let at = |p: &str| format!("{NEW_ROOT}{p}");
    mkdir(&at("/usr"), 0o755)?;
    for (link, target) in [
        ("/bin", "usr/bin"),
        ("/sbin", "usr/sbin"),
        ("/lib", "usr/lib"),
        ("/lib64", "usr/lib64"),
    ] {
        std::os::unix::fs::symlink(target, at(link)).map_err(setup("symlink", link))?;
    }
    mount_9p(usr_tag, &at("/usr"), false)
}

/// An imported or directory image: its root filesystem (share `tag`) read-only, under an
/// overlay whose upper layer is a tmpfs of this VM, so what the guest writes outside the
/// shares is gone with the VM and the image on the host is never written.
fn image_root(tag: &str) -> Result<(), VmGuestError> {
    let nosuid = MountFlags::NOSUID | MountFlags::NODEV;
    mount_9p(tag, IMAGE_LOWER, false)?;
    rustix::mount::mount("layer", IMAGE_RW, "tmpfs", nosuid, Some(c"mode=0755"))
        .map_err(setup("mount", IMAGE_RW))?;
    for dir in ["upper", "work"] {
        mkdir(&format!("{IMAGE_RW}/{dir}"), 0o755)?;
    }
    let data = std::ffi::CString::new(format!(
        "lowerdir={IMAGE_LOWER},upperdir={IMAGE_RW}/upper,workdir={IMAGE_RW}/work"
    ))
    .map_err(|e| VmGuestError::Boot(e.to_string()))?;
    rustix::mount::mount(
        "overlay",
        NEW_ROOT,
        "overlay",
        nosuid,
        Some(data.as_c_str()),
    )
    .map_err(setup("mount overlay", NEW_ROOT))
}

/// Makes the absolute guest path `path` a directory under the new root and returns where it
/// is now. Over an image every component in the image's layer is made a real directory: an
/// entry of the image's that is a link or not a directory is removed first (in the overlay
/// that only hides it), so nothing is mounted or written where a link of the image's would
/// lead. Below another mount (a share: the host's files) nothing is removed; the rest is
/// made as over the host image, a fresh tmpfs whose only links are the merged-`/usr` ones.
fn target_dir(config: &GuestConfig, path: &str) -> Result<String, VmGuestError> {
    use std::os::unix::fs::MetadataExt;
    let full = format!("{NEW_ROOT}{path}");
    if !config.image_root {
        mkdir_all(&full)?;
        return Ok(full);
    }
    // Overlay directories report the overlay's device: another device is another mount.
    let layer = std::fs::metadata(NEW_ROOT)
        .map_err(setup("stat", NEW_ROOT))?
        .dev();
    let mut at = std::path::PathBuf::from(NEW_ROOT);
    for part in Path::new(path).components() {
        match part {
            std::path::Component::RootDir => continue,
            std::path::Component::Normal(name) => at.push(name),
            _ => {
                return Err(VmGuestError::Boot(format!(
                    "{path} is not a plain absolute path"
                )))
            }
        }
        let shown = at.display().to_string();
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.is_dir() && meta.dev() == layer => continue,
            Ok(meta) if meta.is_dir() => {
                mkdir_all(&full)?;
                return Ok(full);
            }
            Ok(_) => std::fs::remove_file(&at).map_err(setup("remove", &shown))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(setup("stat", &shown)(e)),
        }
        mkdir(&shown, 0o755)?;
    }
    Ok(full)
}

/// Moves the new root over the initramfs's (which stays unreachable below it) and enters it.
fn switch_root(config: &GuestConfig) -> Result<(), VmGuestError> {
    std::env::set_current_dir(NEW_ROOT).map_err(setup("chdir", NEW_ROOT))?;
    rustix::mount::mount_move(".", "/").map_err(setup("move mount", NEW_ROOT))?;
    rustix::process::chroot(".").map_err(setup("chroot", NEW_ROOT))?;
    std::env::set_current_dir("/").map_err(setup("chdir", "/"))?;
    let _ = rustix::mount::mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    );
    rustix::system::sethostname(config.hostname.as_bytes())
        .map_err(setup("sethostname", &config.hostname))?;
    airlock_linux::sys::net::set_interface_up("lo").map_err(setup("bring up", "lo"))?;
    Ok(())
}

/// Binds each existing protected path read-only over itself. Guest root could undo such a
/// mount, so protection and `--root` are refused together.
fn protect(config: &GuestConfig, at: &dyn Fn(&str) -> String) -> Result<(), VmGuestError> {
    if !config.protect.is_empty() && config.root_allowed {
        return Err(VmGuestError::Boot(
            "protected paths cannot hold against root in the VM: refusing root_allowed with protect"
                .into(),
        ));
    }
    for path in &config.protect {
        let target = at(path);
        // A link could point the bind anywhere: only a real file or directory is protected
        // in place (a missing one stays missing; the host decides whether to create it).
        match std::fs::symlink_metadata(&target) {
            Ok(meta) if !meta.file_type().is_symlink() => {}
            Ok(_) => {
                return Err(VmGuestError::Boot(format!(
                    "protected path {path} is a symbolic link"
                )))
            }
            Err(_) => continue,
        }
        rustix::mount::mount_bind(target.as_str(), target.as_str()).map_err(setup("bind", path))?;
        let flags = MountFlags::BIND | MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV;
        rustix::mount::mount_remount(target.as_str(), flags, "")
            .map_err(setup("remount read-only", path))?;
    }
    Ok(())
}

fn mkdir(path: &str, mode: u32) -> Result<(), VmGuestError> {
    match rustix::fs::mkdir(path, Mode::from_raw_mode(mode)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => Ok(()),
        Err(e) => Err(setup("mkdir", path)(e)),
    }
}

fn mkdir_all(path: &str) -> Result<(), VmGuestError> {
    std::fs::create_dir_all(path).map_err(setup("mkdir", path))
}

fn mount_9p(tag: &str, target: &str, writable: bool) -> Result<(), VmGuestError> {
    let mut flags = MountFlags::NOSUID | MountFlags::NODEV;
    if !writable {
        flags |= MountFlags::RDONLY;
    }
    // access=client: the guest kernel checks permissions with the ids QEMU records.
    let data = c"trans=virtio,version=9p2000.L,msize=524288,access=client";
    rustix::mount::mount(tag, target, "9p", flags, Some(data)).map_err(setup("mount 9p", target))
}

fn write_etc(config: &GuestConfig, etc: &str) -> Result<(), VmGuestError> {
    let u = &config.user;
    let (passwd, group) = if config.image_root {
        image_accounts(config)
    } else {
        (
            format!(
                "root:x:0:0:root:/root:/bin/sh\n{}:x:{}:{}::{}:/bin/sh\n",
                u.name, u.uid, u.gid, u.home
            ),
            format!("root:x:0:\n{}:x:{}:\n", u.name, u.gid),
        )
    };
    let files = [
        ("passwd", passwd),
        ("group", group),
        ("hostname", format!("{}\n", config.hostname)),
        (
            "hosts",
            format!(
                "127.0.0.1 localhost\n127.0.1.1 {}\n::1 localhost\n",
                config.hostname
            ),
        ),
    ];
    for (name, text) in files {
        let path = format!("{etc}/{name}");
        // An image's own entry (possibly a link) is replaced, never written through.
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(setup("remove", &path)(e)),
        }
        let mut file = File::options()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(setup("create", &path))?;
        file.write_all(text.as_bytes())
            .map_err(setup("write", &path))?;
    }
    Ok(())
}

/// An image's `/etc/passwd` and `/etc/group`: root, the guest user and nobody, then the
/// image's own accounts (`_apt`, `daemon`, …) as a `linux` sandbox of the image has them
/// (`airlock_linux::rootfs::accounts`: read from the image as shipped, without following a
/// link, each entry checked, none colliding with a generated one, no password hash kept).
fn image_accounts(config: &GuestConfig) -> (String, String) {
    use airlock_linux::rootfs::accounts::{merge_group, merge_passwd, read_image_db, Account};
    let u = &config.user;
    let lower = Path::new(IMAGE_LOWER);
    let users = [
        Account {
            name: "root",
            id: 0,
        },
        Account {
            name: &u.name,
            id: u.uid,
        },
        Account {
            name: "nobody",
            id: 65534,
        },
    ];
    let passwd = format!(
        "root:x:0:0:root:/root:/bin/sh\n{name}:x:{uid}:{gid}:{name}:{home}:/bin/sh\n\
         nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n{merged}",
        name = u.name,
        uid = u.uid,
        gid = u.gid,
        home = u.home,
        merged = merge_passwd(
            &users,
            &read_image_db(lower, "passwd").unwrap_or_default(),
            false
        ),
    );
    let groups = [
        Account {
            name: "root",
            id: 0,
        },
        Account {
            name: &u.name,
            id: u.gid,
        },
        Account {
            name: "nogroup",
            id: 65534,
        },
    ];
    let names: std::collections::BTreeSet<String> = passwd
        .lines()
        .filter_map(|l| l.split(':').next())
        .map(str::to_owned)
        .collect();
    let group = format!(
        "root:x:0:\n{name}:x:{gid}:\nnogroup:x:65534:\n{merged}",
        name = u.name,
        gid = u.gid,
        merged = merge_group(
            &groups,
            &read_image_db(lower, "group").unwrap_or_default(),
            false,
            &names
        ),
    );
    (passwd, group)
}

fn populate_dev(dev: &str) -> Result<(), VmGuestError> {
    rustix::mount::mount(
        "dev",
        dev,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NOEXEC,
        Some(c"mode=0755"),
    )
    .map_err(setup("mount", dev))?;
    for (name, major, minor) in [
        ("null", 1, 3),
        ("zero", 1, 5),
        ("full", 1, 7),
        ("random", 1, 8),
        ("urandom", 1, 9),
        ("tty", 5, 0),
    ] {
        let path = format!("{dev}/{name}");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path.as_str(),
            FileType::CharacterDevice,
            Mode::from_raw_mode(0o666),
            rustix::fs::makedev(major, minor),
        )
        .map_err(setup("mknod", &path))?;
        // The umask must not narrow what every process needs.
        rustix::fs::chmod(path.as_str(), Mode::from_raw_mode(0o666))
            .map_err(setup("chmod", &path))?;
    }
    for dir in ["pts", "shm"] {
        mkdir(&format!("{dev}/{dir}"), 0o755)?;
    }
    let pts = format!("{dev}/pts");
    rustix::mount::mount(
        "devpts",
        pts.as_str(),
        "devpts",
        MountFlags::NOSUID | MountFlags::NOEXEC,
        Some(c"newinstance,ptmxmode=0666,mode=0620"),
    )
    .map_err(setup("mount", &pts))?;
    std::os::unix::fs::symlink("pts/ptmx", format!("{dev}/ptmx"))
        .map_err(setup("symlink", "/dev/ptmx"))?;
    let shm = format!("{dev}/shm");
    rustix::mount::mount(
        "shm",
        shm.as_str(),
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        Some(c"mode=1777"),
    )
    .map_err(setup("mount", &shm))?;
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, format!("{dev}/{link}"))
            .map_err(setup("symlink", link))?;
    }
    Ok(())
}

fn options(config: &GuestConfig) -> Result<GuestOptions, VmGuestError> {
    let key = airlock_protocol::Key::from_hex(&config.key)
        .map_err(|e| VmGuestError::Boot(e.to_string()))?;
    let filter = airlock_linux::seccomp::sandbox_filter()
        .map_err(|e| VmGuestError::Seccomp(e.to_string()))?;
    let user = Confinement {
        drop_capabilities: true,
        no_new_privs: true,
        withhold_setfcap: false,
        oom_score_adj: None,
        seccomp: Some(filter.clone()),
        mount_ns: None,
    };
    let root = Confinement {
        drop_capabilities: false,
        no_new_privs: true,
        withhold_setfcap: true,
        oom_score_adj: None,
        seccomp: Some(filter),
        mount_ns: None,
    };
    Ok(GuestOptions {
        key,
        env_base: config.env.clone(),
        sandbox_user: SandboxUser {
            name: config.user.name.clone(),
            uid: config.user.uid,
            gid: config.user.gid,
            home: config.user.home.clone(),
        },
        root_allowed: config.root_allowed,
        confinement: user,
        root_confinement: root,
        relays: Vec::new(),
    })
}

/// Where the egress relay's connections enter the mux (root-only directory).
/// Not under `/run/airlock`: that is the sandbox's egress directory, shared read-only from
/// the host (the CA files the proxy variables name).
const EGRESS_DIR: &str = "/run/airlock-vm";
const EGRESS_SOCKET: &str = "/run/airlock-vm/egress.sock";

/// Runs the guest with streams from the port; returns when the host closed the port.
fn serve(port: File, mut options: GuestOptions, egress_port: Option<u16>) {
    let Ok((to_guest, control)) = airlock_protocol::control_socketpair() else {
        return;
    };
    let to_guest: Arc<Mutex<Option<OwnedFd>>> = Arc::new(Mutex::new(Some(to_guest)));
    let for_open = Arc::clone(&to_guest);
    let Ok(reader) = port.try_clone() else {
        return;
    };
    let (mux, closed) = Mux::start(
        Side::Guest,
        Box::new(reader) as Box<dyn Read + Send>,
        Box::new(port) as Box<dyn Write + Send>,
        Some(Box::new(move |stream| {
            let guard = for_open
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(control) = guard.as_ref() {
                let _ = airlock_protocol::send_stream(control.as_fd(), stream.as_fd());
            }
        })),
    );
    if let Some(port) = egress_port {
        match egress_listener(&mux) {
            Ok(()) => options.relays.push(airlock_guest::Relay {
                port,
                socket: EGRESS_SOCKET.into(),
                // A descriptor cannot cross the VM boundary: the relay copies bytes over the
                // channel to the host proxy.
                handoff: false,
            }),
            Err(err) => eprintln!("airlock vm guest: no egress: {err}"),
        }
    }
    std::thread::spawn(move || {
        closed.wait();
        // The guest's control socket reaches its end: PID 1 stops its processes and returns.
        to_guest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
    });
    airlock_guest::pid1::run(control, options);
}

/// Each connection to [`EGRESS_SOCKET`] (made by PID 1's loopback relay) becomes a stream to
/// the host, which connects it to the sandbox's proxy.
fn egress_listener(mux: &Mux) -> Result<(), VmGuestError> {
    mkdir(EGRESS_DIR, 0o700)?;
    let listener = std::os::unix::net::UnixListener::bind(EGRESS_SOCKET)
        .map_err(setup("bind", EGRESS_SOCKET))?;
    let mux = mux.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            match mux.open() {
                Ok(stream) => bridge(conn, stream),
                // The port is gone: the guest is shutting down.
                Err(_) => return,
            }
        }
    });
    Ok(())
}
