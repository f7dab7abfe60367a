//! The sandbox's generated `/etc/passwd` and `/etc/group` (issue 12): root, the sandbox user
//! and nobody, followed by the image's own accounts (`_apt`, `daemon`, …) that packages and
//! their maintainer scripts look up.
//!
//! The image's files are hostile input (an imported archive, or a host file an unprivileged
//! invoker cannot vouch for). They are read without following a link at their last component
//! (every component above it was checked by `image_links` for non-host images), only when a
//! regular file of at most [`DB_CAP`] bytes, and each line is kept only when it parses as a
//! well-formed entry: a name of the usual shell-safe characters, numeric ids, no control
//! characters. An entry that would collide with a generated one — by name or by id, so never a
//! second uid 0 — is left out, and the password field is always `x` (no hash reaches the
//! sandbox's file, which any sandbox process may read).

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Read;
use std::path::Path;

/// Largest image `passwd`/`group` file merged; a larger one is left out whole.
pub const DB_CAP: u64 = 1024 * 1024;
/// Most image entries merged from one file.
pub const MAX_ENTRIES: usize = 10_000;
/// Longest name kept (`useradd`'s limit).
const MAX_NAME: usize = 32;
/// Longest free-text field (gecos, home, shell) kept.
const MAX_FIELD: usize = 1024;

/// A generated entry: name and id (uid for `passwd`, gid for `group`).
pub struct Account<'a> {
    pub name: &'a str,
    pub id: u32,
}

/// The image's `etc/NAME` beneath `root`, when it is a regular file of at most [`DB_CAP`] bytes
/// that reads as UTF-8, reached without following any link (neither `etc` nor the file may be
/// one: the image is not airlock's); `None` otherwise (nothing is merged then). Non-blocking,
/// so a FIFO never holds up the start.
pub fn read_image_db(root: &Path, name: &str) -> Option<String> {
    use rustix::fs::{open, openat, Mode, OFlags};
    let nofollow = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let etc = open(
        root.join("etc"),
        nofollow | OFlags::DIRECTORY,
        Mode::empty(),
    )
    .ok()?;
    let fd = openat(
        &etc,
        name,
        nofollow | OFlags::NONBLOCK | OFlags::NOCTTY,
        Mode::empty(),
    )
    .ok()?;
    let file = File::from(fd);
    let meta = file.metadata().ok()?;
    if !meta.file_type().is_file() || meta.len() > DB_CAP {
        return None;
    }
    // Room for the whole file and one byte more: read in one call, and a second finds the end
    // (an empty vector would grow from a 32-byte probe, one read per doubling).
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).ok()? + 1);
    file.take(DB_CAP + 1).read_to_end(&mut bytes).ok()?;
    if bytes.len() as u64 > DB_CAP {
        return None;
    }
    String::from_utf8(bytes).ok()
}

