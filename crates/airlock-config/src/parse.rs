//! Parsing one configuration file into [`RawConfig`] while collecting *every* error.
//!
//! serde stops at the first error, so the document is parsed with `toml_edit` (which keeps
//! byte spans) and walked table by table: each key is checked against the raw type's key list,
//! and each leaf value is deserialized on its own through the raw type's field type. A bad value
//! becomes one [`Diagnostic`] and the walk continues with the next key. The position of every
//! visited key path is recorded so later semantic checks can point at lines too.
//!
//! Order of operations: syntax (including duplicate keys, which TOML forbids) → unknown keys →
//! user-only keys in a project file → value types. A syntax error ends the walk of that file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::de::{DeserializeOwned, IntoDeserializer};
use toml_edit::{ImDocument, Item, TableLike};

use crate::diagnostics::{key_segment, Diagnostic, LineIndex};
use crate::raw::{
    RawAgentSettings, RawCache, RawConfig, RawEnv, RawHostPort, RawMount, RawNetwork, RawPort,
    RawTool, RawUnprotect, RawVm, AGENT_KEYS, CACHE_KEYS, CONFIG_KEYS, ENV_KEYS, HOST_PORT_KEYS,
    MOUNT_KEYS, NETWORK_KEYS, PORT_KEYS, TOOL_KEYS, UNPROTECT_KEYS,
};

/// Which file is being read; decides whether user-only keys are allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileRole {
    /// `$XDG_CONFIG_HOME/airlock/config.toml`.
    User,
    /// `<project>/.airlock/config.toml`.
    Project,
}

/// A parsed file: the raw values that were valid, and where each key path is.
#[derive(Debug, Clone)]
pub(crate) struct ParsedFile {
    pub(crate) file: PathBuf,
    pub(crate) raw: RawConfig,
    /// For each entry of `raw.mount`, its index among the file's `[[mount]]` entries (an
    /// entry that failed to parse is not in `raw.mount`, but keeps its place in the file).
    pub(crate) mount_index: Vec<usize>,
    /// How many `[[mount]]` entries the file has, parsed or not.
    pub(crate) mount_entries: usize,
    /// For each entry of `raw.ports`, its index among the file's `[[ports]]` entries.
    pub(crate) port_index: Vec<usize>,
    positions: BTreeMap<String, (u32, u32)>,
}

impl ParsedFile {
    /// A diagnostic at `key`, or at its nearest recorded ancestor when `key` has no position.
    pub(crate) fn diag(&self, key: &str, message: impl Into<String>) -> Diagnostic {
        let (line, column) = self.position(key);
        Diagnostic {
            file: self.file.clone(),
            key: key.to_owned(),
            line,
            column,
            message: message.into(),
        }
    }

    fn position(&self, key: &str) -> (u32, u32) {
        lookup(&self.positions, key)
    }
}

/// The position of `key`, or of its nearest recorded ancestor (`a.b[1].c` → `a.b[1]` → `a.b`
/// → `a`), or (0, 0).
fn lookup(positions: &BTreeMap<String, (u32, u32)>, key: &str) -> (u32, u32) {
    let mut k = key;
    loop {
        if let Some(p) = positions.get(k) {
            return *p;
        }
        match k.rfind(['.', '[']) {
            Some(i) => k = &k[..i],
            None => return (0, 0),
        }
    }
}

/// The message every user-only key in a project file gets (C6).
pub(crate) fn user_only_message(what: &str) -> String {
    format!(
        "{what} belong in the user config (`airlock config`): a project config cannot choose \
         host mounts, secrets, credentials or trust anchors"
    )
}

