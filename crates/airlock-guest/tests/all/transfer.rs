//! File transfer and port forwarding through a real guest (protocol v2): the transfer thread
//! runs as the sandbox user, follows no link, and leaves the rest of PID 1 as it was.

use std::fs;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use airlock_files::{connect, pull, push, NoProgress, Outcome, Source, Target, TransferError};
use airlock_protocol::{ErrorCode, ExitStatus};

use crate::fixture::{request, Guest};

fn needs_root() -> bool {
    airlock_testkit::needs_root(
        "the sandbox user differs from the guest's only when started as root",
    )
}

/// A scratch directory every user may enter and write (the sandbox user is `nobody`).
fn open_tempdir() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o777)).unwrap();
    tmp
}

fn dir_fd(path: &Path) -> std::os::fd::OwnedFd {
    fs::File::open(path).unwrap().into()
}

fn push_tree(
    guest: &Guest,
    src: &Path,
    dest: &Path,
    replace: bool,
) -> Result<Outcome, TransferError> {
    let mut wire = connect(guest.stream(), &guest.key)?;
    let source = Source {
        parent: dir_fd(src.parent().unwrap()),
        name: src.file_name().unwrap().to_str().unwrap().to_owned(),
    };
    push(
        &mut wire,
        &source,
        dest.to_str().unwrap(),
        replace,
        &NoProgress,
    )
}

fn pull_tree(guest: &Guest, src: &Path, out: &Path, name: &str) -> Result<Outcome, TransferError> {
    let mut wire = connect(guest.stream(), &guest.key)?;
    let target = Target {
        parent: dir_fd(out),
        name: name.to_owned(),
        replace: false,
        display: out.join(name).display().to_string(),
    };
    pull(&mut wire, src.to_str().unwrap(), &target, &NoProgress)
}

fn remote_code(result: Result<Outcome, TransferError>) -> ErrorCode {
    match result {
        Err(TransferError::Remote(remote)) => remote.code,
        other => panic!("expected a typed guest error, got {other:?}"),
    }
}

#[test]
fn push_then_pull_round_trips_a_tree_through_the_guest() {
    let guest = Guest::start();
    let host = tempfile::tempdir().unwrap();
    let src = host.path().join("proj");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("sub/data"), b"payload").unwrap();
    std::os::unix::fs::symlink("sub/data", src.join("link")).unwrap();
    let sandbox = open_tempdir();
    let pushed = push_tree(&guest, &src, sandbox.path(), false).unwrap();
    let landed = sandbox.path().join("proj");
    assert_eq!(Path::new(&pushed.sandbox_path), landed);
    assert_eq!(
        (
            pushed.summary.files,
            pushed.summary.dirs,
            pushed.summary.symlinks
        ),
        (1, 2, 1)
    );
    assert_eq!(fs::read(landed.join("sub/data")).unwrap(), b"payload");
    let back = host.path().join("back");
    fs::create_dir(&back).unwrap();
    let pulled = pull_tree(&guest, &landed, &back, "proj").unwrap();
    assert_eq!(pulled.summary, pushed.summary);
    assert_eq!(fs::read(back.join("proj/sub/data")).unwrap(), b"payload");
    assert_eq!(
        fs::read_link(back.join("proj/link")).unwrap(),
        Path::new("sub/data")
    );
}

#[test]
fn pushed_files_belong_to_the_sandbox_user_not_to_pid1() {
    if !needs_root() {
        return;
    }
    let guest = Guest::start();
    let host = tempfile::tempdir().unwrap();
    let src = host.path().join("f");
    fs::write(&src, b"x").unwrap();
    let sandbox = open_tempdir();
    push_tree(&guest, &src, sandbox.path(), false).unwrap();
    let meta = fs::metadata(sandbox.path().join("f")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (65534, 65534));
}

