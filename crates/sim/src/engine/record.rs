//! Recording: the per-bin samples written to `flows.csv`, `paths.csv`, `links.csv` and
//! `completions.csv`, and the run's [`Summary`].

use std::fmt::Write as _;
use std::net::SocketAddr;

use super::{Simulator, StopReason};
use crate::agent::Record;
use crate::error::SimError;
use crate::link::DropReason;
use crate::record::{
    CompletionStats, DROP_UNBOUND, DROP_UNROUTED, FlowSummary, LinkSummary, Stream, Summary,
    delay_stats, drop_index,
};

impl Simulator {
    pub(super) fn sample(&mut self) -> Result<(), SimError> {
        let now = self.now;
        let span = now.saturating_sub(self.last_sample);
        if span == 0 {
            return Ok(());
        }
        self.last_sample = now;
        let Some(out) = self.out.as_mut() else {
            return Ok(());
        };
        let secs = span as f64 / 1e9;
        let t = now as f64 / 1e9;
        for f in &mut self.flows {
            f.app_rx = 0;
            f.app_tx = 0;
        }
        let mut flow_jitter: Vec<(f64, u64)> = vec![(0.0, 0); self.flows.len()];
        for (ai, slot) in self.agents.iter_mut().enumerate() {
            self.stats_buf.app_bytes_received = 0;
            self.stats_buf.app_bytes_sent = 0;
            self.stats_buf.paths.clear();
            slot.agent.stats(&mut self.stats_buf);
            let fi = slot.flow as usize;
            let Some(f) = self.flows.get_mut(fi) else {
                continue;
            };
            f.app_rx += self.stats_buf.app_bytes_received;
            f.app_tx += self.stats_buf.app_bytes_sent;
            if let Some(fj) = flow_jitter.get_mut(fi) {
                for s in &slot.streams {
                    fj.0 += s.jitter;
                    fj.1 += 1;
                }
            }
            if let (Some(paths), true) = (out.paths.as_mut(), self.path_series) {
                let secs_bin = secs;
                let mut write_row = |line: &mut String,
                                     path: String,
                                     local: SocketAddr,
                                     remote: SocketAddr,
                                     st: Option<&Stream>,
                                     p: Option<&crate::agent::PathStats>|
                 -> Result<(), SimError> {
                    line.clear();
                    let opt = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_default();
                    let _ = writeln!(
                        line,
                        "{t:.6},{},{},{ai},{path},{local},{remote},{:.6},{},{},{},{},{},{}",
                        f.name,
                        slot.instance,
                        st.map(|s| s.bin_bytes as f64 * 8.0 / secs_bin / 1e6)
                            .unwrap_or(0.0),
                        st.map(|s| s.bin_drops).unwrap_or(0),
                        p.and_then(|p| p.srtt)
                            .map(|d| format!("{:.6}", d.as_secs_f64() * 1e3))
                            .unwrap_or_default(),
                        opt(p.and_then(|p| p.cwnd)),
                        opt(p.and_then(|p| p.bytes_in_flight)),
                        opt(p.map(|p| p.lost_packets)),
                        opt(p.map(|p| p.sent_packets)),
                    );
                    paths.write(line)
                };
                if self.stats_buf.paths.is_empty() {
                    // No transport state: one row per network stream.
                    for (k, st) in slot.streams.iter().enumerate() {
                        write_row(
                            &mut self.line,
                            format!("s{k}"),
                            st.local,
                            st.remote,
                            Some(st),
                            None,
                        )?;
                    }
                } else {
                    for p in &self.stats_buf.paths {
                        let dir = self.addr_map.get(&p.local.ip()).and_then(|&(h, i)| {
                            self.hosts.get(h as usize)?.ifaces.get(i as usize)?.dir_out
                        });
                        let st = dir.and_then(|d| slot.streams.iter().find(|s| s.path == d));
                        write_row(
                            &mut self.line,
                            p.id.to_string(),
                            p.local,
                            p.remote,
                            st,
                            Some(p),
                        )?;
                    }
                }
            }
            for st in &mut slot.streams {
                st.bin_bytes = 0;
                st.bin_drops = 0;
            }
            self.records_buf.clear();
            slot.agent.drain_records(&mut self.records_buf);
            for r in &self.records_buf {
                let Record::Completion {
                    label,
                    started,
                    finished,
                    bytes,
                } = r;
                let d = (finished.0.saturating_sub(started.0)) as f64 / 1e9;
                f.completions += 1;
                f.completion_sum_s += d;
                f.completion_min_s = f.completion_min_s.min(d);
                f.completion_max_s = f.completion_max_s.max(d);
                self.line.clear();
                let _ = writeln!(
                    self.line,
                    "{},{},{ai},{},{:.9},{:.9},{:.9},{bytes}",
                    f.name,
                    slot.instance,
                    label.replace(',', ";"),
                    started.as_secs_f64(),
                    finished.as_secs_f64(),
                    d
                );
                out.completions.write(&self.line)?;
            }
        }
        for (fi, f) in self.flows.iter_mut().enumerate() {
            let goodput = f.app_rx.saturating_sub(f.app_rx_last) as f64 * 8.0 / secs / 1e6;
            f.app_rx_last = f.app_rx;
            let owd = if f.bin_delivered_pkts > 0 {
                format!(
                    "{:.6}",
                    f.bin_owd_sum_ns as f64 / f.bin_delivered_pkts as f64 / 1e6
                )
            } else {
                String::new()
            };
            let (js, jn) = flow_jitter.get(fi).copied().unwrap_or((0.0, 0));
            let jitter = if jn > 0 {
                format!("{:.6}", js / jn as f64 / 1e6)
            } else {
                String::new()
            };
            self.line.clear();
            let _ = writeln!(
                self.line,
                "{t:.6},{},{:.6},{:.6},{goodput:.6},{},{},{},{owd},{jitter}",
                f.name,
                f.bin_sent_bytes as f64 * 8.0 / secs / 1e6,
                f.bin_delivered_bytes as f64 * 8.0 / secs / 1e6,
                f.bin_sent_pkts,
                f.bin_delivered_pkts,
                f.bin_dropped,
            );
            out.flows.write(&self.line)?;
            f.bin_sent_bytes = 0;
            f.bin_sent_pkts = 0;
            f.bin_delivered_bytes = 0;
            f.bin_delivered_pkts = 0;
            f.bin_dropped = 0;
            f.bin_owd_sum_ns = 0;
        }
        for (di, d) in self.dirs.iter_mut().enumerate() {
            self.line.clear();
            let _ = writeln!(
                self.line,
                "{t:.6},{},{},{:.6},{:.6},{},{},{}",
                self.link_names
                    .get(di / 2)
                    .map(String::as_str)
                    .unwrap_or(""),
                if di % 2 == 0 { "up" } else { "down" },
                d.take_bin_mean_rate(now, secs) / 1e6,
                d.stats.bin_bytes as f64 * 8.0 / secs / 1e6,
                d.queued_bytes,
                d.stats.bin_drops,
                u8::from(d.up)
            );
            out.links.write(&self.line)?;
            d.stats.bin_bytes = 0;
            d.stats.bin_drops = 0;
        }
        Ok(())
    }

