//! The 5G radio model inside the simulator: reading `[radio]`, binding radio paths to
//! links, the per-slot downlink state of a radio link, handover bookkeeping for the
//! summary, and the JSON-lines link-event stream.
//!
//! How a radio link applies the model's [`LinkAction`]s follows `polypath_ran::action`
//! and its executable specification `polypath_ran::reflink::ReferenceLink`: the
//! downlink (side B to side A) queues in the serving cell's buffer and is served slot by
//! slot by a [`SlotScheduler`]; the uplink is a rate server at the uplink rate that holds
//! its queue during interruptions.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use polypath_link::LinkEvent;
use polypath_link::jsonl::JsonLinesWriter;
use polypath_ran::mobility::Mobility;
use polypath_ran::reflink::SlotScheduler;
use polypath_ran::{LinkAction, RadioConfig, RadioError, RadioModel, SlotParams};
use polypath_scenario::{RadioPathRef, Scenario, Side};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::SimError;

/// State of a radio link's downlink, as in `ReferenceLink`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RadioState {
    /// Serving slot by slot.
    Up,
    /// Break-before-make interruption: not serving, queue kept as the target's buffer.
    Interrupted,
    /// Unusable: queue and arrivals dropped.
    Down,
}

/// The radio part of a downlink direction (side B to side A of a radio link).
pub(crate) struct RadioDl {
    /// Index into [`RadioRt::paths`].
    pub path: u32,
    pub state: RadioState,
    /// Slot parameters of the serving cell (kept while interrupted or down).
    pub slot: Option<SlotParams>,
    /// Queue limit in bytes: the serving (or, while interrupted, the target) cell's buffer.
    pub limit: u64,
    /// Bytes of the head packet already granted in earlier slots.
    pub head_sent: u64,
    pub sched: SlotScheduler,
    /// A slot event is pending.
    pub ticking: bool,
    /// The previous slot had an allocation (the next one reports, even if empty).
    pub prev_alloc: bool,
    /// Bytes served since the last report to the model's predictors.
    pub unreported: u64,
}

impl RadioDl {
    pub fn new(path: u32, seed: u64) -> Self {
        Self {
            path,
            state: RadioState::Down,
            slot: None,
            limit: 0,
            head_sent: 0,
            sched: SlotScheduler::new(seed),
            ticking: false,
            prev_alloc: false,
            unreported: 0,
        }
    }

    /// Whether the next slot can change anything: an allocation to report the end of,
    /// or (while up) data queued or a burst / other UEs' turn in progress.
    pub fn needs_slot(&self, queued_bytes: u64) -> bool {
        self.prev_alloc
            || (self.state == RadioState::Up && (queued_bytes > 0 || !self.sched.is_idle()))
    }
}

/// One radio path of the model and what it is bound to.
pub(crate) struct PathRt {
    pub ue: u32,
    pub iface: u16,
    /// The link carrying it, if any.
    pub link: Option<u32>,
    /// The UE-side interface's address on that link.
    pub addr: Option<IpAddr>,
    /// The last `handover_execution` seen on this path: (source, target) cell ids.
    pub last_exec: Option<(u32, u32)>,
    /// Times of its handover executions (ns).
    pub handovers: Vec<u64>,
    /// The open interruption record (index into [`RadioRt::records`]).
    pub open: Option<usize>,
}

