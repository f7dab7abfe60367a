//! C3: one test per rejected mount shape, plus what a valid mount becomes.

use crate::common::{find, World};

fn mount_toml(name: &str, path: &str) -> String {
    format!("[[mount]]\nname = \"{name}\"\npath = \"{path}\"\nread_only = true\n")
}

/// Loads a user config with one mount at `path` and returns the error on `mount[0].path`.
fn rejected_path(w: &World, path: &str) -> String {
    let diags = w.user_errors(&mount_toml("m", path));
    find(&diags, "mount[0].path").message.clone()
}

#[test]
fn valid_mount_maps_to_the_same_absolute_path() {
    let w = World::new();
    let data = w.dir("srv/data");
    w.write_user(&format!(
        "[[mount]]\nname = \"data\"\npath = \"{}\"\nread_only = false\n",
        data.display()
    ));
    let e = w.ok(None);
    assert_eq!(e.mounts.len(), 1);
    assert_eq!(e.mounts[0].host_path, data);
    assert_eq!(e.mounts[0].sandbox_path, data);
    assert!(!e.mounts[0].read_only);
}

#[test]
fn mount_paths_are_normalized() {
    let w = World::new();
    let data = w.dir("srv/data");
    let spelled = format!("{}//data/", data.parent().unwrap().display());
    w.write_user(&mount_toml("data", &spelled));
    assert_eq!(w.ok(None).mounts[0].host_path.as_os_str(), data.as_os_str());
}

#[test]
fn mount_inside_home_outside_credential_roots_is_accepted() {
    let w = World::new();
    let p = w.home().join("datasets");
    std::fs::create_dir_all(&p).unwrap();
    w.write_user(&mount_toml("ds", p.to_str().unwrap()));
    assert_eq!(w.ok(None).mounts[0].host_path, p);
}

#[test]
fn relative_mount_path_is_rejected() {
    let w = World::new();
    assert!(rejected_path(&w, "srv/data").contains("not an absolute path"));
}

#[test]
fn non_existent_mount_path_is_rejected() {
    let w = World::new();
    let missing = w.base.join("nope");
    assert!(rejected_path(&w, missing.to_str().unwrap()).contains("does not exist"));
}

#[test]
fn mount_path_with_symlink_component_is_rejected() {
    let w = World::new();
    let real = w.dir("real/inner");
    std::os::unix::fs::symlink(real.parent().unwrap(), w.base.join("link")).unwrap();
    let through_link = w.base.join("link/inner");
    let msg = rejected_path(&w, through_link.to_str().unwrap());
    assert!(msg.contains("symbolic link"), "{msg}");
}

#[test]
fn mount_path_that_is_itself_a_symlink_is_rejected() {
    let w = World::new();
    let real = w.dir("real2");
    std::os::unix::fs::symlink(&real, w.base.join("last-link")).unwrap();
    let msg = rejected_path(&w, w.base.join("last-link").to_str().unwrap());
    assert!(msg.contains("symbolic link"), "{msg}");
}

#[test]
fn mount_path_with_dot_dot_is_rejected() {
    let w = World::new();
    w.dir("a/b");
    let sneaky = format!("{}/a/b/../b", w.base.display());
    assert!(rejected_path(&w, &sneaky).contains(".."));
}

#[test]
fn root_directory_mount_is_rejected() {
    let w = World::new();
    assert!(rejected_path(&w, "/").contains("whole host"));
}

#[test]
fn home_directory_mount_is_rejected() {
    let w = World::new();
    let msg = rejected_path(&w, w.home().to_str().unwrap());
    assert!(msg.contains("home directory itself"), "{msg}");
}

#[test]
fn mount_containing_home_is_rejected() {
    let w = World::new();
    let msg = rejected_path(&w, w.base.join("home").to_str().unwrap());
    assert!(msg.contains("contains the home directory"), "{msg}");
}

