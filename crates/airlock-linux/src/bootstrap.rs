//! What the host hands the init stage, and the line protocol they speak while it starts.
//!
//! Descriptors of `airlock __init` (fixed numbers, everything else is closed at its start):
//! - [`BOOTSTRAP_FD`]: read end of a pipe carrying one JSON [`Bootstrap`] (spec, per-epoch key).
//!   The key travels only here: never in argv, the environment or a file inside the sandbox.
//! - [`SYNC_FD`]: a stream socket for the start handshake, one line per message: host
//!   `cgroup` with the cgroup's join files attached (only when [`Bootstrap::join_cgroup`]) →
//!   child `unshared` → host writes the id maps → host `mapped` →
//!   intermediate `pid1 <host pid>` → PID 1 `ready`. Any stage may send `error <text>` instead,
//!   then exits; EOF before `ready` is a failed start.
//! - [`CONTROL_FD`]: the guest end of the control socketpair, handed to PID 1.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::RawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::spec::SandboxSpec;

pub const BOOTSTRAP_FD: RawFd = 3;
pub const SYNC_FD: RawFd = 4;
pub const CONTROL_FD: RawFd = 5;
/// The first descriptor number the init stage closes at start.
pub const FIRST_UNUSED_FD: u32 = 6;
/// `argv[1]` of the init stage.
pub const INIT_VERB: &str = "__init";
/// The start stage a failure of the init stage belongs to; the host classifies by it (the
/// first two mean this host cannot provide the backend).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Creating the namespaces.
    Namespaces,
    /// Building the root filesystem.
    Rootfs,
    /// The image cannot serve as a root filesystem (e.g. a link where airlock mounts): the
    /// image's fault, not the host's.
    Image,
    /// Anything else.
    Init,
}

impl Stage {
    /// Its name on the start handshake (`error <stage> <message>`).
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Namespaces => "namespaces",
            Stage::Rootfs => "rootfs",
            Stage::Image => "image",
            Stage::Init => "init",
        }
    }

    fn parse(name: &str) -> Option<Stage> {
        [Stage::Namespaces, Stage::Rootfs, Stage::Image, Stage::Init]
            .into_iter()
            .find(|s| s.as_str() == name)
    }
}
/// Most descriptors passed with one handshake line (the kernel's `SCM_MAX_FD` is 253).
pub const MAX_PASSED_FDS: usize = 250;
/// Length of the per-epoch key.
pub const KEY_LEN: usize = airlock_protocol::handshake::KEY_LEN;

