//! airlock-protocol: see docs/architecture.md.
