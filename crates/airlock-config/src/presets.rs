//! Built-in network presets (N2).
//!
//! `dev` lists what a developer's tools need to fetch code and dependencies, and the LLM APIs
//! agents talk to. Choices:
//! - Read-mostly registries and toolchain hosts are listed by exact name; wildcards only where
//!   the service itself spreads over many names (GitHub's API, uploads and raw content hosts).
//! - General-purpose storage hosts (`storage.googleapis.com`, `*.s3.amazonaws.com`,
//!   `*.blob.core.windows.net`) are NOT listed: anyone can write to them, so they would be an
//!   exfiltration channel. Allow them explicitly when a tool needs them.
//! - Code hosts such as github.com accept pushes; that is the point of a dev sandbox, and
//!   credentials for them only arrive through opt-in secrets (N5).

use crate::policy::{Action, HostPattern, Rule, RuleOrigin};
use crate::raw::Preset;

/// Code hosting (clone, fetch, releases).
pub const CODE_HOSTS: &[&str] = &[
    "github.com",
    "**.github.com",
    "**.githubusercontent.com",
    "gitlab.com",
    "registry.gitlab.com",
    "bitbucket.org",
    "codeberg.org",
];

/// Package registries and distribution mirrors.
pub const REGISTRIES: &[&str] = &[
    // Rust
    "crates.io",
    "static.crates.io",
    "index.crates.io",
    // Python
    "pypi.org",
    "files.pythonhosted.org",
    // JavaScript
    "registry.npmjs.org",
    "registry.yarnpkg.com",
    "repo.yarnpkg.com",
    // Go (the module proxy and checksum database)
    "proxy.golang.org",
    "sum.golang.org",
    // Debian / Ubuntu / Alpine (apt and apk through the proxy, P1)
    "deb.debian.org",
    "security.debian.org",
    "archive.ubuntu.com",
    "security.ubuntu.com",
    "ports.ubuntu.com",
    "dl-cdn.alpinelinux.org",
    // Ruby
    "rubygems.org",
    "index.rubygems.org",
    // JVM
    "repo.maven.apache.org",
    "repo1.maven.org",
    "plugins.gradle.org",
    "services.gradle.org",
    // .NET, PHP, Elixir
    "api.nuget.org",
    "repo.packagist.org",
    "repo.hex.pm",
];

/// Language toolchain downloads.
pub const TOOLCHAINS: &[&str] = &[
    "static.rust-lang.org",
    "sh.rustup.rs",
    "nodejs.org",
    "go.dev",
    // go.dev/dl redirects the actual archives to dl.google.com (download-only host).
    "dl.google.com",
    "www.python.org",
];

/// LLM provider APIs.
pub const LLM_APIS: &[&str] = &[
    "api.anthropic.com",
    "api.openai.com",
    "generativelanguage.googleapis.com",
    "api.mistral.ai",
    "openrouter.ai",
];

/// The allow rules a preset contributes (only `dev` has a list: `none` allows nothing and
/// `open` allows everything without a list).
pub fn rules(preset: Preset) -> Vec<Rule> {
    match preset {
        Preset::None | Preset::Open => Vec::new(),
        Preset::Dev => [CODE_HOSTS, REGISTRIES, TOOLCHAINS, LLM_APIS]
            .concat()
            .into_iter()
            .map(|p| Rule {
                action: Action::Allow,
                pattern: HostPattern::parse(p).unwrap_or_else(|e| {
                    unreachable!("built-in preset pattern {p:?} is invalid: {e}")
                }),
                origin: RuleOrigin::Preset(Preset::Dev),
            })
            .collect(),
    }
}
