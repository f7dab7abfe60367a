//! Agents the user config adds to the catalogue (A1: "extendable from the user config").
//!
//! `[agents.<name>]` in the *user* config with a `command` defines an agent like a catalogue
//! entry (package, API hosts, config dir and sync allowlist, state paths, key variables). The
//! parser refuses these keys in a project config (C6). Every value is validated here: the name
//! and paths end up in host paths (`<cache>/agents/<name>`, beneath the home), so names are
//! `[a-z0-9][a-z0-9_-]{0,31}` and paths are relative without `..`.
//!
//! Catalogue entries are `&'static`; a definition is turned into one by *interning*: the first
//! load of a given definition leaks it once, every later load with the same content (reloads
//! in a long-lived process) gets the same entry back, so memory grows only with distinct
//! definitions the user writes.

use std::sync::Mutex;

use crate::agents::{self, AgentSpec, Package};
use crate::mounts::valid_mount_name;
use crate::policy::HostPattern;
use crate::raw::RawAgentSettings;

/// A validated definition, before interning.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Definition {
    name: String,
    command: String,
    package: Option<(bool, String)>,
    api_hosts: Vec<String>,
    config_dir: String,
    config_sync: Vec<String>,
    state_paths: Vec<String>,
    api_key_env: Vec<String>,
}

/// The agent `[agents.<name>]` defines, `Ok(None)` when it defines none (only settings), or
/// the `(key, message)` of every invalid value.
pub(crate) fn define(
    name: &str,
    raw: &RawAgentSettings,
) -> Result<Option<&'static AgentSpec>, Errors> {
    let defines = raw.package.is_some()
        || raw.api_hosts.is_some()
        || raw.config_dir.is_some()
        || raw.config_sync.is_some()
        || raw.state_paths.is_some()
        || raw.api_key_env.is_some();
    let Some(command) = &raw.command else {
        if defines {
            return Err(vec![(
                "command".to_owned(),
                "an agent definition needs `command` (the executable its session runs)".to_owned(),
            )]);
        }
        return Ok(None);
    };
    let mut errors = Vec::new();
    if agents::find(name).is_some() {
        errors.push((
            "command".to_owned(),
            format!("{name:?} is a built-in agent; define a new agent under another name"),
        ));
    }
    if !valid_mount_name(name) {
        errors.push((
            String::new(),
            format!("invalid agent name {name:?}: use [a-z0-9][a-z0-9_-]{{0,31}}"),
        ));
    }
    if command.is_empty()
        || command.contains(['/', '\0'])
        || command.chars().any(char::is_whitespace)
    {
        errors.push((
            "command".to_owned(),
            format!("{command:?} is not a command name (no `/`, no spaces)"),
        ));
    }
    let package = parse_package(raw.package.as_deref(), &mut errors);
    let list = |v: &Option<Vec<String>>| v.clone().unwrap_or_default();
    let (api_hosts, config_sync, state_paths, api_key_env) = (
        list(&raw.api_hosts),
        list(&raw.config_sync),
        list(&raw.state_paths),
        list(&raw.api_key_env),
    );
    let config_dir = raw.config_dir.clone().unwrap_or_default();
    check_lists(
        &api_hosts,
        &config_dir,
        &config_sync,
        &state_paths,
        &api_key_env,
        &mut errors,
    );
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Some(intern(Definition {
        name: name.to_owned(),
        command: command.clone(),
        package,
        api_hosts,
        config_dir,
        config_sync,
        state_paths,
        api_key_env,
    })))
}

type Errors = Vec<(String, String)>;

fn parse_package(p: Option<&str>, errors: &mut Errors) -> Option<(bool, String)> {
    let p = p?;
    match p.split_once(':') {
        Some(("npm", n)) if package_name(n) => Some((true, n.to_owned())),
        Some(("pip", n)) if package_name(n) => Some((false, n.to_owned())),
        _ => {
            errors.push((
                "package".to_owned(),
                format!("{p:?}: write \"npm:<package>\" or \"pip:<package>\""),
            ));
            None
        }
    }
}

fn check_lists(
    api_hosts: &[String],
    config_dir: &str,
    config_sync: &[String],
    state_paths: &[String],
    api_key_env: &[String],
    errors: &mut Errors,
) {
    for (i, h) in api_hosts.iter().enumerate() {
        if let Err(e) = HostPattern::parse(h) {
            errors.push((format!("api_hosts[{i}]"), e.to_string()));
        }
    }
    if !config_dir.is_empty() && !relative(config_dir) {
        errors.push(("config_dir".to_owned(), not_relative(config_dir)));
    }
    for (key, values) in [("config_sync", config_sync), ("state_paths", state_paths)] {
        for (i, p) in values.iter().enumerate() {
            if !relative(p) {
                errors.push((format!("{key}[{i}]"), not_relative(p)));
            }
        }
    }
    for (i, v) in api_key_env.iter().enumerate() {
        let ok = v
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_uppercase() || c == '_')
            && v.chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
        if !ok {
            errors.push((
                format!("api_key_env[{i}]"),
                format!("{v:?} is not an environment variable name ([A-Z_][A-Z0-9_]*)"),
            ));
        }
    }
}

fn package_name(n: &str) -> bool {
    !n.is_empty()
        && !n.starts_with('-')
        && n.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '@' | '/' | '.' | '_' | '-' | '=' | '<' | '>')
        })
}

/// Relative, non-empty, no `.`/`..` component, no NUL (a trailing `/` is allowed).
fn relative(p: &str) -> bool {
    let p = p.trim_end_matches('/');
    !p.is_empty()
        && !p.starts_with('/')
        && !p.contains('\0')
        && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

fn not_relative(p: &str) -> String {
    format!("{p:?} must be a path relative to the home directory, without `.` or `..`")
}

static INTERNED: Mutex<Vec<(Definition, &'static AgentSpec)>> = Mutex::new(Vec::new());

fn intern(def: Definition) -> &'static AgentSpec {
    let mut interned = INTERNED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, spec)) = interned.iter().find(|(d, _)| *d == def) {
        return spec;
    }
    let s = |v: &String| -> &'static str { Box::leak(v.clone().into_boxed_str()) };
    let l = |v: &Vec<String>| -> &'static [&'static str] {
        Box::leak(v.iter().map(s).collect::<Vec<_>>().into_boxed_slice())
    };
    let spec: &'static AgentSpec = Box::leak(Box::new(AgentSpec {
        name: s(&def.name),
        display_name: s(&def.name),
        command: s(&def.command),
        default_args: &[],
        api_hosts: l(&def.api_hosts),
        config_dir: s(&def.config_dir),
        config_sync: l(&def.config_sync),
        state_paths: l(&def.state_paths),
        api_key_env: l(&def.api_key_env),
        package: def.package.as_ref().map(|(npm, n)| {
            if *npm {
                Package::Npm(s(n))
            } else {
                Package::Pip(s(n))
            }
        }),
    }));
    interned.push((def, spec));
    spec
}
