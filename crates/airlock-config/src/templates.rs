//! Templates written by `airlock init` (project) and `airlock config` (user).

use crate::schema::SCHEMA_FILE_NAME;

/// The project config written by `airlock init`.
pub fn project_template(agent: Option<&str>, image: Option<&str>) -> String {
    let agent_line = match agent {
        Some(a) => format!("agent = {}\n", toml_string(a)),
        None => "# agent = \"claude\"        # claude, codex, opencode, gemini, copilot, aider\n"
            .to_owned(),
    };
    let image_line = match image {
        Some(i) => format!("image = {}\n", toml_string(i)),
        None => {
            "# image = \"host\"          # the host's system files, or an imported image's name\n"
                .to_owned()
        }
    };
    format!(
        "# airlock project configuration (.airlock/config.toml).\n\
         # Checked into the repository; shared by everyone who works on it.\n\
         # Mounts, secrets, credential opt-ins, extra CAs and host ports belong in your user\n\
         # config (`airlock config`), never here.\n\
         \n\
         {agent_line}{image_line}\
         # memory_mb = 8192\n\
         # cpus = 2.0\n\
         # pids_max = 4096\n\
         # layout = \"plain\"         # or \"tmux\"\n\
         # workspace_mode = \"direct\" # or \"clone\"\n\
         # packages = [\"build-essential\"]\n\
         \n\
         # Provisioning: .airlock/provision.sh (next to this file) runs inside the sandbox on\n\
         # EVERY `airlock up`, fresh or retained, after the user's provision script. It must be\n\
         # idempotent: running it twice must leave the same result as running it once.\n\
         \n\
         # Tables such as [network] come last: every key after a [table] line belongs to that\n\
         # table, so keep top-level keys above them. Until you run `airlock trust`, a project\n\
         # config may only tighten the network policy and lower limits.\n\
         # [network]\n\
         # preset = \"dev\"           # none | dev | open\n\
         # allow = [\"api.example.com\", \"*.example.org:8443\"]\n\
         # deny = [\"telemetry.example.com\"]\n"
    )
}

/// The project provision script written by `airlock init` (`.airlock/provision.sh`).
pub fn provision_template() -> String {
    "# airlock provision script: runs INSIDE the sandbox on EVERY `airlock up`, fresh or\n\
     # retained, after `packages` and your user provision script, with the project root as the\n\
     # working directory. It runs with /bin/sh (with bash when the first line is a bash `#!`).\n\
     #\n\
     # Make it idempotent: a second run must leave the same result as the first, and should be\n\
     # quick when there is nothing to do (test before you install).\n\
     #\n\
     # It runs as the sandbox user. To run it as the sandbox's root (namespaced: never the\n\
     # host's root), put this line among the leading comments:\n\
     #   # airlock: run-as root\n\
     #\n\
     # Downloads go through airlock's proxy (the network policy applies) and the package\n\
     # managers' caches (pip, npm, uv, cargo, go, apt) live in /var/cache/airlock, which\n\
     # survives `airlock down`.\n\
     \n\
     set -eu\n\
     \n\
     # [ -d .venv ] || python3 -m venv .venv\n\
     # .venv/bin/pip install -q -r requirements.txt\n\
     # [ -d node_modules ] || npm ci\n"
        .to_owned()
}

/// The user config written by `airlock config` when absent.
pub fn user_template() -> String {
    format!(
        "#:schema ./{SCHEMA_FILE_NAME}\n\
         # airlock user configuration. The schema beside this file is refreshed by\n\
         # `airlock config`; editors with TOML schema support (taplo, Even Better TOML) use it.\n\
         \n\
         # agent = \"claude\"\n\
         # memory_mb = 8192\n\
         # detach_key = \"ctrl-]\"\n\
         \n\
         # Host directories mapped into every sandbox at the same path (at most 16).\n\
         # read_only is required.\n\
         # [[mount]]\n\
         # name = \"datasets\"\n\
         # path = \"/srv/datasets\"\n\
         # read_only = true\n\
         \n\
         [network]\n\
         # preset = \"dev\"           # none | dev | open\n\
         # allow = []\n\
         # deny = []\n\
         # extra_ca = [\"/etc/ssl/corp-root.pem\"]\n\
         \n\
         # Expose a host loopback port inside the sandbox at 127.0.0.1:PORT.\n\
         # [[network.host_port]]\n\
         # port = 5432\n\
         \n\
         # Per-agent opt-ins (credentials and persist_state only here, never in a project).\n\
         # [agents.claude]\n\
         # sync_config = true\n\
         # credentials = false\n\
         # persist_state = false\n\
         \n\
         # Host toolchains mapped read-only at their host path, without credential files:\n\
         # rust (~/.rustup, ~/.cargo/bin), pyenv (~/.pyenv), nvm (~/.nvm), local-bin (~/.local/bin).\n\
         # [[tool]]\n\
         # name = \"rust\"\n\
         \n\
         # Environment of every sandbox process.\n\
         # [env]\n\
         # path_prepend = [\"/opt/tools/bin\"]\n\
         # [env.vars]\n\
         # RUST_LOG = \"info\"\n\
         \n\
         # One package cache for all projects (default: one per project).\n\
         # [cache]\n\
         # shared = false\n"
    )
}

fn toml_string(s: &str) -> String {
    toml_edit::Value::from(s).to_string()
}