/// What an interruption did to one path's link (one handover or re-association).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct InterruptionRecord {
    /// When the interruption (handover execution) began, seconds.
    pub t_s: f64,
    /// UE.
    pub ue: u32,
    /// Radio path of the UE.
    pub iface: u16,
    /// Link bound to the path, if any (without one, the queue figures are zero).
    pub link: Option<String>,
    /// `handover` or `reassociation`.
    pub reason: String,
    /// Source cell (handovers).
    pub source: Option<u32>,
    /// Target cell (handovers).
    pub target: Option<u32>,
    /// Time until the path came up again (or went down), ms; `None` if the run ended first.
    pub interruption_ms: Option<f64>,
    /// Downlink packets queued when the interruption began.
    pub queued_packets: u64,
    /// Downlink bytes queued when the interruption began.
    pub queued_bytes: u64,
    /// Context release: packets delivered at once (overtaking the gap).
    pub delivered_now: u64,
    /// Context release: gap packets redelivered by the target after the interruption.
    pub redelivered: u64,
    /// Context release: gap packets lost.
    pub context_release_lost: u64,
    /// Context release: bytes lost.
    pub context_release_lost_bytes: u64,
    /// Packets arriving for the downlink during the interruption.
    pub arrivals: u64,
    /// Bytes arriving for the downlink during the interruption.
    pub arrival_bytes: u64,
    /// Packets dropped because the target cell's buffer was full (queued packets trimmed
    /// to the target's limit plus arrivals beyond it).
    pub target_buffer_drops: u64,
    /// Bytes of those.
    pub target_buffer_drop_bytes: u64,
    #[serde(skip)]
    start_ns: u64,
}

impl InterruptionRecord {
    /// Whether the sender had data in flight towards the UE: packets queued at the
    /// start or arriving during the interruption.
    pub fn loaded(&self) -> bool {
        self.queued_packets > 0 || self.arrivals > 0
    }
}

/// Radio figures of a run (the `radio` key of `summary.json`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RadioSummary {
    /// Handover executions, all UEs and paths.
    pub handovers: u64,
    /// Mean time between consecutive handovers of the same path, seconds (`None` with
    /// fewer than two handovers on every path).
    pub mean_handover_interval_s: Option<f64>,
    /// Handovers on a bound link with downlink data queued or arriving (a loaded sender).
    pub loaded_handovers: u64,
    /// In those: packets dropped because the target cell's buffer was full.
    pub target_buffer_drops: u64,
    /// In those: bytes dropped because the target cell's buffer was full.
    pub target_buffer_drop_bytes: u64,
    /// In those: packets lost in the source cell's context release.
    pub context_release_lost: u64,
    /// In those: bytes lost in the source cell's context release.
    pub context_release_lost_bytes: u64,
    /// In those: packets redelivered late by the target (reordered).
    pub context_release_redelivered: u64,
    /// In those: packets released at once, overtaking the gap (reordered).
    pub context_release_delivered_now: u64,
    /// Wi-Fi / LiFi re-associations (interruptions that are not handovers).
    pub reassociations: u64,
    /// Link-layer events produced (radio events and, if enabled, RB allocations).
    pub link_events: u64,
    /// Every interruption, in time order.
    pub interruptions: Vec<InterruptionRecord>,
}

/// The radio model and its bindings, owned by the simulator.
pub(crate) struct RadioRt {
    pub model: RadioModel,
    pub paths: Vec<PathRt>,
    pub index: BTreeMap<(u32, u16), u32>,
    /// Host of each UE that has a bound link.
    pub ue_host: BTreeMap<u32, u32>,
    pub rb_events: bool,
    pub records: Vec<InterruptionRecord>,
    pub events: u64,
}

