//! Runtime tests (tiers T2–T4): the real binary, real namespaces, mounts, seccomp and cgroups.
//!
//! Every test runs twice through [`both!`]: as the invoking user of the test suite (root in CI)
//! and as the unprivileged user `airlock-test` (created by `scripts/test`). A missing test user
//! fails the test with a message naming `scripts/test`; set `AIRLOCK_TEST_NO_UNPRIVILEGED=1` to
//! opt out explicitly.
//!
//! Each test asserts a guarantee a user relies on and fails when the layer providing it is
//! removed (the guarantee each test pins is in its name and comment).

#[macro_use]
pub(crate) mod harness;
mod attacks;
mod exit_codes;
mod hardening;
mod identity;
pub(crate) mod images;
mod isolation;
mod lifecycle;
mod markers;
mod protect;
mod run_end;
