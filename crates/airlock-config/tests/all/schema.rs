//! C2: the schema names every key the parser accepts; templates load cleanly.

use std::collections::BTreeSet;

use airlock_config::schema::json_schema;
use airlock_config::templates::{project_template, user_template};
use serde_json::Value;

use crate::common::World;

/// Every property name reachable in the schema, as dotted paths (`[]` for array items).
fn keys(schema: &Value, defs: &Value, path: &str, out: &mut BTreeSet<String>) {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let name = r.trim_start_matches("#/definitions/");
        return keys(&defs[name], defs, path, out);
    }
    for combo in ["anyOf", "allOf", "oneOf"] {
        for s in schema
            .get(combo)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            keys(s, defs, path, out);
        }
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            let p = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            out.insert(p.clone());
            keys(v, defs, &p, out);
        }
    }
    if let Some(items) = schema.get("items") {
        keys(items, defs, &format!("{path}[]"), out);
    }
    if let Some(add) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        keys(add, defs, &format!("{path}.*"), out);
    }
}

#[test]
fn schema_names_every_key_of_both_files() {
    let schema = json_schema();
    let mut found = BTreeSet::new();
    keys(&schema, &schema["definitions"], "", &mut found);
    let expected = [
        "image",
        "agent",
        "memory_mb",
        "cpus",
        "pids_max",
        "packages",
        "layout",
        "detach_key",
        "workspace_mode",
        "mount",
        "mount[].name",
        "mount[].path",
        "mount[].read_only",
        "network",
        "network.preset",
        "network.allow",
        "network.deny",
        "network.extra_ca",
        "network.hosts",
        "network.host_port",
        "network.host_port[].port",
        "network.host_port[].guest_port",
        "agents",
        "agents.*.args",
        "agents.*.sync_config",
        "agents.*.credentials",
        "agents.*.persist_state",
        "protect",
        "unprotect",
        "unprotect[].project",
        "unprotect[].paths",
        "env",
        "env.vars",
        "env.path_prepend",
        "tool",
        "tool[].name",
        "cache",
        "cache.shared",
        "ports",
        "ports[].host",
        "ports[].guest",
        "agents.*.command",
        "agents.*.package",
        "agents.*.api_hosts",
        "agents.*.config_dir",
        "agents.*.config_sync",
        "agents.*.state_paths",
        "agents.*.api_key_env",
        "backend",
        "vm",
        "vm.accel",
        "vm.kernel",
        "vm.qemu",
        "vm.memory_overhead_mb",
    ];
    let expected: BTreeSet<String> = expected.iter().map(|s| s.to_string()).collect();
    assert_eq!(found, expected);
}

#[test]
fn schema_is_strict_and_marks_user_only_keys() {
    let schema = json_schema();
    assert_eq!(schema["additionalProperties"], Value::Bool(false));
    assert_eq!(
        schema["definitions"]["RawMount"]["additionalProperties"],
        Value::Bool(false)
    );
    let required = schema["definitions"]["RawMount"]["required"]
        .as_array()
        .unwrap();
    assert!(required.contains(&Value::from("read_only")));
    let text = schema.to_string();
    for key in [
        "mount",
        "extra_ca",
        "host_port",
        "credentials",
        "persist_state",
        "protect",
        "unprotect",
        "command",
        "package",
        "config_dir",
        "config_sync",
        "state_paths",
        "api_key_env",
    ] {
        let desc = find_description(&schema, key).unwrap_or_default();
        assert!(desc.contains("User config only"), "{key}: {desc}");
    }
    assert!(
        text.contains("\"minimum\":256"),
        "memory_mb minimum is in the schema"
    );
    assert_eq!(schema["properties"]["mount"]["maxItems"], Value::from(16));
}

fn find_description(v: &Value, key: &str) -> Option<String> {
    match v {
        Value::Object(map) => {
            if let Some(d) = map
                .get("properties")
                .and_then(|p| p.get(key))
                .and_then(|p| p.get("description"))
                .and_then(Value::as_str)
            {
                return Some(d.to_owned());
            }
            map.values().find_map(|x| find_description(x, key))
        }
        Value::Array(items) => items.iter().find_map(|x| find_description(x, key)),
        _ => None,
    }
}

#[test]
fn user_template_loads_without_errors_and_points_at_the_schema() {
    let w = World::new();
    let text = user_template();
    assert!(text.starts_with("#:schema ./config.schema.json"));
    w.write_user(&text);
    w.ok(None);
}

#[test]
fn project_templates_load_without_errors_and_require_idempotent_scripts() {
    for (agent, image) in [
        (None, None),
        (Some("claude"), Some("host")),
        (Some("aider"), None),
    ] {
        let w = World::new();
        let text = project_template(agent, image);
        assert!(text.contains("idempotent"));
        let project = w.project("p", Some(&text));
        let e = w.ok(Some(&project));
        assert_eq!(e.agent.value.as_deref(), agent);
    }
}

#[test]
fn project_template_quotes_values_safely() {
    let text = project_template(Some("claude\"\nmemory_mb = 1"), None);
    let w = World::new();
    let project = w.project("p", Some(&text));
    let diags = w.errors(Some(&project));
    assert_eq!(diags.len(), 1, "only the unknown agent name: {diags:?}");
    assert_eq!(diags[0].key, "agent");
}

#[test]
fn a_top_level_key_appended_to_any_project_template_is_read_as_top_level() {
    for agent in [None, Some("claude")] {
        let w = World::new();
        let text = format!("{}memory_mb = 512\n", project_template(agent, None));
        let project = w.project("p", Some(&text));
        let e = w.ok(Some(&project));
        assert_eq!(e.memory_mb.value, 512);
    }
}
