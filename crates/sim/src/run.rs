//! The entry point the CLI calls: `polypath sim run SCENARIO.toml`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use polypath_scenario::Scenario;
use serde::Serialize;

use crate::build::{AgentFactory, BuildContext, UdpTrafficFactory};
use crate::engine::{Outputs, Simulator};
use crate::error::SimError;
use crate::quic::QuicFactory;
use crate::radio::EventSink;
use crate::record::{OutFile, Summary, combine_hashes};
use crate::source::LinkSource;
use crate::time::SimTime;

/// Options of one run.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Seed; the scenario's `sim.seed` when `None`.
    pub seed: Option<u64>,
    /// Directory for the CSV files and `summary.json` (created if missing);
    /// with `None` nothing is written, but outputs are still hashed.
    pub out_dir: Option<PathBuf>,
    /// Show a progress bar on stderr (only drawn on a terminal).
    pub progress: bool,
    /// Write the link-layer event stream here as JSON lines (`polypath_link::jsonl`):
    /// everything the radio model reports (measurements, RRC events, handovers, random
    /// access, link up / down, predicted throughput) and, with `[output] rb_events`,
    /// per-slot RB allocations, in time order. Hashed into the output hash as
    /// `events.jsonl`. Empty for a scenario without `[radio]`.
    pub events: Option<PathBuf>,
}

/// Plug-ins for a run: agents built before the built-in ones (another transport for
/// `kind = "quic"` flows, say), and external link sources.
#[derive(Default)]
pub struct Hooks<'a> {
    /// Tried before the built-in factories ([`crate::QuicFactory`], then the raw-UDP
    /// one) for every flow instance.
    pub agents: Option<&'a mut dyn AgentFactory>,
    /// Sources for links with `rate = { source = "..." }`, and other timed
    /// link changes (not for radio links: the simulator drives those from the
    /// scenario's `[radio]` section itself).
    pub sources: Vec<Box<dyn LinkSource>>,
}

/// What a run produced.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// The deterministic summary (also in `summary.json`).
    #[serde(flatten)]
    pub summary: Summary,
    /// SHA-256 over all output files (name and digest of each, sorted).
    pub output_hash: String,
    /// Per-file SHA-256 digests, sorted by name.
    pub files: Vec<(String, String)>,
    /// Wall-clock seconds the run took (not part of any output file).
    pub wall_time_s: f64,
    /// Simulated seconds per wall-clock second.
    pub speedup: f64,
    /// Events processed per wall-clock second.
    pub events_per_s: f64,
}

/// Reads `scenario_path` and runs it with the built-in agents (raw UDP traffic and the
/// QUIC adapter).
pub fn run(scenario_path: &Path, opts: &RunOptions) -> Result<RunReport, SimError> {
    let scenario = Scenario::load(scenario_path)?;
    run_scenario(&scenario, opts, Hooks::default())
}

const FLOWS_HEADER: &str = "time_s,flow,sent_mbps,delivered_mbps,goodput_mbps,sent_pkts,delivered_pkts,dropped_pkts,owd_mean_ms,jitter_ms\n";
const PATHS_HEADER: &str = "time_s,flow,instance,agent,path,local,remote,delivered_mbps,dropped_pkts,srtt_ms,cwnd,bytes_in_flight,lost_packets,sent_packets\n";
const LINKS_HEADER: &str = "time_s,link,dir,rate_mbps,delivered_mbps,queue_bytes,drops,up\n";
const COMPLETIONS_HEADER: &str = "flow,instance,agent,label,start_s,end_s,duration_s,bytes\n";
const PREDICTIONS_HEADER: &str = "time_s,link,dir,predictor,predicted_mbps,capacity_mbps\n";
const PACKETS_HEADER: &str = "recv_s,send_s,flow,instance,src,dst,bytes,owd_ms,jitter_ms\n";

/// Runs a resolved scenario with `hooks`.
pub fn run_scenario(
    scenario: &Scenario,
    opts: &RunOptions,
    hooks: Hooks<'_>,
) -> Result<RunReport, SimError> {
    let wall = Instant::now();
    let mut sim = prepare(scenario, opts, hooks)?;
    let total_ms = u64::try_from(scenario.sim.duration.as_millis()).unwrap_or(u64::MAX);
    let bar = if opts.progress {
        let b = ProgressBar::with_draw_target(Some(total_ms), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} ms simulated (eta {eta})",
        ) {
            b.set_style(style);
        }
        b
    } else {
        ProgressBar::hidden()
    };
    let stop = sim.run(|t: SimTime| bar.set_position(t.as_nanos() / 1_000_000))?;
    bar.finish_and_clear();

    let summary = sim.summary(stop);
    let (output_hash, files) = write_outputs(&mut sim, opts.out_dir.as_deref(), &summary)?;
    let wall_time_s = wall.elapsed().as_secs_f64();
    Ok(RunReport {
        speedup: if wall_time_s > 0.0 {
            summary.sim_time_s / wall_time_s
        } else {
            0.0
        },
        events_per_s: if wall_time_s > 0.0 {
            summary.events as f64 / wall_time_s
        } else {
            0.0
        },
        summary,
        output_hash,
        files,
        wall_time_s,
    })
}

