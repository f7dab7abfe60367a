//! Imports of archives built here: the three formats, whiteouts, digests, and hostile entries
//! (each refused with nothing published and no working directory left behind).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use airlock_image::{
    import, remove, ImageName, ImportError, ImportRequest, Ownership, Runner, Store, StoreError,
};

use crate::archives::{docker_save, gzip, oci_layout, oci_layout_with, sha, tar, E};

struct World {
    _tmp: tempfile::TempDir,
    data: PathBuf,
    dir: PathBuf,
}

fn world() -> World {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data/airlock");
    let dir = tmp.path().to_path_buf();
    World {
        _tmp: tmp,
        data,
        dir,
    }
}

fn runner() -> (Runner, Ownership) {
    if rustix::process::geteuid().is_root() {
        (Runner::Here { chown: true }, Ownership::Archive)
    } else {
        (Runner::Here { chown: false }, Ownership::Invoker)
    }
}

impl World {
    fn import(&self, name: &str, archive: &[u8]) -> Result<airlock_image::ImageInfo, ImportError> {
        let file = self.dir.join(format!("{name}.tar"));
        std::fs::write(&file, archive).unwrap();
        self.import_file(name, &file, 1 << 30)
    }

    fn import_file(
        &self,
        name: &str,
        file: &Path,
        max_bytes: u64,
    ) -> Result<airlock_image::ImageInfo, ImportError> {
        let store = Store::open(&self.data).unwrap();
        let (r, o) = runner();
        let req = ImportRequest {
            archive: file.to_path_buf(),
            name: ImageName::parse(name).unwrap(),
            max_bytes,
            max_entries: 100_000,
            now: "2026-01-01T00:00:00Z".into(),
        };
        import(&store, &req, &r, o)
    }

    fn root(&self, name: &str) -> PathBuf {
        self.data.join("images").join(name).join("rootfs")
    }

