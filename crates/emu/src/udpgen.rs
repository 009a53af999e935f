//! The built-in UDP generator: the simulator's own `cbr`, `onoff` and `reqresp` agents
//! (`polypath_sim::udp_agents`), each driven on real UDP sockets inside its host's
//! namespace by a thread on the monotonic clock. The same agent code decides what to send
//! and when in both drivers.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use bytes::Bytes;
use polypath_sim::{Agent, AgentStats, Datagram, Record, SimTime};

/// What a generator thread shares with the emulator.
#[derive(Default)]
pub(crate) struct Shared {
    /// Application bytes received (the agent's counter).
    pub app_rx: AtomicU64,
    /// Application bytes sent.
    pub app_tx: AtomicU64,
    /// Completions the agent recorded, for `completions.csv`.
    pub records: Mutex<Vec<Record>>,
    /// The agent reported done (senders) or the thread ended.
    pub done: AtomicBool,
    /// Why the thread ended early, if it did.
    pub error: Mutex<Option<String>>,
}

/// One generator agent and where it runs.
pub(crate) struct Generator {
    /// The host's namespace.
    pub ns_fd: i32,
    /// The host's addresses: the agent is bound to `port` on each.
    pub addrs: Vec<IpAddr>,
    /// Its port.
    pub port: u16,
    /// The agent.
    pub agent: Box<dyn Agent + Send>,
    /// A sender (its thread ends when the agent is done) rather than a receiver.
    pub sender: bool,
}

/// Starts `g` with the run's clock `t0`. The thread ends when `stop` is set (or, for a
/// sender, when the agent is done).
pub(crate) fn spawn(
    mut g: Generator,
    t0: Instant,
    stop: Arc<AtomicBool>,
    shared: Arc<Shared>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        if let Err(e) = drive(&mut g, t0, &stop, &shared)
            && let Ok(mut slot) = shared.error.lock()
        {
            *slot = Some(e.to_string());
        }
        shared.done.store(true, Ordering::Release);
    })
}

fn now_of(t0: Instant) -> SimTime {
    SimTime(u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

fn drive(g: &mut Generator, t0: Instant, stop: &AtomicBool, shared: &Shared) -> io::Result<()> {
    let (ns_fd, port, sender) = (g.ns_fd, g.port, g.sender);
    let agent = g.agent.as_mut();
    let addrs = &g.addrs;
    // SAFETY: moves this thread only into the host's namespace.
    if unsafe { libc::setns(ns_fd, libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    crate::rt::tune_thread(false);
    let mut sockets = Vec::with_capacity(addrs.len());
    for a in addrs {
        let s = UdpSocket::bind(SocketAddr::new(*a, port))?;
        s.set_nonblocking(true)?;
        sockets.push(s);
    }
    let mut pfds: Vec<libc::pollfd> = sockets
        .iter()
        .map(|s| libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let mut buf = vec![0u8; 65536];
    let mut stats = AgentStats::default();
    let mut records = Vec::new();
    let mut last_stats = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let now = now_of(t0);
        while let Some(dg) = agent.poll_transmit(now) {
            let sock = sockets
                .iter()
                .find(|s| s.local_addr().is_ok_and(|a| a == dg.src))
                .or_else(|| sockets.first());
            if let Some(s) = sock {
                match s.send_to(&dg.payload, dg.dst) {
                    Ok(_) => {}
                    // A full socket buffer or an unreachable peer loses the datagram,
                    // as a real application's would.
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock
                                | io::ErrorKind::ConnectionRefused
                                | io::ErrorKind::NetworkUnreachable
                        ) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        if now.0.saturating_sub(last_stats) >= 20_000_000 {
            last_stats = now.0;
            publish(agent, shared, &mut stats, &mut records);
            if sender && agent.is_done() {
                break;
            }
        }
        let deadline = agent.poll_timeout();
        let wait_ns = deadline
            .map(|d| d.0.saturating_sub(now_of(t0).0))
            .unwrap_or(u64::MAX)
            .min(20_000_000);
        let ts = libc::timespec {
            tv_sec: (wait_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (wait_ns % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: pfds is a valid array of pollfd for the length given.
        let n = unsafe {
            libc::ppoll(
                pfds.as_mut_ptr(),
                pfds.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        for (k, s) in sockets.iter().enumerate() {
            if pfds[k].revents == 0 {
                continue;
            }
            pfds[k].revents = 0;
            let local = s.local_addr()?;
            loop {
                match s.recv_from(&mut buf) {
                    Ok((n, from)) => {
                        let now = now_of(t0);
                        agent.handle_datagram(
                            now,
                            Datagram {
                                src: from,
                                dst: local,
                                payload: Bytes::copy_from_slice(&buf[..n]),
                            },
                        );
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => break,
                    Err(e) => return Err(e),
                }
            }
        }
        let now = now_of(t0);
        if agent.poll_timeout().is_some_and(|d| d <= now) {
            agent.handle_timeout(now);
        }
    }
    publish(agent, shared, &mut stats, &mut records);
    Ok(())
}

fn publish(
    agent: &mut dyn Agent,
    shared: &Shared,
    stats: &mut AgentStats,
    records: &mut Vec<Record>,
) {
    stats.app_bytes_received = 0;
    stats.app_bytes_sent = 0;
    stats.paths.clear();
    agent.stats(stats);
    shared
        .app_rx
        .store(stats.app_bytes_received, Ordering::Relaxed);
    shared.app_tx.store(stats.app_bytes_sent, Ordering::Relaxed);
    records.clear();
    agent.drain_records(records);
    if !records.is_empty()
        && let Ok(mut r) = shared.records.lock()
    {
        r.append(records);
    }
}
