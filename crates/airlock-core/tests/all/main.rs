//! One integration test binary for airlock-core (keeps link time down on 2 cores).
//!
//! Multi-process tests re-run this binary with `--exact workers::worker_entry` and
//! `AIRLOCK_CORE_TEST_WORKER` set; see `workers.rs`.

mod common;
mod lock_holder;
mod private_dir;
mod state_cas;
mod state_crash;
mod trust;
mod workers;
