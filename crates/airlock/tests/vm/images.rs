//! Imported images with the `vm` backend: the image's root filesystem is shared read-only with
//! the guest, which lays a tmpfs over it (overlay), so what the guest writes outside the
//! workspace never reaches the image and ends with the VM. One boot, as whoever runs the suite
//! (root in the main pass: its QEMU sees the image through an id-mapped mount; the test user in
//! the unprivileged pass).

use std::path::{Path, PathBuf};

use crate::runtime::harness::{ok, Rt};
use crate::runtime::images::{import, pack, tiny_tree, use_image};

/// Every path below `dir` whose name is `name` (links not followed).
fn named(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_name() == name {
            found.push(path.clone());
        }
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            found.extend(named(&path, name));
        }
    }
    found
}

/// `up` of an imported image (one static binary, its own `/etc/passwd`, a `/tmp` that is a link
/// to `/etc`) with the vm backend: `exec` runs the image's program (the host has no
/// `/bin/tiny`), the guest's `/etc/passwd` keeps the image's own account beside the guest user,
/// a file written in `/tmp` is there for the guest (in a real `/tmp`, not through the image's
/// link) but in no file on the host (not in the image's tree), `image rm` is refused while the
/// sandbox lives and works after `down`.
#[test]
fn vm_backend_runs_an_imported_image_under_a_layer_that_ends_with_the_vm() {
    if !airlock_testkit::needs_tool(super::QEMU) {
        return;
    }
    let Some(kernel) = super::needs_kernel() else {
        return;
    };
    let rt = Rt::invoker();
    let Some(tree) = tiny_tree(&rt, &rt.env.dir("tiny")) else {
        return;
    };
    std::fs::create_dir_all(tree.join("etc")).unwrap();
    std::fs::write(
        tree.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\n_apt:x:42:65534::/nonexistent:/usr/sbin/nologin\n",
    )
    .unwrap();
    rt.hand_over(&tree);
    // A link of the image's where the guest makes its `/tmp`: hidden, never followed.
    std::os::unix::fs::symlink("/etc", tree.join("tmp")).unwrap();
    import(&rt, &pack(&rt, &tree), "tiny");
    use_image(&rt, "tiny");
    rt.env.write_user_config(&format!(
        "backend = \"vm\"\n[vm]\naccel = \"tcg\"\nkernel = \"{}\"\n",
        kernel.root.display()
    ));
    rt.hand_over(rt.env.root());
    assert!(!Path::new("/bin/tiny").exists(), "the host has a /bin/tiny");
    let marker = format!("vm-layer-{}", std::process::id());
    let written = format!("/tmp/{marker}");

    let up = rt.run_args(&["up", "--no-attach", "--timeout", "10m"], None);
    let exec = rt.run_args(&["exec", "--", "/bin/tiny", "from", "image"], None);
    let passwd = rt.run_args(&["exec", "--", "/bin/tiny", "cat", "/etc/passwd"], None);
    let write = rt.run_args(&["exec", "--", "/bin/tiny", "write", &written], None);
    let read = rt.run_args(&["exec", "--", "/bin/tiny", "cat", &written], None);
    let through_link = format!("/etc/{marker}");
    let via_etc = rt.run_args(&["exec", "--", "/bin/tiny", "cat", &through_link], None);
    let on_host = named(rt.env.root(), &marker);
    let rm = rt.run_args(&["image", "rm", "tiny"], None);
    let down = rt.run_args(&["down"], None);

    ok(&up);
    exec.assert_code(3);
    assert_eq!(exec.stdout, "from\nimage\n", "{exec:?}");
    let passwd = ok(&passwd);
    assert!(
        passwd.contains("_apt:x:42:65534::/nonexistent:/usr/sbin/nologin\n"),
        "{passwd}"
    );
    assert_eq!(passwd.matches(":x:0:").count(), 1, "{passwd}");
    ok(&write);
    assert_eq!(ok(&read), "written\n", "{read:?}");
    via_etc.assert_code(1);
    assert_eq!(
        on_host,
        Vec::<PathBuf>::new(),
        "the guest's write reached the host"
    );
    rm.assert_code(1);
    assert!(rm.stderr.contains("image.in_use"), "{rm:?}");
    ok(&down);
    assert_eq!(named(rt.env.root(), &marker), Vec::<PathBuf>::new());
    ok(&rt.run_args(&["image", "rm", "tiny"], None));
}
