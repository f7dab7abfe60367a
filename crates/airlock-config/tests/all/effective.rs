//! The effective configuration: defaults, origins, mappings, agents, provisioning.

use std::collections::BTreeMap;
use std::path::Path;

use airlock_config::effective::{Image, Phase, StepOwner};
use airlock_config::policy::RuleOrigin;
use airlock_config::raw::{Layout, Preset, WorkspaceMode};
use airlock_config::{Origin, Overrides, COMMAND_LINE};

use crate::common::{find, World};

#[test]
fn absent_files_give_documented_defaults() {
    let w = World::new();
    let e = w.ok(None);
    assert!(!e.files.user.present);
    assert_eq!(e.image.value, Image::Host);
    assert_eq!(
        (e.memory_mb.value, e.memory_mb.origin),
        (8192, Origin::Default)
    );
    assert_eq!(e.pids_max.value, 4096);
    assert_eq!(e.cpus.value, None);
    assert_eq!(e.layout.value, Layout::Plain);
    assert_eq!(e.detach_key.value.bytes, vec![0x1d]);
    assert_eq!(e.network.preset.value, Preset::Dev);
    assert_eq!(e.agent.value, None);
    assert!(e.workspaces.is_empty() && e.mounts.is_empty() && e.agents.is_empty());
    assert_eq!(e.provisioning.len(), 1);
    assert_eq!(e.provisioning[0].phase, Phase::Base);
    assert_eq!(e.provisioning[0].owner, StepOwner::Airlock);
}

#[test]
fn precedence_is_default_user_project_flag() {
    let w = World::new();
    w.write_user("memory_mb = 1024\npids_max = 100\ncpus = 2.5\n");
    // A project lowering a limit needs no trust (raising does: see `untrusted.rs`).
    let project = w.project("p", Some("memory_mb = 768\n"));
    let e = w.ok(Some(&project));
    assert_eq!(
        (e.memory_mb.value, e.memory_mb.origin),
        (768, Origin::Project)
    );
    assert_eq!((e.pids_max.value, e.pids_max.origin), (100, Origin::User));
    assert_eq!(e.cpus.value, Some(2.5));
    let e = w
        .load_with(
            Some(&project),
            Overrides {
                memory_mb: Some(512),
            },
            &|_, _| false,
        )
        .unwrap();
    assert_eq!((e.memory_mb.value, e.memory_mb.origin), (512, Origin::Flag));
}

#[test]
fn invalid_memory_flag_is_reported_with_the_config_errors() {
    let w = World::new();
    w.write_user("cpus = 0\n");
    let err = w
        .load_with(
            None,
            Overrides {
                memory_mb: Some(12),
            },
            &|_, _| false,
        )
        .unwrap_err();
    let d = find(&err.0, "--memory-mb");
    assert_eq!(d.file, Path::new(COMMAND_LINE));
    find(&err.0, "cpus");
}

#[test]
fn workspace_and_home_keep_their_host_paths_inside() {
    let w = World::new();
    let project = w.project("my-app", Some("workspace_mode = \"clone\"\n"));
    let e = w.ok(Some(&project));
    assert_eq!(e.workspaces.len(), 1);
    let ws = &e.workspaces[0];
    assert_eq!(ws.name, "my-app");
    assert_eq!(ws.host_path, project.root);
    assert_eq!(ws.sandbox_path, project.root);
    assert_eq!(
        (ws.mode.value, ws.mode.origin),
        (WorkspaceMode::Clone, Origin::Project)
    );
    assert_eq!(e.home.host_path, w.home());
    assert_eq!(e.home.sandbox_path, w.home());
}

#[test]
fn selected_agent_of_a_trusted_project_adds_its_api_hosts_whatever_the_preset() {
    // Untrusted, the same project adds nothing: see `untrusted.rs` (C6).
    let w = World::new();
    w.write_user("[network]\npreset = \"none\"\n[agents.claude]\ncredentials = true\n");
    let project = w.project("p", Some("agent = \"claude\"\n"));
    let e = w
        .load_with(Some(&project), Overrides::default(), &|_, _| true)
        .unwrap();
    assert_eq!(e.agent.value.as_deref(), Some("claude"));
    let claude = &e.agents[0];
    assert!(claude.selected);
    assert_eq!(claude.spec.command, "claude");
    assert_eq!(
        (claude.credentials.value, claude.credentials.origin),
        (true, Origin::User)
    );
    assert!(!claude.persist_state.value);
    let d = e.network.policy().decide("api.anthropic.com", 443);
    assert!(d.allowed);
    assert_eq!(d.rule.unwrap().origin, RuleOrigin::Agent("claude".into()));
    assert!(!e.network.policy().decide("github.com", 443).allowed);
}