/// Parses `text` (the contents of `file`), pushing every problem onto `diags`.
pub(crate) fn parse_file(
    file: &Path,
    text: &str,
    role: FileRole,
    diags: &mut Vec<Diagnostic>,
) -> ParsedFile {
    let mut walker = Walker {
        file,
        role,
        index: LineIndex::new(text),
        positions: BTreeMap::new(),
        mount_index: Vec::new(),
        mount_entries: 0,
        port_index: Vec::new(),
        diags,
    };
    let raw = match ImDocument::parse(text) {
        Ok(doc) => walker.config(doc.as_table()),
        Err(e) => {
            let offset = e.span().map_or(0, |s| s.start);
            let message = e.message().trim().to_owned();
            walker.push_at(offset, "", format!("invalid TOML: {message}"));
            RawConfig::default()
        }
    };
    ParsedFile {
        file: file.to_owned(),
        raw,
        mount_index: walker.mount_index,
        mount_entries: walker.mount_entries,
        port_index: walker.port_index,
        positions: walker.positions,
    }
}

struct Walker<'a> {
    file: &'a Path,
    role: FileRole,
    index: LineIndex,
    positions: BTreeMap<String, (u32, u32)>,
    mount_index: Vec<usize>,
    mount_entries: usize,
    port_index: Vec<usize>,
    diags: &'a mut Vec<Diagnostic>,
}

fn join(path: &str, key: &str) -> String {
    let key = key_segment(key);
    if path.is_empty() {
        key
    } else {
        format!("{path}.{key}")
    }
}

