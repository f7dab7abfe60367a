//! The `linux` backend: builds a sandbox from a plan it is handed.
//! See docs/architecture.md. `sys/` is the only module allowed to contain `unsafe`.
#![deny(unsafe_code)]

pub mod cgroup;
pub mod doctor;
pub mod seccomp;
pub mod sys;
