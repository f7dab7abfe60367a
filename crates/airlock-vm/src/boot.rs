//! The one exchange on stream 0 before the mux starts: the guest's [`Hello`] (it is up, which
//! kernel, how long it took), then the host's [`GuestConfig`] (the epoch key, who runs
//! commands, what is shared). Both carry [`BOOT_VERSION`] and are refused in any other, so an
//! initramfs built by another airlock is never half understood.

use serde::{Deserialize, Serialize};

/// Version of the boot exchange.
pub const BOOT_VERSION: u32 = 1;
/// Largest boot message either side accepts.
pub const MAX_BOOT_MESSAGE: usize = 1 << 20;
/// The name of the virtio-serial port that carries the control channel.
pub const CHANNEL_PORT: &str = "airlock.0";

/// Guest → host, once the guest's PID 1 found its port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    pub version: u32,
    /// `uname -r` of the guest.
    pub kernel: String,
    /// Guest uptime when PID 1 said hello (kernel boot + init), milliseconds.
    pub uptime_ms: u64,
}

/// A host directory the guest mounts (9p over virtio) at the same path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Share {
    /// The virtio-9p mount tag (`ws0`, …; at most 31 bytes).
    pub tag: String,
    /// Absolute path inside the guest.
    pub path: String,
    pub writable: bool,
}

/// The user that ordinary commands run as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: String,
}

/// Host → guest, once, after the hello.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestConfig {
    pub version: u32,
    /// The epoch key, hex; it proves every stream (the control protocol's handshake).
    pub key: String,
    pub hostname: String,
    pub user: GuestUser,
    /// Base environment of every command.
    pub env: Vec<(String, String)>,
    /// Whether `--root` commands are served.
    pub root_allowed: bool,
    /// Tag of the read-only share holding the host's `/usr`, or with `image_root` the image's
    /// whole root filesystem.
    pub usr_tag: String,
    /// Whether the `usr_tag` share is an image's root filesystem (an imported or directory
    /// image) rather than the host's `/usr`: the guest's root is then that share, read-only,
    /// under a writable tmpfs layer (overlay) that ends with the VM.
    #[serde(default)]
    pub image_root: bool,
    /// Workspaces and mounts.
    pub shares: Vec<Share>,
    /// Absolute guest paths inside writable shares that must stay read-only (`.git/hooks`,
    /// `.airlock`, …): each one that exists is bound read-only over itself. This holds only
    /// against processes without `CAP_SYS_ADMIN` in the guest, so a configuration with
    /// `protect` must not also allow root (`root_allowed`): the guest refuses the pair.
    pub protect: Vec<String>,
    /// The loopback port of the egress relay (the proxy's port, e.g. 3128), if the sandbox
    /// has egress: each connection to it becomes a stream the host hands to its proxy.
    pub egress_port: Option<u16>,
}
