//! Human rendering of the effective configuration (`airlock plan`).
//!
//! Sections in a fixed order — files, project, sandbox, mappings, network, secrets, agents,
//! provisioning — and, inside each, the order of the configuration (rules in file order, user
//! first; agents in catalogue order; provisioning in execution order). Every value shows its
//! origin. Every string from a config file or the file system is escaped by [`Doc`].

use airlock_config::effective::{Agent, Image, LoadedFile, ProvisionStep, StepOwner};
use airlock_config::{Action, Effective, Origin, Roots, Rule, RuleOrigin, Sourced};

use airlock_secrets::SecretInfo;

use crate::output::{path_text, Doc, Style};

pub fn render(e: &Effective, roots: &Roots, secrets: &[SecretInfo]) -> Doc {
    let mut doc = Doc::new();
    files(&mut doc, e);
    sandbox(&mut doc, e, roots);
    mappings(&mut doc, e);
    network(&mut doc, e);
    secrets_section(&mut doc, secrets);
    agents(&mut doc, e);
    host_environment(&mut doc, e);
    provisioning(&mut doc, e);
    doc
}

/// The package cache, `[[tool]]` and `[env]` (P2, P4). Variable values are not printed: they
/// are the user's, and a plan is something people paste.
fn host_environment(doc: &mut Doc, e: &Effective) {
    use airlock_config::toolchain::CacheScope;
    doc.heading("Toolchains and environment");
    let cache = match e.cache.value {
        CacheScope::Project => "per project, at /var/cache/airlock inside",
        CacheScope::Shared => "shared by every project, at /var/cache/airlock inside",
    };
    sourced(doc, "package cache", cache, e.cache.origin);
    for tool in &e.tools {
        let dirs: Vec<String> = tool.dirs.iter().map(|d| path_text(d)).collect();
        doc.styled_field(
            1,
            &format!("tool {}", tool.name),
            &[
                (Style::Plain, &format!("{} (read-only)", dirs.join(", "))),
                (Style::Dim, "  (user)"),
            ],
        );
    }
    for (name, _) in &e.env.value.vars {
        doc.styled_field(1, name, &[(Style::Plain, "set"), (Style::Dim, "  (user)")]);
    }
    if !e.env.value.path_prepend.is_empty() {
        let dirs: Vec<String> = e
            .env
            .value
            .path_prepend
            .iter()
            .map(|d| path_text(d))
            .collect();
        doc.styled_field(
            1,
            "PATH prepends",
            &[(Style::Plain, &dirs.join(":")), (Style::Dim, "  (user)")],
        );
    }
}

fn origin(o: Origin) -> String {
    format!("  ({})", o.as_str())
}

/// `key: value  (origin)`.
fn sourced(doc: &mut Doc, key: &str, value: &str, o: Origin) {
    doc.styled_field(1, key, &[(Style::Plain, value), (Style::Dim, &origin(o))]);
}

fn file_state(f: &LoadedFile) -> &'static str {
    if f.present {
        ""
    } else {
        "  (absent: defaults apply)"
    }
}

fn files(doc: &mut Doc, e: &Effective) {
    doc.heading("Configuration files");
    let user = &e.files.user;
    doc.styled_field(
        1,
        "user",
        &[
            (Style::Plain, &path_text(&user.path)),
            (Style::Dim, file_state(user)),
        ],
    );
    match (&e.project, &e.files.project) {
        (Some(project), Some(file)) => {
            let trust = match (file.present, e.files.project_trusted) {
                (false, _) => file_state(file),
                (true, true) => "  (trusted)",
                (true, false) => {
                    "  (untrusted: may only tighten the network policy and lower limits)"
                }
            };
            let style = if file.present && !e.files.project_trusted {
                Style::Warn
            } else {
                Style::Dim
            };
            doc.styled_field(
                1,
                "project",
                &[(Style::Plain, &path_text(&file.path)), (style, trust)],
            );
            doc.field(1, "project root", &path_text(&project.root));
        }
        (Some(project), None) => {
            doc.field(1, "project root", &path_text(&project.root));
        }
        (None, _) => {
            doc.styled_field(
                1,
                "project",
                &[(
                    Style::Dim,
                    "none (no .airlock/ or git work tree here; `airlock init` creates one)",
                )],
            );
        }
    }
}

