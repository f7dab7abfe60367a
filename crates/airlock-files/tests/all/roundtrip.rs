//! A tree sent and received comes out the same: content, modes, times, links as links.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

use airlock_files::TransferError;

use crate::harness::{copy, listing, mode, mtime, source, staged, target};

fn set_mtime(path: &Path, secs: i64) {
    let f = fs::File::open(path).unwrap();
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs as u64);
    f.set_modified(t).unwrap();
}

#[test]
fn tree_round_trips_with_modes_times_and_links() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir_all(src.join("sub/deeper")).unwrap();
    fs::write(src.join("a.txt"), b"alpha").unwrap();
    fs::write(src.join("sub/run.sh"), b"#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(src.join("sub/run.sh"), fs::Permissions::from_mode(0o750)).unwrap();
    fs::write(src.join("sub/deeper/empty"), b"").unwrap();
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(src.join("big.bin"), &big).unwrap();
    symlink("../a.txt", src.join("sub/link")).unwrap();
    symlink("/etc/passwd", src.join("abs-link")).unwrap();
    set_mtime(&src.join("a.txt"), 1_000_000_000);
    fs::set_permissions(src.join("sub/deeper"), fs::Permissions::from_mode(0o555)).unwrap();
    let out = tmp.path().join("out");
    fs::create_dir(&out).unwrap();

    let (sent, got) = copy(&source(&src), &target(&out, "copy", false));
    let (sent, got) = (sent.unwrap(), got.unwrap());
    assert_eq!(sent, got);
    assert_eq!((got.files, got.dirs, got.symlinks), (4, 3, 2));
    assert_eq!(got.bytes, 5 + 18 + big.len() as u64);
    let copy = out.join("copy");
    assert_eq!(listing(&copy), listing(&src));
    assert_eq!(fs::read(copy.join("big.bin")).unwrap(), big);
    assert_eq!(
        fs::read_link(copy.join("sub/link")).unwrap(),
        Path::new("../a.txt")
    );
    assert_eq!(
        fs::read_link(copy.join("abs-link")).unwrap(),
        Path::new("/etc/passwd")
    );
    assert_eq!(mode(&copy.join("sub/run.sh")), 0o750);
    assert_eq!(mode(&copy.join("sub/deeper")), 0o555);
    assert_eq!(mtime(&copy.join("a.txt")), 1_000_000_000);
    assert_eq!(
        mtime(&copy.join("sub/deeper")),
        mtime(&src.join("sub/deeper"))
    );
    assert!(staged(&out).is_empty());
}

#[test]
fn names_with_newlines_and_escape_sequences_arrive_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    let names = [
        "new\nline",
        "\u{1b}[31mred\u{1b}[0m",
        "tab\there",
        " lead",
        "ü-ñ",
    ];
    for name in names {
        fs::write(src.join(name), name.as_bytes()).unwrap();
    }
    let out = tmp.path().join("out");
    fs::create_dir(&out).unwrap();
    let (sent, got) = copy(&source(&src), &target(&out, "src", false));
    sent.unwrap();
    got.unwrap();
    for name in names {
        assert_eq!(
            fs::read(out.join("src").join(name)).unwrap(),
            name.as_bytes()
        );
    }
}

#[test]
fn a_tree_hundreds_of_levels_deep_round_trips() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    // Deeper than PATH_MAX allows as one path string: only descriptor-relative walking works.
    let mut dir = fs::File::open(tmp.path()).unwrap();
    let mut name = "src".to_string();
    for level in 0..900 {
        rustix::fs::mkdirat(&dir, name.as_str(), rustix::fs::Mode::from_raw_mode(0o755)).unwrap();
        dir = fs::File::from(
            rustix::fs::openat(
                &dir,
                name.as_str(),
                rustix::fs::OFlags::RDONLY,
                rustix::fs::Mode::empty(),
            )
            .unwrap(),
        );
        name = format!("level-{level:04}");
    }
    rustix::fs::openat(
        &dir,
        "leaf",
        rustix::fs::OFlags::CREATE | rustix::fs::OFlags::WRONLY,
        rustix::fs::Mode::from_raw_mode(0o644),
    )
    .unwrap();
    let out = tmp.path().join("out");
    fs::create_dir(&out).unwrap();
    airlock_files::raise_open_files_limit();
    let (sent, got) = copy(&source(&src), &target(&out, "copy", false));
    let (sent, got) = (sent.unwrap(), got.unwrap());
    assert_eq!((got.dirs, got.files), (900, 1));
    assert_eq!(sent, got);
}

