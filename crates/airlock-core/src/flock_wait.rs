//! Bounded waiting for an exclusive `flock(2)`.
//!
//! `flock` has no timeout, and a blocking call cannot be bounded without signals, so we poll
//! with `LOCK_NB` and short sleeps (0.1 ms doubling to 2 ms) until the deadline. The ceiling
//! is kept low on purpose: a waiter that sleeps long loses every race against a holder that
//! unlocks and immediately relocks, and starves (measured: with a 16 ms ceiling, four
//! processes incrementing one record ran strictly one after another). The lock belongs
//! to the open file description: the kernel drops it when the last descriptor closes, which
//! includes the owning process dying by any signal. That is why a crashed holder never wedges
//! the next command.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use rustix::fs::FlockOperation;
use rustix::io::Errno;

const FIRST_SLEEP: Duration = Duration::from_micros(100);
const MAX_SLEEP: Duration = Duration::from_millis(2);

/// Takes an exclusive lock on `fd`, waiting at most `wait`. `Ok(false)` means still busy at the
/// deadline. `wait == 0` tries exactly once.
pub(crate) fn lock_exclusive_within(fd: impl AsFd, wait: Duration) -> Result<bool, Errno> {
    let deadline = Instant::now() + wait;
    let mut sleep = FIRST_SLEEP;
    loop {
        match rustix::fs::flock(fd.as_fd(), FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(true),
            Err(Errno::INTR) => continue,
            Err(Errno::WOULDBLOCK) => {
                let now = Instant::now();
                if now >= deadline {
                    return Ok(false);
                }
                std::thread::sleep(sleep.min(deadline - now));
                sleep = (sleep * 2).min(MAX_SLEEP);
            }
            Err(e) => return Err(e),
        }
    }
}
