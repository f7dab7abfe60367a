//! T4: the lifecycle as an ordinary user (rootless: user namespace, no delegated cgroups).

use crate::common::{skip_without_test_user, test_user, Run};

use super::Project;

/// Runs `down` as the test user when dropped, so a failed assertion leaks no sandbox.
struct AsTestUser<'a>(&'a Project);

impl AsTestUser<'_> {
    fn run(&self, args: &[&str]) -> Run {
        self.0
            .env
            .run_as_test_user_in(&self.0.dir, args)
            .expect("test user")
    }
}

impl Drop for AsTestUser<'_> {
    fn drop(&mut self) {
        let _ = self.0.env.run_as_test_user_in(&self.0.dir, &["down"]);
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
