//! The TCP transports of a class: instead of carrying a TCP flow's IP packets in DATAGRAM
//! frames, the client gateway terminates it (a transparent proxy) and carries its bytes on a
//! QUIC stream of the gateways' connection (`"transport": "stream"`) or on a kernel MPTCP
//! connection to the server gateway (`"transport": "mptcp"`, with `ip mptcp` endpoints per
//! interface, the way OpenMPTCProuter relays TCP); the server gateway opens the TCP
//! connection to the destination and relays. Either way there is one congestion control
//! loop on the links, not TCP inside a tunnel.
//!
//! The client gateway redirects the class's TCP connections to a local listener with an
//! nftables `redirect` (table `polypath_gw_proxy_<pid>`, deleted on exit), for connections
//! its own host opens (output hook) and those it routes (prerouting hook), and finds each
//! connection's original destination with `SO_ORIGINAL_DST`.
//!
//! Both transports open with a header naming the destination:
//!
//! ```text
//! Proxy Header {
//!   Magic (32) = "PPRX",
//!   Session (64),        # the session ID of the welcome (checked by the MPTCP relay)
//!   Family (8) = 4 | 6,
//!   Address (32 | 128),
//!   Port (16),
//! }
//! ```
//!
//! The server answers one byte: 0 when it reached the destination (the relay starts), 1
//! when it did not (the client closes the application's connection).
//
//= To Poly or Not to Poly: QoS-Aware Multi-Path Networking, Section III
//# The MPF includes a flexible Multipath Block, allowing selection among various multipath protocols to meet different user demands.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The header's magic bytes.
pub const MAGIC: [u8; 4] = *b"PPRX";
/// The answer: the destination was reached.
pub const OK: u8 = 0;
/// The answer: the destination could not be reached.
pub const UNREACHABLE: u8 = 1;
/// `IPPROTO_MPTCP`.
pub const IPPROTO_MPTCP: i32 = 262;
/// `SO_ORIGINAL_DST` (`linux/netfilter_ipv4.h`).
const SO_ORIGINAL_DST: libc::c_int = 80;

/// A proxy header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The session.
    pub session: u64,
    /// The destination.
    pub dst: SocketAddr,
}

impl Header {
    /// The header's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(31);
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&self.session.to_be_bytes());
        match self.dst.ip() {
            IpAddr::V4(a) => {
                b.push(4);
                b.extend_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                b.push(6);
                b.extend_from_slice(&a.octets());
            }
        }
        b.extend_from_slice(&self.dst.port().to_be_bytes());
        b
    }

    /// Reads a header from `r`; an error for anything else.
    pub async fn read(r: &mut (impl AsyncRead + Unpin)) -> std::io::Result<Header> {
        let bad =
            |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
        let mut head = [0u8; 13];
        r.read_exact(&mut head).await?;
        if head[..4] != MAGIC {
            return Err(bad("not a proxy header"));
        }
        let mut s = [0u8; 8];
        s.copy_from_slice(&head[4..12]);
        let ip = match head[12] {
            4 => {
                let mut a = [0u8; 4];
                r.read_exact(&mut a).await?;
                IpAddr::V4(Ipv4Addr::from(a))
            }
            6 => {
                let mut a = [0u8; 16];
                r.read_exact(&mut a).await?;
                IpAddr::V6(Ipv6Addr::from(a))
            }
            _ => return Err(bad("unknown address family")),
        };
        let mut p = [0u8; 2];
        r.read_exact(&mut p).await?;
        Ok(Header {
            session: u64::from_be_bytes(s),
            dst: SocketAddr::new(ip, u16::from_be_bytes(p)),
        })
    }
}

/// A QUIC stream's two halves as one byte stream (for [`relay`]).
pub type QuicStream = tokio::io::Join<polypath_io::RecvStream, polypath_io::SendStream>;

/// Joins a stream's halves.
pub fn quic_stream(send: polypath_io::SendStream, recv: polypath_io::RecvStream) -> QuicStream {
    tokio::io::join(recv, send)
}

/// The destination a redirected connection was addressed to.
pub fn original_destination(sock: &tokio::net::TcpStream) -> std::io::Result<SocketAddr> {
    let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: SO_ORIGINAL_DST writes a sockaddr_in of at most `len` bytes into `addr`.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_IP,
            SO_ORIGINAL_DST,
            (&mut addr as *mut libc::sockaddr_in).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let ip = Ipv4Addr::from(u32::from_be(addr.sin_addr.s_addr));
    Ok(SocketAddr::new(IpAddr::V4(ip), u16::from_be(addr.sin_port)))
}

/// A TCP socket of `IPPROTO_MPTCP` (kernel MPTCP), not yet connected.
fn mptcp_socket(v4: bool) -> std::io::Result<socket2::Socket> {
    let domain = if v4 {
        socket2::Domain::IPV4
    } else {
        socket2::Domain::IPV6
    };
    socket2::Socket::new(
        domain,
        socket2::Type::STREAM,
        Some(socket2::Protocol::from(IPPROTO_MPTCP)),
    )
    .map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot open an MPTCP socket (is net.mptcp.enabled 1?): {e}"),
        )
    })
}

