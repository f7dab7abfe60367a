//! Hidden verbs of the `airlock` executable, dispatched on argv before clap sees it.
//!
//! The guest side of a sandbox runs as a hidden verb of this same binary (docs/architecture.md),
//! started inside the new namespaces; it must never appear in `--help` and must not depend on
//! clap's parsing of the public surface. The runtime owns the verbs added here.

use std::ffi::OsString;

/// Runs a hidden verb when `args` names one and returns its exit status; `None` for every
/// public command line, which then goes to clap.
pub fn dispatch(args: &[OsString]) -> Option<i32> {
    let verb = args.get(1)?;
    if verb == airlock_linux::bootstrap::INIT_VERB {
        return Some(init());
    }
    if verb == "__devrun" {
        return Some(devrun(&args[2..]));
    }
    None
}

fn init() -> i32 {
    let handoff = match airlock_linux::init::run() {
        Ok(h) => h,
        Err(e) => {
            eprintln!("airlock: sandbox init failed: {e}");
            return 70;
        }
    };
    // TEMP: run a command directly
    let cmd = handoff
        .spec
        .env
        .iter()
        .find(|(k, _)| k == "DEVCMD")
        .map(|(_, v)| v.clone())
        .unwrap();
    let st = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(cmd)
        .stdout(std::process::Stdio::from(
            std::io::stderr().as_fd().try_clone_to_owned().unwrap(),
        ))
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .status()
        .unwrap();
    st.code().unwrap_or(99)
}

use std::os::fd::AsFd;
fn devrun(args: &[OsString]) -> i32 {
    use airlock_linux::spec::*;
    let cwd = std::env::current_dir().unwrap();
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    let spec = SandboxSpec {
        id: format!("dev-{}", std::process::id()),
        image: Image::Host,
        workspaces: vec![Mapping {
            host: cwd.clone(),
            sandbox: cwd.clone(),
            writable: true,
        }],
        mounts: vec![],
        user: HostUser {
            uid,
            gid,
            name: std::env::var("USER").unwrap_or_default(),
            home: std::env::var("HOME").unwrap().into(),
        },
        hostname: "airlock".into(),
        env: vec![("DEVCMD".into(), args[0].to_string_lossy().into_owned())],
        limits: Limits::default(),
        require_root: false,
    };
    let opts = airlock_linux::host::StartOptions {
        exe: "/proc/self/exe".into(),
        sandboxes_dir: std::env::temp_dir().join(format!("airlock-dev-{uid}")),
    };
    let t = std::time::Instant::now();
    let mut sb = match airlock_linux::host::Sandbox::start(&spec, &opts, &mut |_| Ok(())) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("start: {e}");
            return 70;
        }
    };
    eprintln!("started in {:?} {:?}", t.elapsed(), sb.timings);
    let _c = sb.take_control();
    std::thread::sleep(std::time::Duration::from_millis(300));
    sb.destroy(std::time::Duration::from_secs(2)).unwrap();
    0
}
