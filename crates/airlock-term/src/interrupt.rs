//! Ctrl+C during a long client operation such as `up` (PRODUCT L7): the first one asks the
//! operation to cancel cleanly, a second one exits 130 at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use nix::sys::signal::{SigSet, Signal};

/// Ctrl+C during `up` (L7): SIGINT is blocked in every thread and taken by one waiter thread.
/// The first sets the cancel flag, the second exits 130 at once. SIGUSR2 ends the waiter
/// before attaching, where the exec path forwards signals itself.
pub struct CtrlC {
    flag: Arc<AtomicBool>,
    waiter: Option<std::thread::JoinHandle<()>>,
}

impl CtrlC {
    /// Blocks SIGINT (and SIGUSR2) in the calling thread, so threads started later inherit
    /// the mask, and starts the waiter.
    pub fn install() -> CtrlC {
        let flag = Arc::new(AtomicBool::new(false));
        let mut set = SigSet::empty();
        set.add(Signal::SIGINT);
        set.add(Signal::SIGUSR2);
        if set.thread_block().is_err() {
            return CtrlC { flag, waiter: None };
        }
        let f = Arc::clone(&flag);
        let waiter = std::thread::spawn(move || loop {
            match set.wait() {
                Ok(Signal::SIGINT) if f.swap(true, Ordering::SeqCst) => std::process::exit(130),
                Ok(Signal::SIGINT) => {
                    eprintln!("airlock: cancelling (Ctrl+C again to exit at once)")
                }
                Ok(_) | Err(_) => return,
            }
        });
        CtrlC {
            flag,
            waiter: Some(waiter),
        }
    }

    /// Whether a Ctrl+C came.
    pub fn cancelled(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    /// The cancel flag itself, for an operation that keeps it (provisioning stops its step).
    pub fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.flag)
    }

    /// A check for "a Ctrl+C came" to hand to a long operation.
    pub fn check(&self) -> impl Fn() -> bool + Send + Sync + 'static {
        let flag = Arc::clone(&self.flag);
        move || flag.load(Ordering::SeqCst)
    }

    /// Ends the waiter (before attaching, where Ctrl+C is a key of the session).
    pub fn stop(mut self) {
        if let Some(w) = self.waiter.take() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), Signal::SIGUSR2);
            let _ = w.join();
        }
    }
}
