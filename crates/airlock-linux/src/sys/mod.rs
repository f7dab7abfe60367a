//! Thin syscall wrappers. The only place in the workspace where `unsafe` is allowed;
//! every block carries a `// SAFETY:` line.
#![allow(unsafe_code)]

pub mod fd;
pub mod filter_check;
pub mod fork;
pub mod idmount;
pub mod janitor;
pub mod mem;
pub mod monitor;
pub mod net;
pub mod probe;
pub mod process;
pub mod spawn;
pub mod start;
