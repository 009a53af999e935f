//! # polypath-tun
//!
//! Opens a Linux TUN device: layer 3 (`IFF_TUN`), no packet information header
//! (`IFF_NO_PI`), so each `read` or `write` on the descriptor is one IP packet. The
//! emulator gives each host interface one; the gateway reads applications' packets from
//! one. Addresses, MTU and routes are the caller's (`ip` commands).
#![warn(missing_docs)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `TUNSETIFF`: `_IOW('T', 202, int)`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

/// The part of `struct ifreq` that `TUNSETIFF` reads: the name and the flags.
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Creates (or attaches to) the TUN device `name` in the calling thread's network namespace
/// and returns its descriptor, non-blocking and close-on-exec. Errors name the device: a
/// name of 0 or more than 15 bytes, no `/dev/net/tun`, or no permission (CAP_NET_ADMIN).
pub fn open(name: &str) -> io::Result<OwnedFd> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "TUN device name `{name}` must be 1 to {} bytes",
                libc::IFNAMSIZ - 1
            ),
        ));
    }
    let path = c"/dev/net/tun";
    // SAFETY: open(2) with a valid C string.
    let raw = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if raw < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("/dev/net/tun: {e}")));
    }
    // SAFETY: a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
        _pad: [0; 22],
    };
    req.name[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: TUNSETIFF takes a pointer to an ifreq, which `req` is laid out as.
    if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF, &mut req) } < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("cannot create TUN device `{name}`: {e}"),
        ));
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_names_are_refused_before_any_system_call() {
        for name in ["", "a-name-of-sixteen"] {
            let e = open(name).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{name}: {e}");
            assert!(e.to_string().contains("1 to 15 bytes"), "{e}");
        }
    }
}