impl RadioRt {
    /// Reads `[radio]`, builds the model with the run seed and binds the scenario's radio
    /// links to its paths. `None` without a `[radio]` section.
    pub fn build(scenario: &Scenario, seed: u64) -> Result<Option<RadioRt>, SimError> {
        let Some(cfg) = radio_config(scenario)? else {
            return Ok(None);
        };
        let model = RadioModel::new(&cfg, seed).map_err(|e| model_error(scenario, e))?;
        let mut paths: Vec<PathRt> = model
            .paths()
            .iter()
            .map(|p| PathRt {
                ue: p.ue,
                iface: p.iface,
                link: None,
                addr: None,
                last_exec: None,
                handovers: Vec::new(),
                open: None,
            })
            .collect();
        let index: BTreeMap<(u32, u16), u32> = paths
            .iter()
            .enumerate()
            .map(|(i, p)| ((p.ue, p.iface), i as u32))
            .collect();
        let mut ue_host: BTreeMap<u32, u32> = BTreeMap::new();
        for (li, l) in scenario.links.iter().enumerate() {
            let Some(b) = &l.radio else { continue };
            let at = format!("link[{li}].radio");
            let found = model.paths().iter().position(|p| {
                p.ue == b.ue
                    && match &b.path {
                        RadioPathRef::Index(i) => p.iface == *i,
                        RadioPathRef::Name(n) => p.name == *n,
                    }
            });
            let Some(pi) = found else {
                let known: Vec<String> = model
                    .paths()
                    .iter()
                    .filter(|p| p.ue == b.ue)
                    .map(|p| format!("{} = \"{}\"", p.iface, p.name))
                    .collect();
                let msg = if known.is_empty() {
                    format!("the radio model has no UE with id {}", b.ue)
                } else {
                    format!(
                        "UE {} has no such radio path; its paths are {}",
                        b.ue,
                        known.join(", ")
                    )
                };
                return Err(scenario.error_at(&at, msg).into());
            };
            let Some(path) = paths.get_mut(pi) else {
                continue;
            };
            if let Some(other) = path.link {
                let other = scenario
                    .links
                    .get(other as usize)
                    .map(|l| l.name.as_str())
                    .unwrap_or("");
                return Err(scenario
                    .error_at(
                        &at,
                        format!("this radio path already drives link `{other}`"),
                    )
                    .into());
            }
            // Side A is the UE: exactly one interface, on the UE's host.
            let ends: Vec<(usize, IpAddr)> = scenario
                .hosts
                .iter()
                .enumerate()
                .flat_map(|(hi, h)| {
                    h.interfaces
                        .iter()
                        .filter(|i| i.attach.is_some_and(|a| a.link == li && a.side == Side::A))
                        .map(move |i| (hi, i.addr))
                })
                .collect();
            let [(host, addr)] = ends.as_slice() else {
                return Err(scenario
                    .error_at(
                        &at,
                        format!(
                            "side a of a radio link is the UE: exactly one interface must plug into it, found {}",
                            ends.len()
                        ),
                    )
                    .into());
            };
            if let Some(prev) = ue_host.insert(b.ue, *host as u32)
                && prev != *host as u32
            {
                return Err(scenario
                    .error_at(
                        &at,
                        format!(
                            "radio UE {} is host `{}` on another link, not host `{}`",
                            b.ue,
                            scenario
                                .hosts
                                .get(prev as usize)
                                .map(|h| h.name.as_str())
                                .unwrap_or(""),
                            scenario
                                .hosts
                                .get(*host)
                                .map(|h| h.name.as_str())
                                .unwrap_or("")
                        ),
                    )
                    .into());
            }
            path.link = Some(li as u32);
            path.addr = Some(*addr);
        }
        Ok(Some(RadioRt {
            model,
            paths,
            index,
            ue_host,
            rb_events: scenario.output.rb_events,
            records: Vec::new(),
            events: 0,
        }))
    }

    /// Index of the path `(ue, iface)`.
    pub fn path_of(&self, ue: u32, iface: u16) -> Option<u32> {
        self.index.get(&(ue, iface)).copied()
    }

    /// The UE-side address of the link bound to `(ue, iface)`.
    pub fn addr_of(&self, ue: u32, iface: u16) -> Option<IpAddr> {
        let p = self.path_of(ue, iface)?;
        self.paths.get(p as usize)?.addr
    }

