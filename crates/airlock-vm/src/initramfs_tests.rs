use std::collections::HashMap;

use super::*;
use crate::cpio::tests::{read_all, Read as Entry};

/// A fake kernel with two modules, one depending on the other.
fn kernel() -> (tempfile::TempDir, Kernel) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("k");
    let modules = root.join("lib/modules/6.1.0-9-amd64");
    std::fs::create_dir_all(modules.join("kernel/a")).unwrap();
    std::fs::create_dir_all(root.join("boot")).unwrap();
    std::fs::write(root.join("boot/vmlinuz-6.1.0-9-amd64"), b"").unwrap();
    std::fs::write(
        modules.join("modules.dep"),
        "kernel/a/top.ko: kernel/a/base.ko\nkernel/a/base.ko:\n",
    )
    .unwrap();
    std::fs::write(modules.join("kernel/a/top.ko"), b"top").unwrap();
    std::fs::write(modules.join("kernel/a/base.ko"), b"base").unwrap();
    (dir, Kernel::open(&root).unwrap())
}

/// Follows links inside the archive the way the guest's path lookup will.
fn resolve<'a>(entries: &'a HashMap<String, &'a Entry>, path: &str) -> Option<&'a Entry> {
    let mut path = PathBuf::from(path);
    for _ in 0..40 {
        let mut so_far = PathBuf::from("/");
        let parts: Vec<_> = path.components().collect();
        let mut next = None;
        for (i, part) in parts.iter().enumerate() {
            let Component::Normal(part) = part else {
                continue;
            };
            so_far.push(part);
            let key = so_far
                .strip_prefix("/")
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let entry = entries.get(&key)?;
            if entry.mode & 0o170_000 == 0o120_000 {
                let target = std::str::from_utf8(&entry.data).unwrap();
                let mut rest = so_far.parent().unwrap().join(target);
                for later in &parts[i + 1..] {
                    rest.push(later);
                }
                next = Some(normalize(&rest));
                break;
            }
            if i == parts.len() - 1 {
                return Some(entry);
            }
        }
        path = next?;
    }
    None
}

#[test]
fn init_its_interpreter_and_libraries_and_modules_resolve_inside_the_archive() {
    let (dir, kernel) = kernel();
    let exe = std::env::current_exe().unwrap();
    let contents = Contents::for_exe(&exe, &kernel, &["top"]).unwrap();
    let interp = contents.libraries[0].clone();
    assert!(
        contents.libraries.iter().any(|l| l.ends_with("libc.so.6")),
        "libc (needed through DT_NEEDED) missing: {:?}",
        contents.libraries
    );
    assert!(interp.is_absolute(), "{interp:?}");
    let out = dir.path().join("initramfs");
    build(&contents, &kernel, &out).unwrap();
    let bytes = std::fs::read(&out).unwrap();
    let all = read_all(&bytes);
    let entries: HashMap<String, &Entry> = all.iter().map(|e| (e.name.clone(), e)).collect();

    let init = entries["init"];
    assert_eq!(
        init.data.len() as u64,
        std::fs::metadata(&exe).unwrap().len()
    );
    assert_eq!(init.mode & 0o777, 0o755);
    assert_eq!(entries["dev/console"].rdev, (5, 1));
    // The interpreter the kernel will load, through whatever links the host has on the way.
    let names: Vec<_> = all
        .iter()
        .map(|e| e.name.as_str())
        .filter(|n| !n.starts_with("lib/modules"))
        .collect();
    let loaded = resolve(&entries, &interp.to_string_lossy())
        .unwrap_or_else(|| panic!("{interp:?} does not resolve in {names:?}"));
    assert_eq!(loaded.mode & 0o170_000, 0o100_000);
    assert_eq!(loaded.data, std::fs::read(&interp).unwrap());
    for lib in &contents.libraries[1..] {
        assert!(
            resolve(&entries, &lib.to_string_lossy()).is_some(),
            "{lib:?} missing"
        );
    }
    // Modules in dependency order, each present.
    let list = std::str::from_utf8(&entries[MODULES_LIST].data).unwrap();
    assert_eq!(
        list,
        "/lib/modules/6.1.0-9-amd64/kernel/a/base.ko\n/lib/modules/6.1.0-9-amd64/kernel/a/top.ko\n"
    );
    assert_eq!(
        entries["lib/modules/6.1.0-9-amd64/kernel/a/top.ko"].data,
        b"top"
    );
    // Every directory precedes what it holds (the kernel creates nothing on its own).
    for (i, e) in all.iter().enumerate() {
        if let Some((parent, _)) = e.name.rsplit_once('/') {
            let at = all
                .iter()
                .position(|p| p.name == parent)
                .expect("parent listed");
            assert!(at < i, "{} listed before its directory", e.name);
        }
    }
}

#[test]
fn the_interpreter_of_a_file_that_is_not_elf_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("script");
    std::fs::write(&f, b"#!/bin/sh\n").unwrap();
    assert!(matches!(
        elf_interpreter(&f),
        Err(InitramfsError::Elf { .. })
    ));
}

/// A minimal static executable: an ELF header and one `PT_LOAD`, no interpreter, no dynamic
/// section (what the kernel needs to start it; what a static-pie also lacks: `PT_INTERP`).
fn static_elf(path: &Path) {
    let mut b = vec![0u8; 64 + 56];
    b[..4].copy_from_slice(b"\x7fELF");
    b[4] = 2; // 64-bit
    b[5] = 1; // little-endian
    b[6] = 1;
    b[0x10] = 3; // ET_DYN, as a static-pie
    b[0x12] = 62; // x86-64
    b[0x20] = 64; // e_phoff
    b[0x36] = 56; // e_phentsize
    b[0x38] = 1; // e_phnum
    b[64] = 1; // PT_LOAD
    std::fs::write(path, b).unwrap();
}

#[test]
fn a_static_executable_is_init_alone_with_no_libraries() {
    let (dir, kernel) = kernel();
    let exe = dir.path().join("static");
    static_elf(&exe);
    let contents = Contents::for_exe(&exe, &kernel, &["top"]).unwrap();
    assert!(contents.libraries.is_empty(), "{:?}", contents.libraries);
    let out = dir.path().join("initramfs");
    build(&contents, &kernel, &out).unwrap();
    let bytes = std::fs::read(&out).unwrap();
    let all = read_all(&bytes);
    assert!(all.iter().any(|e| e.name == "init"));
    assert!(
        !all.iter().any(|e| e.name.contains(".so")),
        "{:?}",
        all.iter().map(|e| &e.name).collect::<Vec<_>>()
    );
}
