//! A hostile sender (what a compromised guest could send on a pull) can write nothing outside
//! the destination and leaves nothing published when it cheats.

use std::fs;
use std::os::unix::fs::symlink;

use airlock_files::TransferError;
use airlock_protocol::{EntryKind, FileEnd, Message, TransferSummary};

use crate::harness::{end, entry, file, listing, mode, receive_scripted, staged, target};

fn summary(files: u64, dirs: u64, symlinks: u64, bytes: u64) -> TransferSummary {
    TransferSummary {
        files,
        dirs,
        symlinks,
        bytes,
        skipped: 0,
    }
}

/// A destination directory `out` next to a directory `outside` that must stay untouched.
struct World {
    _tmp: tempfile::TempDir,
    out: std::path::PathBuf,
    outside: std::path::PathBuf,
}

fn world() -> World {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let outside = tmp.path().join("outside");
    fs::create_dir(&out).unwrap();
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("precious"), b"keep").unwrap();
    World {
        _tmp: tmp,
        out,
        outside,
    }
}

impl World {
    fn untouched(&self) {
        assert_eq!(listing(&self.outside), ["precious"]);
        assert_eq!(fs::read(self.outside.join("precious")).unwrap(), b"keep");
        assert!(staged(&self.out).is_empty(), "{:?}", staged(&self.out));
    }
}

#[test]
fn names_with_dotdot_or_slashes_are_refused_and_nothing_is_written() {
    for bad in ["..", ".", "../outside/precious", "a/b", "/etc/passwd", ""] {
        let w = world();
        let result = receive_scripted(&target(&w.out, "copy", false), |wire| {
            wire.send(&entry("root", EntryKind::Dir, 0o755, None))
                .unwrap();
            file(wire, bad, 0o644, b"pwned");
            wire.send(&Message::DirEnd).unwrap();
            end(wire, summary(1, 1, 0, 5));
        });
        assert!(
            matches!(result, Err(TransferError::Entry { .. })),
            "{bad:?}: {result:?}"
        );
        assert!(listing(&w.out).is_empty(), "{bad:?}");
        w.untouched();
    }
}

#[test]
fn a_sent_symlink_is_never_written_through() {
    let w = world();
    let outside = w.outside.display().to_string();
    // A link to the outside, then the same name as a directory and as a file: both must fail
    // on the existing name instead of following the link.
    for kind in [EntryKind::Dir, EntryKind::File] {
        let result = receive_scripted(&target(&w.out, "copy", false), |wire| {
            wire.send(&entry("root", EntryKind::Dir, 0o755, None))
                .unwrap();
            wire.send(&entry("escape", EntryKind::Symlink, 0o777, Some(&outside)))
                .unwrap();
            match kind {
                EntryKind::Dir => {
                    wire.send(&entry("escape", EntryKind::Dir, 0o755, None))
                        .unwrap();
                    file(wire, "precious", 0o644, b"pwned");
                    wire.send(&Message::DirEnd).unwrap();
                }
                EntryKind::File | EntryKind::Symlink => file(wire, "escape", 0o644, b"pwned"),
            }
            wire.send(&Message::DirEnd).unwrap();
            end(wire, summary(1, 2, 1, 5));
        });
        assert!(
            matches!(result, Err(TransferError::Io { .. })),
            "{result:?}"
        );
        assert!(listing(&w.out).is_empty());
        w.untouched();
    }
}

#[test]
fn a_root_sent_as_a_symlink_is_published_as_a_link_only() {
    let w = world();
    let outside = w.outside.display().to_string();
    receive_scripted(&target(&w.out, "copy", false), |wire| {
        wire.send(&entry("root", EntryKind::Symlink, 0o777, Some(&outside)))
            .unwrap();
        end(wire, summary(0, 0, 1, 0));
    })
    .unwrap();
    assert_eq!(fs::read_link(w.out.join("copy")).unwrap(), w.outside);
    w.untouched();
}

#[test]
fn content_that_does_not_match_its_hash_or_size_publishes_nothing() {
    for (size, sha) in [(3, None), (5, Some("00".repeat(32)))] {
        let w = world();
        let result = receive_scripted(&target(&w.out, "copy", false), |wire| {
            wire.send(&entry("root", EntryKind::File, 0o644, None))
                .unwrap();
            wire.send_data(b"hello").unwrap();
            let real = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"hello"));
            wire.send(&Message::FileEnd(FileEnd {
                size,
                sha256: sha.clone().unwrap_or(real),
            }))
            .unwrap();
            end(wire, summary(1, 0, 0, 5));
        });
        assert!(
            matches!(result, Err(TransferError::Corrupt { .. })),
            "{result:?}"
        );
        assert!(listing(&w.out).is_empty());
        w.untouched();
    }
}