#[test]
fn credential_root_mounts_are_rejected_every_one() {
    let roots = [
        ".ssh",
        ".gnupg",
        ".aws",
        ".config/gh",
        ".docker",
        ".kube",
        ".password-store",
        ".local/share/keyrings",
        ".mozilla",
        ".config/google-chrome",
        ".config/chromium",
        ".config/BraveSoftware",
    ];
    for rel in roots {
        let w = World::new();
        let p = w.home().join(rel);
        std::fs::create_dir_all(&p).unwrap();
        let msg = rejected_path(&w, p.to_str().unwrap());
        assert!(
            msg.contains(" is ") && msg.contains("credentials"),
            "{rel}: {msg}"
        );
    }
}

#[test]
fn mount_inside_a_credential_root_is_rejected() {
    let w = World::new();
    let p = w.home().join(".ssh/keys");
    std::fs::create_dir_all(&p).unwrap();
    assert!(rejected_path(&w, p.to_str().unwrap()).contains("lies inside"));
}

#[test]
fn mount_containing_a_credential_root_is_rejected() {
    let w = World::new();
    let p = w.home().join(".config");
    std::fs::create_dir_all(&p).unwrap();
    let msg = rejected_path(&w, p.to_str().unwrap());
    assert!(msg.contains("contains"), "{msg}");
}

#[test]
fn netrc_path_is_a_credential_root() {
    let w = World::new();
    // Usually a file (and mounts must be directories); the rule holds for the path itself.
    std::fs::create_dir_all(w.home().join(".netrc")).unwrap();
    let msg = rejected_path(&w, w.home().join(".netrc").to_str().unwrap());
    assert!(msg.contains("credentials"), "{msg}");
}

#[test]
fn airlock_own_roots_cannot_be_mounted() {
    let w = World::new();
    for own in [&w.roots.config, &w.roots.state, &w.roots.data] {
        std::fs::create_dir_all(own).unwrap();
    }
    for own in [w.roots.state.clone(), w.roots.data.join("secrets")] {
        std::fs::create_dir_all(&own).unwrap();
        let msg = rejected_path(&w, own.to_str().unwrap());
        assert!(msg.contains("airlock"), "{}: {msg}", own.display());
    }
    // The config root holds the user config itself, so it is checked with a config present.
    let msg = rejected_path(&w, w.roots.config.to_str().unwrap());
    assert!(msg.contains("airlock"), "{msg}");
}

#[test]
fn overlapping_mounts_are_rejected() {
    let w = World::new();
    let outer = w.dir("srv");
    let inner = w.dir("srv/data");
    let diags = w.user_errors(&format!(
        "{}{}",
        mount_toml("outer", outer.to_str().unwrap()),
        mount_toml("inner", inner.to_str().unwrap())
    ));
    let d = find(&diags, "mount[1].path");
    assert!(
        d.message.contains("overlaps mount \"outer\""),
        "{}",
        d.message
    );
    assert_eq!(d.line, 7);
}

#[test]
fn mount_overlapping_the_workspace_is_rejected_both_ways() {
    let w = World::new();
    let project = w.project("p", None);
    let inside = project.root.join("sub");
    std::fs::create_dir_all(&inside).unwrap();
    for path in [inside, project.root.parent().unwrap().to_owned()] {
        w.write_user(&mount_toml("m", path.to_str().unwrap()));
        let diags = w.errors(Some(&project));
        let d = find(&diags, "mount[0].path");
        assert!(
            d.message.contains("overlaps the workspace"),
            "{}",
            d.message
        );
    }
}

#[test]
fn mount_without_read_only_is_rejected() {
    let w = World::new();
    let data = w.dir("srv/data");
    let diags = w.user_errors(&format!(
        "[[mount]]\nname = \"data\"\npath = \"{}\"\n",
        data.display()
    ));
    let d = find(&diags, "mount[0].read_only");
    assert!(d.message.contains("missing required key"), "{}", d.message);
    assert_eq!(d.line, 1);
}

