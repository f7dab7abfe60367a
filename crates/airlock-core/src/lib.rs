//! airlock-core: see docs/architecture.md.
