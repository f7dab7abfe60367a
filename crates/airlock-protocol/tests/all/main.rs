//! Integration tests of airlock-protocol (one test binary per crate).
mod decoder;
mod schema;
