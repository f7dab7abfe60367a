//! Tests of the public command surface (issue 2).

mod config;
mod doctor;
mod init;
mod plan;
mod trust;
mod usage;
mod version;
