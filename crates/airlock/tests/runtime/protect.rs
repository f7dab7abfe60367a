//! Issue 9.9 (tier T3): files the host executes or trusts stay as they were, whatever the
//! sandbox does to them, and git inside still commits.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use super::harness::ok;
#[allow(unused_imports)]
use super::harness::Rt;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(["-c", "safe.directory=*"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git on the host");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Makes the project a git repository with one commit and no `.git/hooks` directory.
fn repository(rt: &Rt) {
    git(&rt.project, &["init", "-q"]);
    git(
        &rt.project,
        &["commit", "-q", "--allow-empty", "-m", "host"],
    );
    std::fs::remove_dir_all(rt.project.join(".git/hooks")).unwrap();
    rt.env
        .write(&rt.project.join(".airlock/config.toml"), "# kept\n");
    rt.hand_over(&rt.project);
}

const ATTACK: &str = r#"mv .git .git-old && echo moved-git
mkdir -p .git; echo '[core] hooksPath = /tmp' > .git/config && echo wrote-config
mkdir -p .git/hooks && echo evil > .git/hooks/pre-commit && echo wrote-hook
rm -rf .airlock 2>/dev/null; test -f .airlock/config.toml && echo airlock-kept
mv .airlock moved && echo moved-airlock
echo evil >> .airlock/config.toml && echo wrote-airlock
echo done"#;

both! {
    /// `mv .git .git-old; mkdir .git; echo evil > .git/config`, writing
    /// `.git/hooks/pre-commit` (in a repository without `.git/hooks`), `rm -rf .airlock` and
    /// `mv .airlock x` all fail, as the sandbox user and as in-sandbox root; the host finds
    /// `.git` and `.airlock` as they were; `git commit` inside still works.
    fn protected_paths_cannot_be_changed_renamed_or_removed(rt) {
        repository(&rt);
        let config_before = std::fs::read(rt.project.join(".git/config")).unwrap();
        for opts in [&[][..], rt.most_privileged()] {
            let run = rt.sh(opts, ATTACK);
            let out = &run.stdout;
            assert!(out.ends_with("done\n"), "{opts:?}: {run:?}");
            for bad in ["moved-git", "wrote-config", "wrote-hook", "moved-airlock", "wrote-airlock"] {
                assert!(!out.contains(bad), "{bad} with {opts:?}: {run:?}");
            }
            assert!(out.contains("airlock-kept"), "{opts:?}: {run:?}");
            assert!(!rt.project.join(".git-old").exists());
            assert!(!rt.project.join("moved").exists());
            assert_eq!(std::fs::read(rt.project.join(".git/config")).unwrap(), config_before);
            assert_eq!(std::fs::read_to_string(rt.project.join(".airlock/config.toml")).unwrap(), "# kept\n");
            let hooks = rt.project.join(".git/hooks");
            assert_eq!(std::fs::read_dir(&hooks).unwrap().count(), 0, "{opts:?}");
            assert_eq!(std::fs::metadata(&hooks).unwrap().uid(), rt.uid(), "the created .git/hooks belongs to the invoker");
        }
        let run = rt.sh(&[], "git -c user.name=s -c user.email=s@example.com commit -q --allow-empty -m inside && echo committed");
        assert_eq!(ok(&run), "committed\n", "{run:?}");
        assert_eq!(git(&rt.project, &["log", "-1", "--format=%s"]), "inside\n");
    }
}

both! {
    /// `[[unprotect]]` in the user config lifts `.git/config` for this project only: then
    /// `git config` inside works (and `.git/hooks` stays protected).
    fn unprotect_lifts_a_protected_path_for_one_project(rt) {
        repository(&rt);
        rt.env.write_user_config(&format!(
            "[[unprotect]]\nproject = \"{}\"\npaths = [\".git/config\"]\n",
            rt.project.display()
        ));
        rt.hand_over(rt.env.root());
        let run = rt.sh(&[], "git config airlock.test lifted && echo set; touch .git/hooks/x && echo hook; echo end");
        assert_eq!(ok(&run), "set\nend\n", "{run:?}");
        assert_eq!(git(&rt.project, &["config", "airlock.test"]), "lifted\n");
    }
}
