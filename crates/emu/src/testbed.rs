//! The scenario's hosts as network namespaces and its interfaces as TUN devices.
//!
//! Each host is a namespace with its loopback up. Each interface attached to a link is a TUN
//! device (named after the interface when that is a valid device name) with the
//! interface's address as a host address (`/32`, `/128`), the scenario MTU (1500) and:
//!
//! - **source routing as the simulator does it**: a packet leaves by the interface that
//!   owns its source address (`ip rule from ADDR lookup <table of that interface>`, whose
//!   default route is that device), so a multipath application or MPTCP subflow bound to
//!   an address uses that interface's link;
//! - **routes**: host routes to the addresses at the other end of each link, the host's
//!   scenario `routes` (`dst` via the interface, with `src` as a policy rule), and a
//!   default route through the first interface, each with the interface's address as the
//!   preferred source;
//! - `ip_forward` on hosts with `forward = true` (the emulator forwards between links
//!   itself, as the simulator does; the kernel setting keeps the namespace's view
//!   consistent), reverse-path filtering off (a reply may arrive on another interface
//!   than its request left by, as in the simulator), and IPv6 off when the scenario has no
//!   IPv6 address (no router solicitations on the links).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::os::fd::OwnedFd;

use polypath_scenario::{Scenario, Side};

use crate::error::EmuError;
use crate::ns::{Netns, RunLock};

/// First routing table used for per-interface source routing.
const TABLE_BASE: u32 = 100;
/// Priority of the per-interface source rules.
const RULE_PRIORITY: u32 = 1000;
/// Priority of the scenario's source-specific routes (before the per-interface rules).
const SCENARIO_RULE_PRIORITY: u32 = 500;

/// One host interface as a TUN device.
pub(crate) struct Iface {
    /// The device name inside the namespace.
    pub dev: String,
    /// The interface's address.
    pub addr: IpAddr,
    /// The device (non-blocking).
    pub tun: OwnedFd,
}

/// One host as a namespace.
pub(crate) struct Host {
    /// The scenario's host name.
    pub name: String,
    /// Its interfaces, by scenario index (`None`: not attached to a link).
    pub ifaces: Vec<Option<Iface>>,
    /// The namespace (declared last: dropped after the devices are closed).
    pub ns: Netns,
}

impl Host {
    /// The interface owning `addr` (or the first attached one) and its index.
    pub fn iface_for(&self, addr: IpAddr) -> Option<(usize, &Iface)> {
        let attached = || {
            self.ifaces
                .iter()
                .enumerate()
                .filter_map(|(k, i)| i.as_ref().map(|i| (k, i)))
        };
        attached()
            .find(|(_, i)| i.addr == addr)
            .or_else(|| attached().next())
    }
}

/// A valid device name for interface `i` named `name`.
fn dev_name(name: &str, i: usize) -> String {
    let ok = !name.is_empty()
        && name.len() < 16
        && name != "lo"
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        name.to_string()
    } else {
        format!("eth{i}")
    }
}

