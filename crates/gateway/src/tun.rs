//! The gateway's TUN device and the network configuration around it (addresses, routes,
//! forwarding and NAT), done with `ip` and `nft` inside the gateway's own network
//! namespace. Everything made here is undone by [`Tun`]'s and [`Nat`]'s `Drop`: closing
//! the device removes it with its addresses and routes, and the NAT table is deleted.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Command, Stdio};

use tokio::io::unix::AsyncFd;

/// Runs a command; an error carries the command line and what it printed.
pub fn run(program: &str, args: &[&str]) -> io::Result<()> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot run `{program}`: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Runs `ip` with `args`.
pub fn ip(args: &[&str]) -> io::Result<()> {
    run("ip", args)
}

/// A TUN device (no packet information header), non-blocking, registered with Tokio.
pub struct Tun {
    name: String,
    fd: AsyncFd<OwnedFd>,
}

impl Tun {
    /// Creates TUN device `name` in this process's network namespace, sets its MTU and
    /// address (a host address, `/32` or `/128`) and brings it up.
    pub fn create(name: &str, mtu: u16, addr: std::net::IpAddr) -> io::Result<Tun> {
        let fd = polypath_tun::open(name)?;
        let mtu_s = mtu.to_string();
        ip(&[
            "link",
            "set",
            name,
            "mtu",
            &mtu_s,
            "txqueuelen",
            "1000",
            "up",
        ])?;
        let cidr = format!("{addr}/{}", if addr.is_ipv4() { 32 } else { 128 });
        if addr.is_ipv6() {
            ip(&["-6", "addr", "add", &cidr, "dev", name, "nodad"])?;
        } else {
            ip(&["addr", "add", &cidr, "dev", name])?;
        }
        // SAFETY: `fd` is a valid descriptor this `Tun` owns; it is neither replaced nor
        // closed while the `AsyncFd` holds it.
        let fd = unsafe { AsyncFd::register(fd)? };
        Ok(Tun {
            name: name.to_string(),
            fd,
        })
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Routes `prefix` into the device, with `src` as the preferred source address.
    pub fn route(&self, prefix: &str, src: Option<std::net::IpAddr>) -> io::Result<()> {
        let mut args = vec!["route", "replace", prefix, "dev", self.name.as_str()];
        let src_s = src.map(|s| s.to_string());
        if let Some(s) = &src_s {
            args.extend(["src", s.as_str()]);
        }
        ip(&args)
    }

    /// Reads one packet into `buf`, waiting for one.
    pub async fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|fd| {
                // SAFETY: read(2) into a buffer we own, of its length.
                let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            }) {
                Ok(r) => return r,
                Err(_would_block) => continue,
            }
        }
    }

    /// Writes one packet. A full device queue drops the packet (returns `Ok(false)`), as a
    /// router drops what it cannot queue.
    pub fn send(&self, packet: &[u8]) -> io::Result<bool> {
        // SAFETY: write(2) from a slice we own.
        let n = unsafe {
            libc::write(
                self.fd.get_ref().as_raw_fd(),
                packet.as_ptr().cast(),
                packet.len(),
            )
        };
        if n >= 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => Ok(false),
            // The kernel refuses a packet it cannot parse; the tunnel delivered garbage.
            io::ErrorKind::InvalidInput => Ok(false),
            _ => Err(e),
        }
    }
}

/// Turns IPv4 forwarding on in this namespace (the server gateway routes between its TUN
/// device and the destination network).
pub fn enable_forwarding() -> io::Result<()> {
    std::fs::write("/proc/sys/net/ipv4/ip_forward", b"1")
}

/// Source NAT (masquerade) of the tunnel's address pool towards the destination network:
/// an nftables table of this process, deleted on drop.
pub struct Nat {
    table: String,
}

impl Nat {
    /// Masquerades packets from `pool` (a prefix) leaving by any device but `tun`.
    pub fn masquerade(pool: &str, tun: &str) -> io::Result<Nat> {
        let table = format!("polypath_gw_{}", std::process::id());
        let rules = format!(
            "table ip {table} {{\n  chain post {{\n    type nat hook postrouting priority 100;\n    \
             ip saddr {pool} oifname != \"{tun}\" masquerade\n  }}\n}}\n"
        );
        let mut child = Command::new("nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot run `nft` for NAT (is nftables installed?): {e}"),
                )
            })?;
        if let Some(mut stdin) = child.stdin.take() {
            use std::io::Write;
            stdin.write_all(rules.as_bytes())?;
        }
        let out = child.wait_with_output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "nft refused the NAT table: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(Nat { table })
    }
}

impl Drop for Nat {
    fn drop(&mut self) {
        let _ = run("nft", &["delete", "table", "ip", &self.table]);
    }
}
