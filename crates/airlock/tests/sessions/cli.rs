//! Sessions without a terminal: L4 refusals, `up --no-attach` ensuring the default session,
//! `sessions`, `sessions kill`, `status`.

use super::{session, sessions};
use crate::lifecycle::Project;

#[test]
fn attach_without_a_terminal_fails_before_any_side_effect_naming_no_attach() {
    let p = Project::new();
    let before = p.env.snapshot();
    let run = p.run(&["attach"]);
    run.assert_code(2);
    assert!(run.stderr.contains("--no-attach"), "{}", run.stderr);
    assert_eq!(before.diff(&p.env.snapshot()), Vec::<String>::new());
    let run = p.run(&["up"]);
    run.assert_code(2);
    assert!(run.stderr.contains("--no-attach"), "{}", run.stderr);
    assert_eq!(before.diff(&p.env.snapshot()), Vec::<String>::new());
}

#[test]
fn a_detach_key_typing_needs_is_a_config_error_before_up_starts_anything() {
    let p = Project::new();
    p.env.write_user_config("detach_key = \"ctrl-m\"\n");
    let before = p.env.snapshot();
    let run = p.run(&["up", "--no-attach"]);
    run.assert_code(2);
    assert!(
        run.stderr.contains("detach_key") && run.stderr.contains("Enter"),
        "{}",
        run.stderr
    );
    assert_eq!(before.diff(&p.env.snapshot()), Vec::<String>::new());
    assert_eq!(p.status()["health"], "absent");
}

#[test]
fn bad_session_names_are_usage_errors_before_anything_is_touched() {
    let p = Project::new();
    let before = p.env.snapshot();
    for args in [
        &["sessions", "kill", "-x"][..],
        &["sessions", "kill", "a/b"],
    ] {
        let run = p.run(args);
        run.assert_code(2);
    }
    assert_eq!(before.diff(&p.env.snapshot()), Vec::<String>::new());
}

#[test]
fn up_no_attach_ensures_the_default_session_and_sessions_kill_removes_it() {
    let p = Project::new();
    let up = p.run(&["up", "--no-attach", "--json"]);
    up.assert_code(0);
    let doc = up.json();
    assert_eq!(
        (&doc["session"]["name"], &doc["session"]["created"]),
        (&"main".into(), &true.into()),
        "{doc}"
    );
    let main = session(&p, "main").expect("up --no-attach made the default session");
    assert_eq!(
        (&main["state"], &main["clients"]),
        (&"running".into(), &0.into())
    );
    assert_eq!(main["command"][1], "-l", "a login shell: {main}");

    // A second up keeps it: same process.
    let again = p.run(&["up", "--no-attach"]);
    again.assert_code(0);
    assert!(
        again.stdout.contains("session main already running"),
        "{}",
        again.stdout
    );
    assert_eq!(session(&p, "main").unwrap()["pid"], main["pid"]);

    let status = p.status();
    assert_eq!(status["sessions"][0]["name"], "main", "{status}");
    let human = p.run(&["status"]);
    assert!(human.stdout.contains("Sessions") && human.stdout.contains("main  running"));

    let kill = p.run(&["sessions", "kill", "main", "--json"]);
    kill.assert_code(0);
    assert_ne!(
        kill.json()["removed"]["state"],
        "running",
        "{}",
        kill.stdout
    );
    assert_eq!(sessions(&p), Vec::<serde_json::Value>::new());
    let missing = p.run(&["sessions", "kill", "main"]);
    missing.assert_code(1);
    assert!(
        missing.stderr.contains("session.not_found"),
        "{}",
        missing.stderr
    );
}

#[test]
fn sessions_of_a_sandbox_that_is_not_up_say_so() {
    let p = Project::new();
    let run = p.run(&["sessions"]);
    run.assert_code(1);
    assert!(run.stderr.contains("not ready"), "{}", run.stderr);
}

#[test]
fn an_unprivileged_user_gets_a_default_session_running_as_themselves() {
    let Some((uid, _)) = crate::common::test_user() else {
        return crate::common::skip_without_test_user();
    };
    let p = Project::new();
    let run = |args: &[&str]| p.env.run_as_test_user_in(&p.dir, args).expect("test user");
    run(&["up", "--no-attach"]).assert_code(0);
    let list = run(&["sessions", "--json"]);
    list.assert_code(0);
    let main = list.json()["sessions"][0].clone();
    assert_eq!(
        (&main["name"], &main["state"]),
        (&"main".into(), &"running".into()),
        "{main}"
    );
    // The session's shell is the sandbox user, which for an unprivileged invoker is its uid.
    let pid = main["pid"].as_u64().unwrap();
    let owner = run(&["exec", "--", "stat", "-c", "%u", &format!("/proc/{pid}")]);
    owner.assert_code(0);
    assert_eq!(owner.stdout.trim(), uid.to_string(), "{}", owner.stderr);
    run(&["sessions", "kill", "main"]).assert_code(0);
}
