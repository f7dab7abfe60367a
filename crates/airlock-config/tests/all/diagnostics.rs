//! C1: strict files; every independent error reported together with file, key and line.

use crate::common::{find, World};

#[test]
fn misspelled_key_and_wrong_type_in_different_tables_are_both_reported_with_lines() {
    let w = World::new();
    let project = w.project(
        "p",
        Some("agent = \"claude\"\nmemroy_mb = 1024\n\n[network]\npreset = 5\n"),
    );
    let diags = w.errors(Some(&project));
    assert_eq!(diags.len(), 2, "{diags:?}");
    let typo = find(&diags, "memroy_mb");
    assert_eq!((typo.line, typo.column), (2, 1));
    assert_eq!(typo.file, project.config_path);
    assert!(
        typo.message.contains("did you mean `memory_mb`"),
        "{}",
        typo.message
    );
    let wrong = find(&diags, "network.preset");
    assert_eq!(wrong.line, 5);
    assert!(wrong.message.contains("invalid type"), "{}", wrong.message);
}

#[test]
fn errors_of_both_files_and_semantic_errors_are_reported_in_one_run() {
    let w = World::new();
    let user = w.write_user("memory_mb = 100\ncolour = true\n");
    let project = w.project(
        "p",
        Some("pids_max = \"many\"\n[network]\nallow = [\"ok.example.com\", \"bad..host\"]\n"),
    );
    let diags = w.errors(Some(&project));
    let keys: Vec<(&str, u32)> = diags.iter().map(|d| (d.key.as_str(), d.line)).collect();
    assert_eq!(diags.len(), 4, "{keys:?}");
    assert_eq!(find(&diags, "memory_mb").file, user);
    assert!(find(&diags, "memory_mb").message.contains("at least 256"));
    assert_eq!(find(&diags, "colour").line, 2);
    assert_eq!(find(&diags, "pids_max").file, project.config_path);
    let bad = find(&diags, "network.allow[1]");
    assert_eq!(bad.line, 3);
}

#[test]
fn several_errors_inside_one_table_are_all_reported() {
    let w = World::new();
    let diags = w.user_errors(
        "[network]\npreset = \"closed\"\nallow = [\"a.com\", 7]\nalow = []\n[network.hosts]\ndb = \"not-an-ip\"\n",
    );
    assert_eq!(diags.len(), 4, "{diags:?}");
    assert_eq!(find(&diags, "network.preset").line, 2);
    assert_eq!(find(&diags, "network.allow[1]").line, 3);
    assert_eq!(find(&diags, "network.alow").line, 4);
    assert_eq!(find(&diags, "network.hosts.db").line, 6);
}

#[test]
fn toml_syntax_error_reports_its_own_line() {
    let w = World::new();
    let diags = w.user_errors("agent = \"claude\"\n\nmemory_mb = = 3\n");
    assert_eq!(diags.len(), 1);
    assert_eq!(diags[0].line, 3);
    assert!(
        diags[0].message.contains("invalid TOML"),
        "{}",
        diags[0].message
    );
}

#[test]
fn duplicate_keys_are_errors() {
    let w = World::new();
    let diags = w.user_errors("memory_mb = 1024\nmemory_mb = 2048\n");
    assert_eq!(diags.len(), 1);
    assert_eq!(diags[0].line, 2);
    assert!(
        diags[0].message.contains("duplicate"),
        "{}",
        diags[0].message
    );
}

#[test]
fn syntax_error_in_one_file_does_not_hide_errors_of_the_other() {
    let w = World::new();
    w.write_user("[network\n");
    let project = w.project("p", Some("cpus = 0\n"));
    let diags = w.errors(Some(&project));
    assert_eq!(diags.len(), 2, "{diags:?}");
    assert!(diags.iter().any(|d| d.key == "cpus"));
}

#[test]
fn display_names_file_line_column_and_key_one_error_per_line() {
    let w = World::new();
    let path = w.write_user("layout = \"grid\"\n");
    let err = w.load(None).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("{}:1:10: layout: ", path.display())),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1);
}

#[test]
fn project_config_cannot_declare_user_only_settings() {
    let cases = [
        (
            "[[mount]]\nname = \"x\"\npath = \"/srv\"\nread_only = true\n",
            "mount",
            1,
        ),
        (
            "[network]\nextra_ca = [\"/etc/ca.pem\"]\n",
            "network.extra_ca",
            2,
        ),
        (
            "[[network.host_port]]\nport = 5432\n",
            "network.host_port",
            1,
        ),
        (
            "[agents.claude]\ncredentials = true\n",
            "agents.claude.credentials",
            2,
        ),
        (
            "[agents.claude]\npersist_state = true\n",
            "agents.claude.persist_state",
            2,
        ),
        ("[secrets]\nGH = \"x\"\n", "secrets", 1),
        ("secret = \"x\"\n", "secret", 1),
    ];
    for (text, key, line) in cases {
        let w = World::new();
        let project = w.project("p", Some(text));
        let diags = w.errors(Some(&project));
        let d = find(&diags, key);
        assert!(
            d.message.contains("user config") && d.message.contains("airlock config"),
            "{key}: {}",
            d.message
        );
        assert_eq!(d.line, line, "{key}");
        assert_eq!(diags.len(), 1, "{key}: {diags:?}");
    }
}

#[test]
fn user_config_secrets_table_points_to_the_secret_command() {
    let w = World::new();
    let diags = w.user_errors("[secrets]\nGH = \"x\"\n");
    assert!(find(&diags, "secrets")
        .message
        .contains("airlock secret set"));
}

#[test]
fn unknown_agent_names_are_rejected_in_agent_and_agents_tables() {
    let w = World::new();
    let diags = w.user_errors("agent = \"clod\"\n[agents.cursor]\nargs = []\n");
    assert!(find(&diags, "agent").message.contains("claude"));
    assert_eq!(find(&diags, "agents.cursor").line, 2);
}

#[test]
fn out_of_range_values_are_errors() {
    let w = World::new();
    let diags = w.user_errors(
        "memory_mb = 255\npids_max = 15\ncpus = -1.0\ndetach_key = \"alt-q\"\npackages = [\"-oAPT::x\"]\nimage = \"../rootfs\"\n",
    );
    for key in [
        "memory_mb",
        "pids_max",
        "cpus",
        "detach_key",
        "packages[0]",
        "image",
    ] {
        find(&diags, key);
    }
    assert_eq!(diags.len(), 6);
}

#[test]
fn negative_memory_is_a_type_error_not_a_wrap_around() {
    let w = World::new();
    let diags = w.user_errors("memory_mb = -1\n");
    assert_eq!(find(&diags, "memory_mb").line, 1);
}

#[test]
fn dotted_names_are_quoted_in_key_paths() {
    let w = World::new();
    let diags = w.user_errors("[network.hosts]\n\"db.local\" = \"nope\"\n");
    assert_eq!(find(&diags, "network.hosts.\"db.local\"").line, 2);
}