    pub(super) fn final_sample(&mut self) -> Result<(), SimError> {
        if self.now > self.last_sample {
            self.sample()?;
        }
        Ok(())
    }

    /// The deterministic summary of the run so far.
    pub fn summary(&self, stopped_by: StopReason) -> Summary {
        let mut jitter: Vec<(f64, u64)> = vec![(0.0, 0); self.flows.len()];
        for slot in &self.agents {
            if let Some(j) = jitter.get_mut(slot.flow as usize) {
                for s in &slot.streams {
                    j.0 += s.jitter;
                    j.1 += 1;
                }
            }
        }
        let end = self.now as f64 / 1e9;
        let flows = self
            .flows
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let active = f
                    .first_send_ns
                    .map(|s| f.last_delivery_ns.saturating_sub(s) as f64 / 1e9)
                    .unwrap_or(0.0);
                let (js, jn) = jitter.get(i).copied().unwrap_or((0.0, 0));
                FlowSummary {
                    name: f.name.clone(),
                    kind: f.kind.to_string(),
                    instances: f.instances,
                    packets_sent: f.sent_pkts,
                    packets_delivered: f.delivered_pkts,
                    bytes_sent: f.sent_bytes,
                    bytes_delivered: f.delivered_bytes,
                    app_bytes_received: f.app_rx,
                    app_bytes_sent: f.app_tx,
                    drops_queue: f.drops[0],
                    drops_loss: f.drops[1],
                    drops_down: f.drops[2],
                    drops_unrouted: f.drops[DROP_UNROUTED],
                    drops_unbound: f.drops[DROP_UNBOUND],
                    drops_target_buffer: f.drops[drop_index(DropReason::TargetBuffer)],
                    drops_context_release: f.drops[drop_index(DropReason::ContextRelease)],
                    delivered_mbps: if active > 0.0 {
                        f.delivered_bytes as f64 * 8.0 / active / 1e6
                    } else {
                        0.0
                    },
                    owd_ms: delay_stats(f),
                    jitter_ms: if jn > 0 { js / jn as f64 / 1e6 } else { 0.0 },
                    completions: (f.completions > 0).then(|| CompletionStats {
                        count: f.completions,
                        mean_s: f.completion_sum_s / f.completions as f64,
                        min_s: f.completion_min_s,
                        max_s: f.completion_max_s,
                    }),
                }
            })
            .collect();
        let links = self
            .dirs
            .iter()
            .enumerate()
            .map(|(i, d)| LinkSummary {
                link: self.link_names.get(i / 2).cloned().unwrap_or_default(),
                dir: if i % 2 == 0 { "up" } else { "down" }.to_string(),
                packets: d.stats.delivered_pkts,
                bytes: d.stats.delivered_bytes,
                mean_mbps: if end > 0.0 {
                    d.stats.delivered_bytes as f64 * 8.0 / end / 1e6
                } else {
                    0.0
                },
                drops_queue: d.stats.drops_queue,
                drops_loss: d.stats.drops_loss,
                drops_down: d.stats.drops_down,
                drops_target_buffer: d.stats.drops_target_buffer,
                drops_context_release: d.stats.drops_context_release,
                duplicates: d.stats.duplicates,
                max_queue_bytes: d.stats.max_queue_bytes,
            })
            .collect();
        Summary {
            scenario: self.scenario_name.clone(),
            seed: self.seed,
            sim_time_s: end,
            stopped_by: stopped_by.as_str().to_string(),
            events: self.events,
            agents: self.agents.len(),
            flows,
            links,
            radio: self.radio.as_ref().map(|r| r.summary()),
        }
    }
}
