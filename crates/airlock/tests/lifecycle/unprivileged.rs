//! T4: the lifecycle as an ordinary user (rootless: user namespace, no delegated cgroups).

use crate::common::{skip_without_test_user, test_user, Run};

use super::Project;

/// Runs airlock as the test user (the world's drop runs `down` as that user too).
struct AsTestUser<'a>(&'a Project);

impl AsTestUser<'_> {
    fn run(&self, args: &[&str]) -> Run {
        self.0
            .env
            .run_as_test_user_in(&self.0.dir, args)
            .expect("test user")
    }
}

#[test]
fn an_unprivileged_user_can_up_exec_status_and_down() {
    let Some((uid, _)) = test_user() else {
        return skip_without_test_user();
    };
    let p = Project::new();
    let user = AsTestUser(&p);
    user.run(&["up", "--no-attach"]).assert_code(0);
    user.run(&["status"]).assert_code(0);
    // Inside, the sandbox user, which for an unprivileged invoker has the invoker's uid; its
    // files belong to the invoking user on the host (I5).
    let id = user.run(&["exec", "--", "id", "-u"]);
    id.assert_code(0);
    assert_eq!(id.stdout.trim(), uid.to_string(), "{}", id.stderr);
    user.run(&["exec", "--", "touch", "made-inside"])
        .assert_code(0);
    let owner = std::os::unix::fs::MetadataExt::uid(
        &std::fs::metadata(p.dir.join("made-inside")).expect("file made inside"),
    );
    assert_eq!(owner, uid);
    user.run(&["down"]).assert_code(0);
    let status = user.run(&["status", "--json"]);
    status.assert_code(1);
    assert_eq!(status.json()["health"], "absent");
}

#[test]
fn up_without_delegated_cgroups_warns_that_memory_is_unbounded_and_status_keeps_saying_so() {
    if test_user().is_none() {
        return skip_without_test_user();
    }
    let p = Project::new();
    let user = AsTestUser(&p);
    // `run` says on stderr when this user may not create cgroups; `up` must say it too, not
    // only in the keeper's log where nobody looks.
    let probe = user.run(&["run", "--", "true"]);
    probe.assert_code(0);
    if !probe.stderr.contains("without cgroup limits") {
        eprintln!("skipped: cgroups are delegated to the test user here, so no limit is skipped");
        return;
    }
    let up = user.run(&["up", "--no-attach"]);
    up.assert_code(0);
    assert!(
        up.stderr.contains("warning: running without cgroup limits"),
        "{}",
        up.stderr
    );
    let status = user.run(&["status"]);
    status.assert_code(0);
    assert!(
        status.stdout.contains("running without cgroup limits"),
        "{}",
        status.stdout
    );
    let json = user.run(&["status", "--json"]).json();
    let warned = json["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .any(|w| {
            w.as_str()
                .is_some_and(|w| w.contains("without cgroup limits"))
        });
    assert!(warned, "{json}");
}