/// A namespace-name-safe form of a host name.
fn ns_part(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `net.ipv4.<key>=min initial largest`.
fn tcp_buffer_sysctl(key: &str, [min, initial, largest]: [u64; 3]) -> String {
    format!("net.ipv4.{key}={min} {initial} {largest}")
}

fn prefix_len(a: IpAddr) -> u8 {
    if a.is_ipv4() { 32 } else { 128 }
}

/// Builds every host of `scenario`. On error, what was built is removed (the namespaces
/// drop).
pub(crate) fn build(scenario: &Scenario, run: &RunLock, mtu: u32) -> Result<Vec<Host>, EmuError> {
    let any_v6 = scenario
        .hosts
        .iter()
        .flat_map(|h| h.interfaces.iter())
        .any(|i| i.addr.is_ipv6());
    let mut hosts = Vec::with_capacity(scenario.hosts.len());
    for (hi, h) in scenario.hosts.iter().enumerate() {
        let ns = Netns::create(&format!("{}.{}", run.id, ns_part(&h.name)))?;
        let mut settings = vec![
            "net.ipv4.conf.all.rp_filter=0".to_string(),
            "net.ipv4.conf.default.rp_filter=0".to_string(),
            format!("net.ipv4.ip_forward={}", u8::from(h.forward)),
            // A new namespace copies the machine's TCP buffer limits: set the scenario's.
            tcp_buffer_sysctl("tcp_rmem", h.tcp_buffers.rmem),
            tcp_buffer_sysctl("tcp_wmem", h.tcp_buffers.wmem),
        ];
        if !any_v6 {
            settings.push("net.ipv6.conf.all.disable_ipv6=1".into());
            settings.push("net.ipv6.conf.default.disable_ipv6=1".into());
        }
        ns.sysctl(&settings)?;
        let names: Vec<(usize, String)> = h
            .interfaces
            .iter()
            .enumerate()
            .filter(|(_, i)| i.attach.is_some())
            .map(|(k, i)| (k, dev_name(&i.name, k)))
            .collect();
        let mut unique = names.clone();
        unique.sort_by(|a, b| a.1.cmp(&b.1));
        unique.dedup_by(|a, b| a.1 == b.1);
        let names: Vec<(usize, String)> = if unique.len() == names.len() {
            names
        } else {
            names.iter().map(|(k, _)| (*k, format!("eth{k}"))).collect()
        };
        let tuns = ns.open_tuns(&names.iter().map(|n| n.1.clone()).collect::<Vec<_>>())?;
        let mut ifaces: Vec<Option<Iface>> = (0..h.interfaces.len()).map(|_| None).collect();
        for ((k, dev), tun) in names.into_iter().zip(tuns) {
            let addr = h.interfaces[k].addr;
            let mtu_s = mtu.to_string();
            ns.ip(&[
                "link",
                "set",
                &dev,
                "mtu",
                &mtu_s,
                "txqueuelen",
                "1000",
                "up",
            ])?;
            let cidr = format!("{addr}/{}", prefix_len(addr));
            if addr.is_ipv6() {
                ns.ip(&["-6", "addr", "add", &cidr, "dev", &dev, "nodad"])?;
            } else {
                ns.ip(&["addr", "add", &cidr, "dev", &dev])?;
            }
            let table = (TABLE_BASE + k as u32).to_string();
            let fam = if addr.is_ipv6() { "-6" } else { "-4" };
            ns.ip(&[fam, "route", "add", "default", "dev", &dev, "table", &table])?;
            let prio = (RULE_PRIORITY + k as u32).to_string();
            ns.ip(&[
                fam,
                "rule",
                "add",
                "from",
                &addr.to_string(),
                "lookup",
                &table,
                "priority",
                &prio,
            ])?;
            ifaces[k] = Some(Iface { dev, addr, tun });
        }
        // Host routes to the far ends of each link.
        for (k, iface) in h.interfaces.iter().enumerate() {
            let (Some(att), Some(mine)) = (iface.attach, ifaces[k].as_ref()) else {
                continue;
            };
            for (oh, other) in scenario.hosts.iter().enumerate() {
                for o in &other.interfaces {
                    let Some(oa) = o.attach else { continue };
                    if oh == hi || oa.link != att.link || oa.side == att.side {
                        continue;
                    }
                    if o.addr.is_ipv6() != mine.addr.is_ipv6() {
                        continue;
                    }
                    let dst = format!("{}/{}", o.addr, prefix_len(o.addr));
                    // Several links may reach the same address; the first one wins.
                    let _ = ns.ip(&[
                        "route",
                        "add",
                        &dst,
                        "dev",
                        &mine.dev,
                        "src",
                        &mine.addr.to_string(),
                    ]);
                }
            }
        }
        for (ri, r) in h.routes.iter().enumerate() {
            let Some(via) = ifaces.get(r.via).and_then(Option::as_ref) else {
                continue;
            };
            let dst = r.dst.to_string();
            match &r.src {
                None => {
                    let _ = ns.ip(&[
                        "route",
                        "add",
                        &dst,
                        "dev",
                        &via.dev,
                        "src",
                        &via.addr.to_string(),
                    ]);
                }
                Some(src) => {
                    let table = (TABLE_BASE + r.via as u32).to_string();
                    let prio = (SCENARIO_RULE_PRIORITY + ri as u32).to_string();
                    ns.ip(&[
                        "rule",
                        "add",
                        "from",
                        &src.to_string(),
                        "to",
                        &dst,
                        "lookup",
                        &table,
                        "priority",
                        &prio,
                    ])?;
                }
            }
        }
        // A default route per address family, through the first interface of that family.
        for v6 in [false, true] {
            if let Some(first) = ifaces.iter().flatten().find(|i| i.addr.is_ipv6() == v6) {
                let fam = if v6 { "-6" } else { "-4" };
                let src = first.addr.to_string();
                ns.ip(&[
                    fam, "route", "add", "default", "dev", &first.dev, "src", &src,
                ])?;
            }
        }
        hosts.push(Host {
            name: h.name.clone(),
            ifaces,
            ns,
        });
    }
    Ok(hosts)
}

/// Configures the in-kernel MPTCP path manager of every host: each interface after the
/// first is an endpoint, with limits for one subflow and one announced address per
/// interface. Every such endpoint is `signal` (the host announces the address, ADD_ADDR,
/// and the peer may open a subflow to it from the local address its routing picks); in
/// a scenario where no link end is shared by several interfaces it is also `subflow` (the
/// host opens a subflow from it to the peer's first address).
///
/// A `subflow` endpoint's subflow crosses links: out over this interface's link to an
/// address on another link, and its answers come back over that other link, addressed to
/// this interface. A link end with a single interface hands such packets to its host; at
/// an end shared by several hosts (an IAB node, a backhaul behind which many UEs sit) no
/// interface there owns the address and the engine drops them, so the subflow would hang
/// in SYN-SENT and hold a subflow slot. Where ends are shared, hosts rely on their peers'
/// announcements instead, so a server must listen on the announced addresses too (e.g.
/// on all addresses, as the `tcp` flows' receivers do).
pub(crate) fn setup_mptcp(scenario: &Scenario, hosts: &[Host]) -> Result<(), EmuError> {
    let mut per_end: BTreeMap<(usize, Side), usize> = BTreeMap::new();
    for h in &scenario.hosts {
        for a in h.interfaces.iter().filter_map(|i| i.attach) {
            *per_end.entry((a.link, a.side)).or_default() += 1;
        }
    }
    let cross_subflows = per_end.values().all(|&n| n <= 1);
    for h in hosts {
        let attached: Vec<&Iface> = h.ifaces.iter().flatten().collect();
        let n = attached.len().clamp(1, 8).to_string();
        h.ns.ip(&[
            "mptcp",
            "limits",
            "set",
            "subflows",
            &n,
            "add_addr_accepted",
            &n,
        ])?;
        for (k, i) in attached.iter().enumerate().skip(1) {
            let id = (k + 1).to_string();
            let addr = i.addr.to_string();
            let mut args = vec![
                "mptcp", "endpoint", "add", &addr, "dev", &i.dev, "id", &id, "signal",
            ];
            if cross_subflows {
                args.push("subflow");
            }
            h.ns.ip(&args)?;
        }
    }
    Ok(())
}
