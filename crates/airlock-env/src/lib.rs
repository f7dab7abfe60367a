//! airlock-env: the one catalogue of every environment variable airlock reads or sets.
//!
//! Code elsewhere names variables through these constants, never as string literals, so this
//! file is the complete list a reviewer needs to audit what crosses the host/sandbox boundary.
//! It is a leaf crate with no dependencies, so every crate (the guest's PID 1 and the proxy
//! included) can use it; `airlock-config` re-exports it as `airlock_config::env_vars`. A test
//! ([`ALL`] and the scan in `tests`) fails when non-test source in `crates/*/src` spells a
//! catalogued name as a string literal.

// ---- Read on the host -------------------------------------------------------------------

/// The invoking user's home directory; required and absolute. Also set inside the sandbox to
/// the same path (I3), which there is the sandbox's own directory.
pub const HOME: &str = "HOME";
/// Base for the user config (`$XDG_CONFIG_HOME/airlock`), default `~/.config`.
pub const XDG_CONFIG_HOME: &str = "XDG_CONFIG_HOME";
/// Base for state (`$XDG_STATE_HOME/airlock`), default `~/.local/state`.
pub const XDG_STATE_HOME: &str = "XDG_STATE_HOME";
/// Base for data: secrets, CA, images (`$XDG_DATA_HOME/airlock`), default `~/.local/share`.
pub const XDG_DATA_HOME: &str = "XDG_DATA_HOME";
/// Base for caches mapped in for package managers (`$XDG_CACHE_HOME/airlock`), default `~/.cache`.
pub const XDG_CACHE_HOME: &str = "XDG_CACHE_HOME";
/// Base for sockets (`$XDG_RUNTIME_DIR/airlock`), default `<state>/run`.
pub const XDG_RUNTIME_DIR: &str = "XDG_RUNTIME_DIR";
/// Preferred editor for `airlock config` (checked before `EDITOR`).
pub const VISUAL: &str = "VISUAL";
/// Fallback editor for `airlock config`.
pub const EDITOR: &str = "EDITOR";
/// When set (to anything), human output has no colour.
pub const NO_COLOR: &str = "NO_COLOR";
/// Terminal type; read on the host and passed into attached sessions (S2).
pub const TERM: &str = "TERM";
/// The user's login shell; the default session command when no agent is configured (S1).
pub const SHELL: &str = "SHELL";
/// When set, `airlock run` prints `airlock: phase <name> <ms>` lines on stderr (scripts/bench).
pub const AIRLOCK_TRACE_PHASES: &str = "AIRLOCK_TRACE_PHASES";
/// Certificate directory OpenSSL-style tools read; when it or [`SSL_CERT_FILE`] is set on the
/// host, the egress proxy takes its upstream roots from there.
pub const SSL_CERT_DIR: &str = "SSL_CERT_DIR";
/// The file `git config --global` reads instead of `~/.gitconfig`; when it is set, `up` asks
/// git for the user's identity (A5) even without a `~/.gitconfig`.
pub const GIT_CONFIG_GLOBAL: &str = "GIT_CONFIG_GLOBAL";

// ---- Test hooks and the test suite (debug builds only; release builds never read them) ----

/// Debug builds: `up` aborts when this phase starts (crash tests).
pub const AIRLOCK_TEST_CRASH_AT: &str = "AIRLOCK_TEST_CRASH_AT";
/// Debug builds: `up` sleeps 3 s when this phase starts (to press Ctrl+C mid-phase).
pub const AIRLOCK_TEST_PAUSE_AT: &str = "AIRLOCK_TEST_PAUSE_AT";
/// Debug builds: shortens the 30 s wait for a sandbox's lock (milliseconds).
pub const AIRLOCK_TEST_LOCK_WAIT_MS: &str = "AIRLOCK_TEST_LOCK_WAIT_MS";
/// The docs tests rewrite the generated man pages and references instead of comparing them.
pub const AIRLOCK_UPDATE_DOCS: &str = "AIRLOCK_UPDATE_DOCS";
/// Set by CI: a test that lacks root, the unprivileged test user or a tool fails instead of
/// skipping (`airlock-testkit`).
pub const CI: &str = "CI";