fn sandbox(doc: &mut Doc, e: &Effective, roots: &Roots) {
    doc.heading("Sandbox");
    let image = match &e.image.value {
        Image::Host => "host".to_owned(),
        Image::Directory(p) => format!("directory {}", path_text(p)),
        Image::Named(n) => airlock_host::images::plan_label(roots, n),
    };
    sourced(doc, "image", &image, e.image.origin);
    let agent = e.agent.value.as_deref().unwrap_or("none (your shell)");
    sourced(doc, "agent", agent, e.agent.origin);
    sourced(
        doc,
        "memory_mb",
        &e.memory_mb.value.to_string(),
        e.memory_mb.origin,
    );
    let cpus = e
        .cpus
        .value
        .map_or("unlimited".to_owned(), |c| c.to_string());
    sourced(doc, "cpus", &cpus, e.cpus.origin);
    sourced(
        doc,
        "pids_max",
        &e.pids_max.value.to_string(),
        e.pids_max.origin,
    );
    for i in &e.ignored {
        doc.styled_field(
            1,
            &i.key,
            &[
                (Style::Warn, &format!("{} ignored (untrusted)", i.value)),
                (Style::Plain, " — "),
                (Style::Dim, &i.reason),
            ],
        );
    }
    let layout = serde_label(&e.layout.value);
    sourced(doc, "layout", &layout, e.layout.origin);
    sourced(
        doc,
        "detach_key",
        &e.detach_key.value.text,
        e.detach_key.origin,
    );
    if e.packages.is_empty() {
        doc.styled_field(1, "packages", &[(Style::Dim, "none")]);
    }
    for p in &e.packages {
        sourced(doc, "package", &p.value, p.origin);
    }
}

fn mappings(doc: &mut Doc, e: &Effective) {
    doc.heading("Mappings (host -> sandbox)");
    for w in &e.workspaces {
        let mode = serde_label(&w.mode.value);
        doc.styled_field(
            1,
            &format!("workspace {}", w.name),
            &[
                (Style::Plain, &path_text(&w.host_path)),
                (Style::Plain, " -> "),
                (Style::Plain, &path_text(&w.sandbox_path)),
                (
                    Style::Dim,
                    &format!("  (read-write, {mode}, {})", w.mode.origin.as_str()),
                ),
            ],
        );
        if let Some(linked) = &w.linked_git_dir {
            doc.styled_field(
                1,
                &format!("git dir {}", w.name),
                &[
                    (Style::Plain, &path_text(&linked.common_dir)),
                    (Style::Plain, " -> "),
                    (Style::Plain, &path_text(&linked.common_dir)),
                    (
                        Style::Dim,
                        "  (read-write, config and hooks read-only; the main repository of \
                         this linked worktree, confirmed by git's back-pointer)",
                    ),
                ],
            );
        }
    }
    doc.styled_field(
        1,
        "home",
        &[
            (Style::Plain, &path_text(&e.home.sandbox_path)),
            (
                Style::Dim,
                "  (the sandbox's own, empty; the host home is not mapped)",
            ),
        ],
    );
    for p in &e.protect {
        let state = if p.lifted {
            "lifted for this project".to_owned()
        } else if p.files_only {
            // Only a `gitdir:` file is protected; a directory of that name stays writable.
            format!("read-only when it is a file, {}", p.origin.as_str())
        } else {
            format!("read-only, {}", p.origin.as_str())
        };
        doc.styled_field(
            1,
            "protected",
            &[
                (Style::Plain, &p.path),
                (Style::Dim, &format!("  ({state})")),
            ],
        );
    }
    for m in &e.mounts {
        let access = if m.read_only {
            "read-only"
        } else {
            "read-write"
        };
        doc.styled_field(
            1,
            &format!("mount {}", m.name),
            &[
                (Style::Plain, &path_text(&m.host_path)),
                (Style::Plain, " -> "),
                (Style::Plain, &path_text(&m.sandbox_path)),
                (Style::Dim, &format!("  ({access}, user)")),
            ],
        );
    }
    for p in &e.ports {
        doc.styled_field(
            1,
            "published port",
            &[
                (
                    Style::Plain,
                    &format!("127.0.0.1:{} -> sandbox port {}", p.host, p.guest),
                ),
                (Style::Dim, "  (user, on every up)"),
            ],
        );
    }
}

fn rule_spans(r: &Rule) -> (String, String) {
    let action = match r.action {
        Action::Allow => "allow",
        Action::Deny => "deny",
    };
    (
        format!("{action} {}", r.pattern),
        format!("  ({})", rule_origin(&r.origin)),
    )
}

fn rule_origin(o: &RuleOrigin) -> String {
    o.to_string()
}

fn network(doc: &mut Doc, e: &Effective) {
    let n = &e.network;
    doc.heading("Network (egress proxy)");
    let builtin = airlock_config::presets::rules(n.preset.value).len();
    doc.styled_field(
        1,
        "preset",
        &[
            (Style::Plain, n.preset.value.as_str()),
            (
                Style::Dim,
                &format!(
                    "  ({}; {builtin} built-in rules, listed by `airlock policy ls`)",
                    n.preset.origin.as_str()
                ),
            ),
        ],
    );
    for r in n.rules.iter().chain(&n.agent_hosts) {
        let (text, o) = rule_spans(r);
        doc.styled_field(1, "rule", &[(Style::Plain, &text), (Style::Dim, &o)]);
    }
    for i in &n.ignored {
        doc.styled_field(
            1,
            "ignored",
            &[
                (Style::Warn, &format!("{} = {}", i.key, i.value)),
                (Style::Plain, " — "),
                (Style::Warn, &i.reason),
            ],
        );
    }
    for h in &n.hosts {
        doc.styled_field(
            1,
            "host",
            &[
                (Style::Plain, &format!("{} = {}", h.name, h.address)),
                (Style::Dim, &origin(h.origin)),
            ],
        );
    }
    for p in &n.host_ports {
        doc.styled_field(
            1,
            "host port",
            &[
                (
                    Style::Plain,
                    &format!(
                        "host 127.0.0.1:{} -> sandbox 127.0.0.1:{}",
                        p.port, p.guest_port
                    ),
                ),
                (Style::Dim, "  (user)"),
            ],
        );
    }
    for ca in &n.extra_ca {
        doc.styled_field(
            1,
            "extra CA",
            &[(Style::Plain, &path_text(ca)), (Style::Dim, "  (user)")],
        );
    }
}

