//! `docs/config-reference.md` is generated from the JSON Schema ([`json_schema`]), which is
//! generated from the types that parse both config files: the reference cannot describe a key
//! the parser does not have. The test fails when the committed file is stale;
//! `AIRLOCK_UPDATE_DOCS=1 cargo test -p airlock-config reference` (or `scripts/update-docs`)
//! rewrites it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use airlock_config::schema::{json_schema, SCHEMA_FILE_NAME};
use serde_json::{Map, Value};

const INTRO: &str = "\
# Configuration reference

<!-- Generated from the configuration's JSON Schema by
     crates/airlock-config/tests/all/reference.rs. Do not edit: run scripts/update-docs. -->

airlock reads two TOML files, with the same keys:

- the **user config**, `$XDG_CONFIG_HOME/airlock/config.toml` (usually
  `~/.config/airlock/config.toml`; `airlock config` creates and opens it), and
- the **project config**, `.airlock/config.toml` at the project root (`airlock init` creates
  it; it is checked into the repository).

Both are strict: an unknown key, a wrong type, a duplicate or an out-of-range value is an error
naming the file, the key and the line, and `airlock plan` reports every error at once. Keys
marked *User config only* are refused in a project config: a repository never chooses host
mounts, secrets, credentials or trust anchors. A project config may only *tighten* the network
policy and lower the limits until you run `airlock trust` for it. When both files set a key,
the project's value applies (within those rules); `airlock plan` shows each value's origin.

`airlock config` also writes the JSON Schema these pages are generated from, as
SCHEMA_FILE beside the user config, for editors that complete and check TOML against a
schema. Labels in parentheses such as (A3) or (N10) name airlock's requirements; the tests and
[security.md](security.md) use the same labels.
";

/// The schema definition a `$ref` points to.
fn resolve<'a>(v: &'a Value, defs: &'a Map<String, Value>) -> &'a Value {
    let Some(r) = v.get("$ref").and_then(Value::as_str) else {
        return v;
    };
    let name = r.trim_start_matches("#/definitions/");
    defs.get(name)
        .unwrap_or_else(|| panic!("dangling schema reference {r}"))
}

/// The non-null alternative of `Option<T>` (`anyOf: [T, null]`), resolved.
fn unwrap<'a>(v: &'a Value, defs: &'a Map<String, Value>) -> &'a Value {
    if let Some(alts) = v.get("anyOf").and_then(Value::as_array) {
        if let Some(inner) = alts.iter().find(|a| a.get("type") != Some(&"null".into())) {
            return resolve(inner, defs);
        }
    }
    resolve(v, defs)
}

/// The JSON types of a schema, without `null`.
fn types(v: &Value) -> Vec<&str> {
    match v.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect(),
        _ => Vec::new(),
    }
}

fn is_table(v: &Value) -> bool {
    types(v) == ["object"] && v.get("properties").is_some()
}

/// How a value is written in TOML, in words.
fn type_name(v: &Value, defs: &Map<String, Value>) -> String {
    let v = unwrap(v, defs);
    if let Some(alts) = v.get("oneOf").and_then(Value::as_array) {
        let names: Vec<String> = alts
            .iter()
            .flat_map(|a| a["enum"].as_array().cloned().unwrap_or_default())
            .map(|e| format!("`{e}`"))
            .collect();
        return format!("one of {}", names.join(", "));
    }
    match types(v).as_slice() {
        ["string"] if v.get("format") == Some(&"ip".into()) => "IP address (string)".to_owned(),
        ["string"] => "string".to_owned(),
        ["integer"] => "integer".to_owned(),
        ["number"] => "number".to_owned(),
        ["boolean"] => "boolean".to_owned(),
        ["array"] => {
            let items = unwrap(&v["items"], defs);
            if is_table(items) {
                "array of tables".to_owned()
            } else {
                format!("array of {}s", type_name(items, defs))
            }
        }
        ["object"] => match v.get("additionalProperties") {
            Some(inner @ Value::Object(_)) if is_table(unwrap(inner, defs)) => {
                "table of tables, keyed by name".to_owned()
            }
            Some(inner @ Value::Object(_)) => {
                format!("table of name = {}", type_name(inner, defs))
            }
            _ => "table".to_owned(),
        },
        other => panic!("a schema type the reference cannot name: {other:?}"),
    }
}