// ---- Set inside the sandbox ---------------------------------------------------------------

/// Egress proxy for plain HTTP (N1): `http://127.0.0.1:3128`.
pub const HTTP_PROXY: &str = "HTTP_PROXY";
/// Egress proxy for HTTPS/CONNECT (N1).
pub const HTTPS_PROXY: &str = "HTTPS_PROXY";
/// Lower-case spelling of [`HTTP_PROXY`]; curl only honours this one for http.
pub const HTTP_PROXY_LOWER: &str = "http_proxy";
/// Lower-case spelling of [`HTTPS_PROXY`].
pub const HTTPS_PROXY_LOWER: &str = "https_proxy";
/// Catch-all proxy variable some tools read instead of the two above.
pub const ALL_PROXY: &str = "ALL_PROXY";
/// Lower-case spelling of [`ALL_PROXY`].
pub const ALL_PROXY_LOWER: &str = "all_proxy";
/// Hosts reached without the proxy: only loopback (`localhost,127.0.0.1,::1`).
pub const NO_PROXY: &str = "NO_PROXY";
/// Lower-case spelling of [`NO_PROXY`].
pub const NO_PROXY_LOWER: &str = "no_proxy";
/// CA bundle for OpenSSL-based tools, including airlock's interception CA (N6).
pub const SSL_CERT_FILE: &str = "SSL_CERT_FILE";
/// CA bundle for Python `requests` (N6).
pub const REQUESTS_CA_BUNDLE: &str = "REQUESTS_CA_BUNDLE";
/// CA bundle for curl (N6).
pub const CURL_CA_BUNDLE: &str = "CURL_CA_BUNDLE";
/// Extra CA certificates for Node.js (N6).
pub const NODE_EXTRA_CA_CERTS: &str = "NODE_EXTRA_CA_CERTS";
/// CA bundle for git over HTTPS (N6).
pub const GIT_SSL_CAINFO: &str = "GIT_SSL_CAINFO";
/// CA bundle for cargo (N6).
pub const CARGO_HTTP_CAINFO: &str = "CARGO_HTTP_CAINFO";
/// UTF-8 locale inside the sandbox (S3): `C.UTF-8`. `LC_ALL` is left to the user, so a
/// command may still choose another locale category by category.
pub const LANG: &str = "LANG";
/// The sandbox user's name.
pub const USER: &str = "USER";
/// The sandbox user's name, as read by some tools instead of `USER`.
pub const LOGNAME: &str = "LOGNAME";
/// Executable search path inside the sandbox.
pub const PATH: &str = "PATH";
/// pip's download cache, in the package cache (P2).
pub const PIP_CACHE_DIR: &str = "PIP_CACHE_DIR";
/// npm's download cache, in the package cache (P2).
pub const NPM_CONFIG_CACHE: &str = "npm_config_cache";
/// uv's cache, in the package cache (P2).
pub const UV_CACHE_DIR: &str = "UV_CACHE_DIR";
/// cargo's home (registry, git checkouts), writable, in the package cache (P2, P4).
pub const CARGO_HOME: &str = "CARGO_HOME";
/// Go's module cache, in the package cache (P2).
pub const GOMODCACHE: &str = "GOMODCACHE";
/// rustup's home, mapped read-only by `[[tool]] name = "rust"` (P4).
pub const RUSTUP_HOME: &str = "RUSTUP_HOME";
/// pyenv's root, mapped read-only by `[[tool]] name = "pyenv"` (P4).
pub const PYENV_ROOT: &str = "PYENV_ROOT";
/// nvm's directory, mapped read-only by `[[tool]] name = "nvm"` (P4).
pub const NVM_DIR: &str = "NVM_DIR";

