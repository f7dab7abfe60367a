//! How a transfer reports progress to whoever shows it.

/// Called as bytes and files go by (from the transferring thread).
pub trait Progress {
    /// `n` more file bytes were sent or written.
    fn bytes(&self, n: u64);
    /// One more regular file is complete.
    fn file(&self);
}

/// Reports nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn bytes(&self, _n: u64) {}
    fn file(&self) {}
}
