//! Deleting a project's markers must not widen its workspace (issue 9 finding 4, C7).

use std::path::Path;
use std::process::{Command, Stdio};

use super::harness::ok;
#[allow(unused_imports)]
use super::harness::Rt;
use crate::common::Run;

fn run_in(rt: &Rt, dir: &Path, args: &[&str]) -> Run {
    let out = rt
        .command(dir, args)
        .stdin(Stdio::null())
        .output()
        .expect("spawn airlock");
    Run::from(out)
}

both! {
    /// `rm -rf .airlock .git` in a project inside a parent git repository (done here from the
    /// host side) makes discovery find the parent: `run` refuses, naming both paths and the
    /// fix, and the parent is never mapped; `airlock init` in the project restores it.
    fn deleting_project_markers_never_maps_the_parent_repository(rt) {
        let parent = rt.env.dir("src");
        let st = Command::new("git").args(["init", "-q"]).current_dir(&parent).status();
        assert!(st.expect("run git init").success());
        let proj = parent.join("proj");
        std::fs::create_dir_all(proj.join(".airlock")).unwrap();
        std::fs::create_dir_all(proj.join(".git")).unwrap();
        rt.env.write(&parent.join("parent-only"), "PARENT-CONTENT\n");
        rt.hand_over(rt.env.root());
        let probe = format!("cat {}/parent-only 2>/dev/null; echo ran", parent.display());

        // First use: the project root is remembered.
        let first = run_in(&rt, &proj, &["run", "--", "sh", "-c", &probe]);
        assert_eq!(ok(&first), "ran\n", "the parent is not mapped while proj is the project");

        std::fs::remove_dir_all(proj.join(".airlock")).unwrap();
        std::fs::remove_dir_all(proj.join(".git")).unwrap();
        let again = run_in(&rt, &proj, &["run", "--", "sh", "-c", &probe]);
        again.assert_code(2);
        assert!(!again.stdout.contains("PARENT-CONTENT"), "{again:?}");
        assert!(!again.stdout.contains("ran"), "nothing ran: {again:?}");
        for named in [&proj, &parent] {
            assert!(again.stderr.contains(&*named.to_string_lossy()), "{again:?}");
        }
        assert!(again.stderr.contains("airlock init"), "{again:?}");
        // plan refuses the same way (read-only commands never map the ancestor either).
        run_in(&rt, &proj, &["plan"]).assert_code(2);

        // The fix the error names: `airlock init` in proj makes it the project again.
        ok(&run_in(&rt, &proj, &["init"]));
        assert!(proj.join(".airlock/config.toml").is_file());
        let fixed = run_in(&rt, &proj, &["run", "--", "sh", "-c", &probe]);
        assert_eq!(ok(&fixed), "ran\n");
    }
}