    /// The open interruption record of `path`, opening one at `now` if there is none.
    /// `queued` is (packets, bytes) queued on the downlink.
    pub fn open_record(
        &mut self,
        path: u32,
        now: u64,
        handover: bool,
        link_name: Option<&str>,
        queued: (u64, u64),
    ) -> Option<&mut InterruptionRecord> {
        let p = self.paths.get_mut(path as usize)?;
        let i = match p.open {
            Some(i) => i,
            None => {
                let (source, target) = match (handover, p.last_exec.take()) {
                    (true, Some((s, t))) => (Some(s), Some(t)),
                    _ => (None, None),
                };
                if handover {
                    p.handovers.push(now);
                }
                self.records.push(InterruptionRecord {
                    t_s: now as f64 / 1e9,
                    ue: p.ue,
                    iface: p.iface,
                    link: link_name.map(str::to_string),
                    reason: if handover {
                        "handover"
                    } else {
                        "reassociation"
                    }
                    .to_string(),
                    source,
                    target,
                    interruption_ms: None,
                    queued_packets: queued.0,
                    queued_bytes: queued.1,
                    delivered_now: 0,
                    redelivered: 0,
                    context_release_lost: 0,
                    context_release_lost_bytes: 0,
                    arrivals: 0,
                    arrival_bytes: 0,
                    target_buffer_drops: 0,
                    target_buffer_drop_bytes: 0,
                    start_ns: now,
                });
                let i = self.records.len() - 1;
                p.open = Some(i);
                i
            }
        };
        self.records.get_mut(i)
    }

    /// The open interruption record of `path`, if any.
    pub fn record_mut(&mut self, path: u32) -> Option<&mut InterruptionRecord> {
        let i = self.paths.get(path as usize)?.open?;
        self.records.get_mut(i)
    }

    /// Closes the open record of `path` at `now` (the path came up or went down).
    pub fn close_record(&mut self, path: u32, now: u64) {
        let Some(i) = self
            .paths
            .get_mut(path as usize)
            .and_then(|p| p.open.take())
        else {
            return;
        };
        if let Some(r) = self.records.get_mut(i) {
            r.interruption_ms = Some(now.saturating_sub(r.start_ns) as f64 / 1e6);
        }
    }

    /// The `radio` part of the summary.
    pub fn summary(&self) -> RadioSummary {
        let handovers = self.paths.iter().map(|p| p.handovers.len() as u64).sum();
        let (mut sum, mut n) = (0u64, 0u64);
        for p in &self.paths {
            for w in p.handovers.windows(2) {
                if let [a, b] = w {
                    sum += b.saturating_sub(*a);
                    n += 1;
                }
            }
        }
        let loaded: Vec<&InterruptionRecord> = self
            .records
            .iter()
            .filter(|r| r.reason == "handover" && r.link.is_some() && r.loaded())
            .collect();
        RadioSummary {
            handovers,
            mean_handover_interval_s: (n > 0).then(|| sum as f64 / n as f64 / 1e9),
            loaded_handovers: loaded.len() as u64,
            target_buffer_drops: loaded.iter().map(|r| r.target_buffer_drops).sum(),
            target_buffer_drop_bytes: loaded.iter().map(|r| r.target_buffer_drop_bytes).sum(),
            context_release_lost: loaded.iter().map(|r| r.context_release_lost).sum(),
            context_release_lost_bytes: loaded.iter().map(|r| r.context_release_lost_bytes).sum(),
            context_release_redelivered: loaded.iter().map(|r| r.redelivered).sum(),
            context_release_delivered_now: loaded.iter().map(|r| r.delivered_now).sum(),
            reassociations: self
                .records
                .iter()
                .filter(|r| r.reason != "handover")
                .count() as u64,
            link_events: self.events,
            interruptions: self.records.clone(),
        }
    }
}

/// Whether an action interrupts for a handover (rather than a re-association).
pub(crate) fn is_handover(action: &LinkAction) -> bool {
    matches!(
        action,
        LinkAction::ContextRelease(_)
            | LinkAction::Interrupt {
                reason: polypath_link::DownReason::Handover,
                ..
            }
    )
}