impl Walker<'_> {
    fn push_at(&mut self, offset: usize, key: &str, message: String) {
        let (line, column) = self.index.position(offset);
        self.diags.push(Diagnostic {
            file: self.file.to_owned(),
            key: key.to_owned(),
            line,
            column,
            message,
        });
    }

    fn push_key(&mut self, key: &str, message: String) {
        let (line, column) = lookup(&self.positions, key);
        self.diags.push(Diagnostic {
            file: self.file.to_owned(),
            key: key.to_owned(),
            line,
            column,
            message,
        });
    }

    /// Records where `path` is: the item's own span, else its key's.
    fn record(&mut self, path: &str, key_span: Option<std::ops::Range<usize>>, item: &Item) {
        if let Some(span) = item.span().or(key_span) {
            let pos = self.index.position(span.start);
            self.positions.insert(path.to_owned(), pos);
        }
    }

    /// Records positions of every key of `t` and reports keys outside `allowed`.
    fn keys(&mut self, t: &dyn TableLike, path: &str, allowed: &[&str]) {
        for (key, item) in t.iter() {
            let key_span = t.key(key).and_then(|k| k.span());
            let full = join(path, key);
            self.record(&full, key_span.clone(), item);
            if allowed.contains(&key) {
                continue;
            }
            let message = unknown_key_message(self.role, path, key, allowed);
            let (line, column) = key_span
                .map(|s| self.index.position(s.start))
                .or_else(|| self.positions.get(&full).copied())
                .unwrap_or((0, 0));
            self.diags.push(Diagnostic {
                file: self.file.to_owned(),
                key: full,
                line,
                column,
                message,
            });
        }
    }

    /// Deserializes one value through its raw field type.
    fn value<T: DeserializeOwned>(&mut self, item: &Item, path: &str) -> Option<T> {
        let value = item.clone().into_value().ok()?;
        match T::deserialize(value.into_deserializer()) {
            Ok(v) => Some(v),
            Err(e) => {
                self.push_key(path, type_message(e.message().trim()));
                None
            }
        }
    }

    fn leaf<T: DeserializeOwned>(&mut self, t: &dyn TableLike, path: &str, key: &str) -> Option<T> {
        let item = t.get(key)?;
        self.value(item, &join(path, key))
    }

    /// A list deserialized element by element, so each bad element is its own error.
    fn list<T: DeserializeOwned>(
        &mut self,
        t: &dyn TableLike,
        path: &str,
        key: &str,
    ) -> Option<Vec<T>> {
        let item = t.get(key)?;
        let full = join(path, key);
        let Some(array) = item.as_array() else {
            self.push_key(&full, format!("expected an array, found {}", kind(item)));
            return None;
        };
        let mut out = Vec::new();
        for (i, v) in array.iter().enumerate() {
            let elem = format!("{full}[{i}]");
            let element = Item::Value(v.clone());
            self.record(&elem, None, &element);
            out.extend(self.value::<T>(&element, &elem));
        }
        Some(out)
    }

    /// A table of name → value, deserialized entry by entry.
    fn map<T: DeserializeOwned>(
        &mut self,
        t: &dyn TableLike,
        path: &str,
        key: &str,
    ) -> Option<BTreeMap<String, T>> {
        let item = t.get(key)?;
        let full = join(path, key);
        let table = self.table(item, &full)?;
        let mut out = BTreeMap::new();
        for (name, entry) in table.iter() {
            let entry_path = join(&full, name);
            self.record(&entry_path, table.key(name).and_then(|k| k.span()), entry);
            if let Some(v) = self.value::<T>(entry, &entry_path) {
                out.insert(name.to_owned(), v);
            }
        }
        Some(out)
    }

    fn table<'i>(&mut self, item: &'i Item, path: &str) -> Option<&'i dyn TableLike> {
        let table = item.as_table_like();
        if table.is_none() {
            self.push_key(path, format!("expected a table, found {}", kind(item)));
        }
        table
    }

    /// Elements of an array of tables (`[[x]]` or an inline array of inline tables).
    fn tables<'i>(&mut self, item: &'i Item, path: &str) -> Vec<(String, &'i dyn TableLike)> {
        let mut out: Vec<(String, &'i dyn TableLike)> = Vec::new();
        if let Some(aot) = item.as_array_of_tables() {
            for (i, t) in aot.iter().enumerate() {
                let p = format!("{path}[{i}]");
                if let Some(span) = t.span() {
                    let pos = self.index.position(span.start);
                    self.positions.insert(p.clone(), pos);
                }
                out.push((p, t as &dyn TableLike));
            }
        } else if let Some(array) = item.as_array() {
            for (i, v) in array.iter().enumerate() {
                let p = format!("{path}[{i}]");
                if let Some(span) = v.span() {
                    let pos = self.index.position(span.start);
                    self.positions.insert(p.clone(), pos);
                }
                match v.as_inline_table() {
                    Some(t) => out.push((p, t as &dyn TableLike)),
                    None => self.push_key(&p, "expected a table".to_owned()),
                }
            }
        } else {
            self.push_key(
                path,
                format!("expected an array of tables, found {}", kind(item)),
            );
        }
        out
    }

    /// Reports a user-only key present in a project file; true when the key may be read.
    fn allowed_here(&mut self, t: &dyn TableLike, path: &str, key: &str, what: &str) -> bool {
        if t.get(key).is_none() {
            return false;
        }
        if self.role == FileRole::Project {
            self.push_key(&join(path, key), user_only_message(what));
            return false;
        }
        true
    }

    fn required<T: DeserializeOwned>(
        &mut self,
        t: &dyn TableLike,
        path: &str,
        key: &str,
    ) -> Option<T> {
        if t.get(key).is_none() {
            self.push_key(
                &join(path, key),
                format!("missing required key `{key}` (it has no default)"),
            );
            return None;
        }
        self.leaf(t, path, key)
    }

    fn config(&mut self, root: &dyn TableLike) -> RawConfig {
        self.keys(root, "", CONFIG_KEYS);
        let mut raw = RawConfig {
            image: self.leaf(root, "", "image"),
            agent: self.leaf(root, "", "agent"),
            memory_mb: self.leaf(root, "", "memory_mb"),
            cpus: self.leaf(root, "", "cpus"),
            pids_max: self.leaf(root, "", "pids_max"),
            packages: self.list(root, "", "packages"),
            layout: self.leaf(root, "", "layout"),
            detach_key: self.leaf(root, "", "detach_key"),
            workspace_mode: self.leaf(root, "", "workspace_mode"),
            ..RawConfig::default()
        };
        if self.allowed_here(root, "", "mount", "mounts (`[[mount]]`)") {
            if let Some(item) = root.get("mount") {
                raw.mount = self.mounts(item);
            }
        }
        if self.allowed_here(root, "", "protect", "protected paths (`protect`)") {
            raw.protect = self.list(root, "", "protect");
        }
        if self.allowed_here(
            root,
            "",
            "unprotect",
            "lifted protections (`[[unprotect]]`)",
        ) {
            if let Some(item) = root.get("unprotect") {
                raw.unprotect = self.unprotects(item);
            }
        }
        if let Some(item) = root.get("network") {
            if let Some(t) = self.table(item, "network") {
                raw.network = Some(self.network(t));
            }
        }
        if let Some(item) = root.get("agents") {
            if let Some(t) = self.table(item, "agents") {
                raw.agents = self.agents(t);
            }
        }
        self.host_environment(root, &mut raw);
        raw
    }

    fn unprotects(&mut self, item: &Item) -> Vec<RawUnprotect> {
        let mut out = Vec::new();
        for (path, t) in self.tables(item, "unprotect") {
            self.keys(t, &path, UNPROTECT_KEYS);
            let project = self.required::<String>(t, &path, "project");
            let paths = if t.get("paths").is_none() {
                self.required::<Vec<String>>(t, &path, "paths")
            } else {
                self.list::<String>(t, &path, "paths")
            };
            if let (Some(project), Some(paths)) = (project, paths) {
                out.push(RawUnprotect { project, paths });
            }
        }
        out
    }

    /// `[env]`, `[[tool]]`, `[cache]` and `[[ports]]`: user config only (they name host paths
    /// or host ports and decide what every sandbox of every project sees).
    fn host_environment(&mut self, root: &dyn TableLike, raw: &mut RawConfig) {
        if self.allowed_here(root, "", "env", "environment settings (`[env]`)") {
            if let Some(t) = root.get("env").and_then(|i| self.table(i, "env")) {
                self.keys(t, "env", ENV_KEYS);
                raw.env = Some(RawEnv {
                    vars: self.map(t, "env", "vars"),
                    path_prepend: self.list(t, "env", "path_prepend"),
                });
            }
        }
        if self.allowed_here(root, "", "tool", "host toolchains (`[[tool]]`)") {
            if let Some(item) = root.get("tool") {
                for (p, t) in self.tables(item, "tool") {
                    self.keys(t, &p, TOOL_KEYS);
                    if let Some(name) = self.required::<String>(t, &p, "name") {
                        raw.tool.push(RawTool { name });
                    }
                }
            }
        }
        if self.allowed_here(root, "", "cache", "cache settings (`[cache]`)") {
            if let Some(t) = root.get("cache").and_then(|i| self.table(i, "cache")) {
                self.keys(t, "cache", CACHE_KEYS);
                raw.cache = Some(RawCache {
                    shared: self.leaf(t, "cache", "shared"),
                });
            }
        }
        if self.allowed_here(root, "", "backend", "the sandbox backend (`backend`)") {
            raw.backend = self.leaf(root, "", "backend");
        }
        if self.allowed_here(root, "", "vm", "vm backend settings (`[vm]`)") {
            if let Some(t) = root.get("vm").and_then(|i| self.table(i, "vm")) {
                self.keys(t, "vm", crate::raw::VM_KEYS);
                raw.vm = Some(RawVm {
                    accel: self.leaf(t, "vm", "accel"),
                    kernel: self.leaf(t, "vm", "kernel"),
                    qemu: self.leaf(t, "vm", "qemu"),
                    memory_overhead_mb: self.leaf(t, "vm", "memory_overhead_mb"),
                });
            }
        }
        if self.allowed_here(root, "", "ports", "published ports (`[[ports]]`)") {
            if let Some(item) = root.get("ports") {
                for (index, (p, t)) in self.tables(item, "ports").into_iter().enumerate() {
                    self.keys(t, &p, PORT_KEYS);
                    let host = self.required::<u16>(t, &p, "host");
                    let guest = self.required::<u16>(t, &p, "guest");
                    if let (Some(host), Some(guest)) = (host, guest) {
                        raw.ports.push(RawPort { host, guest });
                        self.port_index.push(index);
                    }
                }
            }
        }
    }

    fn mounts(&mut self, item: &Item) -> Vec<crate::raw::RawMount> {
        let mut out = Vec::new();
        let entries = self.tables(item, "mount");
        self.mount_entries = entries.len();
        for (index, (path, t)) in entries.into_iter().enumerate() {
            self.keys(t, &path, MOUNT_KEYS);
            let name = self.required::<String>(t, &path, "name");
            let host = self.required::<String>(t, &path, "path");
            let read_only = self.required::<bool>(t, &path, "read_only");
            if let (Some(name), Some(path), Some(read_only)) = (name, host, read_only) {
                out.push(RawMount {
                    name,
                    path,
                    read_only,
                });
                self.mount_index.push(index);
            }
        }
        out
    }

    fn network(&mut self, t: &dyn TableLike) -> RawNetwork {
        let path = "network";
        self.keys(t, path, NETWORK_KEYS);
        let mut net = RawNetwork {
            preset: self.leaf(t, path, "preset"),
            allow: self.list(t, path, "allow"),
            deny: self.list(t, path, "deny"),
            hosts: self.map(t, path, "hosts"),
            ..RawNetwork::default()
        };
        if self.allowed_here(
            t,
            path,
            "extra_ca",
            "extra CA certificates (`network.extra_ca`)",
        ) {
            net.extra_ca = self.list(t, path, "extra_ca");
        }
        if self.allowed_here(t, path, "host_port", "host ports (`[[network.host_port]]`)") {
            if let Some(item) = t.get("host_port") {
                for (p, hp) in self.tables(item, "network.host_port") {
                    self.keys(hp, &p, HOST_PORT_KEYS);
                    let port = self.required::<u16>(hp, &p, "port");
                    let guest_port = self.leaf::<u16>(hp, &p, "guest_port");
                    if let Some(port) = port {
                        net.host_port.push(RawHostPort { port, guest_port });
                    }
                }
            }
        }
        net
    }

    fn agents(&mut self, t: &dyn TableLike) -> BTreeMap<String, RawAgentSettings> {
        let mut out = BTreeMap::new();
        for (name, item) in t.iter() {
            let path = join("agents", name);
            self.record(&path, t.key(name).and_then(|k| k.span()), item);
            let Some(at) = self.table(item, &path) else {
                continue;
            };
            self.keys(at, &path, AGENT_KEYS);
            let mut settings = RawAgentSettings {
                args: self.list(at, &path, "args"),
                sync_config: self.leaf(at, &path, "sync_config"),
                ..RawAgentSettings::default()
            };
            if self.allowed_here(
                at,
                &path,
                "credentials",
                "credential opt-ins (`credentials`)",
            ) {
                settings.credentials = self.leaf(at, &path, "credentials");
            }
            if self.allowed_here(
                at,
                &path,
                "persist_state",
                "credential opt-ins (`persist_state`)",
            ) {
                settings.persist_state = self.leaf(at, &path, "persist_state");
            }
            self.agent_definition(at, &path, &mut settings);
            out.insert(name.to_owned(), settings);
        }
        out
    }
}