/// Whether `name` is a plain account name: `[A-Za-z0-9_][A-Za-z0-9_.-]*` with an optional
/// trailing `$` (machine accounts), at most [`MAX_NAME`] bytes.
fn valid_name(name: &str) -> bool {
    let body = name.strip_suffix('$').unwrap_or(name);
    let mut chars = body.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    first_ok
        && name.len() <= MAX_NAME
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// A free-text field: no control characters, bounded length.
fn valid_text(field: &str) -> bool {
    field.len() <= MAX_FIELD && !field.chars().any(char::is_control)
}

fn valid_id(field: &str) -> Option<u32> {
    if field.is_empty() || field.len() > 10 || !field.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // u32::MAX is the kernel's "no id" (-1): never a real account.
    field.parse::<u32>().ok().filter(|id| *id != u32::MAX)
}

/// Names and ids already taken by the generated entries, extended as image entries are kept.
struct Taken {
    names: BTreeSet<String>,
    ids: BTreeSet<u32>,
}

impl Taken {
    fn new(generated: &[Account<'_>]) -> Self {
        Taken {
            names: generated.iter().map(|a| a.name.to_owned()).collect(),
            ids: generated.iter().map(|a| a.id).collect(),
        }
    }

    /// Takes `name`/`id` when neither is taken yet.
    fn claim(&mut self, name: &str, id: u32) -> bool {
        if self.names.contains(name) || self.ids.contains(&id) {
            return false;
        }
        self.names.insert(name.to_owned());
        self.ids.insert(id);
        true
    }
}

/// Ids from here up are people's accounts, not system ones (Debian's `FIRST_UID`).
pub const FIRST_PERSON_ID: u32 = 1000;

/// The image's `passwd` lines that may join the generated ones (see the module docs), each
/// ending in a newline, password field `x`. With `system_only` (the host image: its people
/// are the host's, not the sandbox's business) only ids below [`FIRST_PERSON_ID`] join.
pub fn merge_passwd(generated: &[Account<'_>], image: &str, system_only: bool) -> String {
    let mut taken = Taken::new(generated);
    let mut out = String::new();
    for line in image.lines().take(MAX_ENTRIES) {
        let fields: Vec<&str> = line.split(':').collect();
        let [name, _password, uid, gid, gecos, home, shell] = fields[..] else {
            continue;
        };
        let (Some(uid), Some(gid)) = (valid_id(uid), valid_id(gid)) else {
            continue;
        };
        if !valid_name(name) || ![gecos, home, shell].iter().all(|f| valid_text(f)) {
            continue;
        }
        if system_only && uid >= FIRST_PERSON_ID {
            continue;
        }
        if taken.claim(name, uid) {
            out.push_str(&format!("{name}:x:{uid}:{gid}:{gecos}:{home}:{shell}\n"));
        }
    }
    out
}

/// The image's `group` lines that may join the generated ones; members that are not plain
/// names are dropped (and with `system_only`, as for [`merge_passwd`], so are groups and
/// members that are not system accounts).
pub fn merge_group(
    generated: &[Account<'_>],
    image: &str,
    system_only: bool,
    system_users: &BTreeSet<String>,
) -> String {
    let mut taken = Taken::new(generated);
    let mut out = String::new();
    for line in image.lines().take(MAX_ENTRIES) {
        let fields: Vec<&str> = line.split(':').collect();
        let [name, _password, gid, members] = fields[..] else {
            continue;
        };
        let Some(gid) = valid_id(gid) else {
            continue;
        };
        if !valid_name(name) || !valid_text(members) || (system_only && gid >= FIRST_PERSON_ID) {
            continue;
        }
        let members: Vec<&str> = members
            .split(',')
            .filter(|m| valid_name(m) && (!system_only || system_users.contains(*m)))
            .collect();
        if taken.claim(name, gid) {
            out.push_str(&format!("{name}:x:{gid}:{}\n", members.join(",")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const GENERATED: &[Account<'static>] = &[
        Account {
            name: "root",
            id: 0,
        },
        Account {
            name: "dev",
            id: 1000,
        },
        Account {
            name: "nobody",
            id: 65534,
        },
    ];

    #[test]
    fn image_accounts_join_and_collisions_or_bad_lines_are_left_out() {
        let image = "root:x:0:0:root:/root:/bin/bash\n\
                     _apt:x:42:65534::/nonexistent:/usr/sbin/nologin\n\
                     toor:$6$h:0:0::/root:/bin/sh\n\
                     dev:x:7:7::/home/dev:/bin/sh\n\
                     other:x:1000:1000::/:/bin/sh\n\
                     bad name:x:8:8::/:/bin/sh\n\
                     ctl:x:9:9:a\u{1b}[2J:/:/bin/sh\n\
                     neg:x:-1:9::/:/bin/sh\n\
                     big:x:4294967295:9::/:/bin/sh\n\
                     short:x:7\n\
                     dup:x:42:1::/:/bin/sh\n\
                     daemon:secret:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n";
        assert_eq!(
            merge_passwd(GENERATED, image, false),
            "_apt:x:42:65534::/nonexistent:/usr/sbin/nologin\n\
             daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
        );
    }

    #[test]
    fn group_members_that_are_not_names_are_dropped() {
        let image = "root:x:0:\nadm:x:4:_apt,bad name,,syslog\nnogroup:x:65534:\nweird:x:5\n";
        assert_eq!(
            merge_group(GENERATED, image, false, &BTreeSet::new()),
            "adm:x:4:_apt,syslog\n"
        );
    }

    #[test]
    fn the_host_image_keeps_only_system_accounts() {
        let passwd = "_apt:x:42:65534::/nonexistent:/usr/sbin/nologin\n\
                      alice:x:1001:1001:Alice:/home/alice:/bin/bash\n";
        assert_eq!(
            merge_passwd(GENERATED, passwd, true),
            "_apt:x:42:65534::/nonexistent:/usr/sbin/nologin\n"
        );
        let group = "adm:x:4:_apt,alice\nalice:x:1001:\n";
        let system: BTreeSet<String> = ["_apt".to_owned()].into();
        assert_eq!(
            merge_group(GENERATED, group, true, &system),
            "adm:x:4:_apt\n"
        );
    }

    #[test]
    fn a_link_a_fifo_or_an_oversized_file_is_never_read() {
        let image = tempfile::tempdir().unwrap();
        let root = image.path();
        let etc = root.join("etc");
        std::fs::create_dir(&etc).unwrap();
        std::fs::write(etc.join("real"), "a:x:1:1::/:/bin/sh\n").unwrap();
        assert_eq!(
            read_image_db(root, "real").as_deref(),
            Some("a:x:1:1::/:/bin/sh\n")
        );
        // Read whole whatever its size below the cap (the buffer is sized from the file).
        let long = "u:x:7:7::/:/bin/sh\n".repeat(3000);
        std::fs::write(etc.join("long"), &long).unwrap();
        assert_eq!(read_image_db(root, "long").as_deref(), Some(long.as_str()));
        std::os::unix::fs::symlink(etc.join("real"), etc.join("link")).unwrap();
        assert_eq!(read_image_db(root, "link"), None);
        nix::unistd::mkfifo(&etc.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert_eq!(read_image_db(root, "fifo"), None);
        std::fs::write(etc.join("big"), vec![b'a'; DB_CAP as usize + 1]).unwrap();
        assert_eq!(read_image_db(root, "big"), None);
        // An image whose `etc` is a link (here to a directory outside it) is not read through.
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::create_dir(elsewhere.path().join("etc")).unwrap();
        std::fs::write(elsewhere.path().join("etc/passwd"), "b:x:2:2::/:/bin/sh\n").unwrap();
        let linked = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path().join("etc"), linked.path().join("etc"))
            .unwrap();
        assert_eq!(read_image_db(linked.path(), "passwd"), None);
    }
}
