use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::SystemTime;

use super::*;

/// A fake kernel with one module and a fake executable (no interpreter: the contents are
/// given, not derived from ELF), in one temporary directory; the cache directory beside them.
struct Setup {
    tmp: tempfile::TempDir,
    kernel: Kernel,
    contents: Contents,
}

impl Setup {
    fn new() -> Setup {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("k");
        let modules = root.join("lib/modules/6.1.0-9-amd64");
        std::fs::create_dir_all(modules.join("kernel")).unwrap();
        std::fs::create_dir_all(root.join("boot")).unwrap();
        std::fs::write(root.join("boot/vmlinuz-6.1.0-9-amd64"), b"").unwrap();
        std::fs::write(modules.join("modules.dep"), "kernel/m.ko:\n").unwrap();
        std::fs::write(modules.join("kernel/m.ko"), b"module one").unwrap();
        let exe = tmp.path().join("airlock");
        std::fs::write(&exe, b"executable version one").unwrap();
        let kernel = Kernel::open(&root).unwrap();
        let contents = Contents {
            exe,
            libraries: Vec::new(),
            modules: kernel.load_order(&["m"]).unwrap(),
        };
        Setup {
            tmp,
            kernel,
            contents,
        }
    }

    fn dir(&self) -> PathBuf {
        self.tmp.path().join("cache/vm-initramfs")
    }

    fn get(&self) -> Cached {
        initramfs(&self.dir(), &self.contents, &self.kernel).unwrap()
    }

    /// What a fresh build writes.
    fn expected(&self) -> Vec<u8> {
        initramfs::write(&self.contents, &self.kernel, Vec::new()).unwrap()
    }

    fn entries(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }
}

#[test]
fn cache_builds_once_then_reuses_the_same_entry() {
    let s = Setup::new();
    let first = s.get();
    assert!(!first.hit);
    assert_eq!(std::fs::read(&first.path).unwrap(), s.expected());
    let meta = std::fs::symlink_metadata(&first.path).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o600);
    let dir_meta = std::fs::metadata(s.dir()).unwrap();
    assert_eq!(dir_meta.mode() & 0o7777, 0o700);
    let second = s.get();
    assert!(second.hit, "the second boot rebuilt the initramfs");
    assert_eq!(second.path, first.path);
    assert_eq!(
        std::fs::metadata(&second.path).unwrap().ino(),
        meta.ino(),
        "the entry was rewritten"
    );
    assert_eq!(
        s.entries(),
        [first.path.file_name().unwrap().to_str().unwrap()]
    );
}

#[test]
fn cache_entry_follows_the_contents_not_timestamps() {
    let s = Setup::new();
    let first = s.get();
    // A rebuild in place that keeps the size and the modification time.
    let exe_meta = std::fs::metadata(&s.contents.exe).unwrap();
    std::fs::write(&s.contents.exe, b"executable version two").unwrap();
    File::options()
        .write(true)
        .open(&s.contents.exe)
        .unwrap()
        .set_modified(exe_meta.modified().unwrap())
        .unwrap();
    let second = s.get();
    assert!(
        !second.hit,
        "a changed airlock binary reused the old initramfs"
    );
    assert_ne!(second.path, first.path);
    assert_eq!(std::fs::read(&second.path).unwrap(), s.expected());
    // Another kernel's module, same binary.
    std::fs::write(s.kernel.modules_dir().join("kernel/m.ko"), b"module two").unwrap();
    let third = s.get();
    assert!(
        !third.hit,
        "changed kernel modules reused the old initramfs"
    );
    assert_ne!(third.path, second.path);
}

#[test]
fn cache_rebuilds_a_truncated_entry() {
    let s = Setup::new();
    let first = s.get();
    let full = std::fs::metadata(&first.path).unwrap().len();
    File::options()
        .write(true)
        .open(&first.path)
        .unwrap()
        .set_len(full / 2)
        .unwrap();
    let again = s.get();
    assert!(!again.hit, "a truncated entry was used");
    assert_eq!(again.path, first.path);
    assert_eq!(std::fs::read(&again.path).unwrap(), s.expected());
}

