//! The init stage's share of issue 9's budget on the start path ("the id-mapped mounts and the
//! tmpfs sizes must not cost more than 0.5 ms of `run -- true`"), measured where it is spent
//! and reported to the host with the `ready` line; `run` prints it with
//! `AIRLOCK_TRACE_PHASES` (`airlock: cost <name> <ms>`) and `scripts/bench-run` takes medians:
//! - `attach`: attaching the id-mapped mounts the host passed (`move_mount`, a root invoker's
//!   sandbox; an unprivileged invoker's binds host paths instead, which this does not count);
//! - `masks`: covering the image's entries others may not read (`rootfs/unreadable.rs`);
//! - `sizes`: sizing the tmpfs mounts to `memory_mb` (`rootfs/budget.rs`): computing the sizes
//!   and options and the scratch tmpfs's `fsconfig(size)` call. `/dev` and `/dev/shm` take
//!   theirs in the option string of their `mount` call, whose parsing is not separable.
//!
//! PID 1 builds the root filesystem single-threaded, once: the sums are process-wide.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Time the init stage spent on each part of the budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Costs {
    pub attach: Duration,
    pub masks: Duration,
    pub sizes: Duration,
}

/// A part of the budget, accumulated by [`timed`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Cost {
    Attach,
    Masks,
    Sizes,
}

static ATTACH_NS: AtomicU64 = AtomicU64::new(0);
static MASKS_NS: AtomicU64 = AtomicU64::new(0);
static SIZES_NS: AtomicU64 = AtomicU64::new(0);

fn counter(cost: Cost) -> &'static AtomicU64 {
    match cost {
        Cost::Attach => &ATTACH_NS,
        Cost::Masks => &MASKS_NS,
        Cost::Sizes => &SIZES_NS,
    }
}

/// Runs `f`, adding its duration to `cost`.
pub(crate) fn timed<T>(cost: Cost, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let out = f();
    let ns = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
    counter(cost).fetch_add(ns, Ordering::Relaxed);
    out
}

impl Costs {
    /// What this process measured so far.
    pub fn measured() -> Costs {
        let get = |c: Cost| Duration::from_nanos(counter(c).load(Ordering::Relaxed));
        Costs {
            attach: get(Cost::Attach),
            masks: get(Cost::Masks),
            sizes: get(Cost::Sizes),
        }
    }

    /// The text sent after `ready`: `attach=<ns> masks=<ns> sizes=<ns>`.
    pub fn line(&self) -> String {
        format!(
            "attach={} masks={} sizes={}",
            self.attach.as_nanos(),
            self.masks.as_nanos(),
            self.sizes.as_nanos()
        )
    }

    /// Reads [`Costs::line`]; a part missing or malformed reads as zero (these are figures for
    /// a benchmark, never a reason to fail a start).
    pub fn parse(text: &str) -> Costs {
        let mut costs = Costs::default();
        for part in text.split_whitespace() {
            let Some((name, ns)) = part.split_once('=') else {
                continue;
            };
            let Ok(ns) = ns.parse::<u64>() else { continue };
            let took = Duration::from_nanos(ns);
            match name {
                "attach" => costs.attach = took,
                "masks" => costs.masks = took,
                "sizes" => costs.sizes = took,
                _ => {}
            }
        }
        costs
    }

    /// `(name, duration)` for each part, in the names `run` prints (`airlock: cost <name>`).
    pub fn named(&self) -> [(&'static str, Duration); 3] {
        [
            ("init-attach-idmounts", self.attach),
            ("init-unreadable-masks", self.masks),
            ("init-tmpfs-sizes", self.sizes),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ready_line_carries_each_cost_and_tolerates_garbage() {
        let costs = Costs {
            attach: Duration::from_nanos(12_345),
            masks: Duration::from_nanos(7),
            sizes: Duration::from_nanos(0),
        };
        assert_eq!(Costs::parse(&costs.line()), costs);
        assert_eq!(Costs::parse(""), Costs::default());
        assert_eq!(
            Costs::parse("attach=x masks=5 junk sizes=-1"),
            Costs {
                masks: Duration::from_nanos(5),
                ..Costs::default()
            }
        );
    }
}
