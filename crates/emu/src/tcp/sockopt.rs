//! The socket options the TCP tool reads and sets: `TCP_CONGESTION`, `TCP_INFO` and
//! `MPTCP_INFO`, with the kernel structures parsed by offset so that an older kernel's
//! shorter structure simply leaves the newer fields `None`.

use serde::Serialize;
use std::io;
use std::os::fd::RawFd;

/// `IPPROTO_MPTCP` (linux/in.h).
pub const IPPROTO_MPTCP: i32 = 262;
/// `SOL_MPTCP` (linux/socket.h).
pub const SOL_MPTCP: i32 = 284;
/// `MPTCP_INFO` (linux/mptcp.h).
pub const MPTCP_INFO: i32 = 1;
/// `TCP_CA_NAME_MAX` (net/tcp.h): controller names are shorter than this.
pub const TCP_CA_NAME_MAX: usize = 16;
/// Where Linux lists the congestion controllers a socket may use.
pub const AVAILABLE_CC_PATH: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";

/// `getsockopt` into `buf`; returns how many bytes the kernel filled in.
pub fn get(fd: RawFd, level: i32, name: i32, buf: &mut [u8]) -> io::Result<usize> {
    let mut len = libc::socklen_t::try_from(buf.len()).unwrap_or(libc::socklen_t::MAX);
    // SAFETY: `buf` is valid for `len` bytes of writes and `len` is a valid socklen_t.
    let rc = unsafe { libc::getsockopt(fd, level, name, buf.as_mut_ptr().cast(), &mut len) };
    if rc == 0 {
        Ok((len as usize).min(buf.len()))
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `setsockopt` with `value` as the option's bytes.
pub fn set(fd: RawFd, level: i32, name: i32, value: &[u8]) -> io::Result<()> {
    let len = libc::socklen_t::try_from(value.len())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `value` is valid for `len` bytes of reads.
    let rc = unsafe { libc::setsockopt(fd, level, name, value.as_ptr().cast(), len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets `TCP_CONGESTION`.
pub fn set_congestion(fd: RawFd, name: &str) -> io::Result<()> {
    set(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, name.as_bytes())
}

/// Reads `TCP_CONGESTION`: the controller the socket uses.
pub fn congestion(fd: RawFd) -> io::Result<String> {
    let mut buf = [0u8; TCP_CA_NAME_MAX];
    let len = get(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, &mut buf)?;
    let name = &buf[..len];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}

/// The congestion controllers this machine offers, as Linux lists them (space separated), or
/// why they could not be read.
pub fn available_congestion_controls() -> String {
    match std::fs::read_to_string(AVAILABLE_CC_PATH) {
        Ok(list) => list.trim().to_owned(),
        Err(e) => format!("unknown ({AVAILABLE_CC_PATH}: {e})"),
    }
}

/// Reads a native-endian `u32` at `offset` if the kernel filled that far.
fn u32_at(buf: &[u8], len: usize, offset: usize) -> Option<u32> {
    let bytes = buf.get(offset..offset + 4).filter(|_| offset + 4 <= len)?;
    Some(u32::from_ne_bytes(bytes.try_into().ok()?))
}

/// Reads a native-endian `u64` at `offset` if the kernel filled that far.
fn u64_at(buf: &[u8], len: usize, offset: usize) -> Option<u64> {
    let bytes = buf.get(offset..offset + 8).filter(|_| offset + 8 <= len)?;
    Some(u64::from_ne_bytes(bytes.try_into().ok()?))
}

/// Reads a native-endian `u16` at `offset` if the kernel filled that far.
fn u16_at(buf: &[u8], len: usize, offset: usize) -> Option<u16> {
    let bytes = buf.get(offset..offset + 2).filter(|_| offset + 2 <= len)?;
    Some(u16::from_ne_bytes(bytes.try_into().ok()?))
}

/// Reads a `u8` at `offset` if the kernel filled that far.
fn u8_at(buf: &[u8], len: usize, offset: usize) -> Option<u8> {
    buf.get(offset).copied().filter(|_| offset < len)
}

/// The fields of `struct tcp_info` (linux/tcp.h) the tool uses. Fields that a kernel's
/// shorter structure lacks are `None`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TcpInfo {
    /// `tcpi_state`: the TCP state (1 = established).
    pub state: u8,
    /// `tcpi_snd_mss`: sender maximum segment size, bytes.
    pub snd_mss: u32,
    /// `tcpi_retrans`: segments retransmitted and not yet acknowledged.
    pub retrans: u32,
    /// `tcpi_rtt`: smoothed round-trip time, µs.
    pub rtt_us: u32,
    /// `tcpi_rttvar`: round-trip time variation, µs.
    pub rttvar_us: u32,
    /// `tcpi_snd_ssthresh`: slow-start threshold, segments.
    pub snd_ssthresh: u32,
    /// `tcpi_snd_cwnd`: congestion window, segments.
    pub snd_cwnd: u32,
    /// `tcpi_total_retrans`: segments retransmitted over the connection's life.
    pub total_retrans: u32,
    /// `tcpi_bytes_acked`: bytes acknowledged by the peer.
    pub bytes_acked: Option<u64>,
    /// `tcpi_bytes_received`: bytes received from the peer.
    pub bytes_received: Option<u64>,
    /// `tcpi_min_rtt`: the smallest round-trip time seen, µs.
    pub min_rtt_us: Option<u32>,
    /// `tcpi_delivery_rate`: the most recent delivery rate estimate, bytes/s.
    pub delivery_rate: Option<u64>,
    /// `tcpi_busy_time`: time with data in flight, µs (the two limited times included).
    pub busy_time_us: Option<u64>,
    /// `tcpi_rwnd_limited`: time the sender was stalled by the receiver's window, µs.
    pub rwnd_limited_us: Option<u64>,
    /// `tcpi_sndbuf_limited`: time the sender was stalled by its own send buffer, µs.
    pub sndbuf_limited_us: Option<u64>,
    /// `tcpi_bytes_sent`: bytes sent, retransmissions included.
    pub bytes_sent: Option<u64>,
    /// `tcpi_bytes_retrans`: bytes retransmitted.
    pub bytes_retrans: Option<u64>,
    /// `tcpi_total_rto`: retransmission timeouts over the connection's life (kernels from
    /// 6.7).
    pub total_rto: Option<u16>,
    /// `tcpi_total_rto_recoveries`: recoveries that began with a retransmission timeout
    /// (kernels from 6.7).
    pub total_rto_recoveries: Option<u16>,
    /// `tcpi_total_rto_time`: time spent in those recoveries, ms (kernels from 6.7).
    pub total_rto_time_ms: Option<u32>,
}

impl TcpInfo {
    /// Size of the buffer handed to the kernel: larger than any `struct tcp_info` so far.
    const BUF: usize = 512;
    /// Bytes up to and including `tcpi_total_retrans`, the oldest fields used.
    const MIN_LEN: usize = 104;

    /// Parses a `struct tcp_info` the kernel filled `len` bytes of; `None` if too short.
    pub fn parse(buf: &[u8], len: usize) -> Option<TcpInfo> {
        if len < Self::MIN_LEN {
            return None;
        }
        Some(TcpInfo {
            state: u8_at(buf, len, 0)?,
            snd_mss: u32_at(buf, len, 16)?,
            retrans: u32_at(buf, len, 36)?,
            rtt_us: u32_at(buf, len, 68)?,
            rttvar_us: u32_at(buf, len, 72)?,
            snd_ssthresh: u32_at(buf, len, 76)?,
            snd_cwnd: u32_at(buf, len, 80)?,
            total_retrans: u32_at(buf, len, 100)?,
            bytes_acked: u64_at(buf, len, 120),
            bytes_received: u64_at(buf, len, 128),
            min_rtt_us: u32_at(buf, len, 148),
            delivery_rate: u64_at(buf, len, 160),
            busy_time_us: u64_at(buf, len, 168),
            rwnd_limited_us: u64_at(buf, len, 176),
            sndbuf_limited_us: u64_at(buf, len, 184),
            bytes_sent: u64_at(buf, len, 200),
            bytes_retrans: u64_at(buf, len, 208),
            total_rto: u16_at(buf, len, 240),
            total_rto_recoveries: u16_at(buf, len, 242),
            total_rto_time_ms: u32_at(buf, len, 244),
        })
    }

    /// Reads `TCP_INFO` from a socket (for an MPTCP socket, recent kernels answer with the
    /// first subflow's).
    pub fn read(fd: RawFd) -> io::Result<TcpInfo> {
        let mut buf = [0u8; Self::BUF];
        let len = get(fd, libc::IPPROTO_TCP, libc::TCP_INFO, &mut buf)?;
        TcpInfo::parse(&buf, len).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("TCP_INFO is {len} bytes, fewer than {}", Self::MIN_LEN),
            )
        })
    }

    /// Smoothed round-trip time, ms.
    pub fn rtt_ms(&self) -> f64 {
        f64::from(self.rtt_us) / 1000.0
    }

    /// Congestion window, bytes (segments times the sender MSS).
    pub fn cwnd_bytes(&self) -> u64 {
        u64::from(self.snd_cwnd) * u64::from(self.snd_mss)
    }
}

/// The fields of `struct mptcp_info` (linux/mptcp.h) the tool uses.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MptcpInfo {
    /// `mptcpi_subflows`: subflows the path manager added (the initial one not counted).
    pub subflows: u8,
    /// `mptcpi_subflows_total`: all subflows, the initial one included while it is open
    /// (kernels from 6.7).
    pub subflows_total: Option<u8>,
    /// `mptcpi_flags`.
    pub flags: u32,
    /// `mptcpi_retransmits` (kernels from 6.6).
    pub retransmits: Option<u32>,
    /// `mptcpi_bytes_sent`: bytes sent at the MPTCP level (kernels from 6.6).
    pub bytes_sent: Option<u64>,
    /// `mptcpi_bytes_received` (kernels from 6.6).
    pub bytes_received: Option<u64>,
    /// `mptcpi_bytes_acked` (kernels from 6.6).
    pub bytes_acked: Option<u64>,
}