/// Constraints worth stating beside the type.
fn limits(v: &Value, defs: &Map<String, Value>) -> Vec<String> {
    let v = unwrap(v, defs);
    let mut out = Vec::new();
    if let Some(min) = v.get("minimum").and_then(Value::as_f64) {
        out.push(format!("minimum {min}"));
    }
    if let Some(max) = v.get("maximum").and_then(Value::as_f64) {
        out.push(format!("maximum {max}"));
    }
    if let Some(n) = v.get("maxItems").and_then(Value::as_u64) {
        out.push(format!("at most {n} entries"));
    }
    out
}

/// The description of a key: its own, else its type's.
fn description(v: &Value, defs: &Map<String, Value>) -> String {
    v.get("description")
        .or_else(|| unwrap(v, defs).get("description"))
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("a key without a description: {v}"))
        .to_owned()
}

/// The values of an enum-like type with their meanings, one bullet each.
fn choices(v: &Value, defs: &Map<String, Value>) -> String {
    let mut out = String::new();
    let v = unwrap(v, defs);
    for alt in v
        .get("oneOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for e in alt["enum"].as_array().into_iter().flatten() {
            let meaning = alt.get("description").and_then(Value::as_str).unwrap_or("");
            let _ = writeln!(out, "- `{e}`: {meaning}");
        }
    }
    out
}

/// Renders the keys of `table` (at TOML path `prefix`) and, after them, its sub-tables.
fn render_table(
    out: &mut String,
    heading: &str,
    prefix: &str,
    table: &Value,
    defs: &Map<String, Value>,
) {
    let _ = writeln!(out, "## {heading}\n");
    if let Some(d) = table.get("description").and_then(Value::as_str) {
        let _ = writeln!(out, "{d}\n");
    }
    let props = table["properties"].as_object().expect("a table has keys");
    let mut nested = Vec::new();
    for (key, v) in props {
        let path = format!("{prefix}{key}");
        let inner = unwrap(v, defs);
        let mut facts = vec![format!("*Type:* {}", type_name(v, defs))];
        facts.extend(limits(v, defs));
        let _ = writeln!(out, "### `{path}`\n\n{}\n", facts.join(" · "));
        let _ = writeln!(out, "{}\n", description(v, defs));
        let choices = choices(v, defs);
        if !choices.is_empty() {
            let _ = writeln!(out, "{choices}");
        }
        if is_table(inner) {
            nested.push((format!("`[{path}]`"), format!("{path}."), inner));
        } else if types(inner) == ["array"] && is_table(unwrap(&inner["items"], defs)) {
            nested.push((
                format!("`[[{path}]]`"),
                format!("{path}[]."),
                unwrap(&inner["items"], defs),
            ));
        } else if let Some(item @ Value::Object(_)) = inner.get("additionalProperties") {
            if is_table(unwrap(item, defs)) {
                nested.push((
                    format!("`[{path}.<name>]`"),
                    format!("{path}.<name>."),
                    unwrap(item, defs),
                ));
            }
        }
    }
    for (heading, prefix, table) in nested {
        render_table(out, &heading, &prefix, table, defs);
    }
}

/// The whole reference page.
fn reference() -> String {
    let schema = json_schema();
    let defs = schema["definitions"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut out = INTRO.replace("SCHEMA_FILE", &format!("`{SCHEMA_FILE_NAME}`"));
    out.push('\n');
    let top = serde_json::json!({ "properties": schema["properties"] });
    render_table(&mut out, "Top-level keys", "", &top, &defs);
    out.truncate(out.trim_end().len());
    out.push('\n');
    out
}

fn reference_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/config-reference.md")
}

#[test]
fn committed_config_reference_matches_the_schema() {
    let want = reference();
    let path = reference_path();
    if std::env::var_os("AIRLOCK_UPDATE_DOCS").is_some() {
        std::fs::write(&path, &want).expect("write docs/config-reference.md");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == want,
        "docs/config-reference.md is stale; regenerate it with scripts/update-docs"
    );
}

#[test]
fn the_reference_names_every_key_of_every_table() {
    let text = reference();
    for key in [
        "`image`",
        "`memory_mb`",
        "`network.preset`",
        "`network.host_port[].port`",
        "`mount[].read_only`",
        "`agents.<name>.persist_state`",
    ] {
        assert!(text.contains(&format!("### {key}")), "{key} missing");
    }
    assert!(
        text.contains("*Type:* one of `\"none\"`, `\"dev\"`, `\"open\"`"),
        "{text}"
    );
}
