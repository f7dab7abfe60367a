//! airlock-core: the host-side state layer, and later lifecycle orchestration
//! (see docs/architecture.md).
//!
//! - [`atomic`]: atomic file replacement (temp, fsync, rename, directory fsync), with the
//!   flushes a write needs ([`Durability`]).
//! - [`private_dir`]: verifies/creates directories only the invoking user controls.
//! - [`state`]: revisioned JSON records with compare-and-swap ([`StateStore`]).
//! - [`lock`]: the per-sandbox `flock` with bounded waiting and holder identity ([`SandboxLock`]).
//! - [`trust`]: which projects may widen network policy ([`TrustStore`]).
//! - [`known_roots`]: project roots airlock has used, so a workspace never silently widens
//!   ([`KnownRoots`]).
//! - [`names`], [`records`], [`ownership`], [`backend`], [`lifecycle`]: sandbox identity, the
//!   lifecycle's records, ownership proofs (R2), the backend boundary (§13) and the operations
//!   `up`, `down`, `clean`, `status` (§4).
//!
//! Invariant across modules: reading never creates or changes anything on disk, so read-only
//! commands (`plan`, `status`) can use the same types as mutating ones.

pub mod atomic;
pub mod backend;
mod flock_wait;
pub mod known_roots;
pub mod lifecycle;
pub mod lock;
pub mod names;
pub mod ownership;
pub mod private_dir;
pub mod records;
pub mod state;
pub mod trust;

pub use atomic::{write_atomic, write_atomic_with, AtomicWriteError, Durability};
pub use known_roots::{KnownRoots, KnownRootsError};
pub use lock::{Holder, LockError, LockGuard, SandboxLock};
pub use private_dir::{check_private_dir, ensure_private_dir, DirPresence, PrivateDirError};
pub use state::{Record, StateError, StateStore};
pub use trust::{TrustEntry, TrustError, TrustStore};
