//! `[[ports]]` validation (user config only): host loopback ports forwarded into every sandbox
//! on each `up`, like `airlock ports --publish HOST:GUEST`.
//!
//! Checks, all reported at once with file, key and line (keys use the entry's index in the
//! file): at most [`MAX_PORTS`] entries (the first one past the limit is reported, all are
//! still checked) → each port from 1 to
//! 65535 (the parser already refused values outside `u16`) → a host port appears once. A
//! project config never reaches here: the parser refuses the key there (C6: a repository
//! does not choose what listens on the developer's machine).

use std::collections::BTreeSet;

use serde::Serialize;

use crate::diagnostics::Diagnostic;
use crate::parse::ParsedFile;

/// Most `[[ports]]` entries a user config may declare.
pub const MAX_PORTS: usize = 32;

/// A validated `[[ports]]` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PublishedPort {
    /// Port on the host's loopback interface (`127.0.0.1` only).
    pub host: u16,
    /// Port inside the sandbox.
    pub guest: u16,
}

/// The user config's validated ports, in file order; problems are pushed to `d`.
pub(crate) fn validate(user: Option<&ParsedFile>, d: &mut Vec<Diagnostic>) -> Vec<PublishedPort> {
    let Some(file) = user else {
        return Vec::new();
    };
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (n, (&i, raw)) in file.port_index.iter().zip(&file.raw.ports).enumerate() {
        let key = format!("ports[{i}]");
        if n == MAX_PORTS {
            d.push(file.diag(
                &key,
                format!(
                    "at most {MAX_PORTS} `[[ports]]` entries are allowed, found {}; \
                     remove the extra ones or publish them with `airlock ports --publish`",
                    file.raw.ports.len()
                ),
            ));
        }
        let mut ok = true;
        for (what, port) in [("host", raw.host), ("guest", raw.guest)] {
            if port == 0 {
                d.push(file.diag(
                    &format!("{key}.{what}"),
                    format!("{what} port 0 is not allowed; use a port from 1 to 65535"),
                ));
                ok = false;
            }
        }
        if raw.host != 0 && !seen.insert(raw.host) {
            d.push(file.diag(
                &format!("{key}.host"),
                format!(
                    "host port {} is listed twice; a host port forwards to one sandbox port",
                    raw.host
                ),
            ));
            ok = false;
        }
        if ok && n < MAX_PORTS {
            out.push(PublishedPort {
                host: raw.host,
                guest: raw.guest,
            });
        }
    }
    out
}