#[test]
fn cache_does_not_follow_a_symlinked_entry() {
    let s = Setup::new();
    let first = s.get();
    // A link to a file with the right bytes elsewhere: still not ours to trust.
    let elsewhere = s.tmp.path().join("elsewhere.cpio");
    std::fs::write(&elsewhere, s.expected()).unwrap();
    std::fs::remove_file(&first.path).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &first.path).unwrap();
    let again = s.get();
    assert!(!again.hit, "a symbolic link was used as the entry");
    let meta = std::fs::symlink_metadata(&again.path).unwrap();
    assert!(meta.file_type().is_file(), "the link is still there");
    assert_eq!(std::fs::read(&elsewhere).unwrap(), s.expected());
}

#[test]
fn cache_rebuilds_an_entry_others_can_write_or_that_has_another_name() {
    let s = Setup::new();
    let first = s.get();
    std::fs::set_permissions(&first.path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let again = s.get();
    assert!(!again.hit, "a world-writable entry was used");
    assert_eq!(
        std::fs::metadata(&again.path).unwrap().mode() & 0o777,
        0o600
    );
    // A second name: whoever holds it could change the entry after the check.
    let other = s.tmp.path().join("other-name");
    std::fs::hard_link(&again.path, &other).unwrap();
    let third = s.get();
    assert!(!third.hit, "a hard-linked entry was used");
    assert_eq!(std::fs::metadata(&third.path).unwrap().nlink(), 1);
}

#[test]
fn cache_does_not_block_on_a_fifo_entry() {
    let s = Setup::new();
    let first = s.get();
    std::fs::remove_file(&first.path).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &first.path,
        FileType::Fifo,
        Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let again = s.get();
    assert!(!again.hit);
    assert!(std::fs::symlink_metadata(&again.path)
        .unwrap()
        .file_type()
        .is_file());
}

#[test]
fn cache_rebuilds_an_entry_owned_by_another_user() {
    if !airlock_testkit::needs_root("chown an entry to another user") {
        return;
    }
    let s = Setup::new();
    let first = s.get();
    std::os::unix::fs::chown(&first.path, Some(65534), Some(65534)).unwrap();
    let again = s.get();
    assert!(!again.hit, "another user's entry was used");
    assert_eq!(
        std::fs::metadata(&again.path).unwrap().uid(),
        rustix::process::geteuid().as_raw()
    );
}

#[test]
fn cache_refuses_a_directory_others_can_write_or_a_linked_one() {
    let s = Setup::new();
    std::fs::create_dir_all(s.dir()).unwrap();
    std::fs::set_permissions(s.dir(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = initramfs(&s.dir(), &s.contents, &s.kernel).unwrap_err();
    assert!(
        matches!(&err, CacheError::Unsafe { why, .. } if why.contains("others can write")),
        "{err}"
    );
    assert!(
        s.entries().is_empty(),
        "something was written: {:?}",
        s.entries()
    );
    let real = s.tmp.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let linked = s.tmp.path().join("linked");
    std::os::unix::fs::symlink(&real, &linked).unwrap();
    let err = initramfs(&linked, &s.contents, &s.kernel).unwrap_err();
    assert!(matches!(err, CacheError::Unsafe { .. }), "{err}");
    assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0);
}

#[test]
fn cache_prunes_old_entries_but_keeps_the_newest_and_recently_used() {
    let s = Setup::new();
    std::fs::create_dir_all(s.dir()).unwrap();
    std::fs::set_permissions(s.dir(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let hours_ago = |h: u64| SystemTime::now() - Duration::from_secs(h * 3600);
    let plant = |i: u8, when: SystemTime| {
        let name = format!("{}.cpio", format!("{i:x}").repeat(64));
        let path = s.dir().join(&name);
        std::fs::write(&path, b"old").unwrap();
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(when)
            .unwrap();
        name
    };
    let recent = plant(1, SystemTime::now());
    let old: Vec<String> = (2..7).map(|i| plant(i, hours_ago(u64::from(i)))).collect();
    let unrelated = s.dir().join("notes.txt");
    std::fs::write(&unrelated, b"not an entry").unwrap();
    let built = s.get();
    let left = s.entries();
    let built_name = built.path.file_name().unwrap().to_str().unwrap().to_owned();
    let mut want = vec![built_name, recent, old[0].clone(), old[1].clone()];
    want.push("notes.txt".into());
    want.sort();
    assert_eq!(left, want);
}
