//! P2, P4: `[env]`, `[[tool]]` and `[cache]` — user config only, validated before anything runs.

use airlock_config::toolchain::CacheScope;
use airlock_config::Origin;

use crate::common::{find, World};

#[test]
fn env_vars_and_path_prepends_reach_the_effective_config() {
    let w = World::new();
    w.write_user(
        "[env]\npath_prepend = [\"/opt/tools/bin\", \"/opt/x//bin/\"]\n\
         [env.vars]\nRUST_LOG = \"debug\"\nEMPTY = \"\"\n",
    );
    let e = w.ok(None);
    assert_eq!(e.env.origin, Origin::User);
    assert_eq!(
        e.env.value.vars,
        [
            ("EMPTY".to_owned(), String::new()),
            ("RUST_LOG".to_owned(), "debug".to_owned())
        ]
    );
    let prepend: Vec<&str> = e
        .env
        .value
        .path_prepend
        .iter()
        .map(|p| p.to_str().unwrap())
        .collect();
    assert_eq!(prepend, ["/opt/tools/bin", "/opt/x/bin"]);
}

#[test]
fn env_cannot_replace_path_proxy_ca_or_cache_variables() {
    let w = World::new();
    let diags = w.user_errors(
        "[env.vars]\nPATH = \"/evil\"\nHTTPS_PROXY = \"http://x\"\nSSL_CERT_FILE = \"/x\"\n\
         CARGO_HOME = \"/x\"\n\"bad-name\" = \"v\"\n",
    );
    assert!(find(&diags, "env.vars.PATH")
        .message
        .contains("path_prepend"));
    for key in ["HTTPS_PROXY", "SSL_CERT_FILE", "CARGO_HOME"] {
        let d = find(&diags, &format!("env.vars.{key}"));
        assert!(d.message.contains("set by airlock"), "{d:?}");
    }
    assert!(find(&diags, "env.vars.bad-name")
        .message
        .contains("invalid variable name"));
}

#[test]
fn relative_or_colon_path_prepends_are_refused_with_their_index() {
    let w = World::new();
    let diags = w.user_errors("[env]\npath_prepend = [\"/ok\", \"bin\", \"/a:/b\"]\n");
    assert!(find(&diags, "env.path_prepend[1]")
        .message
        .contains("absolute"));
    assert!(find(&diags, "env.path_prepend[2]").message.contains(':'));
}

#[test]
fn project_config_cannot_set_env_tools_or_cache() {
    let w = World::new();
    let p = w.project(
        "p",
        Some("[env.vars]\nX = \"1\"\n[[tool]]\nname = \"rust\"\n[cache]\nshared = true\n"),
    );
    let diags = w.load(Some(&p)).unwrap_err().0;
    for key in ["env", "tool", "cache"] {
        assert!(
            find(&diags, key).message.contains("user config"),
            "{key}: {diags:?}"
        );
    }
}

#[test]
fn rust_tool_maps_rustup_and_cargo_bin_but_not_cargo_home() {
    let w = World::new();
    for d in [".rustup", ".cargo/bin"] {
        std::fs::create_dir_all(w.home().join(d)).unwrap();
    }
    std::fs::write(w.home().join(".cargo/credentials.toml"), "token").unwrap();
    w.write_user("[[tool]]\nname = \"rust\"\n");
    let e = w.ok(None);
    assert_eq!(e.tools.len(), 1);
    let t = &e.tools[0];
    assert_eq!(
        t.dirs,
        [w.home().join(".rustup"), w.home().join(".cargo/bin")]
    );
    assert!(t.dirs.iter().all(|d| *d != w.home().join(".cargo")));
    assert_eq!(
        t.env,
        [(
            "RUSTUP_HOME".to_owned(),
            w.home().join(".rustup").display().to_string()
        )]
    );
    assert_eq!(t.path, [w.home().join(".cargo/bin")]);
}

#[test]
fn missing_tool_directory_is_refused_with_what_to_do() {
    let w = World::new();
    let diags = w.user_errors("[[tool]]\nname = \"pyenv\"\n");
    let m = &find(&diags, "tool[0].name").message;
    assert!(m.contains(".pyenv") && m.contains("does not exist"), "{m}");
    assert!(m.contains("remove this entry"), "{m}");
}

#[test]
fn symlinked_tool_directory_is_refused() {
    let w = World::new();
    let real = w.dir("elsewhere/bin");
    std::fs::create_dir_all(w.home().join(".local")).unwrap();
    std::os::unix::fs::symlink(&real, w.home().join(".local/bin")).unwrap();
    let diags = w.user_errors("[[tool]]\nname = \"local-bin\"\n");
    assert!(find(&diags, "tool[0].name")
        .message
        .contains("symbolic link"));
}

#[test]
fn unknown_or_duplicate_tools_are_refused() {
    let w = World::new();
    std::fs::create_dir_all(w.home().join(".local/bin")).unwrap();
    let diags = w.user_errors(
        "[[tool]]\nname = \"local-bin\"\n[[tool]]\nname = \"local-bin\"\n[[tool]]\nname = \"ruby\"\n",
    );
    assert!(find(&diags, "tool[1].name").message.contains("twice"));
    assert!(find(&diags, "tool[2].name")
        .message
        .contains("unknown tool \"ruby\""));
}

#[test]
fn cache_is_per_project_unless_the_user_shares_it() {
    let w = World::new();
    let e = w.ok(None);
    assert_eq!(e.cache.value, CacheScope::Project);
    assert_eq!(e.cache.origin, Origin::Default);
    w.write_user("[cache]\nshared = true\n");
    assert_eq!(w.ok(None).cache.value, CacheScope::Shared);
}
