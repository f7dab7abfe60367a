//! airlock-config: see docs/architecture.md.
