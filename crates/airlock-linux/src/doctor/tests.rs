//! Parsers with fixtures, check logic on injected layouts, and the real host probe.
use super::*;
use crate::cgroup::detect::Layout;

const SUBUID: &str = "# comment\nalice:100000:65536\n1001:200000:65536\nbob:300000:0\nmallory:1:2:3\n\nalice:500000:10\n";

#[test]
fn subuid_ranges_match_by_name_and_by_uid() {
    assert_eq!(
        subid_ranges(SUBUID, "alice", 1000),
        vec![
            SubIdRange {
                start: 100000,
                count: 65536
            },
            SubIdRange {
                start: 500000,
                count: 10
            }
        ]
    );
    assert_eq!(
        subid_ranges(SUBUID, "carol", 1001),
        vec![SubIdRange {
            start: 200000,
            count: 65536
        }]
    );
}

#[test]
fn subuid_zero_counts_and_malformed_lines_grant_nothing() {
    assert!(subid_ranges(SUBUID, "bob", 1002).is_empty());
    assert!(subid_ranges(SUBUID, "mallory", 1003).is_empty());
    assert!(subid_ranges("alice:x:65536\n", "alice", 1000).is_empty());
}

#[test]
fn user_name_comes_from_passwd_uid_field() {
    let passwd = "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/sh\n";
    assert_eq!(user_name_for(passwd, 1000).as_deref(), Some("alice"));
    assert_eq!(user_name_for(passwd, 0).as_deref(), Some("root"));
    assert_eq!(user_name_for(passwd, 7), None);
}

fn hybrid_layout() -> Layout {
    let mi = "31 30 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n33 30 0:29 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n34 30 0:30 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n35 30 0:31 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";
    Layout::from_texts(mi, "8:pids:/\n4:memory:/\n1:cpu:/\n0::/\n", |_| {
        Some(String::new())
    })
}

#[test]
fn hybrid_host_with_v1_controllers_is_not_a_warning() {
    let alice = Invoker {
        uid: 1000,
        name: "alice".into(),
    };
    let checks = cgroup_checks(&hybrid_layout(), &alice, |_| true);
    let v2 = checks.iter().find(|c| c.id == "cgroup_v2").unwrap();
    // Not a warning (v1 stands in), and not `ok` either: its line says the controllers are
    // missing there (regression: it was labelled `ok`).
    assert_eq!(
        v2.status,
        Status::Unused,
        "empty v2 is fine when v1 has everything: {v2:?}"
    );
    assert!(
        v2.detail.contains("v1 controllers are used instead"),
        "{v2:?}"
    );
    assert_eq!(
        checks.iter().find(|c| c.id == "cgroup_v1").unwrap().status,
        Status::Ok
    );
    assert_eq!(
        checks
            .iter()
            .find(|c| c.id == "cgroup_create")
            .unwrap()
            .status,
        Status::Ok
    );
}

/// A host with every controller in cgroup v2 and no v1 hierarchy: the v1 line says v1 is not
/// needed instead of `ok` beside "memory, pids, cpu not mounted as v1".
#[test]
fn v2_only_host_does_not_label_the_absent_v1_controllers_ok() {
    let mi = "31 30 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
    let layout = Layout::from_texts(mi, "0::/user.slice\n", |_| {
        Some("cpuset cpu io memory pids\n".to_owned())
    });
    let alice = Invoker {
        uid: 1000,
        name: "alice".into(),
    };
    let checks = cgroup_checks(&layout, &alice, |_| true);
    let v2 = checks.iter().find(|c| c.id == "cgroup_v2").unwrap();
    assert_eq!(v2.status, Status::Ok, "{v2:?}");
    let v1 = checks.iter().find(|c| c.id == "cgroup_v1").unwrap();
    assert_eq!(v1.status, Status::Unused, "{v1:?}");
    assert!(
        v1.detail.contains("v2 controllers are used instead"),
        "{v1:?}"
    );
}

/// The fix names what works: an imported image (earlier versions pointed to an import command
/// they did not have, then to a directory image only).
#[test]
fn read_only_system_files_fix_names_what_works_today() {
    let alice = Invoker {
        uid: 1000,
        name: "alice".into(),
    };
    let failure = crate::sys::probe::StepFailure {
        step: "mount(overlay)",
        errno: libc::EPERM,
    };
    let c = system_files_check(Err(failure), &alice, "system_files_writable", "t");
    let fix = c.fix.expect("a fix");
    assert!(fix.contains("airlock image import"), "{fix}");
    assert!(fix.contains("image = "), "{fix}");
}

#[test]
fn rootless_user_without_cgroup_access_gets_a_warning_with_a_fix() {
    let alice = Invoker {
        uid: 1000,
        name: "alice".into(),
    };
    let checks = cgroup_checks(&hybrid_layout(), &alice, |_| false);
    let create = checks.iter().find(|c| c.id == "cgroup_create").unwrap();
    assert_eq!(create.status, Status::Warning);
    assert!(!create.required);
    let fix = create.fix.as_deref().unwrap();
    assert!(
        fix.contains("chown alice /sys/fs/cgroup/memory/airlock"),
        "{fix}"
    );
}

