//! Integration tests of airlock-files (one test binary per crate).
mod harness;
mod hostile;
mod race;
mod resolve;
mod roundtrip;
