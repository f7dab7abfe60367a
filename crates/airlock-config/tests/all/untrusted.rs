//! C6 beyond the network: an untrusted project config may only lower the limits the user
//! config and defaults give, and cannot widen the network through the agent it selects
//! (issue 9 findings 2 and 3).

use airlock_config::effective::Ignored;
use airlock_config::{Effective, Origin, Overrides};

use crate::common::World;

fn ignored<'e>(e: &'e Effective, key: &str) -> &'e Ignored {
    e.ignored
        .iter()
        .find(|i| i.key == key)
        .unwrap_or_else(|| panic!("{key} is not listed as ignored: {:?}", e.ignored))
}

fn trusted(w: &World, project: &airlock_config::Project) -> Effective {
    w.load_with(Some(project), Overrides::default(), &|_, _| true)
        .unwrap()
}

#[test]
fn untrusted_project_cannot_raise_memory_mb_above_the_user_config() {
    let w = World::new();
    w.write_user("memory_mb = 2048\n");
    let project = w.project("p", Some("memory_mb = 1048576\n"));
    let e = w.ok(Some(&project));
    assert_eq!(
        (e.memory_mb.value, e.memory_mb.origin),
        (2048, Origin::User)
    );
    let i = ignored(&e, "memory_mb");
    assert_eq!(i.value, "1048576");
    assert!(i.reason.contains("untrusted") && i.reason.contains("airlock trust"));
    assert!(i.reason.contains("2048"), "{}", i.reason);
}

#[test]
fn untrusted_project_cannot_raise_memory_mb_above_the_default() {
    let w = World::new();
    let project = w.project("p", Some("memory_mb = 9000\n"));
    let e = w.ok(Some(&project));
    assert_eq!(
        (e.memory_mb.value, e.memory_mb.origin),
        (8192, Origin::Default)
    );
    ignored(&e, "memory_mb");
}

#[test]
fn untrusted_project_cannot_raise_pids_max() {
    let w = World::new();
    let project = w.project("p", Some("pids_max = 4194304\n"));
    let e = w.ok(Some(&project));
    assert_eq!(
        (e.pids_max.value, e.pids_max.origin),
        (4096, Origin::Default)
    );
    assert_eq!(ignored(&e, "pids_max").value, "4194304");
}

#[test]
fn untrusted_project_cannot_raise_cpus_but_may_limit_unlimited_cpus() {
    let w = World::new();
    w.write_user("cpus = 2\n");
    let project = w.project("p", Some("cpus = 64\n"));
    let e = w.ok(Some(&project));
    assert_eq!((e.cpus.value, e.cpus.origin), (Some(2.0), Origin::User));
    assert_eq!(ignored(&e, "cpus").value, "64");

    let w = World::new();
    let project = w.project("p", Some("cpus = 1.5\n"));
    let e = w.ok(Some(&project));
    assert_eq!((e.cpus.value, e.cpus.origin), (Some(1.5), Origin::Project));
    assert!(e.ignored.is_empty(), "{:?}", e.ignored);
}

#[test]
fn untrusted_project_may_lower_every_limit() {
    let w = World::new();
    let project = w.project("p", Some("memory_mb = 512\npids_max = 64\ncpus = 1\n"));
    let e = w.ok(Some(&project));
    assert_eq!(
        (e.memory_mb.value, e.memory_mb.origin),
        (512, Origin::Project)
    );
    assert_eq!((e.pids_max.value, e.pids_max.origin), (64, Origin::Project));
    assert_eq!((e.cpus.value, e.cpus.origin), (Some(1.0), Origin::Project));
    assert!(e.ignored.is_empty());
}

#[test]
fn trusted_project_may_raise_every_limit() {
    let w = World::new();
    w.write_user("memory_mb = 1024\npids_max = 100\ncpus = 1\n");
    let project = w.project("p", Some("memory_mb = 4096\npids_max = 200\ncpus = 4\n"));
    let e = trusted(&w, &project);
    assert_eq!(
        (e.memory_mb.value, e.memory_mb.origin),
        (4096, Origin::Project)
    );
    assert_eq!(
        (e.pids_max.value, e.pids_max.origin),
        (200, Origin::Project)
    );
    assert_eq!((e.cpus.value, e.cpus.origin), (Some(4.0), Origin::Project));
    assert!(e.ignored.is_empty());
}

const USER_NONE: &str = "[network]\npreset = \"none\"\n";

#[test]
fn untrusted_project_agent_cannot_add_its_api_hosts_under_user_preset_none() {
    for agent in ["claude", "copilot"] {
        let w = World::new();
        w.write_user(USER_NONE);
        let project = w.project("p", Some(&format!("agent = \"{agent}\"\n")));
        let e = w.ok(Some(&project));
        assert_eq!(e.agent.value.as_deref(), Some(agent));
        assert!(
            e.network.agent_hosts.is_empty(),
            "{:?}",
            e.network.agent_hosts
        );
        let spec = airlock_config::agents::find(agent).unwrap();
        let listed = e
            .network
            .ignored
            .iter()
            .filter(|i| i.key == "agent")
            .count();
        assert_eq!(listed, spec.api_hosts.len(), "{:?}", e.network.ignored);
        let policy = e.network.policy();
        for host in [
            "api.anthropic.com",
            "api.githubcopilot.com",
            "x.y.githubcopilot.com",
        ] {
            assert!(!policy.decide(host, 443).allowed, "{agent}: {host}");
        }
    }
}

#[test]
fn trusted_project_agent_adds_its_api_hosts() {
    let w = World::new();
    w.write_user(USER_NONE);
    let project = w.project("p", Some("agent = \"claude\"\n"));
    let e = trusted(&w, &project);
    assert!(e.network.ignored.is_empty(), "{:?}", e.network.ignored);
    assert!(e.network.policy().decide("api.anthropic.com", 443).allowed);
}

#[test]
fn agent_chosen_by_the_user_config_adds_its_api_hosts_whatever_the_preset() {
    let w = World::new();
    w.write_user(&format!("agent = \"claude\"\n{USER_NONE}"));
    let project = w.project("p", Some("memory_mb = 512\n"));
    let e = w.ok(Some(&project));
    assert!(e.network.policy().decide("api.anthropic.com", 443).allowed);
    assert!(e.network.ignored.is_empty());
}

#[test]
fn untrusted_project_agent_keeps_hosts_the_user_config_already_allows() {
    let w = World::new();
    w.write_user("[network]\npreset = \"none\"\nallow = [\"api.anthropic.com\"]\n");
    let project = w.project("p", Some("agent = \"claude\"\n"));
    let e = w.ok(Some(&project));
    let kept: Vec<String> = e
        .network
        .agent_hosts
        .iter()
        .map(|r| r.pattern.to_string())
        .collect();
    assert_eq!(kept, ["api.anthropic.com"]);
    let policy = e.network.policy();
    assert!(policy.decide("api.anthropic.com", 443).allowed);
    assert!(!policy.decide("claude.ai", 443).allowed);
}
