//! Networking: bringing `lo` up inside a fresh network namespace (PRODUCT I9), and the one
//! socket option std and rustix do not set (`TCP_DEFER_ACCEPT`, for the egress listener).

use std::os::fd::AsRawFd;

/// Sets `IFF_UP` on the interface `name` (e.g. `lo`) of the current network namespace.
pub fn set_interface_up(name: &str) -> std::io::Result<()> {
    let sock = rustix::net::socket(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::DGRAM,
        None,
    )?;
    let bytes = name.as_bytes();
    // SAFETY: ifreq is a plain C struct; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    if bytes.len() >= req.ifr_name.len() {
        return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput));
    }
    for (dst, src) in req.ifr_name.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the interface name and writes the flags union member of `req`,
    // which is a valid, initialised ifreq owned by this frame.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: after SIOCGIFFLAGS the flags member of the union is the initialised one.
    unsafe {
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    }
    // SAFETY: as above; SIOCSIFFLAGS only reads `req`.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Sets `TCP_DEFER_ACCEPT` on the listening TCP socket `fd`: a connection becomes acceptable
/// (and the listener readable) only once its first bytes arrive, or after about `seconds`
/// without any. For listeners whose clients speak first: no wake-up of the accepting process
/// for a connection that has nothing to read yet.
pub fn set_tcp_defer_accept(fd: std::os::fd::BorrowedFd<'_>, seconds: u32) -> std::io::Result<()> {
    let value = libc::c_int::try_from(seconds).unwrap_or(libc::c_int::MAX);
    // SAFETY: `value` is a c_int owned by this frame, its size is passed alongside; the kernel
    // only reads it. `fd` is a valid descriptor for the duration of the call.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            std::ptr::from_ref(&value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
