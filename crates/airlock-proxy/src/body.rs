//! Body wrappers: counting bytes, scanning for placeholders, and writing the audit line when a
//! response ends.
//!
//! The audit line of a forwarded request is written by [`AuditGuard`]'s `Drop`, which runs when
//! the response body has been sent completely or the client went away, so `bytes_down` is what
//! was actually delivered. Placeholders found in the request body by [`ScanBody`] are added as
//! warnings to that same line.

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::audit::{AuditEntry, AuditLog};
use crate::shared::Runtime;
use crate::substitute::{unsubstituted_warning, BodyScanner};

/// What the request side learned, shared with the audit guard.
#[derive(Debug, Default)]
pub struct RequestNotes {
    /// Request body bytes sent upstream.
    pub bytes_up: AtomicU64,
    /// Secrets whose placeholders appeared in the request body.
    pub body_placeholders: Mutex<BTreeSet<String>>,
}

/// The request body sent upstream: counted and scanned for placeholders.
#[derive(Debug)]
pub struct ScanBody {
    inner: Incoming,
    /// The scanner and the request's policy and secrets (shared, so no secret value is copied).
    scanner: Option<(BodyScanner, Arc<Runtime>)>,
    notes: Arc<RequestNotes>,
}

impl ScanBody {
    /// Wraps `inner`; scans only when `runtime` holds secrets.
    pub fn new(inner: Incoming, runtime: &Arc<Runtime>, notes: Arc<RequestNotes>) -> ScanBody {
        let table = &runtime.bindings;
        let scanner = (!table.is_empty()).then(|| (BodyScanner::new(table), runtime.clone()));
        ScanBody {
            inner,
            scanner,
            notes,
        }
    }
}

impl Body for ScanBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                this.notes
                    .bytes_up
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                if let Some((scanner, runtime)) = &mut this.scanner {
                    scanner.feed(data, &runtime.bindings);
                    if !scanner.found().is_empty() {
                        let mut found = this
                            .notes
                            .body_placeholders
                            .lock()
                            .unwrap_or_else(|p| p.into_inner());
                        found.extend(scanner.found().iter().cloned());
                    }
                }
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Writes one audit line when dropped.
#[derive(Debug)]
pub struct AuditGuard {
    log: Arc<AuditLog>,
    entry: AuditEntry,
    notes: Option<Arc<RequestNotes>>,
    bytes_down: u64,
}

impl AuditGuard {
    /// A guard for `entry`, completed from `notes` when dropped.
    pub fn new(log: Arc<AuditLog>, entry: AuditEntry, notes: Option<Arc<RequestNotes>>) -> Self {
        AuditGuard {
            log,
            entry,
            notes,
            bytes_down: 0,
        }
    }
}

impl Drop for AuditGuard {
    fn drop(&mut self) {
        self.entry.bytes_down += self.bytes_down;
        if let Some(notes) = &self.notes {
            self.entry.bytes_up += notes.bytes_up.load(Ordering::Relaxed);
            let found = notes
                .body_placeholders
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            for name in found.iter() {
                let text = unsubstituted_warning(name, "the request body", &self.entry.host);
                self.entry.warnings.push(text);
            }
        }
        self.log.append(&self.entry);
    }
}

/// A response body that counts delivered bytes into its [`AuditGuard`].
#[derive(Debug)]
pub struct CountBody<B> {
    inner: B,
    guard: AuditGuard,
}

impl<B> CountBody<B> {
    /// Wraps `inner`; the audit line is written when this body is dropped.
    pub fn new(inner: B, guard: AuditGuard) -> CountBody<B> {
        CountBody { inner, guard }
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for CountBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                this.guard.bytes_down += data.len() as u64;
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