#[derive(Debug, Error)]
pub enum BootstrapError {
    #[error("cannot read the bootstrap message: {0}")]
    Read(#[source] std::io::Error),
    #[error("malformed bootstrap message: {0}")]
    Decode(#[source] serde_json::Error),
    #[error("the start handshake failed: {0}")]
    Sync(#[source] std::io::Error),
    #[error("the sandbox's init stage ended before {expected}")]
    Closed { expected: &'static str },
    #[error("unexpected start handshake message {got:?} while waiting for {expected}")]
    Unexpected { expected: &'static str, got: String },
    /// The init stage reported a failure in `stage`.
    #[error("{message}")]
    Remote { stage: Stage, message: String },
}

/// Everything the init stage needs to know, decided by the host.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Bootstrap {
    pub spec: SandboxSpec,
    /// The per-epoch key, hex (see the control-channel contract in docs/architecture.md).
    pub key_hex: String,
    /// Host pid of the airlock process that started this sandbox (checked after PDEATHSIG).
    pub host_pid: u32,
    /// Empty host directory the init stage mounts its scratch tmpfs on (its own mount
    /// namespace only; the host never sees anything mounted there).
    pub scratch_dir: PathBuf,
    pub sandbox_uid: u32,
    pub sandbox_gid: u32,
    /// Whether id 0 is mapped inside (a root identity exists).
    pub root_mapped: bool,
    /// Whether PID 1 may start `--root` processes: a root identity exists and, for a root
    /// invoker, the sandbox was started for them (`StartOptions::root_view`), so that what
    /// others may not read in the image is masked (`rootfs/unreadable.rs`).
    pub root_processes: bool,
    /// Whether the host sends the sandbox's cgroup join files (`cgroup`, right after this
    /// message) for the init stage to join before it unshares anything: `run` creates the
    /// cgroup while the init stage execs instead of before it (`host::Spawning::handshake`).
    #[serde(default)]
    pub join_cgroup: bool,
}

impl Bootstrap {
    /// Reads the message from the inherited pipe (until EOF) and closes it.
    pub fn read_inherited() -> Result<Self, BootstrapError> {
        let fd = crate::sys::fd::take_inherited(BOOTSTRAP_FD);
        let mut buf = Vec::new();
        std::fs::File::from(fd)
            .read_to_end(&mut buf)
            .map_err(BootstrapError::Read)?;
        serde_json::from_slice(&buf).map_err(BootstrapError::Decode)
    }
}

/// One side of the start handshake.
pub struct Sync {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Sync {
    pub fn new(stream: UnixStream) -> Result<Self, BootstrapError> {
        let writer = stream.try_clone().map_err(BootstrapError::Sync)?;
        Ok(Self {
            reader: BufReader::new(stream),
            writer,
        })
    }

    pub fn send(&mut self, line: &str) -> Result<(), BootstrapError> {
        let clean: String = line
            .chars()
            .map(|c| if c == '\n' { ' ' } else { c })
            .collect();
        self.writer
            .write_all(format!("{clean}\n").as_bytes())
            .map_err(BootstrapError::Sync)
    }

    /// Sends one line with descriptors attached (`SCM_RIGHTS`, at most [`MAX_PASSED_FDS`]).
    pub fn send_with_fds(
        &mut self,
        line: &str,
        fds: &[std::os::fd::BorrowedFd<'_>],
    ) -> Result<(), BootstrapError> {
        use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
        if fds.is_empty() {
            return self.send(line);
        }
        if fds.len() > MAX_PASSED_FDS {
            return Err(BootstrapError::Sync(std::io::Error::other(format!(
                "{} mounts to pass, at most {MAX_PASSED_FDS} are supported",
                fds.len()
            ))));
        }
        let text = format!("{}\n", line.replace('\n', " "));
        let mut space =
            vec![std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_PASSED_FDS))];
        let mut ancillary = SendAncillaryBuffer::new(&mut space);
        ancillary.push(SendAncillaryMessage::ScmRights(fds));
        let sent = sendmsg(
            &self.writer,
            &[std::io::IoSlice::new(text.as_bytes())],
            &mut ancillary,
            SendFlags::NOSIGNAL,
        )
        .map_err(|e| BootstrapError::Sync(e.into()))?;
        if sent != text.len() {
            // The descriptors went with the first bytes; the rest is plain data.
            self.writer
                .write_all(&text.as_bytes()[sent..])
                .map_err(BootstrapError::Sync)?;
        }
        Ok(())
    }

    /// Like [`Sync::expect`], also returning the descriptors that came with the line
    /// (close-on-exec). Only valid while nothing else is buffered (the peer sends nothing
    /// between our last message and this one).
    pub fn expect_with_fds(
        &mut self,
        expected: &'static str,
    ) -> Result<(String, Vec<std::os::fd::OwnedFd>), BootstrapError> {
        use rustix::net::{recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
        if !self.reader.buffer().is_empty() {
            return self.expect(expected).map(|rest| (rest, Vec::new()));
        }
        let mut buf = vec![0u8; 4096];
        let mut space =
            vec![std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_PASSED_FDS))];
        let mut ancillary = RecvAncillaryBuffer::new(&mut space);
        let got = loop {
            match recvmsg(
                self.reader.get_ref(),
                &mut [std::io::IoSliceMut::new(&mut buf)],
                &mut ancillary,
                RecvFlags::CMSG_CLOEXEC,
            ) {
                Ok(r) => break r,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(BootstrapError::Sync(e.into())),
            }
        };
        let mut fds = Vec::new();
        for message in ancillary.drain() {
            if let RecvAncillaryMessage::ScmRights(rights) = message {
                fds.extend(rights);
            }
        }
        let mut bytes = buf[..got.bytes].to_vec();
        while !bytes.ends_with(b"\n") {
            let mut more = [0u8; 512];
            let n = self
                .reader
                .get_mut()
                .read(&mut more)
                .map_err(BootstrapError::Sync)?;
            if n == 0 {
                return Err(BootstrapError::Closed { expected });
            }
            bytes.extend_from_slice(&more[..n]);
        }
        let line = String::from_utf8_lossy(&bytes).into_owned();
        let rest = Self::parse_line(line.trim_end_matches('\n'), expected)?;
        Ok((rest, fds))
    }

    /// Waits for a message starting with `expected`; returns the rest of the line.
    pub fn expect(&mut self, expected: &'static str) -> Result<String, BootstrapError> {
        let mut line = String::new();
        let n = self
            .reader
            .read_line(&mut line)
            .map_err(BootstrapError::Sync)?;
        if n == 0 {
            return Err(BootstrapError::Closed { expected });
        }
        Self::parse_line(line.trim_end_matches('\n'), expected)
    }

    fn parse_line(line: &str, expected: &'static str) -> Result<String, BootstrapError> {
        if let Some(text) = line.strip_prefix("error ") {
            let (name, message) = text.split_once(' ').unwrap_or((text, ""));
            return Err(match Stage::parse(name) {
                Some(stage) => BootstrapError::Remote {
                    stage,
                    message: message.to_owned(),
                },
                None => BootstrapError::Unexpected {
                    expected,
                    got: line.chars().take(200).collect(),
                },
            });
        }
        match line.strip_prefix(expected) {
            Some(rest) => Ok(rest.trim().to_owned()),
            None => Err(BootstrapError::Unexpected {
                expected,
                got: line.chars().take(200).collect(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_lines_carry_values_and_typed_remote_errors() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut host, mut guest) = (Sync::new(a).unwrap(), Sync::new(b).unwrap());
        guest.send("pid1 42").unwrap();
        assert_eq!(host.expect("pid1").unwrap(), "42");
        guest
            .send("error rootfs cannot mount proc\non two lines")
            .unwrap();
        match host.expect("ready") {
            Err(BootstrapError::Remote { stage, message }) => {
                assert_eq!(stage, Stage::Rootfs);
                assert_eq!(message, "cannot mount proc on two lines");
            }
            other => panic!("{other:?}"),
        }
        guest.send("mapped").unwrap();
        assert!(matches!(
            host.expect("ready"),
            Err(BootstrapError::Unexpected { .. })
        ));
        drop(guest);
        assert!(matches!(
            host.expect("ready"),
            Err(BootstrapError::Closed { expected: "ready" })
        ));
    }
}
