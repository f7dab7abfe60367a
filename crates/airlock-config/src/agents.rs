//! The built-in agent catalogue (A1).
//!
//! Each entry is data: the command, the arguments it gets inside a sandbox (where the sandbox,
//! not the agent's own permission prompts, is the security boundary), the hosts its API needs
//! (added to the policy whenever the agent is selected, whatever the preset), the allowlist of
//! *user-authored* configuration that `sync_config` may copy (A2: never credentials, history,
//! transcripts, logs or caches), the files that hold its login (A4: mapped only with
//! `persist_state`), and the environment variables that carry API keys (A3: only through proxy
//! placeholders).
//!
//! `config_dir` is relative to the home directory (empty: the home itself); `config_sync`
//! entries are relative to `config_dir`, a trailing `/` marks a directory; `state_paths` are
//! relative to the home directory.

use serde::Serialize;

/// One agent of the catalogue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentSpec {
    /// Catalogue name used in config files (`agent = "claude"`).
    pub name: &'static str,
    /// Human name.
    pub display_name: &'static str,
    /// Executable started in the default session.
    pub command: &'static str,
    /// Arguments used unless `[agents.<name>] args` replaces them.
    pub default_args: &'static [&'static str],
    /// Host patterns of the agent's API and login endpoints.
    pub api_hosts: &'static [&'static str],
    /// The agent's configuration directory, relative to the home directory (`""`: the home).
    /// Config sync reads beneath it and never follows a link out of it.
    pub config_dir: &'static str,
    /// User-authored configuration (relative to `config_dir`) that `sync_config` may copy.
    pub config_sync: &'static [&'static str],
    /// Files and directories that hold the agent's login and state (A4).
    pub state_paths: &'static [&'static str],
    /// Environment variables carrying API keys; only ever set to placeholders (N5).
    pub api_key_env: &'static [&'static str],
    /// The package that provides `command` when the image lacks it (A1); `None` for a
    /// user-defined agent without one (the image must have it).
    pub package: Option<Package>,
}

/// Where an agent's command comes from when the image does not have it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "manager", content = "name")]
pub enum Package {
    /// An npm package installed with `npm install --global --prefix <tool dir>`.
    Npm(&'static str),
    /// A Python package installed into a virtual environment in the tool dir.
    Pip(&'static str),
}

/// Every agent airlock knows.
pub const CATALOGUE: &[AgentSpec] = &[
    AgentSpec {
        name: "claude",
        display_name: "Claude Code",
        command: "claude",
        default_args: &["--dangerously-skip-permissions"],
        api_hosts: &[
            "api.anthropic.com",
            "console.anthropic.com",
            "statsig.anthropic.com",
            "claude.ai",
        ],
        config_dir: ".claude",
        config_sync: &[
            "CLAUDE.md",
            "settings.json",
            "commands/",
            "agents/",
            "skills/",
        ],
        state_paths: &[".claude/", ".claude.json"],
        api_key_env: &["ANTHROPIC_API_KEY"],
        package: Some(Package::Npm("@anthropic-ai/claude-code")),
    },
    AgentSpec {
        name: "codex",
        display_name: "Codex CLI",
        command: "codex",
        default_args: &["--dangerously-bypass-approvals-and-sandbox"],
        api_hosts: &[
            "api.openai.com",
            "auth.openai.com",
            "chatgpt.com",
            "ab.chatgpt.com",
        ],
        config_dir: ".codex",
        config_sync: &["config.toml", "AGENTS.md", "prompts/"],
        state_paths: &[".codex/"],
        api_key_env: &["OPENAI_API_KEY"],
        package: Some(Package::Npm("@openai/codex")),
    },
    AgentSpec {
        name: "opencode",
        display_name: "OpenCode",
        command: "opencode",
        default_args: &[],
        api_hosts: &["opencode.ai", "*.opencode.ai", "models.dev"],
        config_dir: ".config/opencode",
        config_sync: &["opencode.json", "AGENTS.md", "agent/", "command/"],
        state_paths: &[".local/share/opencode/"],
        api_key_env: &["ANTHROPIC_API_KEY", "OPENAI_API_KEY"],
        package: Some(Package::Npm("opencode-ai")),
    },
    AgentSpec {
        name: "gemini",
        display_name: "Gemini CLI",
        command: "gemini",
        default_args: &["--yolo"],
        api_hosts: &[
            "generativelanguage.googleapis.com",
            "cloudcode-pa.googleapis.com",
            "oauth2.googleapis.com",
            "play.googleapis.com",
        ],
        config_dir: ".gemini",
        config_sync: &["settings.json", "GEMINI.md", "commands/"],
        state_paths: &[".gemini/"],
        api_key_env: &["GEMINI_API_KEY"],
        package: Some(Package::Npm("@google/gemini-cli")),
    },
    AgentSpec {
        name: "copilot",
        display_name: "GitHub Copilot CLI",
        command: "copilot",
        default_args: &["--allow-all-tools"],
        api_hosts: &[
            "api.github.com",
            "api.githubcopilot.com",
            "**.githubcopilot.com",
        ],
        config_dir: ".copilot",
        config_sync: &["agents/"],
        state_paths: &[".copilot/"],
        api_key_env: &["GH_TOKEN", "GITHUB_TOKEN"],
        package: Some(Package::Npm("@github/copilot")),
    },
    AgentSpec {
        name: "aider",
        display_name: "Aider",
        command: "aider",
        default_args: &[],
        api_hosts: &["api.openai.com", "api.anthropic.com"],
        config_dir: "",
        config_sync: &[".aider.conf.yml", ".aider.model.settings.yml"],
        state_paths: &[".aider/"],
        api_key_env: &["OPENAI_API_KEY", "ANTHROPIC_API_KEY"],
        package: Some(Package::Pip("aider-chat")),
    },
];

/// Headers other than `Authorization` that agents' APIs read a key from, by the environment
/// variable that holds it (N5): a secret of that name may also be carried in these headers.
/// Anthropic's API reads `x-api-key`, Gemini's `x-goog-api-key`; OpenAI and GitHub use
/// `Authorization`, which every secret may use.
pub const API_KEY_HEADERS: &[(&str, &[&str])] = &[
    ("ANTHROPIC_API_KEY", &["x-api-key"]),
    ("GEMINI_API_KEY", &["x-goog-api-key"]),
];

/// The extra headers (lowercase) the catalogue names for a key held in `env`.
pub fn api_key_headers(env: &str) -> &'static [&'static str] {
    API_KEY_HEADERS
        .iter()
        .find(|(name, _)| *name == env)
        .map_or(&[], |(_, headers)| headers)
}

/// The built-in catalogue entry named `name`.
pub fn find(name: &str) -> Option<&'static AgentSpec> {
    CATALOGUE.iter().find(|a| a.name == name)
}

