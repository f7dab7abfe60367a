//! Id-mapped mounts of a root invoker's sandbox (PRODUCT I2, I5; docs/security.md).
//!
//! A root invoker's sandbox maps no host id it did not claim ([`crate::idmap`]): host root's
//! files would appear as `nobody`, and the sandbox could neither use its workspace nor change
//! its system files. So the host process, which is privileged, shows each host directory the
//! sandbox needs through an id-mapped mount and passes the detached mounts to the init stage
//! with the `mapped` handshake line; the init stage attaches them in its own mount namespace
//! instead of bind-mounting host paths:
//! - `lower:<name>` (the `host` image's system directories) and `image` (a directory image):
//!   through the sandbox's own user namespace, so a file host root owns is owned by in-sandbox
//!   root (which can change it in the overlay) and every other host id appears as itself inside
//!   or as `nobody`; read-only;
//! - `map:<i>` (workspaces and mounts, in mount order), `egress` and `bundle`: through a user
//!   namespace made for the purpose ([`crate::idmap::MountMaps`]): the invoker's files are the
//!   sandbox user's, and what the sandbox user writes belongs to the invoker on the host;
//!   read-only unless the mapping is writable.
//!
//! Every mount is `nosuid,nodev`. A filesystem that cannot be id-mapped (NFS, FUSE, …) fails
//! the start with its path: showing it without a mapping would make it unusable, and showing it
//! with host root's identity is what this module exists to prevent.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::idmap::MountMaps;
use crate::spec::{Image, SandboxSpec};
use crate::sys::idmount;

#[derive(Debug, Error)]
pub enum IdMountError {
    #[error("cannot open the user namespace of the sandbox (/proc/{pid}/ns/user): {source}")]
    SandboxNamespace {
        pid: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create the user namespace for the sandbox's mounts: {source}")]
    OwnerNamespace {
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open {path} as a mount: {source}")]
    Clone {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "cannot show {path} with an id mapping ({source}): its filesystem does not support \
         id-mapped mounts (NFS and FUSE do not). A root-invoked sandbox never sees host files \
         as host root: move it to a local filesystem (ext4, xfs, btrfs, tmpfs) or run airlock \
         as a regular user; `airlock doctor` checks the usual locations"
    )]
    Unsupported {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the host sent id-mapped mounts the sandbox cannot match: {0}")]
    Mismatch(String),
}

/// Top-level host entries the `host` image exposes (I2). Everything else stays invisible.
pub const HOST_IMAGE_ENTRIES: &[&str] = &[
    "usr", "etc", "opt", "bin", "sbin", "lib", "lib32", "lib64", "libx32",
];

/// What the host prepared: one label per descriptor, in order. Drop it once the sandbox is
/// ready: that reaps the short-lived child that made the mounts' user namespace.
pub struct Prepared {
    pub labels: Vec<String>,
    pub fds: Vec<OwnedFd>,
    _ns_child: idmount::NsChild,
}

impl Prepared {
    /// The `mapped` handshake line carrying these mounts.
    pub fn line(&self) -> String {
        let mut line = String::from("mapped");
        for label in &self.labels {
            line.push(' ');
            line.push_str(label);
        }
        line
    }
}

/// Host side: clones and id-maps every host directory the sandbox of `spec` shows (see the
/// module docs). `init_pid` is the init stage, whose user namespace has its maps already.
pub fn prepare(
    spec: &SandboxSpec,
    init_pid: u32,
    maps: &MountMaps,
) -> Result<Prepared, IdMountError> {
    let sandbox_ns = idmount::open_namespace(Path::new(&format!("/proc/{init_pid}/ns/user")))
        .map_err(|source| IdMountError::SandboxNamespace {
            pid: init_pid,
            source,
        })?;
    let (owner_ns, ns_child) =
        idmount::user_namespace(&maps.owner_uid_text(), &maps.owner_gid_text())
            .map_err(|source| IdMountError::OwnerNamespace { source })?;
    let mut out = Prepared {
        labels: Vec::new(),
        fds: Vec::new(),
        _ns_child: ns_child,
    };
    let mut add = |label: String, path: &Path, ns: &OwnedFd, read_only: bool| {
        let tree = idmount::clone_tree(path).map_err(|source| IdMountError::Clone {
            path: path.to_path_buf(),
            source,
        })?;
        idmount::set_idmap(tree.as_fd(), ns.as_fd(), read_only).map_err(|source| {
            IdMountError::Unsupported {
                path: path.to_path_buf(),
                source,
            }
        })?;
        out.labels.push(label);
        out.fds.push(tree);
        Ok::<(), IdMountError>(())
    };
    match &spec.image {
        Image::Host => {
            for name in HOST_IMAGE_ENTRIES {
                let host = Path::new("/").join(name);
                let is_dir = std::fs::symlink_metadata(&host).is_ok_and(|m| m.is_dir());
                if is_dir {
                    add(format!("lower:{name}"), &host, &sandbox_ns, true)?;
                }
            }
        }
        Image::Directory(dir) => add("image".to_owned(), dir, &sandbox_ns, true)?,
    }
    for (i, m) in spec.mappings_in_mount_order().iter().enumerate() {
        add(format!("map:{i}"), &m.host, &owner_ns, !m.writable)?;
    }
    if let Some(egress) = &spec.egress {
        add("egress".to_owned(), &egress.host_dir, &owner_ns, true)?;
        if let Some(bundle) = &egress.trust_bundle {
            add(
                "bundle".to_owned(),
                &egress.host_dir.join(bundle),
                &owner_ns,
                true,
            )?;
        }
    }
    Ok(out)
}

/// Init-stage side: the detached mounts the host passed, by label.
#[derive(Debug, Default)]
pub struct Received {
    mounts: HashMap<String, OwnedFd>,
}

impl Received {
    /// Pairs the labels of the `mapped` line with the descriptors that came with it.
    pub fn new(labels: &str, fds: Vec<OwnedFd>) -> Result<Received, IdMountError> {
        let labels: Vec<&str> = labels.split_whitespace().collect();
        if labels.len() != fds.len() {
            return Err(IdMountError::Mismatch(format!(
                "{} labels, {} descriptors",
                labels.len(),
                fds.len()
            )));
        }
        let mounts = labels
            .into_iter()
            .map(str::to_owned)
            .zip(fds)
            .collect::<HashMap<_, _>>();
        Ok(Received { mounts })
    }

    /// Whether the host passed id-mapped mounts (a root invoker's sandbox).
    pub fn active(&self) -> bool {
        !self.mounts.is_empty()
    }

    /// Takes the mount passed as `label`.
    pub fn take(&mut self, label: &str) -> Option<OwnedFd> {
        self.mounts.remove(label)
    }
}