#[test]
fn rootless_user_without_cgroups_is_told_how_systemd_delegates_them_and_what_still_holds() {
    let alice = Invoker {
        uid: 1000,
        name: "alice".into(),
    };
    let checks = cgroup_checks(&hybrid_layout(), &alice, |_| false);
    let create = checks.iter().find(|c| c.id == "cgroup_create").unwrap();
    let fix = create.fix.as_deref().unwrap();
    assert!(fix.contains("Delegate=yes"), "{fix}");
    assert!(fix.contains("user@.service.d"), "{fix}");
    assert!(fix.contains("systemd-run --user --scope"), "{fix}");
    assert!(create.detail.contains("RLIMIT_NPROC"), "{}", create.detail);
    assert!(create.detail.contains("tmpfs"), "{}", create.detail);
}

#[test]
fn slow_cgroup_joins_get_a_remount_fix_naming_the_cgroup2_mount() {
    let alice = Invoker {
        uid: 1000,
        name: "alice".into(),
    };
    // Controllers on v2: the join writes cgroup.procs, which waits without favordynmods.
    let mi = "31 30 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
    let v2 = Layout::from_texts(mi, "0::/user.slice\n", |_| {
        Some("cpuset cpu io memory pids\n".to_owned())
    });
    let checks = cgroup_checks(&v2, &alice, |_| true);
    let join = checks.iter().find(|c| c.id == "cgroup_fast_join").unwrap();
    assert_eq!(join.status, Status::Warning);
    assert_eq!(
        join.fix.as_deref(),
        Some("mount -o remount,favordynmods /sys/fs/cgroup")
    );
    let fast = Layout {
        favordynmods: true,
        ..v2
    };
    let checks = cgroup_checks(&fast, &alice, |_| true);
    assert_eq!(
        checks
            .iter()
            .find(|c| c.id == "cgroup_fast_join")
            .unwrap()
            .status,
        Status::Ok
    );
}

#[test]
fn joins_through_v1_tasks_files_are_fast_without_favordynmods() {
    let alice = Invoker {
        uid: 1000,
        name: "alice".into(),
    };
    let checks = cgroup_checks(&hybrid_layout(), &alice, |_| true);
    let join = checks.iter().find(|c| c.id == "cgroup_fast_join").unwrap();
    assert_eq!(join.status, Status::Ok, "{join:?}");
    assert!(join.detail.contains("tasks"), "{join:?}");
}

#[test]
fn missing_userns_fix_names_the_blocking_sysctl() {
    let read = |p: &str| (p == "/proc/sys/user/max_user_namespaces").then(|| "0\n".to_owned());
    assert_eq!(
        userns_fix(&read),
        "sysctl -w user.max_user_namespaces=15000"
    );
    let read =
        |p: &str| (p == "/proc/sys/kernel/unprivileged_userns_clone").then(|| "0".to_owned());
    assert_eq!(
        userns_fix(&read),
        "sysctl -w kernel.unprivileged_userns_clone=1"
    );
}

#[test]
fn probe_host_reports_every_area_with_fixes_for_failures() {
    let checks = probe_host();
    for id in [
        "user_namespaces",
        "overlay_in_userns",
        "seccomp",
        "cgroup_v2",
        "cgroup_v1",
        "cgroup_create",
        "cgroup_fast_join",
        "subordinate_ids",
    ] {
        assert!(
            checks.iter().any(|c| c.id == id),
            "missing check {id}: {checks:#?}"
        );
    }
    for c in checks.iter().filter(|c| c.status != Status::Ok) {
        assert!(
            c.fix.as_deref().is_some_and(|f| !f.is_empty()),
            "{c:?} needs a fix"
        );
    }
    let json = serde_json::to_value(&checks).unwrap();
    for c in json.as_array().unwrap() {
        assert!(
            ["ok", "missing", "warning", "unused"].contains(&c["status"].as_str().unwrap()),
            "{c}"
        );
    }
    // The sandbox itself cannot run on a host failing these, and this project's test
    // machines provide them; a failure here explains the runtime tests' failures.
    for id in ["user_namespaces", "overlay_in_userns", "seccomp"] {
        let c = checks.iter().find(|c| c.id == id).unwrap();
        assert_eq!(c.status, Status::Ok, "{c:?}");
    }
}

#[test]
fn doctor_proposes_a_subordinate_range_no_other_user_holds() {
    // T1: a fake /etc/subuid and /etc/subgid where 100000.. is taken by someone else.
    let files = |path: &str| match path {
        "/etc/subuid" => Some("alice:100000:65536\nbob:165536:65536\n".to_owned()),
        "/etc/subgid" => Some("alice:100000:65536\ncarol:262144:10\n".to_owned()),
        _ => None,
    };
    let dev = Invoker {
        uid: 1234,
        name: "dev".into(),
    };
    let check = check_subordinate_ids(&dev, &files);
    assert!(
        check
            .fix
            .as_deref()
            .unwrap_or("")
            .contains("--add-subuids 327680-393215 --add-subgids 327680-393215 dev"),
        "{check:?}"
    );
}