#[test]
fn a_tree_deeper_than_the_limit_is_refused_and_nothing_is_published() {
    let tmp = tempfile::tempdir().unwrap();
    let mut dir = fs::File::open(tmp.path()).unwrap();
    let mut name = "src".to_string();
    for level in 0..=airlock_protocol::transfer::MAX_DEPTH {
        rustix::fs::mkdirat(&dir, name.as_str(), rustix::fs::Mode::from_raw_mode(0o755)).unwrap();
        dir = fs::File::from(
            rustix::fs::openat(
                &dir,
                name.as_str(),
                rustix::fs::OFlags::RDONLY,
                rustix::fs::Mode::empty(),
            )
            .unwrap(),
        );
        name = format!("{level}");
    }
    let out = tmp.path().join("out");
    fs::create_dir(&out).unwrap();
    airlock_files::raise_open_files_limit();
    let (sent, got) = copy(
        &source(&tmp.path().join("src")),
        &target(&out, "copy", false),
    );
    assert!(
        matches!(sent, Err(TransferError::TooDeep { .. })),
        "{sent:?}"
    );
    assert!(got.is_err());
    assert!(listing(&out).is_empty(), "{:?}", listing(&out));
}

#[test]
fn a_symlinked_root_is_sent_as_the_link_not_its_target() {
    let tmp = tempfile::tempdir().unwrap();
    let secret = tmp.path().join("secret");
    fs::create_dir(&secret).unwrap();
    fs::write(secret.join("key"), b"do not copy").unwrap();
    symlink(&secret, tmp.path().join("root-link")).unwrap();
    let out = tmp.path().join("out");
    fs::create_dir(&out).unwrap();
    let (sent, got) = copy(
        &source(&tmp.path().join("root-link")),
        &target(&out, "copy", false),
    );
    let got = got.unwrap();
    sent.unwrap();
    assert_eq!((got.symlinks, got.files), (1, 0));
    assert_eq!(fs::read_link(out.join("copy")).unwrap(), secret);
}

#[test]
fn setuid_and_setgid_bits_are_never_recreated() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("tool");
    fs::write(&src, b"x").unwrap();
    fs::set_permissions(&src, fs::Permissions::from_mode(0o6755)).unwrap();
    let dir = tmp.path().join("d");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o2775)).unwrap();
    let out = tmp.path().join("out");
    fs::create_dir(&out).unwrap();
    let (_, got) = copy(&source(&src), &target(&out, "tool", false));
    got.unwrap();
    let (_, got) = copy(&source(&dir), &target(&out, "d", false));
    got.unwrap();
    assert_eq!(mode(&out.join("tool")), 0o755);
    assert_eq!(mode(&out.join("d")), 0o775);
}

#[test]
fn fifos_are_skipped_and_counted_not_opened() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        src.join("pipe"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    fs::write(src.join("file"), b"f").unwrap();
    let out = tmp.path().join("out");
    fs::create_dir(&out).unwrap();
    let (sent, got) = copy(&source(&src), &target(&out, "src", false));
    let got = got.unwrap();
    sent.unwrap();
    assert_eq!((got.files, got.skipped), (1, 1));
    assert_eq!(listing(&out.join("src")), ["file"]);
}

#[test]
fn an_existing_target_is_refused_without_replace_and_swapped_with_it() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("new"), b"new").unwrap();
    let out = tmp.path().join("out");
    fs::create_dir_all(out.join("src")).unwrap();
    fs::write(out.join("src/old"), b"old").unwrap();
    let (_, got) = copy(&source(&src), &target(&out, "src", false));
    assert!(matches!(got, Err(TransferError::Exists { .. })), "{got:?}");
    assert_eq!(listing(&out), ["src", "src/old"]);
    let (_, got) = copy(&source(&src), &target(&out, "src", true));
    got.unwrap();
    assert_eq!(listing(&out), ["src", "src/new"]);
}
