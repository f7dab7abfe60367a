//! Issue 4 items 9, 10 and L2/L4: names outside the documented charset, a missing terminal and
//! unsafe state roots are refused before any side effect.

use std::os::unix::fs::PermissionsExt;

use super::Project;

#[test]
fn sandbox_names_that_escape_or_pose_as_options_are_usage_errors() {
    let p = Project::new();
    let long = "a".repeat(300);
    for bad in ["../x", "-rf", "a\nb", long.as_str(), "UPPER", ""] {
        for verb in ["up", "status", "down", "exec"] {
            let mut args = vec![verb, "--name", bad];
            match verb {
                "up" => args.push("--no-attach"),
                "exec" => args.extend(["--", "true"]),
                _ => {}
            }
            let run = p.run(&args);
            assert_eq!(run.code, Some(2), "{verb} --name {bad:?}: {}", run.stderr);
        }
    }
    assert!(!p.state_root().exists(), "a refused name created state");
}

#[test]
fn up_without_a_terminal_fails_first_and_names_no_attach() {
    let p = Project::new();
    let before = p.env.snapshot();
    let run = p.run(&["up"]);
    run.assert_code(2);
    assert!(run.stderr.contains("--no-attach"), "{}", run.stderr);
    assert_eq!(before.diff(&p.env.snapshot()), Vec::<String>::new());
}

#[test]
fn a_typo_in_the_config_fails_before_anything_is_created() {
    let p = Project::new();
    p.env.write_user_config("memroy_mb = 512\n");
    let before = p.env.snapshot();
    p.run(&["up", "--no-attach"]).assert_code(2);
    assert_eq!(before.diff(&p.env.snapshot()), Vec::<String>::new());
}

#[test]
fn a_world_writable_state_root_is_refused() {
    let p = Project::new();
    let state = p.env.state_home();
    std::fs::create_dir_all(&state).unwrap();
    let root = state.join("airlock");
    std::fs::create_dir(&root).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
    let run = p.run(&["up", "--no-attach"]);
    assert_ne!(run.code, Some(0));
    assert!(run.stderr.contains("chmod go-w"), "{}", run.stderr);
    assert!(!root.join("lifecycle").exists());
}

#[test]
fn two_projects_get_different_stable_names() {
    let p = Project::new();
    let other = p.env.git_project("other");
    let a = p.run(&["status", "--json"]).json()["name"].clone();
    let b = p.env.run_in(&other, &["status", "--json"]).json()["name"].clone();
    assert_ne!(a, b);
    assert!(a.as_str().unwrap().starts_with("proj-"), "{a}");
    assert_eq!(a, p.run(&["status", "--json"]).json()["name"]);
}

/// Runs `down --name NAME` when dropped.
struct Named<'a>(&'a Project, &'a str);

impl Drop for Named<'_> {
    fn drop(&mut self) {
        let _ = self.0.run(&["down", "--name", self.1]);
    }
}

#[test]
fn the_longest_name_works_although_its_socket_path_exceeds_sockaddr_un() {
    let p = Project::new();
    let name = "n".repeat(63);
    let socket = p
        .runtime_root()
        .join("sandboxes")
        .join(&name)
        .join("control.sock");
    assert!(socket.as_os_str().len() > 108, "the test needs a long path");
    let _down = Named(&p, &name);
    p.run(&["up", "--no-attach", "--name", &name])
        .assert_code(0);
    let run = p.run(&["exec", "--name", &name, "--", "echo", "reached"]);
    run.assert_code(0);
    assert_eq!(run.stdout.trim(), "reached");
    p.run(&["exec", "-d", "--name", &name, "--", "true"])
        .assert_code(0);
    p.run(&["down", "--name", &name]).assert_code(0);
    assert!(!socket.exists());
}