impl Walker<'_> {
    /// The keys that define an agent the catalogue lacks: user config only (C6: a repository
    /// never chooses which host files are synced or which package is installed).
    fn agent_definition(&mut self, at: &dyn TableLike, path: &str, s: &mut RawAgentSettings) {
        let what = "agent definitions";
        if self.allowed_here(at, path, "command", what) {
            s.command = self.leaf(at, path, "command");
        }
        if self.allowed_here(at, path, "package", what) {
            s.package = self.leaf(at, path, "package");
        }
        if self.allowed_here(at, path, "config_dir", what) {
            s.config_dir = self.leaf(at, path, "config_dir");
        }
        if self.allowed_here(at, path, "api_hosts", what) {
            s.api_hosts = self.list(at, path, "api_hosts");
        }
        if self.allowed_here(at, path, "config_sync", what) {
            s.config_sync = self.list(at, path, "config_sync");
        }
        if self.allowed_here(at, path, "state_paths", what) {
            s.state_paths = self.list(at, path, "state_paths");
        }
        if self.allowed_here(at, path, "api_key_env", what) {
            s.api_key_env = self.list(at, path, "api_key_env");
        }
    }
}

fn kind(item: &Item) -> &'static str {
    match item {
        Item::None => "nothing",
        Item::Table(_) => "a table",
        Item::ArrayOfTables(_) => "an array of tables",
        Item::Value(v) => v.type_name(),
    }
}

