//! Racing the transfer: something that can write the source or the destination (a sandbox
//! process, in a workspace) swaps directories for symbolic links while the walk runs.
//! Bounded: a fixed number of transfers, each with the racer running flat out.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use crate::harness::{copy, listing, source, target};

const ROUNDS: usize = 150;
const SECRET: &[u8] = b"host secret";

/// Stops the racer when the test body ends, also by a failed assertion (else the scope would
/// wait for the racer forever).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn tree_contains(root: &Path, needle: &[u8]) -> bool {
    listing(root).iter().any(|rel| {
        let path = root.join(rel);
        fs::symlink_metadata(&path).is_ok_and(|m| m.is_file())
            && fs::read(&path).is_ok_and(|data| data == needle)
    })
}

#[test]
fn a_source_directory_swapped_for_a_symlink_mid_walk_never_leaks_its_target() {
    let tmp = tempfile::tempdir().unwrap();
    let secret = tmp.path().join("secret");
    fs::create_dir(&secret).unwrap();
    fs::write(secret.join("key"), SECRET).unwrap();
    let src = tmp.path().join("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    for i in 0..20 {
        fs::write(src.join(format!("sub/f{i}")), b"ordinary").unwrap();
    }
    fs::write(src.join("sub/key"), b"ordinary").unwrap();
    let stop = AtomicBool::new(false);
    thread::scope(|scope| {
        scope.spawn(|| {
            let (sub, aside) = (src.join("sub"), src.join("aside"));
            while !stop.load(Ordering::Relaxed) {
                let _ = fs::rename(&sub, &aside);
                let _ = symlink(&secret, &sub);
                let _ = fs::remove_file(&sub);
                let _ = fs::rename(&aside, &sub);
            }
        });
        let _stop = StopOnDrop(&stop);
        for round in 0..ROUNDS {
            let out = tmp.path().join(format!("out{round}"));
            fs::create_dir(&out).unwrap();
            let (_sent, _got) = copy(&source(&src), &target(&out, "copy", false));
            assert!(
                !tree_contains(&out, SECRET),
                "round {round}: the secret was copied: {:?}",
                listing(&out)
            );
            fs::remove_dir_all(&out).unwrap();
        }
    });
}

#[test]
fn a_staged_directory_swapped_for_a_symlink_mid_write_never_writes_outside() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tmp.path().join("outside");
    fs::create_dir(&outside).unwrap();
    let src = tmp.path().join("src");
    for d in 0..10 {
        fs::create_dir_all(src.join(format!("d{d}"))).unwrap();
        for f in 0..10 {
            fs::write(src.join(format!("d{d}/f{f}")), b"payload").unwrap();
        }
    }
    let out = tmp.path().join("out");
    fs::create_dir(&out).unwrap();
    let stop = AtomicBool::new(false);
    thread::scope(|scope| {
        scope.spawn(|| {
            // Whatever is being staged in `out`, swap its subdirectories for links outside.
            while !stop.load(Ordering::Relaxed) {
                let Ok(items) = fs::read_dir(&out) else {
                    continue;
                };
                for item in items.flatten() {
                    let staged = item.path();
                    for d in 0..10 {
                        let sub = staged.join(format!("d{d}"));
                        let aside = staged.join(format!("aside{d}"));
                        if fs::rename(&sub, &aside).is_ok() {
                            let _ = symlink(&outside, &sub);
                        }
                    }
                }
            }
        });
        let _stop = StopOnDrop(&stop);
        for round in 0..ROUNDS {
            let _ = copy(&source(&src), &target(&out, &format!("copy{round}"), false));
            assert!(
                listing(&outside).is_empty(),
                "round {round}: written outside: {:?}",
                listing(&outside)
            );
        }
    });
}