/// Parses the scenario's `[radio]` table into a [`RadioConfig`] (file paths in it made
/// relative to the scenario file). Errors name the scenario file, the line and the
/// `radio.…` field.
pub fn radio_config(scenario: &Scenario) -> Result<Option<RadioConfig>, SimError> {
    let Some(table) = &scenario.radio else {
        return Ok(None);
    };
    let mut cfg: RadioConfig = serde_path_to_error::deserialize(table.clone()).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." {
            "radio".to_string()
        } else {
            format!("radio.{path}")
        };
        scenario.error_at(&field, e.inner().to_string().trim().to_string())
    })?;
    let base = scenario
        .file
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    cfg.resolve_paths(&base);
    if let Err(e) = cfg.validate() {
        return Err(scenario
            .error_at(&format!("radio.{}", e.field), e.message)
            .into());
    }
    // Resolve mobility here too, to say which UE a problem belongs to.
    for (i, u) in cfg.ues.iter().enumerate() {
        if let Err(e) = Mobility::from_config(&u.mobility) {
            let at = format!("radio.ues[{i}].mobility");
            return Err(if e.file == "<config>" {
                scenario.error_at(&format!("{at}.{}", e.field), e.message)
            } else {
                let named = scenario.error_at(&format!("{at}.file"), "");
                let mut err = polypath_scenario::Error::new(
                    Path::new(&e.file),
                    format!(
                        "{} (GPS track named at {}:{}, field `{at}.file`)",
                        e.message,
                        scenario.file.display(),
                        named.line.unwrap_or(0)
                    ),
                )
                .field(e.field);
                err.line = (e.line > 0).then_some(e.line);
                err
            }
            .into());
        }
    }
    Ok(Some(cfg))
}

fn model_error(scenario: &Scenario, e: RadioError) -> SimError {
    match e {
        RadioError::Config(c) => scenario
            .error_at(&format!("radio.{}", c.field), c.message)
            .into(),
        RadioError::Trace(t) => {
            let mut err =
                polypath_scenario::Error::new(Path::new(&t.file), t.message).field(t.field);
            err.line = (t.line > 0).then_some(t.line);
            err.into()
        }
        RadioError::Model(m) => polypath_scenario::Error::new(
            Path::new(&m.file),
            format!(
                "{} (predictor model of the [radio] section of {})",
                m.message,
                scenario.file.display()
            ),
        )
        .into(),
    }
}

/// A writer that hashes what passes through it.
struct HashWriter<W: Write> {
    inner: W,
    hasher: Sha256,
}

impl<W: Write> Write for HashWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(buf.get(..n).unwrap_or(buf));
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The link-event stream written as JSON lines (`RunOptions::events`), hashed like the
/// other outputs under the name `events.jsonl`.
pub(crate) struct EventSink {
    path: PathBuf,
    writer: JsonLinesWriter<HashWriter<BufWriter<File>>>,
}

impl EventSink {
    pub fn create(path: &Path) -> Result<Self, SimError> {
        let f = File::create(path).map_err(|e| SimError::io(path, e))?;
        Ok(Self {
            path: path.to_path_buf(),
            writer: JsonLinesWriter::new(HashWriter {
                inner: BufWriter::with_capacity(1 << 16, f),
                hasher: Sha256::new(),
            }),
        })
    }

    pub fn write(&mut self, event: &LinkEvent) -> Result<(), SimError> {
        self.writer
            .write(event)
            .map_err(|e| SimError::io(&self.path, e))
    }

    /// Flushes and returns (name, hex digest).
    pub fn finish(self) -> Result<(&'static str, String), SimError> {
        let inner = self
            .writer
            .into_inner()
            .map_err(|e| SimError::io(&self.path, e))?;
        Ok(("events.jsonl", hex::encode(inner.hasher.finalize())))
    }
}