/// Builds a run of `scenario` ready to start: hosts and links, every flow's agents (from
/// `hooks.agents` first, then the QUIC adapter and the raw-UDP generators), the external
/// sources, the recorders writing to `opts.out_dir` and the link-event stream. The
/// simulator runs it with [`Simulator::run`]; the emulator drives it in real time
/// ([`Simulator::start`], [`Simulator::advance`], [`Simulator::finish`]). Either way
/// [`write_outputs`] closes the files.
pub fn prepare(
    scenario: &Scenario,
    opts: &RunOptions,
    mut hooks: Hooks<'_>,
) -> Result<Simulator, SimError> {
    let seed = opts.seed.unwrap_or(scenario.sim.seed);
    let mut sim = Simulator::new(scenario, seed)?;
    for s in hooks.sources.drain(..) {
        sim.add_source(s);
    }
    if let Some((link, source)) = sim.missing_sources().into_iter().next() {
        let idx = scenario.link_index(&link).unwrap_or(0);
        return Err(scenario
            .error_at(
                &format!("link[{idx}].rate"),
                format!("link `{link}` takes its rate from source `{source}`, but no such source was supplied"),
            )
            .into());
    }
    {
        let mut ctx = BuildContext::new(&mut sim, scenario);
        let mut udp = UdpTrafficFactory;
        let mut quic = QuicFactory::new(opts.out_dir.as_deref());
        for (fi, f) in scenario.flows.iter().enumerate() {
            for ii in 0..f.instances.len() {
                let mut built = false;
                if let Some(ext) = hooks.agents.as_deref_mut() {
                    built = ext.build(&mut ctx, fi, ii)?;
                }
                if !built {
                    built = quic.build(&mut ctx, fi, ii)?;
                }
                if !built {
                    built = udp.build(&mut ctx, fi, ii)?;
                }
                if !built {
                    let why = if matches!(f.kind, polypath_scenario::FlowKind::Command(_)) {
                        format!(
                            "flow `{}` runs a command, which only the emulator can do \
                             (`polypath emu run`)",
                            f.name
                        )
                    } else if matches!(f.kind, polypath_scenario::FlowKind::Tcp(_)) {
                        format!(
                            "flow `{}` is a kernel TCP transfer, which only the emulator can \
                             run (`polypath emu run`)",
                            f.name
                        )
                    } else {
                        format!(
                            "no agent factory builds flow `{}` of kind `{}`",
                            f.name,
                            f.kind.name()
                        )
                    };
                    return Err(scenario.error_at(&format!("flow[{fi}].kind"), why).into());
                }
            }
        }
    }
    let dir = opts.out_dir.as_deref();
    if let Some(d) = dir {
        std::fs::create_dir_all(d).map_err(|e| SimError::io(d, e))?;
    }
    sim.set_outputs(Outputs {
        flows: OutFile::create(dir, "flows.csv", FLOWS_HEADER)?,
        paths: if scenario.output.path_series {
            Some(OutFile::create(dir, "paths.csv", PATHS_HEADER)?)
        } else {
            None
        },
        links: OutFile::create(dir, "links.csv", LINKS_HEADER)?,
        completions: OutFile::create(dir, "completions.csv", COMPLETIONS_HEADER)?,
        packets: if scenario.output.packet_log {
            Some(OutFile::create(dir, "packets.csv", PACKETS_HEADER)?)
        } else {
            None
        },
        predictions: if scenario
            .links
            .iter()
            .any(|l| l.up.predictor.is_some() || l.down.predictor.is_some())
        {
            Some(OutFile::create(dir, "predictions.csv", PREDICTIONS_HEADER)?)
        } else {
            None
        },
    });
    if let Some(p) = &opts.events {
        sim.set_event_sink(EventSink::create(p)?);
    }
    Ok(sim)
}

/// Closes the recorders' files of a finished run, writes `summary` as `summary.json` to
/// `dir` (when given) and hashes every output. Returns the output hash and each file's
/// digest, sorted by name.
pub fn write_outputs<S: Serialize>(
    sim: &mut Simulator,
    dir: Option<&Path>,
    summary: &S,
) -> Result<(String, Vec<(String, String)>), SimError> {
    let mut files = Vec::new();
    if let Some(out) = sim.take_outputs() {
        files.push(out.flows.finish()?);
        if let Some(p) = out.paths {
            files.push(p.finish()?);
        }
        files.push(out.links.finish()?);
        files.push(out.completions.finish()?);
        if let Some(p) = out.packets {
            files.push(p.finish()?);
        }
        if let Some(p) = out.predictions {
            files.push(p.finish()?);
        }
    }
    if let Some(sink) = sim.take_event_sink() {
        files.push(sink.finish()?);
    }
    let json = serde_json::to_string_pretty(summary)
        .map_err(|e| SimError::Build(format!("cannot encode the summary: {e}")))?;
    let mut sf = OutFile::create(dir, "summary.json", &json)?;
    sf.write("\n")?;
    files.push(sf.finish()?);
    files.sort();
    let output_hash = combine_hashes(files.clone());
    Ok((
        output_hash,
        files.into_iter().map(|(n, d)| (n.to_string(), d)).collect(),
    ))
}
