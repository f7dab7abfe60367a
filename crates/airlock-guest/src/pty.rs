//! Opening a pseudo-terminal pair for PTY-mode execs.
//!
//! The master stays in the guest (close-on-exec); the slave becomes the child's fds 0/1/2
//! and, through `TIOCSCTTY` in `sys::process`, its controlling terminal. The slave is opened
//! with `TIOCGPTPEER` (Linux 4.13) from the master itself, so no path lookup in `/dev/pts`
//! can be raced or redirected; `ptsname` + `open` is the fallback for older kernels.

use std::os::fd::OwnedFd;

use rustix::fs::{open, Mode, OFlags};
use rustix::io::Errno;
use rustix::pty::{grantpt, ioctl_tiocgptpeer, openpt, ptsname, unlockpt, OpenptFlags};
use rustix::termios::{tcsetwinsize, Winsize};

use airlock_protocol::WindowSize;

/// A master and its slave.
#[derive(Debug)]
pub struct Pty {
    /// The guest's side.
    pub master: OwnedFd,
    /// The child's side.
    pub slave: OwnedFd,
}

/// Why a PTY could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("{syscall} failed while setting up a terminal: {source}")]
pub struct PtyError {
    /// The syscall.
    pub syscall: &'static str,
    /// The OS error.
    pub source: std::io::Error,
}

fn err(syscall: &'static str) -> impl FnOnce(Errno) -> PtyError {
    move |errno| PtyError {
        syscall,
        source: errno.into(),
    }
}

/// Opens a PTY pair of the given size.
pub fn open_pty(size: WindowSize) -> Result<Pty, PtyError> {
    let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
    let master = openpt(flags).map_err(err("posix_openpt"))?;
    grantpt(&master).map_err(err("grantpt"))?;
    unlockpt(&master).map_err(err("unlockpt"))?;
    let slave = match ioctl_tiocgptpeer(&master, flags) {
        Ok(slave) => slave,
        Err(_) => {
            let name = ptsname(&master, Vec::new()).map_err(err("ptsname"))?;
            let oflags = OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC;
            open(name.as_c_str(), oflags, Mode::empty()).map_err(err("open(pts)"))?
        }
    };
    resize(&master, size)?;
    Ok(Pty { master, slave })
}

/// Sets the terminal size (`TIOCSWINSZ`); the foreground process group gets `SIGWINCH`.
pub fn resize(master: &OwnedFd, size: WindowSize) -> Result<(), PtyError> {
    let winsize = Winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    tcsetwinsize(master, winsize).map_err(err("ioctl(TIOCSWINSZ)"))
}