/// Catalogue names, in catalogue order.
pub fn names() -> impl Iterator<Item = &'static str> {
    CATALOGUE.iter().map(|a| a.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::HostPattern;
    use std::collections::HashSet;

    #[test]
    fn catalogue_has_the_agents_the_product_names() {
        for name in ["claude", "codex", "opencode", "gemini", "copilot", "aider"] {
            assert!(find(name).is_some(), "{name} missing");
        }
        assert_eq!(find("claude").unwrap().command, "claude");
        let unique: HashSet<_> = names().collect();
        assert_eq!(unique.len(), CATALOGUE.len());
    }

    #[test]
    fn api_key_headers_belong_to_catalogued_keys_and_are_lowercase_tokens() {
        for (env, headers) in API_KEY_HEADERS {
            assert!(
                CATALOGUE.iter().any(|a| a.api_key_env.contains(env)),
                "{env} is no agent's key"
            );
            for h in *headers {
                assert!(
                    !h.is_empty() && h.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'),
                    "{h}"
                );
            }
        }
        assert_eq!(api_key_headers("ANTHROPIC_API_KEY"), ["x-api-key"]);
        assert!(api_key_headers("OPENAI_API_KEY").is_empty());
    }

    #[test]
    fn every_agent_api_host_is_a_valid_pattern() {
        for agent in CATALOGUE {
            assert!(!agent.api_hosts.is_empty(), "{}", agent.name);
            for host in agent.api_hosts {
                HostPattern::parse(host).unwrap_or_else(|e| panic!("{}: {e}", agent.name));
            }
        }
    }

    #[test]
    fn config_sync_never_includes_login_files_or_credentials() {
        for agent in CATALOGUE {
            for sync in agent.config_sync {
                assert!(!sync.starts_with('/') && !sync.contains(".."), "{sync}");
                for lower in ["credential", "auth", "token", "oauth", "history", "log"] {
                    assert!(
                        !sync.to_ascii_lowercase().contains(lower),
                        "{}: {sync} looks like a credential/history file",
                        agent.name
                    );
                }
                // A sync entry may sit inside a state directory (it is user-authored), but it
                // must never be a whole state directory or state file.
                let home_rel = if agent.config_dir.is_empty() {
                    (*sync).to_owned()
                } else {
                    format!("{}/{sync}", agent.config_dir)
                };
                assert!(
                    !agent.state_paths.contains(&home_rel.as_str()),
                    "{}: {sync}",
                    agent.name
                );
            }
        }
    }
}