/// serde's message for a value of the wrong type, made readable where toml_edit's is terse.
fn type_message(message: &str) -> String {
    match message {
        // toml_edit's words for a non-string where an enum (a string) was expected.
        "wanted string or table" => "invalid type: expected a string".to_owned(),
        other => other.to_owned(),
    }
}

fn unknown_key_message(role: FileRole, path: &str, key: &str, allowed: &[&str]) -> String {
    if path.is_empty() && (key == "secrets" || key == "secret") {
        return match role {
            FileRole::Project => user_only_message("secrets"),
            FileRole::User => "secrets are not kept in config files; store one with \
                               `airlock secret set NAME --host HOST`"
                .to_owned(),
        };
    }
    let mut message = format!("unknown key `{key}`");
    if let Some(best) = closest(key, allowed) {
        message.push_str(&format!(", did you mean `{best}`?"));
    } else {
        message.push_str(&format!("; expected one of: {}", allowed.join(", ")));
    }
    message
}

/// The allowed key within edit distance 2 of `key`, if any.
fn closest<'k>(key: &str, allowed: &[&'k str]) -> Option<&'k str> {
    allowed
        .iter()
        .map(|a| (edit_distance(key, a), *a))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, a)| a)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raw::{RawAgentSettings, RawHostPort, RawMount, RawNetwork};
    use proptest::prelude::*;
    use schemars::JsonSchema;
    use std::collections::BTreeSet;

    const FULL: &str = r#"
