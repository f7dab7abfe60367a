//! Agents defined in the user config (A1: the catalogue is extendable from the user config).

use crate::common::{find, World};

const DEFINITION: &str = r#"agent = "mycli"

[agents.mycli]
command = "mycli"
package = "npm:@example/mycli"
api_hosts = ["api.mycli.example"]
config_dir = ".mycli"
config_sync = ["prompts/", "settings.json"]
state_paths = [".mycli/state/"]
api_key_env = ["MYCLI_API_KEY"]
"#;

#[test]
fn a_user_defined_agent_is_selected_with_its_hosts_and_sync_allowlist() {
    let w = World::new();
    w.write_user(DEFINITION);
    let eff = w.ok(None);
    let agent = eff.agents.iter().find(|a| a.selected).unwrap();
    assert_eq!(agent.spec.name, "mycli");
    assert_eq!(agent.spec.command, "mycli");
    assert_eq!(
        agent.spec.package,
        Some(airlock_config::agents::Package::Npm("@example/mycli"))
    );
    assert_eq!(agent.spec.config_sync, ["prompts/", "settings.json"]);
    let hosts: Vec<String> = eff
        .network
        .agent_hosts
        .iter()
        .map(|r| r.pattern.to_string())
        .collect();
    assert_eq!(hosts, ["api.mycli.example"]);
    // A reload yields the very same (interned) entry.
    let again = w.ok(None);
    let same = again.agents.iter().find(|a| a.selected).unwrap();
    assert!(std::ptr::eq(agent.spec, same.spec));
}

#[test]
fn a_project_config_cannot_define_an_agent() {
    let w = World::new();
    let project = w.project(
        "p",
        Some("agent = \"evil\"\n[agents.evil]\ncommand = \"sh\"\nconfig_dir = \".ssh\"\nconfig_sync = [\"id_ed25519\"]\n"),
    );
    let errors = w.errors(Some(&project));
    for key in [
        "agents.evil.command",
        "agents.evil.config_dir",
        "agents.evil.config_sync",
    ] {
        let d = find(&errors, key);
        assert!(d.message.contains("user config"), "{}", d.message);
    }
    find(&errors, "agent");
}

#[test]
fn bad_agent_definitions_are_refused_naming_each_key() {
    let w = World::new();
    w.write_user(
        r#"[agents."../x"]
command = "x"

[agents.claude]
command = "other"

[agents.bad]
command = "/bin/sh -c"
package = "curl:http://x"
api_hosts = ["not a host"]
config_dir = "../.ssh"
config_sync = ["/etc/passwd", "a/../../b"]
state_paths = [""]
api_key_env = ["lower"]

[agents.nocommand]
package = "npm:x"
"#,
    );
    let errors = w.errors(None);
    for key in [
        "agents.claude.command",
        "agents.bad.command",
        "agents.bad.package",
        "agents.bad.api_hosts[0]",
        "agents.bad.config_dir",
        "agents.bad.config_sync[0]",
        "agents.bad.config_sync[1]",
        "agents.bad.state_paths[0]",
        "agents.bad.api_key_env[0]",
        "agents.nocommand.command",
    ] {
        find(&errors, key);
    }
    assert!(
        errors
            .iter()
            .any(|d| d.message.contains("invalid agent name")),
        "{errors:?}"
    );
}

#[test]
fn config_sync_of_a_user_defined_agent_still_refuses_credentials() {
    let w = World::new();
    w.write_user(DEFINITION);
    let eff = w.ok(None);
    let spec = eff.agents.iter().find(|a| a.selected).unwrap().spec;
    let dir = w.home().join(".mycli");
    std::fs::create_dir_all(dir.join("prompts")).unwrap();
    std::fs::write(dir.join("prompts/a.md"), "fine\n").unwrap();
    std::fs::write(
        dir.join("settings.json"),
        format!("{{\"key\": \"xo{}-1234567890-abcdefghij\"}}\n", "xb"),
    )
    .unwrap();
    let set = airlock_config::agent_sync::collect(w.home(), spec);
    assert_eq!(set.files.len(), 1);
    assert_eq!(set.skipped.len(), 1);
    assert!(set.skipped[0].message().contains("settings.json:1:"));
}