#[test]
fn a_file_the_sandbox_user_cannot_read_stays_unreadable_to_pull() {
    if !needs_root() {
        return;
    }
    let guest = Guest::start();
    let sandbox = open_tempdir();
    let src = sandbox.path().join("tree");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("readable"), b"ok").unwrap();
    fs::write(src.join("secret"), b"root only").unwrap();
    fs::set_permissions(src.join("secret"), fs::Permissions::from_mode(0o600)).unwrap();
    let out = tempfile::tempdir().unwrap();
    let result = pull_tree(&guest, &src, out.path(), "tree");
    assert_eq!(remote_code(result), ErrorCode::PermissionDenied);
    assert_eq!(
        fs::read_dir(out.path()).unwrap().count(),
        0,
        "nothing is published"
    );
}

#[test]
fn a_push_into_a_directory_only_root_may_write_is_refused() {
    if !needs_root() {
        return;
    }
    let guest = Guest::start();
    let host = tempfile::tempdir().unwrap();
    let src = host.path().join("f");
    fs::write(&src, b"x").unwrap();
    let root_only = tempfile::tempdir().unwrap();
    fs::set_permissions(root_only.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let result = push_tree(&guest, &src, root_only.path(), false);
    assert_eq!(remote_code(result), ErrorCode::PermissionDenied);
    assert_eq!(fs::read_dir(root_only.path()).unwrap().count(), 0);
}

#[test]
fn pid1_keeps_its_identity_after_serving_a_transfer() {
    if !needs_root() {
        return;
    }
    let guest = Guest::start_with(true);
    let host = tempfile::tempdir().unwrap();
    let src = host.path().join("f");
    fs::write(&src, b"x").unwrap();
    let sandbox = open_tempdir();
    push_tree(&guest, &src, sandbox.path(), false).unwrap();
    let mut root = request(&["id", "-u"]);
    root.user = airlock_protocol::ExecUser::Root;
    let out = guest.run_with(&root, None).unwrap();
    assert_eq!((out.status, out.stdout.trim()), (ExitStatus::Code(0), "0"));
}

#[test]
fn sandbox_paths_with_a_symlink_component_are_refused() {
    let guest = Guest::start();
    let host = tempfile::tempdir().unwrap();
    let src = host.path().join("f");
    fs::write(&src, b"x").unwrap();
    let sandbox = open_tempdir();
    let elsewhere = open_tempdir();
    std::os::unix::fs::symlink(elsewhere.path(), sandbox.path().join("link")).unwrap();
    let result = push_tree(&guest, &src, &sandbox.path().join("link/f"), false);
    assert_eq!(remote_code(result), ErrorCode::BadPath);
    // The link as the target itself: it exists, so it is refused, never written through.
    let result = push_tree(&guest, &src, &sandbox.path().join("link"), false);
    assert_eq!(remote_code(result), ErrorCode::AlreadyExists);
    assert_eq!(fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    let out = tempfile::tempdir().unwrap();
    let result = pull_tree(&guest, &sandbox.path().join("link/x"), out.path(), "x");
    assert_eq!(remote_code(result), ErrorCode::BadPath);
}

#[test]
fn sandbox_paths_into_proc_or_with_dotdot_are_refused_by_the_guest_too() {
    let guest = Guest::start();
    let out = tempfile::tempdir().unwrap();
    for bad in ["/proc/1/environ", "/tmp/../proc/self/environ", "relative"] {
        let result = pull_tree(&guest, Path::new(bad), out.path(), "x");
        assert_eq!(remote_code(result), ErrorCode::BadPath, "{bad}");
    }
}

#[test]
fn a_forward_reaches_a_sandbox_loopback_port_and_carries_raw_bytes() {
    let guest = Guest::start();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut buf = [0u8; 5];
        conn.read_exact(&mut buf).unwrap();
        conn.write_all(&[b"echo:".as_slice(), &buf].concat())
            .unwrap();
    });
    let mut stream = guest.stream();
    airlock_protocol::host_handshake(
        &mut stream,
        &guest.key,
        airlock_protocol::VersionRange::CURRENT,
    )
    .unwrap();
    airlock_protocol::write_message(
        &mut stream,
        airlock_protocol::Message::Forward(airlock_protocol::ForwardRequest { port }),
    )
    .unwrap();
    let reply = airlock_protocol::read_packet(&mut stream).unwrap().unwrap();
    assert_eq!(
        reply,
        airlock_protocol::Packet::Control(airlock_protocol::Message::ForwardConnected)
    );
    stream.write_all(b"hello").unwrap();
    let mut back = Vec::new();
    stream.read_to_end(&mut back).unwrap();
    assert_eq!(back, b"echo:hello");
    server.join().unwrap();
}

