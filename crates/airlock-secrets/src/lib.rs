//! airlock-secrets: the host-side secret store.
