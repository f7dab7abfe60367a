//! The `linux` backend: builds a sandbox from a plan it is handed.
//! See docs/architecture.md. `sys/` is the only module allowed to contain `unsafe`.
#![deny(unsafe_code)]

pub mod bootstrap;
pub mod cgroup;
pub mod doctor;
pub mod host;
pub mod idmap;
pub mod idmounts;
pub mod init;
pub mod pidfd;
pub mod rootfs;
pub mod seccomp;
pub mod spec;
pub mod sys;
