//! The one integration-test binary of the `airlock` crate (one binary keeps link time down on
//! small machines). Every test runs the real executable in its own temporary HOME/XDG world
//! with a cleared environment; see [`common::TestEnv`].

pub mod common;

mod agents;
mod cli;
mod lifecycle;
mod network;
mod runtime;
mod sessions;
mod vm;