#[test]
fn counts_that_disagree_with_the_tree_publish_nothing() {
    let w = world();
    let result = receive_scripted(&target(&w.out, "copy", false), |wire| {
        wire.send(&entry("root", EntryKind::Dir, 0o755, None))
            .unwrap();
        file(wire, "a", 0o644, b"a");
        wire.send(&Message::DirEnd).unwrap();
        end(wire, summary(2, 1, 0, 1));
    });
    assert!(
        matches!(result, Err(TransferError::Corrupt { .. })),
        "{result:?}"
    );
    assert!(listing(&w.out).is_empty());
}

#[test]
fn a_sender_that_vanishes_mid_file_publishes_nothing() {
    let w = world();
    let result = receive_scripted(&target(&w.out, "copy", false), |wire| {
        wire.send(&entry("root", EntryKind::Dir, 0o755, None))
            .unwrap();
        file(wire, "done", 0o644, b"complete");
        wire.send(&entry("half", EntryKind::File, 0o644, None))
            .unwrap();
        wire.send_data(b"partial").unwrap();
        // The stream ends here: the sandbox was killed.
    });
    assert!(matches!(result, Err(TransferError::Closed)), "{result:?}");
    assert!(listing(&w.out).is_empty());
}

#[test]
fn duplicate_names_fail_instead_of_overwriting() {
    let w = world();
    let result = receive_scripted(&target(&w.out, "copy", false), |wire| {
        wire.send(&entry("root", EntryKind::Dir, 0o755, None))
            .unwrap();
        file(wire, "a", 0o644, b"first");
        file(wire, "a", 0o644, b"second");
        wire.send(&Message::DirEnd).unwrap();
        end(wire, summary(2, 1, 0, 11));
    });
    assert!(
        matches!(result, Err(TransferError::Io { .. })),
        "{result:?}"
    );
    assert!(listing(&w.out).is_empty());
}

#[test]
fn stray_data_and_out_of_order_messages_are_refused() {
    let w = world();
    let result = receive_scripted(&target(&w.out, "copy", false), |wire| {
        wire.send(&entry("root", EntryKind::Dir, 0o755, None))
            .unwrap();
        wire.send_data(b"data outside a file").unwrap();
        end(wire, summary(0, 1, 0, 0));
    });
    assert!(
        matches!(result, Err(TransferError::Unexpected { .. })),
        "{result:?}"
    );
    let result = receive_scripted(&target(&w.out, "copy", false), |wire| {
        wire.send(&Message::DirEnd).unwrap();
    });
    assert!(
        matches!(result, Err(TransferError::Unexpected { .. })),
        "{result:?}"
    );
    assert!(listing(&w.out).is_empty());
}

#[test]
fn setuid_modes_sent_by_a_hostile_sender_are_stripped() {
    let w = world();
    receive_scripted(&target(&w.out, "copy", false), |wire| {
        wire.send(&entry("root", EntryKind::Dir, 0o7777, None))
            .unwrap();
        file(wire, "suid", 0o4755, b"x");
        file(wire, "sgid", 0o2755, b"x");
        wire.send(&Message::DirEnd).unwrap();
        end(wire, summary(2, 1, 0, 2));
    })
    .unwrap();
    assert_eq!(mode(&w.out.join("copy/suid")), 0o755);
    assert_eq!(mode(&w.out.join("copy/sgid")), 0o755);
    assert_eq!(mode(&w.out.join("copy")), 0o1777);
}

#[test]
fn a_preplanted_symlink_at_the_target_is_replaced_not_followed() {
    let w = world();
    symlink(&w.outside, w.out.join("copy")).unwrap();
    let script = |wire: &mut airlock_files::Wire| {
        wire.send(&entry("root", EntryKind::Dir, 0o755, None))
            .unwrap();
        file(wire, "precious", 0o644, b"pwned");
        wire.send(&Message::DirEnd).unwrap();
        end(wire, summary(1, 1, 0, 5));
    };
    let result = receive_scripted(&target(&w.out, "copy", false), script);
    assert!(
        matches!(result, Err(TransferError::Exists { .. })),
        "{result:?}"
    );
    w.untouched();
    receive_scripted(&target(&w.out, "copy", true), script).unwrap();
    assert!(fs::symlink_metadata(w.out.join("copy")).unwrap().is_dir());
    assert_eq!(fs::read(w.out.join("copy/precious")).unwrap(), b"pwned");
    w.untouched();
}