/// Connects an MPTCP connection to `to`.
pub async fn mptcp_connect(to: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let s = mptcp_socket(to.is_ipv4())?;
    s.set_nonblocking(true)?;
    match s.connect(&to.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    let stream = tokio::net::TcpStream::from_std(s.into())?;
    stream.writable().await?;
    if let Some(e) = stream.take_error()? {
        return Err(e);
    }
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// An MPTCP listener on `addr`.
pub fn mptcp_listen(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let s = mptcp_socket(addr.is_ipv4())?;
    s.set_reuse_address(true)?;
    s.bind(&addr.into())?;
    s.listen(128)?;
    s.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(s.into())
}

/// Copies both ways between two byte streams until both ends are closed; returns the bytes
/// copied each way.
pub async fn relay<A, B>(a: &mut A, b: &mut B) -> std::io::Result<(u64, u64)>
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    tokio::io::copy_bidirectional(a, b).await
}

/// Sends the answer byte and flushes.
pub async fn answer(w: &mut (impl AsyncWrite + Unpin), ok: bool) -> std::io::Result<()> {
    w.write_all(&[if ok { OK } else { UNREACHABLE }]).await?;
    w.flush().await
}

/// The nftables redirect of the proxied classes' TCP connections, deleted on drop.
pub struct Redirect {
    table: String,
}

impl Redirect {
    /// Redirects TCP connections matching each `(match, port)` to the local `port`, except
    /// those to `exempt` addresses (the server gateway: the gateway's own connections) and
    /// on loopback.
    pub fn install(
        rules: &[(crate::policy::Match, u16)],
        exempt: &[IpAddr],
    ) -> std::io::Result<Redirect> {
        let table = format!("polypath_gw_proxy_{}", std::process::id());
        let set = |items: Vec<String>| match items.len() {
            0 => String::new(),
            1 => items[0].clone(),
            _ => format!("{{ {} }}", items.join(", ")),
        };
        let mut body = String::new();
        let exempt_v4: Vec<String> = exempt
            .iter()
            .filter(|a| a.is_ipv4())
            .map(|a| a.to_string())
            .collect();
        if !exempt_v4.is_empty() {
            body += &format!("    ip daddr {} return\n", set(exempt_v4));
        }
        body += "    oifname \"lo\" return\n";
        for (m, port) in rules {
            let mut r = String::from("    meta l4proto tcp");
            let dst: Vec<String> = m
                .dst
                .iter()
                .filter(|p| p.addr.is_ipv4())
                .map(|p| p.to_string())
                .collect();
            if !dst.is_empty() {
                r += &format!(" ip daddr {}", set(dst));
            }
            let src: Vec<String> = m
                .src
                .iter()
                .filter(|p| p.addr.is_ipv4())
                .map(|p| p.to_string())
                .collect();
            if !src.is_empty() {
                r += &format!(" ip saddr {}", set(src));
            }
            let ports = |v: &[crate::policy::PortRange]| {
                set(v
                    .iter()
                    .map(|p| {
                        if p.0 == p.1 {
                            p.0.to_string()
                        } else {
                            format!("{}-{}", p.0, p.1)
                        }
                    })
                    .collect())
            };
            if !m.dst_ports.is_empty() {
                r += &format!(" tcp dport {}", ports(&m.dst_ports));
            }
            if !m.src_ports.is_empty() {
                r += &format!(" tcp sport {}", ports(&m.src_ports));
            }
            if !m.dscp.is_empty() {
                r += &format!(
                    " ip dscp {}",
                    set(m.dscp.iter().map(|d| d.to_string()).collect())
                );
            }
            r += &format!(" redirect to :{port}\n");
            body += &r;
        }
        let rules_text = format!(
            "table ip {table} {{\n  chain out {{\n    type nat hook output priority -100;\n{body}  }}\n  \
             chain pre {{\n    type nat hook prerouting priority -100;\n{body}  }}\n}}\n"
        );
        let mut child = std::process::Command::new("nft")
            .args(["-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("cannot run `nft` (is nftables installed?): {e}"),
                )
            })?;
        if let Some(mut stdin) = child.stdin.take() {
            use std::io::Write;
            stdin.write_all(rules_text.as_bytes())?;
        }
        let out = child.wait_with_output()?;
        if !out.status.success() {
            return Err(std::io::Error::other(format!(
                "nft refused the proxy redirect: {}\n{rules_text}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(Redirect { table })
    }
}

impl Drop for Redirect {
    fn drop(&mut self) {
        let _ = crate::tun::run("nft", &["delete", "table", "ip", &self.table]);
    }
}

/// Adds an in-kernel MPTCP endpoint (`ip mptcp endpoint add ADDR dev DEV subflow`) for each
/// interface after the first, so MPTCP connections open a subflow over each; an endpoint
/// that exists already is left as it is.
pub fn add_mptcp_endpoints(ifaces: &[(String, IpAddr)]) {
    let n = ifaces.len().clamp(1, 8).to_string();
    let _ = crate::tun::ip(&[
        "mptcp",
        "limits",
        "set",
        "subflows",
        &n,
        "add_addr_accepted",
        &n,
    ]);
    for (dev, addr) in ifaces.iter().skip(1) {
        let a = addr.to_string();
        let _ = crate::tun::ip(&["mptcp", "endpoint", "add", &a, "dev", dev, "subflow"]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn headers_round_trip_and_garbage_is_refused() {
        for dst in ["10.99.0.10:5201", "[fd00::1]:443"] {
            let h = Header {
                session: 0xdead_beef,
                dst: dst.parse().unwrap(),
            };
            let bytes = h.encode();
            assert_eq!(Header::read(&mut &bytes[..]).await.unwrap(), h);
        }
        let mut bad = Header {
            session: 1,
            dst: "1.2.3.4:5".parse().unwrap(),
        }
        .encode();
        bad[12] = 5;
        assert!(Header::read(&mut &bad[..]).await.is_err());
        assert!(Header::read(&mut &b"HTTP/1.1 200"[..]).await.is_err());
    }
}