impl MptcpInfo {
    /// Size of the buffer handed to the kernel.
    const BUF: usize = 256;
    /// Bytes up to and including `mptcpi_flags`.
    const MIN_LEN: usize = 12;

    /// Parses a `struct mptcp_info` the kernel filled `len` bytes of; `None` if too short.
    pub fn parse(buf: &[u8], len: usize) -> Option<MptcpInfo> {
        if len < Self::MIN_LEN {
            return None;
        }
        Some(MptcpInfo {
            subflows: u8_at(buf, len, 0)?,
            subflows_total: u8_at(buf, len, 80),
            flags: u32_at(buf, len, 8)?,
            retransmits: u32_at(buf, len, 44),
            bytes_sent: u64_at(buf, len, 56),
            bytes_received: u64_at(buf, len, 64),
            bytes_acked: u64_at(buf, len, 72),
        })
    }

    /// Reads `MPTCP_INFO` from an MPTCP socket. Fails on a plain TCP socket and on an MPTCP
    /// connection that fell back to TCP.
    pub fn read(fd: RawFd) -> io::Result<MptcpInfo> {
        let mut buf = [0u8; Self::BUF];
        let len = get(fd, SOL_MPTCP, MPTCP_INFO, &mut buf)?;
        MptcpInfo::parse(&buf, len).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("MPTCP_INFO is {len} bytes, fewer than {}", Self::MIN_LEN),
            )
        })
    }

    /// Open subflows: `mptcpi_subflows_total` where the kernel has it, otherwise the added
    /// subflows plus the initial one.
    pub fn subflow_count(&self) -> u32 {
        match self.subflows_total {
            Some(total) => u32::from(total),
            None => u32::from(self.subflows) + 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_info_fields_by_offset() {
        let mut buf = [0u8; 248];
        buf[0] = 1;
        buf[16..20].copy_from_slice(&1448u32.to_ne_bytes());
        buf[68..72].copy_from_slice(&2500u32.to_ne_bytes());
        buf[80..84].copy_from_slice(&10u32.to_ne_bytes());
        buf[100..104].copy_from_slice(&3u32.to_ne_bytes());
        buf[120..128].copy_from_slice(&123u64.to_ne_bytes());
        buf[168..176].copy_from_slice(&1000u64.to_ne_bytes());
        buf[176..184].copy_from_slice(&789u64.to_ne_bytes());
        buf[184..192].copy_from_slice(&7u64.to_ne_bytes());
        buf[200..208].copy_from_slice(&456u64.to_ne_bytes());
        buf[240..242].copy_from_slice(&4u16.to_ne_bytes());
        buf[242..244].copy_from_slice(&2u16.to_ne_bytes());
        buf[244..248].copy_from_slice(&1268u32.to_ne_bytes());
        let info = TcpInfo::parse(&buf, buf.len()).expect("long enough");
        assert_eq!(info.state, 1);
        assert_eq!(info.rtt_ms(), 2.5);
        assert_eq!(info.cwnd_bytes(), 14480);
        assert_eq!(info.total_retrans, 3);
        assert_eq!(info.bytes_acked, Some(123));
        assert_eq!(info.bytes_sent, Some(456));
        assert_eq!(info.busy_time_us, Some(1000));
        assert_eq!(info.rwnd_limited_us, Some(789));
        assert_eq!(info.sndbuf_limited_us, Some(7));
        assert_eq!(
            (
                info.total_rto,
                info.total_rto_recoveries,
                info.total_rto_time_ms
            ),
            (Some(4), Some(2), Some(1268))
        );
        // A kernel before 6.7 ends its structure before tcpi_total_rto.
        let before = TcpInfo::parse(&buf, 240).expect("long enough");
        assert_eq!(before.bytes_retrans, Some(0));
        assert_eq!(before.total_rto, None);
        assert_eq!(before.total_rto_time_ms, None);
        // An old kernel's structure ends before tcpi_bytes_acked.
        let old = TcpInfo::parse(&buf, 104).expect("long enough");
        assert_eq!(old.bytes_acked, None);
        assert_eq!(old.bytes_sent, None);
        assert_eq!(old.rwnd_limited_us, None);
        assert!(TcpInfo::parse(&buf, 100).is_none());
    }

    #[test]
    fn mptcp_info_subflow_count() {
        let mut buf = [0u8; 96];
        buf[0] = 1;
        buf[80] = 2;
        let full = MptcpInfo::parse(&buf, 96).expect("long enough");
        assert_eq!(full.subflow_count(), 2);
        let old = MptcpInfo::parse(&buf, 48).expect("long enough");
        assert_eq!(old.subflows_total, None);
        assert_eq!(old.bytes_sent, None);
        assert_eq!(old.subflow_count(), 2);
        assert!(MptcpInfo::parse(&buf, 0).is_none());
    }
}
