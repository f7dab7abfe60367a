//! Integration tests of airlock-image (one test binary per crate).

mod archives;
mod import;
