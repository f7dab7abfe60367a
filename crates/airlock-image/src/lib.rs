//! airlock-image: local images for sandboxes (PRODUCT I2).
//!
//! - [`store`]: `$XDG_DATA_HOME/airlock/images/` — published images, staging, removal.
//! - [`import`]: `image import` / `image rm` from start to end.
//! - [`unpack`], [`source`], [`outer`]: reading plain rootfs, `docker save` and OCI layout
//!   archives, with every digest checked.
//! - [`extract`], [`tree`], [`entry_path`]: extraction beneath the image root that refuses
//!   hostile entries and never follows a link.
//! - [`helper`]: the same executable re-run inside a user namespace for unprivileged imports.
//!
//! This crate knows nothing of sandboxes: whether an image is in use is the caller's question.
#![deny(unsafe_code)]

pub mod entry_path;
pub mod extract;
pub mod helper;
pub mod import;
pub mod name;
pub mod outer;
pub mod source;
pub mod store;
pub mod tree;
pub mod unpack;

pub use import::{import, remove, ImportError, ImportRequest, Runner};
pub use name::ImageName;
pub use store::{ImageHold, ImageInfo, Ownership, RemovalLock, Store, StoreError};

/// What a sandbox's plan records for an imported image (compared by L1: a re-imported image
/// under the same name has another digest, so the plan differs).
pub fn plan_label(info: &ImageInfo) -> String {
    format!("image {} {}", info.name, info.digest)
}

/// Whether a recorded plan's image label (see [`plan_label`]) names image `name`.
pub fn uses_image(label: &str, name: &str) -> bool {
    label
        .strip_prefix("image ")
        .and_then(|rest| rest.split(' ').next())
        == Some(name)
}
