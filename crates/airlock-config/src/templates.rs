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
        None => "# image = \"host\"          # the host's system files; a directory image: user config\n"
            .to_owned(),
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
         # persist_state = false\n"
    )
}

fn toml_string(s: &str) -> String {
    toml_edit::Value::from(s).to_string()
}