#[test]
fn more_than_sixteen_mounts_are_rejected() {
    let w = World::new();
    let mut text = String::new();
    for i in 0..17 {
        let p = w.dir(&format!("srv/m{i}"));
        text.push_str(&mount_toml(&format!("m{i}"), p.to_str().unwrap()));
    }
    let diags = w.user_errors(&text);
    assert_eq!(diags.len(), 1, "{diags:?}");
    assert!(find(&diags, "mount[16]").message.contains("at most 16"));
}

#[test]
fn duplicate_mount_names_are_rejected() {
    let w = World::new();
    let a = w.dir("srv/a");
    let b = w.dir("srv/b");
    let diags = w.user_errors(&format!(
        "{}{}",
        mount_toml("data", a.to_str().unwrap()),
        mount_toml("data", b.to_str().unwrap())
    ));
    assert!(find(&diags, "mount[1].name").message.contains("duplicate"));
}

#[test]
fn mount_names_outside_the_charset_are_rejected() {
    let w = World::new();
    let a = w.dir("srv/a");
    for bad in ["Data", "-x", "", "a.b", "x/y", &"a".repeat(33)] {
        let diags = w.user_errors(&mount_toml(bad, a.to_str().unwrap()));
        assert!(
            find(&diags, "mount[0].name")
                .message
                .contains("invalid mount name"),
            "{bad:?}"
        );
    }
}

#[test]
fn mount_given_as_inline_table_array_is_validated_the_same() {
    let w = World::new();
    let diags = w.user_errors("mount = [{ name = \"x\", path = \"rel\", read_only = true }]\n");
    assert!(find(&diags, "mount[0].path").message.contains("absolute"));
}

#[test]
fn workspace_at_home_or_root_is_refused() {
    let w = World::new();
    let home_project =
        airlock_config::Project::at(w.home().to_owned(), airlock_config::ProjectKind::Git);
    let diags = w.errors(Some(&home_project));
    assert!(find(&diags, "workspace").message.contains("home directory"));
    let root_project = airlock_config::Project::at("/".into(), airlock_config::ProjectKind::Git);
    let diags = w.errors(Some(&root_project));
    assert!(find(&diags, "workspace").message.contains("whole host"));
}

#[test]
fn mounts_after_one_that_fails_to_parse_keep_their_own_index_and_line() {
    let w = World::new();
    let text = "[[mount]]\n\
                name = \"first\"\n\
                path = \"/srv\"\n\
                \n\
                [[mount]]\n\
                name = \"BAD\"\n\
                path = \"/\"\n\
                read_only = true\n";
    let diags = w.user_errors(text);
    let missing = find(&diags, "mount[0].read_only");
    assert_eq!(missing.line, 1, "{missing}");
    let name = find(&diags, "mount[1].name");
    assert_eq!(name.line, 6, "{name}");
    let path = find(&diags, "mount[1].path");
    assert_eq!(path.line, 7, "{path}");
    assert_eq!(diags.len(), 3, "{diags:?}");
}

/// `/dev`, `/proc` and `/sys` are the sandbox's own: a host directory there would be hidden
/// by them (or cannot be id-mapped), so it is refused while the config is read, not when the
/// command starts (seen: a project under `/dev/shm` failed with "chdir failed").
#[test]
fn a_mount_inside_dev_proc_or_sys_is_rejected() {
    let w = World::new();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let msg = rejected_path(&w, shm.path().to_str().unwrap());
    assert!(msg.contains("lies inside /dev"), "{msg}");
    assert!(msg.contains("sandbox's own"), "{msg}");
    let msg = rejected_path(&w, "/sys/kernel");
    assert!(msg.contains("inside /sys"), "{msg}");
}

#[test]
fn a_project_inside_dev_shm_cannot_be_a_workspace() {
    use airlock_config::project::{Project, ProjectKind};
    let w = World::new();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    std::fs::create_dir_all(shm.path().join(".airlock")).unwrap();
    let project = Project::at(shm.path().to_path_buf(), ProjectKind::Airlock);
    let diags = w.errors(Some(&project));
    let msg = &find(&diags, "workspace").message;
    assert!(msg.contains("cannot be a workspace"), "{msg}");
    assert!(msg.contains("lies inside /dev"), "{msg}");
}
