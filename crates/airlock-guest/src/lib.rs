//! airlock-guest: see docs/architecture.md.