image = "host"
agent = "claude"
memory_mb = 4096
cpus = 2
pids_max = 512
packages = ["git", "make"]
layout = "tmux"
detach_key = "ctrl-p,ctrl-q"
workspace_mode = "clone"
protect = [".envrc", ".github/workflows"]

[[unprotect]]
project = "/home/u/proj"
paths = [".git/config"]

[[mount]]
name = "data"
path = "/srv/data"
read_only = true

[network]
preset = "none"
allow = ["github.com", "*.example.com:8443"]
deny = ["evil.com"]
extra_ca = ["/etc/ca.pem"]
hosts = { db = "10.0.0.5" }

[[network.host_port]]
port = 5432
guest_port = 15432

[agents.claude]
args = ["--verbose"]
sync_config = false
credentials = true
persist_state = true

[env]
path_prepend = ["/opt/tools/bin"]

[env.vars]
RUST_LOG = "debug"

[[tool]]
name = "rust"

[cache]
shared = true

[[ports]]
host = 8080
guest = 3000
"#;

    fn parse(text: &str, role: FileRole) -> (RawConfig, Vec<Diagnostic>) {
        let mut diags = Vec::new();
        let parsed = parse_file(Path::new("/cfg.toml"), text, role, &mut diags);
        (parsed.raw, diags)
    }

    #[test]
    fn walker_and_plain_serde_read_a_full_document_identically() {
        let (walked, diags) = parse(FULL, FileRole::User);
        assert!(diags.is_empty(), "{diags:?}");
        let serde: RawConfig = toml::from_str(FULL).unwrap();
        assert_eq!(walked, serde);
        assert_eq!(walked.cpus, Some(2.0), "integers are accepted for cpus");
    }

    fn schema_keys<T: JsonSchema>() -> BTreeSet<String> {
        let schema = schemars::schema_for!(T);
        let obj = schema.schema.object.expect("struct schemas are objects");
        obj.properties.keys().cloned().collect()
    }

    fn set(keys: &[&str]) -> BTreeSet<String> {
        keys.iter().map(|k| (*k).to_owned()).collect()
    }

    #[test]
    fn walker_key_lists_equal_the_schema_of_each_raw_type() {
        assert_eq!(set(CONFIG_KEYS), schema_keys::<RawConfig>());
        assert_eq!(set(MOUNT_KEYS), schema_keys::<RawMount>());
        assert_eq!(set(UNPROTECT_KEYS), schema_keys::<RawUnprotect>());
        assert_eq!(set(NETWORK_KEYS), schema_keys::<RawNetwork>());
        assert_eq!(set(HOST_PORT_KEYS), schema_keys::<RawHostPort>());
        assert_eq!(set(AGENT_KEYS), schema_keys::<RawAgentSettings>());
        assert_eq!(set(ENV_KEYS), schema_keys::<RawEnv>());
        assert_eq!(set(TOOL_KEYS), schema_keys::<RawTool>());
        assert_eq!(set(CACHE_KEYS), schema_keys::<RawCache>());
        assert_eq!(set(crate::raw::VM_KEYS), schema_keys::<RawVm>());
        assert_eq!(set(PORT_KEYS), schema_keys::<RawPort>());
    }

    #[test]
    fn project_role_drops_user_only_values_and_reports_each() {
        let (raw, diags) = parse(FULL, FileRole::Project);
        let keys: Vec<&str> = diags.iter().map(|d| d.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "mount",
                "protect",
                "unprotect",
                "network.extra_ca",
                "network.host_port",
                "agents.claude.credentials",
                "agents.claude.persist_state",
                "env",
                "tool",
                "cache",
                "ports"
            ]
        );
        assert!(raw.mount.is_empty());
        assert!(raw.protect.is_none() && raw.unprotect.is_empty());
        let net = raw.network.unwrap();
        assert!(net.extra_ca.is_none() && net.host_port.is_empty());
        assert_eq!(raw.agents["claude"].credentials, None);
        assert!(raw.env.is_none() && raw.tool.is_empty() && raw.cache.is_none());
        assert!(raw.ports.is_empty());
        assert_eq!(raw.agents["claude"].sync_config, Some(false));
    }

    #[test]
    fn unknown_keys_suggest_the_closest_known_key() {
        let (_, diags) = parse(
            "[network]\nalow = []\n[agents.claude]\nsync_confg = true\n",
            FileRole::User,
        );
        assert!(diags[0].message.contains("did you mean `allow`"));
        assert!(diags[1].message.contains("did you mean `sync_config`"));
        let (_, diags) = parse("zzzzzz = 1\n", FileRole::User);
        assert!(diags[0].message.contains("expected one of: image, agent"));
    }

    proptest! {
        #[test]
        fn parser_never_panics_on_arbitrary_text(text in ".{0,200}") {
            let _ = parse(&text, FileRole::User);
            let _ = parse(&text, FileRole::Project);
        }

        #[test]
        fn every_unknown_top_level_key_is_reported_on_its_own_line(
            keys in prop::collection::btree_set("x[a-z]{3,8}", 1..6)
        ) {
            let text: String = keys.iter().map(|k| format!("{k} = 1\n")).collect();
            let (_, diags) = parse(&text, FileRole::User);
            prop_assert_eq!(diags.len(), keys.len());
            for (i, (key, d)) in keys.iter().zip(&diags).enumerate() {
                prop_assert_eq!(&d.key, key);
                prop_assert_eq!(d.line as usize, i + 1);
            }
        }

        #[test]
        fn every_bad_allow_element_is_reported_with_its_index(
            bad in prop::collection::vec(any::<bool>(), 1..8)
        ) {
            let items: Vec<String> = bad
                .iter()
                .map(|b| if *b { "1".to_owned() } else { "\"ok.example.com\"".to_owned() })
                .collect();
            let text = format!("[network]\nallow = [\n{}\n]\n", items.join(",\n"));
            let (_, diags) = parse(&text, FileRole::User);
            let want: Vec<String> = bad
                .iter()
                .enumerate()
                .filter(|(_, b)| **b)
                .map(|(i, _)| format!("network.allow[{i}]"))
                .collect();
            let got: Vec<String> = diags.iter().map(|d| d.key.clone()).collect();
            prop_assert_eq!(got, want);
            for d in &diags {
                let index: usize = d.key["network.allow[".len()..d.key.len() - 1].parse().unwrap();
                prop_assert_eq!(d.line as usize, index + 3);
            }
        }
    }
}