/// Every variable this catalogue names (a test keeps it complete).
pub const ALL: &[&str] = &[
    HOME,
    XDG_CONFIG_HOME,
    XDG_STATE_HOME,
    XDG_DATA_HOME,
    XDG_CACHE_HOME,
    XDG_RUNTIME_DIR,
    VISUAL,
    EDITOR,
    NO_COLOR,
    TERM,
    SHELL,
    AIRLOCK_TRACE_PHASES,
    SSL_CERT_DIR,
    GIT_CONFIG_GLOBAL,
    AIRLOCK_TEST_CRASH_AT,
    AIRLOCK_TEST_PAUSE_AT,
    AIRLOCK_TEST_LOCK_WAIT_MS,
    AIRLOCK_UPDATE_DOCS,
    CI,
    HTTP_PROXY,
    HTTPS_PROXY,
    HTTP_PROXY_LOWER,
    HTTPS_PROXY_LOWER,
    ALL_PROXY,
    ALL_PROXY_LOWER,
    NO_PROXY,
    NO_PROXY_LOWER,
    SSL_CERT_FILE,
    REQUESTS_CA_BUNDLE,
    CURL_CA_BUNDLE,
    NODE_EXTRA_CA_CERTS,
    GIT_SSL_CAINFO,
    CARGO_HTTP_CAINFO,
    LANG,
    USER,
    LOGNAME,
    PATH,
    PIP_CACHE_DIR,
    NPM_CONFIG_CACHE,
    UV_CACHE_DIR,
    CARGO_HOME,
    GOMODCACHE,
    RUSTUP_HOME,
    PYENV_ROOT,
    NVM_DIR,
];

/// Variables airlock reads on the host.
pub const READ_ON_HOST: &[&str] = &[
    HOME,
    XDG_CONFIG_HOME,
    XDG_STATE_HOME,
    XDG_DATA_HOME,
    XDG_CACHE_HOME,
    XDG_RUNTIME_DIR,
    VISUAL,
    EDITOR,
    NO_COLOR,
    TERM,
    SHELL,
    GIT_CONFIG_GLOBAL,
];

/// Proxy variables set for every sandbox process (N1).
pub const PROXY_VARS: &[&str] = &[
    HTTP_PROXY,
    HTTPS_PROXY,
    HTTP_PROXY_LOWER,
    HTTPS_PROXY_LOWER,
    ALL_PROXY,
    ALL_PROXY_LOWER,
];

/// Variables pointing tools at the CA bundle that includes airlock's interception CA (N6).
pub const CA_BUNDLE_VARS: &[&str] = &[
    SSL_CERT_FILE,
    REQUESTS_CA_BUNDLE,
    CURL_CA_BUNDLE,
    NODE_EXTRA_CA_CERTS,
    GIT_SSL_CAINFO,
    CARGO_HTTP_CAINFO,
];

/// Variables pointing package managers into the package cache (P2), with the cache-relative
/// directory each one names.
pub const CACHE_DIRS: &[(&str, &str)] = &[
    (PIP_CACHE_DIR, "pip"),
    (NPM_CONFIG_CACHE, "npm"),
    (UV_CACHE_DIR, "uv"),
    (CARGO_HOME, "cargo"),
    (GOMODCACHE, "go-mod"),
];

/// The names of [`CACHE_DIRS`].
pub const CACHE_VARS: &[&str] = &[
    PIP_CACHE_DIR,
    NPM_CONFIG_CACHE,
    UV_CACHE_DIR,
    CARGO_HOME,
    GOMODCACHE,
];

/// Where the package cache appears inside the sandbox (P2).
pub const SANDBOX_CACHE_DIR: &str = "/var/cache/airlock";

/// The proxy's port on the sandbox's loopback (N1).
pub const PROXY_PORT: u16 = 3128;

/// The proxy address inside the sandbox (N1): `127.0.0.1:`[`PROXY_PORT`] (a test keeps them equal).
pub const PROXY_URL: &str = "http://127.0.0.1:3128";

/// The value of [`NO_PROXY`] inside the sandbox.
pub const NO_PROXY_VALUE: &str = "localhost,127.0.0.1,::1";

/// The locale inside the sandbox (S3).
pub const SANDBOX_LOCALE: &str = "C.UTF-8";

#[cfg(test)]
mod tests;
