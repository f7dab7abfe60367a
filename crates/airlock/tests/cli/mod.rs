//! Tests of the public command surface (issue 2).

mod usage;
mod version;