#[test]
fn a_forward_to_a_closed_port_is_a_typed_refusal() {
    let guest = Guest::start();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut stream = guest.stream();
    airlock_protocol::host_handshake(
        &mut stream,
        &guest.key,
        airlock_protocol::VersionRange::CURRENT,
    )
    .unwrap();
    airlock_protocol::write_message(
        &mut stream,
        airlock_protocol::Message::Forward(airlock_protocol::ForwardRequest { port }),
    )
    .unwrap();
    match airlock_protocol::read_packet(&mut stream).unwrap() {
        Some(airlock_protocol::Packet::Control(airlock_protocol::Message::Error(e))) => {
            assert_eq!(e.code, ErrorCode::ConnectionRefused)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_transfer_thread_holds_no_capability_even_when_its_uid_does_not_change() {
    if !needs_root() {
        return;
    }
    // The sandbox user is uid 0 here, like PID 1 itself: the uid switch drops nothing, so only
    // the explicit capability drop keeps CAP_DAC_OVERRIDE from reading another user's file.
    let guest = Guest::start_with_sandbox_id(0);
    let sandbox = open_tempdir();
    let src = sandbox.path().join("private");
    fs::write(&src, b"belongs to 4242").unwrap();
    fs::set_permissions(&src, fs::Permissions::from_mode(0o600)).unwrap();
    rustix::fs::chown(&src, Some(rustix::fs::Uid::from_raw(4242)), None).unwrap();
    let out = tempfile::tempdir().unwrap();
    let result = pull_tree(&guest, &src, out.path(), "private");
    assert_eq!(remote_code(result), ErrorCode::PermissionDenied);
    assert_eq!(fs::read_dir(out.path()).unwrap().count(), 0);
}

#[test]
fn one_stream_carries_several_pushes_until_one_is_refused() {
    let guest = Guest::start();
    let host = tempfile::tempdir().unwrap();
    for (name, text) in [("a", "first"), ("b", "second")] {
        fs::write(host.path().join(name), text).unwrap();
    }
    fs::create_dir(host.path().join("d")).unwrap();
    let sandbox = open_tempdir();
    let dest = sandbox.path().to_str().unwrap();
    let source = |name: &str| Source {
        parent: dir_fd(host.path()),
        name: name.to_owned(),
    };
    let mut wire = connect(guest.stream(), &guest.key).unwrap();
    for name in ["a", "b", "d"] {
        push(&mut wire, &source(name), dest, false, &NoProgress).unwrap();
    }
    assert_eq!(fs::read(sandbox.path().join("a")).unwrap(), b"first");
    assert_eq!(fs::read(sandbox.path().join("b")).unwrap(), b"second");
    assert!(sandbox.path().join("d").is_dir());
    // A refusal ends the stream: the push after it finds the stream closed.
    let refused = push(&mut wire, &source("a"), dest, false, &NoProgress);
    assert_eq!(remote_code(refused), ErrorCode::AlreadyExists);
    let after = push(&mut wire, &source("b"), dest, true, &NoProgress);
    assert!(matches!(after, Err(TransferError::Closed)), "{after:?}");
    assert_eq!(fs::read(sandbox.path().join("b")).unwrap(), b"second");
}
