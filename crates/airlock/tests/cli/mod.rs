//! Tests of the public command surface (issue 2).

mod completions;
mod config;
mod docs;
mod doctor;
mod hostile_project;
mod init;
mod plan;
mod policy;
mod secret;
mod trust;
mod usage;
mod version;