/// One line per secret: its name, the hosts the proxy may send it to, the header its template
/// sets. Never a value (the store's listing has none).
fn secrets_section(doc: &mut Doc, secrets: &[SecretInfo]) {
    doc.heading("Secrets (names and hosts; values stay on the host)");
    if secrets.is_empty() {
        doc.text(
            1,
            &[(
                Style::Dim,
                "none; `airlock secret set NAME --host HOST` stores one",
            )],
        );
    }
    for s in secrets {
        let header = s
            .header
            .as_deref()
            .map(|h| format!("  (header {h})"))
            .unwrap_or_default();
        doc.styled_field(
            1,
            &s.name,
            &[(Style::Plain, &s.hosts.join(", ")), (Style::Dim, &header)],
        );
    }
}

fn agents(doc: &mut Doc, e: &Effective) {
    doc.heading("Agents");
    if e.agents.is_empty() {
        doc.text(
            1,
            &[(
                Style::Dim,
                "none configured; the default session runs your shell",
            )],
        );
    }
    for a in &e.agents {
        agent(doc, a);
    }
}

fn agent(doc: &mut Doc, a: &Agent) {
    let mut title = format!("{} ({})", a.spec.name, a.spec.display_name);
    if a.selected {
        title.push_str(", selected");
    }
    doc.text(1, &[(Style::Plain, &title)]);
    let args = format!("{} {}", a.spec.command, a.args.value.join(" "));
    nested(doc, "command", args.trim_end(), a.args.origin);
    nested(
        doc,
        "sync_config",
        yes_no(&a.sync_config),
        a.sync_config.origin,
    );
    nested(
        doc,
        "credentials",
        yes_no(&a.credentials),
        a.credentials.origin,
    );
    nested(
        doc,
        "persist_state",
        yes_no(&a.persist_state),
        a.persist_state.origin,
    );
    let dim = |doc: &mut Doc, key: &str, text: &str| {
        doc.styled_field(2, key, &[(Style::Dim, text)]);
    };
    if a.selected {
        let package = match a.spec.package {
            Some(airlock_config::agents::Package::Npm(n)) => format!("npm {n}"),
            Some(airlock_config::agents::Package::Pip(n)) => format!("pip {n}"),
            None => "no package".to_owned(),
        };
        let tools = format!(
            "{}/{} (read-only; when the image lacks `{}`, `up` installs {package})",
            airlock_host::agents::TOOLS_INSIDE,
            a.spec.name,
            a.spec.command
        );
        dim(doc, "tools", &tools);
    }
    if a.sync_config.value && !a.spec.config_sync.is_empty() {
        let from = if a.spec.config_dir.is_empty() {
            "~".to_owned()
        } else {
            format!("~/{}", a.spec.config_dir)
        };
        dim(
            doc,
            "syncs",
            &format!("{from}: {}", a.spec.config_sync.join(", ")),
        );
    }
    if a.persist_state.value {
        let state = format!(
            "{} (kept under airlock's data root, agent-state/{})",
            a.spec.state_paths.join(", "),
            a.spec.name
        );
        dim(doc, "state", &state);
    }
}

fn nested(doc: &mut Doc, key: &str, value: &str, o: Origin) {
    doc.styled_field(2, key, &[(Style::Plain, value), (Style::Dim, &origin(o))]);
}

fn yes_no(v: &Sourced<bool>) -> &'static str {
    if v.value {
        "yes"
    } else {
        "no"
    }
}

fn provisioning(doc: &mut Doc, e: &Effective) {
    doc.heading("Provisioning (in order)");
    if e.provisioning.is_empty() {
        doc.text(1, &[(Style::Dim, "nothing to provision")]);
    }
    for (i, step) in e.provisioning.iter().enumerate() {
        provision_step(doc, i + 1, step);
    }
}

fn provision_step(doc: &mut Doc, n: usize, s: &ProvisionStep) {
    let owner = match &s.owner {
        StepOwner::Airlock => "airlock".to_owned(),
        StepOwner::File(p) => path_text(p),
    };
    doc.styled_field(
        1,
        &format!("{n}. {}", serde_label(&s.phase)),
        &[
            (Style::Plain, &s.detail),
            (Style::Dim, &format!("  (owner: {owner})")),
        ],
    );
}

/// The serde name of a unit enum value (`plain`, `direct`, `user-script`): the same word the
/// config file and the JSON output use.
fn serde_label<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".to_owned(),
    }
}