#[test]
fn agent_args_from_config_replace_the_catalogue_defaults() {
    let w = World::new();
    w.write_user("agent = \"codex\"\n[agents.codex]\nargs = [\"--model\", \"o3\"]\n");
    let e = w.ok(None);
    assert_eq!(e.agents[0].args.value, ["--model", "o3"]);
    assert_eq!(e.agents[0].args.origin, Origin::User);
}

#[test]
fn provisioning_steps_follow_p1_order_with_owners() {
    let w = World::new();
    let user = w.write_user("packages = [\"git\"]\n");
    std::fs::write(w.roots.provision_script_path(), "#!/bin/sh\n").unwrap();
    let project = w.project("p", Some("packages = [\"make\", \"git\"]\n"));
    std::fs::write(&project.provision_path, "#!/bin/sh\n").unwrap();
    let e = w.ok(Some(&project));
    let phases: Vec<Phase> = e.provisioning.iter().map(|s| s.phase).collect();
    assert_eq!(
        phases,
        [
            Phase::Base,
            Phase::Packages,
            Phase::Packages,
            Phase::UserScript,
            Phase::ProjectScript
        ]
    );
    assert_eq!(e.provisioning[1].owner, StepOwner::File(user));
    assert_eq!(
        e.provisioning[2].owner,
        StepOwner::File(project.config_path.clone())
    );
    assert_eq!(
        e.provisioning[4].owner,
        StepOwner::File(project.provision_path.clone())
    );
    let pkgs: Vec<(&str, Origin)> = e
        .packages
        .iter()
        .map(|p| (p.value.as_str(), p.origin))
        .collect();
    assert_eq!(pkgs, [("git", Origin::User), ("make", Origin::Project)]);
}

#[test]
fn scripts_are_listed_only_when_they_exist() {
    let w = World::new();
    let project = w.project("p", None);
    let e = w.ok(Some(&project));
    assert!(e
        .provisioning
        .iter()
        .all(|s| !matches!(s.phase, Phase::UserScript | Phase::ProjectScript)));
}

#[test]
fn user_config_may_name_a_directory_image_but_a_project_may_not() {
    let w = World::new();
    let rootfs = w.dir("images/rootfs");
    w.write_user(&format!("image = \"{}\"\n", rootfs.display()));
    assert_eq!(w.ok(None).image.value, Image::Directory(rootfs.clone()));
    let project = w.project("p", Some(&format!("image = \"{}\"\n", rootfs.display())));
    let diags = w.errors(Some(&project));
    assert!(find(&diags, "image").message.contains("user config"));
}

#[test]
fn host_ports_and_extra_ca_come_from_the_user_config() {
    let w = World::new();
    let ca = w.base.join("corp.pem");
    std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\n").unwrap();
    w.write_user(&format!(
        "[network]\nextra_ca = [\"{}\"]\n[[network.host_port]]\nport = 5432\n\
         [[network.host_port]]\nport = 8080\nguest_port = 80\n",
        ca.display()
    ));
    let e = w.ok(None);
    assert_eq!(e.network.extra_ca, [ca]);
    let ports: Vec<(u16, u16)> = e
        .network
        .host_ports
        .iter()
        .map(|p| (p.port, p.guest_port))
        .collect();
    assert_eq!(ports, [(5432, 5432), (8080, 80)]);
}

#[test]
fn host_port_onto_the_proxy_port_or_a_used_guest_port_is_rejected() {
    let w = World::new();
    let diags = w.user_errors(
        "[[network.host_port]]\nport = 3128\n[[network.host_port]]\nport = 1\nguest_port = 3128\n\
         [[network.host_port]]\nport = 9000\n[[network.host_port]]\nport = 9001\nguest_port = 9000\n",
    );
    find(&diags, "network.host_port[0]");
    find(&diags, "network.host_port[1]");
    find(&diags, "network.host_port[3]");
    assert_eq!(diags.len(), 3);
}

#[test]
fn effective_serializes_every_value_with_its_origin() {
    let w = World::new();
    w.write_user("memory_mb = 1024\n");
    let e = w.ok(None);
    let json = serde_json::to_value(&e).unwrap();
    assert_eq!(
        json["memory_mb"],
        serde_json::json!({"value": 1024, "origin": "user"})
    );
    assert_eq!(json["pids_max"]["origin"], "default");
    assert_eq!(json["network"]["preset"]["value"], "dev");
}

/// Every path under `dir` with its size, for "nothing changed" comparisons.
fn snapshot(dir: &Path) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            out.insert(entry.path().display().to_string(), meta.len());
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    out
}

#[test]
fn loading_creates_nothing_anywhere() {
    let w = World::new();
    w.write_user("agent = \"claude\"\n");
    let project = w.project("p", Some("[network]\nallow = [\"a.example.com\"]\n"));
    let before = snapshot(&w.base);
    w.ok(Some(&project));
    let _ = w.load_with(Some(&project), Overrides { memory_mb: Some(1) }, &|_, _| {
        true
    });
    assert_eq!(snapshot(&w.base), before);
}