    /// Nothing published and no working directory left.
    fn assert_empty_store(&self) {
        let left: Vec<_> = std::fs::read_dir(self.data.join("images"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "left in the store: {left:?}");
    }

    fn refused(&self, archive: &[u8]) -> String {
        let err = self
            .import("bad", archive)
            .expect_err("hostile archive imported");
        match &err {
            ImportError::Refused { .. } => {}
            other => panic!("expected a refusal, got {other:?}"),
        }
        self.assert_empty_store();
        err.to_string()
    }
}

#[test]
fn plain_rootfs_tar_is_imported_with_modes_links_and_digest() {
    let w = world();
    let archive = tar(&[
        E::Dir("./", 0o755),
        E::Dir("./bin", 0o755),
        E::File("./bin/tool", b"#!tool\n", 0o755),
        E::Link("./bin/alias", "tool"),
        E::Link("./etc-link", "/etc"),
        E::Hard("./bin/again", "./bin/tool"),
        E::Dir("./ro", 0o555),
        E::File("./ro/inside", b"x", 0o644),
    ]);
    let info = w.import("plain", &archive).unwrap();
    assert_eq!(info.source.as_str(), "rootfs");
    assert_eq!(info.digest, format!("sha256:{}", sha(&archive)));
    let root = w.root("plain");
    assert_eq!(std::fs::read(root.join("bin/tool")).unwrap(), b"#!tool\n");
    let mode = |p: &str| {
        std::fs::symlink_metadata(root.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode("bin/tool"), 0o755);
    assert_eq!(
        mode("ro"),
        0o555,
        "directory modes are applied after extraction"
    );
    assert_eq!(
        std::fs::read_link(root.join("bin/alias")).unwrap(),
        Path::new("tool")
    );
    assert_eq!(
        std::fs::read_link(root.join("etc-link")).unwrap(),
        Path::new("/etc")
    );
    let ino = |p: &str| std::fs::metadata(root.join(p)).unwrap().ino();
    assert_eq!(ino("bin/again"), ino("bin/tool"));
    assert_eq!(info.stats.entries, 8);
}

#[test]
fn gzip_compressed_rootfs_tar_is_imported() {
    let w = world();
    let archive = gzip(&tar(&[E::File("hello", b"hi", 0o644)]));
    let info = w.import("gz", &archive).unwrap();
    assert_eq!(info.digest, format!("sha256:{}", sha(&archive)));
    assert_eq!(std::fs::read(w.root("gz").join("hello")).unwrap(), b"hi");
}

#[test]
fn setuid_bits_are_stripped_and_devices_skipped() {
    let w = world();
    let info = w
        .import(
            "suid",
            &tar(&[
                E::File("su", b"x", 0o4755),
                E::File("sg", b"x", 0o2755),
                E::Dev("dev/null"),
                E::Dev("etc/evil-device"),
            ]),
        )
        .unwrap();
    let root = w.root("suid");
    for f in ["su", "sg"] {
        let mode = std::fs::metadata(root.join(f))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o755, "{f} kept a set-id bit: {mode:o}");
    }
    assert!(!root.join("dev/null").exists() && !root.join("etc/evil-device").exists());
    assert_eq!(info.stats.devices_skipped, 2);
    assert_eq!(info.stats.setid_stripped, 2);
}

#[test]
fn archive_owners_are_kept_for_a_root_invoker() {
    if !airlock_testkit::needs_root("only root can give files other owners") {
        return;
    }
    let w = world();
    w.import(
        "owners",
        &tar(&[
            E::Owned("usr-file", b"x", 0o644, 0, 0),
            E::Owned("user-file", b"x", 0o600, 1000, 100),
            E::Link("link", "user-file"),
        ]),
    )
    .unwrap();
    let root = w.root("owners");
    let ids = |p: &str| {
        let m = std::fs::symlink_metadata(root.join(p)).unwrap();
        (m.uid(), m.gid())
    };
    assert_eq!(ids("usr-file"), (0, 0));
    assert_eq!(ids("user-file"), (1000, 100));
}

/// Issue 12: owners written only in pax extended headers (how tar records ids too large for
/// the header's field, and how some image builders record every owner) are honoured, and
/// checked against the sandbox's id range like the header's.
#[test]
fn pax_owner_ids_are_honoured_for_a_root_invoker() {
    if !airlock_testkit::needs_root("only root can give files other owners") {
        return;
    }
    let w = world();
    w.import(
        "pax",
        &tar(&[
            E::PaxOwned("pax-file", 1000, 100),
            E::File("plain", b"x", 0o644),
        ]),
    )
    .unwrap();
    let root = w.root("pax");
    let ids = |p: &str| {
        let m = std::fs::symlink_metadata(root.join(p)).unwrap();
        (m.uid(), m.gid())
    };
    assert_eq!(ids("pax-file"), (1000, 100));
    assert_eq!(ids("plain"), (0, 0));
    let msg = world().refused(&tar(&[E::PaxOwned("f", 70000, 0)]));
    assert!(msg.contains("70000"), "{msg}");
}

#[test]
fn owner_ids_beyond_the_sandbox_map_are_refused() {
    if !airlock_testkit::needs_root("ids are only kept (and checked) when importing as root") {
        return;
    }
    let w = world();
    let msg = w.refused(&tar(&[E::Owned("f", b"x", 0o644, 70000, 0)]));
    assert!(msg.contains("70000"), "{msg}");
}

#[test]
fn docker_save_layers_apply_in_order_with_whiteouts() {
    let w = world();
    let base = tar(&[
        E::Dir("etc", 0o755),
        E::File("etc/keep", b"base", 0o644),
        E::File("etc/gone", b"base", 0o644),
        E::Dir("opaque", 0o755),
        E::File("opaque/old", b"old", 0o644),
        E::Dir("opaque/sub", 0o755),
        E::File("opaque/sub/older", b"old", 0o644),
        E::File("replaced", b"file", 0o644),
    ]);
    let top = tar(&[
        E::File("etc/keep", b"top", 0o644),
        E::File("etc/.wh.gone", b"", 0o644),
        E::Dir("opaque", 0o755),
        E::File("opaque/.wh..wh..opq", b"", 0o644),
        E::Dir("opaque/sub", 0o755),
        E::File("opaque/sub/new", b"new", 0o644),
        E::Dir("replaced", 0o755),
    ]);
    let info = w.import("docker", &docker_save(&[base, top])).unwrap();
    assert_eq!(info.source.as_str(), "docker-save");
    assert_eq!(info.layers, 2);
    let root = w.root("docker");
    assert_eq!(std::fs::read(root.join("etc/keep")).unwrap(), b"top");
    assert!(!root.join("etc/gone").exists());
    assert!(
        !root.join("etc/.wh.gone").exists(),
        "whiteouts are not extracted"
    );
    assert!(!root.join("opaque/old").exists());
    assert!(
        !root.join("opaque/sub/older").exists(),
        "opaque hides lower layers' subtrees"
    );
    assert!(root.join("opaque/sub/new").exists());
    assert!(!root.join("opaque/.wh..wh..opq").exists());
    assert!(root.join("replaced").is_dir());
}

#[test]
fn oci_layout_with_gzip_layers_is_imported_and_named_by_its_manifest() {
    let w = world();
    let l1 = tar(&[E::Dir("bin", 0o755), E::File("bin/a", b"1", 0o755)]);
    let l2 = tar(&[
        E::File("bin/.wh.a", b"", 0o644),
        E::File("bin/b", b"2", 0o755),
    ]);
    let (archive, digest) = oci_layout(&[l1, l2]);
    let info = w.import("oci", &archive).unwrap();
    assert_eq!(info.source.as_str(), "oci-layout");
    assert_eq!(info.digest, digest);
    let root = w.root("oci");
    assert!(!root.join("bin/a").exists());
    assert_eq!(std::fs::read(root.join("bin/b")).unwrap(), b"2");
}

#[test]
fn an_existing_name_is_never_overwritten() {
    let w = world();
    w.import("same", &tar(&[E::File("one", b"1", 0o644)]))
        .unwrap();
    let err = w
        .import("same", &tar(&[E::File("two", b"2", 0o644)]))
        .unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
    assert!(w.root("same").join("one").exists());
}

#[test]
fn absolute_entry_names_are_refused() {
    let msg = world().refused(&tar(&[E::RawFile(b"/tmp/airlock-evil", b"x")]));
    assert!(msg.contains("absolute"), "{msg}");
    assert!(!Path::new("/tmp/airlock-evil").exists());
}

#[test]
fn parent_components_in_entry_names_are_refused() {
    let w = world();
    let msg = w.refused(&tar(&[E::RawFile(b"a/../../escaped", b"x")]));
    assert!(msg.contains(".."), "{msg}");
    assert!(!w.data.join("escaped").exists() && !w.dir.join("escaped").exists());
}

#[test]
fn a_file_written_through_an_earlier_symlink_is_refused() {
    let w = world();
    let outside = w.dir.join("outside");
    std::fs::create_dir(&outside).unwrap();
    let target: &'static str = Box::leak(outside.to_string_lossy().into_owned().into_boxed_str());
    let msg = w.refused(&tar(&[
        E::Link("escape", target),
        E::File("escape/planted", b"x", 0o644),
    ]));
    assert!(msg.contains("symbolic link"), "{msg}");
    assert!(!outside.join("planted").exists());
    // Relative links that climb out are refused the same way.
    let msg = w.refused(&tar(&[
        E::Link("up", "../../../.."),
        E::File("up/planted", b"x", 0o644),
    ]));
    assert!(msg.contains("symbolic link"), "{msg}");
}

#[test]
fn a_whiteout_through_a_symlink_is_refused() {
    let w = world();
    let victim = w.dir.join("victim");
    std::fs::create_dir(&victim).unwrap();
    std::fs::write(victim.join("precious"), b"x").unwrap();
    let target: &'static str = Box::leak(victim.to_string_lossy().into_owned().into_boxed_str());
    let base = tar(&[E::Link("v", target)]);
    let top = tar(&[E::File("v/.wh.precious", b"", 0o644)]);
    w.refused(&docker_save(&[base, top]));
    assert!(victim.join("precious").exists());
}

#[test]
fn hard_links_out_of_the_root_are_refused() {
    let w = world();
    let secret = w.dir.join("secret");
    std::fs::write(&secret, b"host secret").unwrap();
    let abs: &'static str = Box::leak(secret.to_string_lossy().into_owned().into_boxed_str());
    let msg = w.refused(&tar(&[E::Hard("grab", abs)]));
    assert!(msg.contains("leaves the image root"), "{msg}");
    let msg = w.refused(&tar(&[E::Hard("grab", "../../../secret")]));
    assert!(msg.contains("leaves the image root"), "{msg}");
    // Nor through a symlink stored earlier.
    let dir: &'static str = Box::leak(w.dir.to_string_lossy().into_owned().into_boxed_str());
    w.refused(&tar(&[E::Link("d", dir), E::Hard("grab", "d/secret")]));
    assert_eq!(std::fs::metadata(&secret).unwrap().nlink(), 1);
}

#[test]
fn a_tampered_docker_layer_is_refused() {
    let w = world();
    let layer = tar(&[E::File("f", b"genuine", 0o644)]);
    let mut archive = docker_save(&[layer]);
    let at = archive.windows(7).position(|x| x == b"genuine").unwrap();
    archive[at..at + 7].copy_from_slice(b"altered");
    let msg = w.refused(&archive);
    assert!(msg.contains("does not match its digest"), "{msg}");
}

#[test]
fn a_tampered_oci_blob_is_refused() {
    let w = world();
    let layer = tar(&[E::File("f", b"genuine", 0o644)]);
    let other = gzip(&tar(&[E::File("f", b"altered", 0o644)]));
    let (archive, _) = oci_layout_with(&[layer], |members| {
        let blob = members
            .iter_mut()
            .find(|(n, d)| n.starts_with("blobs/") && d.starts_with(&[0x1f, 0x8b]))
            .unwrap();
        blob.1 = other.clone();
    });
    let msg = w.refused(&archive);
    assert!(msg.contains("does not match"), "{msg}");
}

#[test]
fn content_beyond_the_size_cap_is_refused_whatever_the_headers_say() {
    let w = world();
    let file = w.dir.join("big.tar");
    std::fs::write(
        &file,
        tar(&[
            E::File("a", &[7u8; 4096], 0o644),
            E::File("b", &[7u8; 4096], 0o644),
        ]),
    )
    .unwrap();
    let err = w.import_file("big", &file, 6000).unwrap_err();
    assert!(
        err.to_string().contains("larger than the import limit"),
        "{err}"
    );
    w.assert_empty_store();
}

#[test]
fn a_file_that_is_not_an_archive_is_refused() {
    let msg =
        world().refused(b"this is not a tar archive at all, just some text that is long enough");
    assert!(msg.contains("tar"), "{msg}");
}

#[test]
fn removal_deletes_the_image_and_its_tree() {
    let w = world();
    w.import(
        "gone",
        &tar(&[E::Dir("ro", 0o555), E::File("ro/f", b"x", 0o444)]),
    )
    .unwrap();
    let store = Store::open(&w.data).unwrap();
    let (r, _) = runner();
    let name = ImageName::parse("gone").unwrap();
    let lock = store.lock_for_removal(&name).unwrap();
    remove(&store, &name, &lock, &r).unwrap();
    w.assert_empty_store();
}

/// `image rm` checks the sandbox records under its exclusive lock, and a sandbox being
/// created holds the image (shared) from before its record is written: one of the two is
/// refused, so a record can never appear between the check and the removal.
#[test]
fn a_held_image_cannot_be_locked_for_removal_nor_a_locked_one_held() {
    let w = world();
    w.import("busy", &tar(&[E::File("f", b"x", 0o644)]))
        .unwrap();
    let store = Store::open(&w.data).unwrap();
    let name = ImageName::parse("busy").unwrap();
    let hold = store.hold(&name).unwrap();
    let second = store.hold(&name).unwrap();
    assert!(matches!(
        store.lock_for_removal(&name),
        Err(StoreError::InUse { .. })
    ));
    drop((hold, second));
    let lock = store.lock_for_removal(&name).unwrap();
    assert!(matches!(
        store.hold(&name),
        Err(StoreError::Removing { .. })
    ));
    let (r, _) = runner();
    remove(&store, &name, &lock, &r).unwrap();
    drop(lock);
    assert!(matches!(
        store.hold(&name),
        Err(StoreError::NotFound { .. })
    ));
}

#[test]
fn an_interrupted_import_publishes_nothing_and_is_swept_by_the_next() {
    let w = world();
    let store = Store::open(&w.data).unwrap();
    // What an import killed mid-way leaves: a marked working directory with a partial tree.
    let dead = store.dir().join(".import-4194304-0");
    std::fs::create_dir_all(dead.join("rootfs/usr")).unwrap();
    std::fs::write(dead.join("owner"), "4194304 1\n").unwrap();
    // One whose owner is alive (this process) is left alone, and so is an unmarked one.
    let alive = store.dir().join(".import-live");
    std::fs::create_dir_all(&alive).unwrap();
    let me = std::process::id();
    let stat = std::fs::read_to_string(format!("/proc/{me}/stat")).unwrap();
    let start = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(19)
        .unwrap()
        .to_owned();
    std::fs::write(alive.join("owner"), format!("{me} {start}\n")).unwrap();
    assert!(
        store.list().unwrap().is_empty(),
        "a working directory is listed"
    );
    w.import("next", &tar(&[E::File("f", b"x", 0o644)]))
        .unwrap();
    assert!(!dead.exists(), "the abandoned import was not swept");
    assert!(alive.exists(), "a live import's directory was removed");
    let names: Vec<_> = store
        .list()
        .unwrap()
        .into_iter()
        .map(|i| i.unwrap().name)
        .collect();
    assert_eq!(names, ["next"]);
}

/// Issue 12 (decided: no zstd decoder for hostile archives, see docs/guide.md): a
/// zstd-compressed archive or layer is refused with an error that names zstd and says what to
/// do, and nothing is imported.
#[test]
fn zstd_archives_and_layers_are_refused_saying_what_to_do() {
    let zstd = [0x28, 0xb5, 0x2f, 0xfd, 0, 0, 0, 0].repeat(8);
    let msg = world().refused(&zstd);
    assert!(msg.contains("zstd") && msg.contains("zstd -d"), "{msg}");
    let msg = world().refused(&docker_save(&[zstd]));
    assert!(msg.contains("zstd") && msg.contains("gzip"), "{msg}");
}
