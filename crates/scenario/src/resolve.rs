//! Turns the raw file into the resolved [`Scenario`].

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;
use crate::locate::line_of_path;
use crate::model::*;
use crate::raw::*;
use crate::trace::{self, Missing};
use crate::units::parse_rate;

/// Builds errors that point into the scenario source.
pub(crate) struct Ctx<'a> {
    pub file: &'a Path,
    pub src: &'a str,
}

impl Ctx<'_> {
    pub fn err(&self, path: &str, message: impl Into<String>) -> Error {
        let mut e = Error::new(self.file, message).field(path);
        e.line = line_of_path(self.src, path);
        e
    }

    fn base_dir(&self) -> PathBuf {
        self.file
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."))
    }
}

fn check_probability(ctx: &Ctx<'_>, path: &str, v: f64) -> Result<f64, Error> {
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(ctx.err(path, format!("{v} is not a probability in [0, 1]")))
    }
}

pub(crate) fn resolve(raw: RawScenario, file: &Path, src: Arc<str>) -> Result<Scenario, Error> {
    let ctx = Ctx { file, src: &src };
    let sim = SimSettings {
        duration: raw.sim.duration.0,
        seed: raw.sim.seed.unwrap_or(0),
        stop_when_done: raw.sim.stop_when_done.unwrap_or(true),
        packet_protection: match raw.sim.packet_protection.as_deref() {
            None => PacketProtection::DEFAULT,
            Some(name) => PacketProtection::from_name(name).ok_or_else(|| {
                ctx.err(
                    "sim.packet_protection",
                    format!("unknown packet protection `{name}` (aead or simulated)"),
                )
            })?,
        },
    };
    if sim.duration.is_zero() {
        return Err(ctx.err("sim.duration", "must be positive"));
    }
    let output = OutputSettings {
        bin: raw
            .output
            .bin
            .map(|d| d.0)
            .unwrap_or(Duration::from_millis(100)),
        packet_log: raw.output.packet_log.unwrap_or(false),
        path_series: raw.output.path_series.unwrap_or(true),
        rb_events: raw.output.rb_events.unwrap_or(false),
    };
    if output.bin.is_zero() {
        return Err(ctx.err("output.bin", "must be positive"));
    }

    let mut links = Vec::with_capacity(raw.link.len());
    let mut link_index = BTreeMap::new();
    for (i, l) in raw.link.iter().enumerate() {
        let p = format!("link[{i}]");
        if l.name.is_empty() {
            return Err(ctx.err(&format!("{p}.name"), "link name is empty"));
        }
        if link_index.insert(l.name.clone(), i).is_some() {
            return Err(ctx.err(
                &format!("{p}.name"),
                format!("duplicate link name `{}`", l.name),
            ));
        }
        let base = l.base();
        let up_raw = l.up.clone().unwrap_or_default().over(&base);
        let down_raw = l.down.clone().unwrap_or_default().over(&base);
        let radio = match &l.radio {
            Some(b) => Some(radio_binding(&ctx, &p, l, b, raw.radio.is_some())?),
            None => None,
        };
        let is_radio = radio.is_some();
        let up = direction(&ctx, &p, "up", l.up.as_ref(), &up_raw, is_radio)?;
        let mut down = direction(&ctx, &p, "down", l.down.as_ref(), &down_raw, is_radio)?;
        if is_radio {
            // The radio model sets the downlink limit (the serving cell's buffer).
            down.queue = QueueLimit::Unlimited;
        }
        if is_radio && l.outage_signal.is_some() {
            return Err(ctx.err(
                &format!("{p}.outage_signal"),
                "a radio link's up and down events come from the radio model; remove it",
            ));
        }
        links.push(Link {
            name: l.name.clone(),
            up,
            down,
            radio,
            outage_signal: match l.outage_signal {
                None | Some(RawOutageSignal::Both(false)) => OutageSignal::Silent,
                Some(RawOutageSignal::Both(true)) => OutageSignal::BothEnds,
                Some(RawOutageSignal::Side(RawSide::A)) => OutageSignal::End(Side::A),
                Some(RawOutageSignal::Side(RawSide::B)) => OutageSignal::End(Side::B),
            },
        });
    }

    let hosts = hosts(&ctx, &raw.host, &link_index)?;
    let flows = flows(&ctx, &raw.flow, &hosts)?;

    let name = raw.name.unwrap_or_else(|| {
        file.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    });
    Ok(Scenario {
        file: file.to_path_buf(),
        name,
        description: raw.description.unwrap_or_default(),
        sim,
        output,
        hosts,
        links,
        flows,
        radio: raw.radio,
        source: src.clone(),
    })
}

/// Checks a link's `radio` key and the keys a radio link may not have.
fn radio_binding(
    ctx: &Ctx<'_>,
    p: &str,
    l: &RawLink,
    b: &RawRadioBinding,
    have_radio: bool,
) -> Result<RadioBinding, Error> {
    if !have_radio {
        return Err(ctx.err(
            &format!("{p}.radio"),
            "this link is bound to a radio path, but the scenario has no [radio] section",
        ));
    }
    let base = l.base();
    let tables: [(&str, Option<&RawDir>); 3] = [
        ("", Some(&base)),
        (".up", l.up.as_ref()),
        (".down", l.down.as_ref()),
    ];
    for (sub, t) in tables {
        let Some(t) = t else { continue };
        for key in ["rate", "outages", "outage_policy", "predictor"] {
            if t.has(key) {
                return Err(ctx.err(
                    &format!("{p}{sub}.{key}"),
                    format!(
                        "a radio link takes `{key}` from the radio model (predictors: \
                         [[radio.predictors]]); remove it"
                    ),
                ));
            }
        }
        for (i, s) in t.steps.iter().flatten().enumerate() {
            if s.rate.is_some() {
                return Err(ctx.err(
                    &format!("{p}{sub}.steps[{i}].rate"),
                    "a radio link's rate comes from the radio model; steps may change delay and loss only",
                ));
            }
        }
    }
    if l.down.as_ref().is_some_and(|d| d.queue.is_some()) {
        return Err(ctx.err(
            &format!("{p}.down.queue"),
            "a radio downlink queues in the serving cell's buffer (`buffer_bytes` of the cell); `queue` applies to the uplink only",
        ));
    }
    let path = match &b.iface {
        RawRadioIface::Index(i) => RadioPathRef::Index(u16::try_from(*i).map_err(|_| {
            ctx.err(
                &format!("{p}.radio.iface"),
                format!("{i} is not a radio path number (0..=65535)"),
            )
        })?),
        RawRadioIface::Name(n) => RadioPathRef::Name(n.clone()),
    };
    Ok(RadioBinding { ue: b.ue, path })
}

fn direction(
    ctx: &Ctx<'_>,
    link: &str,
    dir: &str,
    overrides: Option<&RawDir>,
    r: &RawDir,
    radio: bool,
) -> Result<LinkDirection, Error> {
    // Errors point at the `up`/`down` table when the field was set there, else
    // at the link's top level.
    let fp = |f: &str| {
        if overrides.is_some_and(|o| o.has(f)) {
            format!("{link}.{dir}.{f}")
        } else {
            format!("{link}.{f}")
        }
    };
    let rate = if radio {
        RateModel::Radio
    } else {
        let rate_raw = r.rate.as_ref().ok_or_else(|| {
            ctx.err(
                &fp("rate"),
                "every link direction needs a rate (or the link a `radio` path)",
            )
        })?;
        rate_model(ctx, &fp("rate"), rate_raw)?
    };
    let delay = r.delay.map(|d| d.0).unwrap_or(Duration::ZERO);
    let jitter = Jitter {
        amount: r.jitter.map(|d| d.0).unwrap_or(Duration::ZERO),
        dist: match r.jitter_dist.unwrap_or(RawJitterDist::Uniform) {
            RawJitterDist::Uniform => JitterDist::Uniform,
            RawJitterDist::Normal => JitterDist::Normal,
            RawJitterDist::Exponential => JitterDist::Exponential,
        },
    };
    let loss = match &r.loss {
        None => LossModel::None,
        Some(l) => loss_model(ctx, &fp("loss"), l)?,
    };
    let duplicate = check_probability(ctx, &fp("duplicate"), r.duplicate.unwrap_or(0.0))?;
    let queue = match r
        .queue
        .unwrap_or(RawQueue::Time(Duration::from_millis(100)))
    {
        RawQueue::Unlimited => QueueLimit::Unlimited,
        RawQueue::Bytes(b) => QueueLimit::Bytes(b),
        RawQueue::Time(t) => QueueLimit::Time(t),
        RawQueue::Bdp(m) => QueueLimit::Bdp(m),
    };
    let mut outages: Vec<Outage> = r
        .outages
        .iter()
        .flatten()
        .map(|o| Outage {
            at: o.at.0,
            duration: o.duration.0,
        })
        .collect();
    outages.sort_by_key(|o| o.at);
    for (i, w) in outages.windows(2).enumerate() {
        if let [a, b] = w
            && a.at + a.duration > b.at
        {
            return Err(ctx.err(&format!("{}[{}]", fp("outages"), i + 1), "outages overlap"));
        }
    }
    let mut steps = Vec::new();
    for (i, s) in r.steps.iter().flatten().enumerate() {
        let sp = format!("{}[{i}]", fp("steps"));
        let loss = match &s.loss {
            Some(l) => Some(loss_model(ctx, &format!("{sp}.loss"), l)?),
            None => None,
        };
        if s.rate.is_none() && s.delay.is_none() && loss.is_none() {
            return Err(ctx.err(&sp, "a step changes nothing; give rate, delay or loss"));
        }
        steps.push(Step {
            at: s.at.0,
            rate: s.rate.map(|x| x.0),
            delay: s.delay.map(|d| d.0),
            loss,
        });
    }
    steps.sort_by_key(|s| s.at);
    let predictor = match &r.predictor {
        Some(p) => Some(link_predictor(ctx, &fp("predictor"), p, &rate)?),
        None => None,
    };
    Ok(LinkDirection {
        rate,
        delay,
        jitter,
        reorder: r.reorder.unwrap_or(false),
        loss,
        duplicate,
        queue,
        outages,
        outage_policy: match r.outage_policy.unwrap_or(RawOutagePolicy::Drop) {
            RawOutagePolicy::Drop => OutagePolicy::Drop,
            RawOutagePolicy::Hold => OutagePolicy::Hold,
        },
        steps,
        predictor,
    })
}

/// Checks a link direction's `predictor` and loads its prediction file.
fn link_predictor(
    ctx: &Ctx<'_>,
    path: &str,
    p: &RawPredictor,
    rate: &RateModel,
) -> Result<LinkPredictor, Error> {
    let rule_keys = [
        ("bias", p.bias.is_some()),
        ("noise_sigma", p.noise_sigma.is_some()),
        ("window", p.window.is_some()),
        ("alpha", p.alpha.is_some()),
        ("observe", p.observe.is_some()),
    ];
    let file_keys = [
        ("format", p.format.is_some()),
        ("column", p.column.is_some()),
        ("interval", p.interval.is_some()),
    ];
    let period = p.period.map(|d| d.0).unwrap_or(Duration::from_secs(1));
    if period < Duration::from_millis(1) {
        return Err(ctx.err(&format!("{path}.period"), "must be at least 1ms"));
    }
    let (source, default_name) = match (&p.kind, &p.file) {
        (Some(kind), None) => {
            if let Some((key, _)) = file_keys.iter().find(|k| k.1) {
                return Err(ctx.err(
                    &format!("{path}.{key}"),
                    format!("`{key}` belongs to prediction files; a `kind` rule does not take it"),
                ));
            }
            if matches!(rate, RateModel::External { .. } | RateModel::Radio) {
                return Err(ctx.err(
                    &format!("{path}.kind"),
                    "a predictor rule needs a rate known ahead (constant, schedule or trace); \
                     this direction's rate comes from an external source",
                ));
            }
            let window = match p.window {
                Some(w) => Some(u64::try_from(w).ok().filter(|w| *w > 0).ok_or_else(|| {
                    ctx.err(&format!("{path}.window"), "must be a positive sample count")
                })?),
                None => None,
            };
            (
                PredictorSource::Rule(PredictorRule {
                    kind: kind.clone(),
                    bias: p.bias,
                    noise_sigma: p.noise_sigma,
                    window,
                    alpha: p.alpha,
                }),
                kind.clone(),
            )
        }
        (None, Some(file)) => {
            if let Some((key, _)) = rule_keys.iter().find(|k| k.1) {
                return Err(ctx.err(
                    &format!("{path}.{key}"),
                    format!(
                        "`{key}` belongs to predictor rules; a prediction file does not take it"
                    ),
                ));
            }
            let file_path = ctx.base_dir().join(file);
            let format = match p.format {
                Some(f) => f,
                None if file.ends_with(".npy") => RawPredictionFormat::Npy,
                None => RawPredictionFormat::Lumos5g,
            };
            let column = match p.column {
                None => 1,
                Some(n) if n >= 1 => n as usize,
                Some(_) => {
                    return Err(ctx.err(
                        &format!("{path}.column"),
                        "a prediction column is 1-based (after the time column in text files)",
                    ));
                }
            };
            let wrap = |e: Error| {
                let at = match line_of_path(ctx.src, &format!("{path}.file")) {
                    Some(l) => format!("{}:{l}", ctx.file.display()),
                    None => ctx.file.display().to_string(),
                };
                Error {
                    message: format!(
                        "{} (prediction file named at {at}, field `{path}.file`)",
                        e.message
                    ),
                    ..e
                }
            };
            let mut tr = match format {
                RawPredictionFormat::Lumos5g => trace::load_lumos5g(&file_path, column),
                RawPredictionFormat::Npy => trace::load_npy(&file_path, column),
            }
            .map_err(wrap)?;
            if let Some(step) = p.interval {
                if step.0.is_zero() {
                    return Err(ctx.err(&format!("{path}.interval"), "interval must be positive"));
                }
                tr.step = step.0;
            }
            (
                PredictorSource::File {
                    path: file_path,
                    trace: Arc::new(tr),
                },
                "file".to_string(),
            )
        }
        _ => {
            return Err(ctx.err(
                path,
                "a predictor needs exactly one of `kind` (a rule: oracle, noisy_oracle, \
                 harmonic_mean, ewma) or `file` (a prediction file)",
            ));
        }
    };
    Ok(LinkPredictor {
        source,
        period,
        name: p.name.clone().unwrap_or(default_name),
        tell: match p.tell {
            None | Some(RawTell::Sender) => PredictionTell::Sender,
            Some(RawTell::Receiver) => PredictionTell::Receiver,
            Some(RawTell::Both) => PredictionTell::Both,
        },
        observe: match p.observe {
            None | Some(RawObserve::Capacity) => PredictionInput::Capacity,
            Some(RawObserve::Delivered) => PredictionInput::Delivered,
        },
        at: path.to_string(),
    })
}

fn loss_model(ctx: &Ctx<'_>, path: &str, l: &RawLoss) -> Result<LossModel, Error> {
    match l {
        RawLoss::Probability(p) => {
            let p = check_probability(ctx, path, *p)?;
            Ok(if p == 0.0 {
                LossModel::None
            } else {
                LossModel::Bernoulli(p)
            })
        }
        RawLoss::Table(t) => match t.model {
            RawLossKind::Bernoulli => {
                if t.r.is_some()
                    || t.k.is_some()
                    || t.h.is_some()
                    || t.mean.is_some()
                    || t.burst.is_some()
                {
                    return Err(ctx.err(path, "a bernoulli loss takes only `p`"));
                }
                let p =
                    t.p.ok_or_else(|| ctx.err(path, "bernoulli loss needs `p`"))?;
                Ok(LossModel::Bernoulli(check_probability(
                    ctx,
                    &format!("{path}.p"),
                    p,
                )?))
            }
            RawLossKind::GilbertElliott => {
                if let (Some(mean), Some(burst)) = (t.mean, t.burst) {
                    if t.p.is_some() || t.r.is_some() || t.k.is_some() || t.h.is_some() {
                        return Err(
                            ctx.err(path, "give either mean and burst, or p, r, k, h; not both")
                        );
                    }
                    if !(0.0..1.0).contains(&mean) {
                        return Err(ctx.err(&format!("{path}.mean"), "mean loss must be in [0, 1)"));
                    }
                    if !(burst >= 1.0 && burst.is_finite()) {
                        return Err(ctx.err(
                            &format!("{path}.burst"),
                            "mean burst length must be at least 1 packet",
                        ));
                    }
                    // Simple Gilbert model: nothing lost in Good, all lost in
                    // Bad, so a burst is a stay in Bad: mean length 1/r; the
                    // stationary share of Bad is p/(p+r) = mean.
                    let r = 1.0 / burst;
                    let p = mean * r / (1.0 - mean);
                    if p > 1.0 {
                        return Err(ctx.err(
                            path,
                            "this mean loss and burst length need P(Good->Bad) > 1",
                        ));
                    }
                    return Ok(LossModel::GilbertElliott {
                        p,
                        r,
                        k: 1.0,
                        h: 0.0,
                    });
                }
                if t.mean.is_some() || t.burst.is_some() {
                    return Err(ctx.err(path, "`mean` and `burst` go together"));
                }
                let p = t.p.ok_or_else(|| {
                    ctx.err(
                        path,
                        "gilbert-elliott loss needs `p` and `r` (or `mean` and `burst`)",
                    )
                })?;
                let r =
                    t.r.ok_or_else(|| ctx.err(path, "gilbert-elliott loss needs `r`"))?;
                Ok(LossModel::GilbertElliott {
                    p: check_probability(ctx, &format!("{path}.p"), p)?,
                    r: check_probability(ctx, &format!("{path}.r"), r)?,
                    k: check_probability(ctx, &format!("{path}.k"), t.k.unwrap_or(1.0))?,
                    h: check_probability(ctx, &format!("{path}.h"), t.h.unwrap_or(0.0))?,
                })
            }
        },
    }
}

fn rate_model(ctx: &Ctx<'_>, path: &str, r: &RawRate) -> Result<RateModel, Error> {
    let t = match r {
        RawRate::Constant(v) => return Ok(RateModel::Constant(*v)),
        RawRate::Table(t) => t,
    };
    let kinds = [t.schedule.is_some(), t.trace.is_some(), t.source.is_some()];
    if kinds.iter().filter(|&&k| k).count() != 1 {
        return Err(ctx.err(
            path,
            "a rate table needs exactly one of `schedule`, `trace` or `source`",
        ));
    }
    let scale = t.scale.unwrap_or(1.0);
    if !(scale.is_finite() && scale > 0.0) {
        return Err(ctx.err(&format!("{path}.scale"), "scale must be positive"));
    }
    if let Some(source) = &t.source {
        if t.schedule.is_some()
            || t.period.is_some()
            || t.format.is_some()
            || t.column.is_some()
            || t.looped.is_some()
        {
            return Err(ctx.err(path, "an external rate takes only `source` and `initial`"));
        }
        return Ok(RateModel::External {
            source: source.clone(),
            initial: t.initial.map(|r| r.0).unwrap_or(0.0) * scale,
        });
    }
    if t.initial.is_some() {
        return Err(ctx.err(
            &format!("{path}.initial"),
            "`initial` only applies to `source` rates",
        ));
    }
    if let Some(sched) = &t.schedule {
        if sched.is_empty() {
            return Err(ctx.err(&format!("{path}.schedule"), "schedule is empty"));
        }
        let mut points = Vec::with_capacity(sched.len());
        for (i, p) in sched.iter().enumerate() {
            if i == 0 && !p.at.0.is_zero() {
                return Err(ctx.err(
                    &format!("{path}.schedule[0].at"),
                    "the first schedule point must be at 0s",
                ));
            }
            if let Some(&(prev, _)) = points.last()
                && p.at.0 <= prev
            {
                return Err(ctx.err(
                    &format!("{path}.schedule[{i}].at"),
                    "schedule times must increase",
                ));
            }
            points.push((p.at.0, p.rate.0 * scale));
        }
        let period = match (t.period, t.looped) {
            (Some(p), _) => {
                if points.last().is_some_and(|l| l.0 >= p.0) {
                    return Err(ctx.err(
                        &format!("{path}.period"),
                        "period must be later than the last schedule point",
                    ));
                }
                Some(p.0)
            }
            (None, Some(true)) => {
                return Err(ctx.err(&format!("{path}.loop"), "a looping schedule needs `period`"));
            }
            (None, _) => None,
        };
        return Ok(RateModel::Schedule { points, period });
    }
    // A trace.
    let trace_name = t.trace.as_deref().unwrap_or_default();
    let trace_path = ctx.base_dir().join(trace_name);
    let format = t.format.ok_or_else(|| {
        ctx.err(
            &format!("{path}.format"),
            "a trace needs `format`: \"lumos5g\", \"mahimahi\" or \"csv\"",
        )
    })?;
    let looped = t.looped.unwrap_or(true);
    let wrap = |e: Error| {
        let line = line_of_path(ctx.src, &format!("{path}.trace"));
        let at = match line {
            Some(l) => format!("{}:{l}", ctx.file.display()),
            None => ctx.file.display().to_string(),
        };
        Error {
            message: format!("{} (trace named at {at}, field `{path}.trace`)", e.message),
            ..e
        }
    };
    let rate_trace = match format {
        RawTraceFormat::Mahimahi => {
            if t.column.is_some() || t.unit.is_some() || t.interval.is_some() || t.missing.is_some()
            {
                return Err(ctx.err(
                    path,
                    "a mahimahi trace takes only `trace`, `format`, `scale` and `loop`",
                ));
            }
            let d = trace::load_mahimahi(&trace_path).map_err(wrap)?;
            return Ok(RateModel::Deliveries {
                trace: Arc::new(d),
                scale,
                looped,
            });
        }
        RawTraceFormat::Lumos5g => {
            if t.unit.is_some() || t.missing.is_some() {
                return Err(ctx.err(
                    path,
                    "a lumos5g trace is in Mbit/s; `unit` and `missing` do not apply",
                ));
            }
            let col = match &t.column {
                None => 1,
                Some(RawColumn::Number(n)) if *n >= 1 => *n as usize,
                Some(_) => {
                    return Err(ctx.err(
                        &format!("{path}.column"),
                        "a lumos5g column is a rate column number, 1-based",
                    ));
                }
            };
            let mut tr = trace::load_lumos5g(&trace_path, col).map_err(wrap)?;
            if let Some(step) = t.interval {
                tr.step = step.0;
            }
            tr
        }
        RawTraceFormat::Csv => {
            let col = match &t.column {
                Some(RawColumn::Name(n)) => n.clone(),
                _ => {
                    return Err(ctx.err(
                        &format!("{path}.column"),
                        "a csv trace needs `column` = a header name",
                    ));
                }
            };
            let unit = match &t.unit {
                Some(u) => {
                    parse_rate(&format!("1{u}")).map_err(|e| ctx.err(&format!("{path}.unit"), e))?
                }
                None => 1e6,
            };
            let missing = match t.missing.unwrap_or(RawMissing::Hold) {
                RawMissing::Hold => Missing::Hold,
                RawMissing::Zero => Missing::Zero,
                RawMissing::Skip => Missing::Skip,
            };
            let step = t.interval.map(|d| d.0).unwrap_or(Duration::from_secs(1));
            trace::load_csv_column(&trace_path, &col, unit, step, missing).map_err(wrap)?
        }
    };
    if t.period.is_some() {
        return Err(ctx.err(
            &format!("{path}.period"),
            "a trace's period is its length; use `loop`",
        ));
    }
    if rate_trace.step.is_zero() {
        return Err(ctx.err(&format!("{path}.interval"), "interval must be positive"));
    }
    let mut points = Vec::with_capacity(rate_trace.rates_bps.len() + 1);
    let mut at = Duration::ZERO;
    for &r in &rate_trace.rates_bps {
        points.push((at, r * scale));
        at += rate_trace.step;
    }
    let period = if looped {
        Some(at)
    } else {
        points.push((at, 0.0));
        None
    };
    Ok(RateModel::Schedule { points, period })
}

fn parse_ip(ctx: &Ctx<'_>, path: &str, s: &str) -> Result<IpAddr, Error> {
    s.trim()
        .parse()
        .map_err(|_| ctx.err(path, format!("`{s}` is not an IP address")))
}

fn parse_prefix(ctx: &Ctx<'_>, path: &str, s: &str) -> Result<Prefix, Error> {
    s.parse().map_err(|e: String| ctx.err(path, e))
}

fn offset_ip(ip: IpAddr, by: u32) -> Option<IpAddr> {
    match ip {
        IpAddr::V4(a) => u32::from(a).checked_add(by).map(|v| IpAddr::V4(v.into())),
        IpAddr::V6(a) => u128::from(a)
            .checked_add(u128::from(by))
            .map(|v| IpAddr::V6(v.into())),
    }
}

fn hosts(
    ctx: &Ctx<'_>,
    raw: &[RawHost],
    links: &BTreeMap<String, usize>,
) -> Result<Vec<Host>, Error> {
    let mut out = Vec::new();
    let mut names = BTreeSet::new();
    let mut addrs = BTreeMap::new();
    for (hi, h) in raw.iter().enumerate() {
        let p = format!("host[{hi}]");
        if h.name.is_empty() {
            return Err(ctx.err(&format!("{p}.name"), "host name is empty"));
        }
        let count = h.count.unwrap_or(1);
        if count == 0 {
            return Err(ctx.err(&format!("{p}.count"), "count must be at least 1"));
        }
        // Validate the template once.
        let mut iface_names = BTreeSet::new();
        let mut template = Vec::new();
        for (ii, iface) in h.interfaces.iter().enumerate() {
            let ip = format!("{p}.interfaces[{ii}]");
            if !iface_names.insert(iface.name.clone()) {
                return Err(ctx.err(
                    &format!("{ip}.name"),
                    format!("duplicate interface name `{}`", iface.name),
                ));
            }
            let addr = parse_ip(ctx, &format!("{ip}.addr"), &iface.addr)?;
            let attach = match (&iface.link, iface.side) {
                (None, None) => None,
                (Some(l), Some(side)) => {
                    let link = *links.get(l).ok_or_else(|| {
                        ctx.err(&format!("{ip}.link"), format!("no link named `{l}`"))
                    })?;
                    Some(Attachment {
                        link,
                        side: match side {
                            RawSide::A => Side::A,
                            RawSide::B => Side::B,
                        },
                    })
                }
                (Some(_), None) => {
                    return Err(ctx.err(
                        &format!("{ip}.side"),
                        "an attached interface needs `side` = \"a\" or \"b\"",
                    ));
                }
                (None, Some(_)) => {
                    return Err(ctx.err(&format!("{ip}.link"), "`side` given without `link`"));
                }
            };
            template.push((iface.name.clone(), addr, attach));
        }
        let default = TcpBuffers::default();
        let tcp_buffers = TcpBuffers {
            rmem: tcp_buffer(ctx, &format!("{p}.tcp_rmem"), &h.tcp_rmem, default.rmem)?,
            wmem: tcp_buffer(ctx, &format!("{p}.tcp_wmem"), &h.tcp_wmem, default.wmem)?,
        };
        let mut routes = Vec::new();
        for (ri, r) in h.routes.iter().enumerate() {
            let rp = format!("{p}.routes[{ri}]");
            let dst = parse_prefix(ctx, &format!("{rp}.dst"), &r.dst)?;
            let src = match &r.src {
                Some(s) => Some(parse_prefix(ctx, &format!("{rp}.src"), s)?),
                None => None,
            };
            let via = template
                .iter()
                .position(|(n, _, _)| *n == r.via)
                .ok_or_else(|| {
                    ctx.err(
                        &format!("{rp}.via"),
                        format!("no interface named `{}` on this host", r.via),
                    )
                })?;
            routes.push(Route { dst, src, via });
        }
        for i in 0..count {
            let name = if h.count.is_some() {
                format!("{}{i}", h.name)
            } else {
                h.name.clone()
            };
            if !names.insert(name.clone()) {
                return Err(ctx.err(
                    &format!("{p}.name"),
                    format!("duplicate host name `{name}`"),
                ));
            }
            let mut interfaces = Vec::with_capacity(template.len());
            for (ii, (iname, addr, attach)) in template.iter().enumerate() {
                let ap = format!("{p}.interfaces[{ii}].addr");
                let a =
                    offset_ip(*addr, i).ok_or_else(|| ctx.err(&ap, "address range overflows"))?;
                if let Some(prev) = addrs.insert(a, name.clone()) {
                    return Err(ctx.err(
                        &ap,
                        format!("address {a} of host `{name}` is already used by host `{prev}`"),
                    ));
                }
                interfaces.push(Interface {
                    name: iname.clone(),
                    addr: a,
                    attach: *attach,
                });
            }
            out.push(Host {
                name,
                group: h.name.clone(),
                index: i,
                forward: h.forward.unwrap_or(false),
                interfaces,
                routes: routes.clone(),
                tcp_buffers,
            });
        }
    }
    Ok(out)
}

/// A `tcp_rmem` or `tcp_wmem` key: three sizes in bytes, 1 ≤ minimum ≤ initial ≤ largest,
/// each a C `int` (the kernel stores them so); `default` when absent.
fn tcp_buffer(
    ctx: &Ctx<'_>,
    path: &str,
    raw: &Option<Vec<u64>>,
    default: [u64; 3],
) -> Result<[u64; 3], Error> {
    let Some(v) = raw else {
        return Ok(default);
    };
    let b: [u64; 3] = v.as_slice().try_into().map_err(|_| {
        ctx.err(
            path,
            format!(
                "needs 3 sizes in bytes [minimum, initial, largest], got {}",
                v.len()
            ),
        )
    })?;
    if b[0] < 1 || b[0] > b[1] || b[1] > b[2] || b[2] > i32::MAX as u64 {
        return Err(ctx.err(
            path,
            format!(
                "{b:?}: needs 1 <= minimum <= initial <= largest <= {}",
                i32::MAX
            ),
        ));
    }
    Ok(b)
}

/// Host indices named by `name`: a group's members, or one host.
fn select_hosts(hosts: &[Host], name: &str) -> Vec<usize> {
    let group: Vec<usize> = hosts
        .iter()
        .enumerate()
        .filter(|(_, h)| h.group == name)
        .map(|(i, _)| i)
        .collect();
    if !group.is_empty() {
        return group;
    }
    hosts
        .iter()
        .position(|h| h.name == name)
        .into_iter()
        .collect()
}

fn flow_paths(
    ctx: &Ctx<'_>,
    p: &str,
    f: &RawFlow,
    from: &Host,
    to: &Host,
) -> Result<Vec<FlowPath>, Error> {
    let wanted: Vec<RawPath> = match &f.paths {
        Some(list) => {
            if list.is_empty() {
                return Err(ctx.err(&format!("{p}.paths"), "paths is empty"));
            }
            list.clone()
        }
        None => from
            .interfaces
            .iter()
            .filter(|i| i.attach.is_some())
            .map(|i| RawPath {
                local: i.name.clone(),
                remote: None,
            })
            .collect(),
    };
    if wanted.is_empty() {
        return Err(ctx.err(
            &format!("{p}.from"),
            format!("host `{}` has no attached interface", from.name),
        ));
    }
    let mut out = Vec::new();
    for (k, w) in wanted.iter().enumerate() {
        let pp = format!("{p}.paths[{k}]");
        let li = from
            .interfaces
            .iter()
            .position(|i| i.name == w.local)
            .ok_or_else(|| {
                ctx.err(
                    &pp,
                    format!("host `{}` has no interface `{}`", from.name, w.local),
                )
            })?;
        let local = &from.interfaces[li];
        let ri = match &w.remote {
            Some(r) => to
                .interfaces
                .iter()
                .position(|i| i.name == *r)
                .ok_or_else(|| {
                    ctx.err(&pp, format!("host `{}` has no interface `{r}`", to.name))
                })?,
            None => {
                // Prefer the peer interface on the other side of the same link,
                // then the first attached one, then the first one.
                let same_link = local.attach.and_then(|a| {
                    to.interfaces.iter().position(|i| {
                        i.attach
                            == Some(Attachment {
                                link: a.link,
                                side: a.side.other(),
                            })
                    })
                });
                same_link
                    .or_else(|| to.interfaces.iter().position(|i| i.attach.is_some()))
                    .or(if to.interfaces.is_empty() {
                        None
                    } else {
                        Some(0)
                    })
                    .ok_or_else(|| {
                        ctx.err(
                            &format!("{p}.to"),
                            format!("host `{}` has no interface", to.name),
                        )
                    })?
            }
        };
        let remote = &to.interfaces[ri];
        if local.addr.is_ipv4() != remote.addr.is_ipv4() {
            return Err(ctx.err(&pp, "local and remote addresses are of different families"));
        }
        out.push(FlowPath {
            local_iface: li,
            remote_iface: ri,
            local: local.addr,
            remote: remote.addr,
        });
    }
    Ok(out)
}

fn flows(ctx: &Ctx<'_>, raw: &[RawFlow], hosts: &[Host]) -> Result<Vec<Flow>, Error> {
    let mut out = Vec::new();
    let mut names = BTreeSet::new();
    for (fi, f) in raw.iter().enumerate() {
        let p = format!("flow[{fi}]");
        if !names.insert(f.name.clone()) {
            return Err(ctx.err(
                &format!("{p}.name"),
                format!("duplicate flow name `{}`", f.name),
            ));
        }
        let kind = flow_kind(ctx, &p, f)?;
        let from = select_hosts(hosts, &f.from);
        if from.is_empty() {
            return Err(ctx.err(
                &format!("{p}.from"),
                format!("no host or host group named `{}`", f.from),
            ));
        }
        let to = select_hosts(hosts, &f.to);
        if to.is_empty() {
            return Err(ctx.err(
                &format!("{p}.to"),
                format!("no host or host group named `{}`", f.to),
            ));
        }
        if to.len() != 1 && to.len() != from.len() {
            return Err(ctx.err(
                &format!("{p}.to"),
                format!(
                    "`to` names {} hosts; it must name 1 or as many as `from` ({})",
                    to.len(),
                    from.len()
                ),
            ));
        }
        let start = f.start.map(|d| d.0).unwrap_or(Duration::ZERO);
        let spread = f.start_spread.map(|d| d.0).unwrap_or(Duration::ZERO);
        let stop = f.stop.map(|d| d.0);
        if let Some(s) = stop
            && s <= start
        {
            return Err(ctx.err(&format!("{p}.stop"), "stop must be after start"));
        }
        let n = from.len();
        let mut instances = Vec::with_capacity(n);
        for (k, &src) in from.iter().enumerate() {
            let dst = if to.len() == 1 { to[0] } else { to[k] };
            if src == dst {
                return Err(ctx.err(
                    &p,
                    format!("flow from host `{}` to itself", hosts[src].name),
                ));
            }
            let paths = flow_paths(ctx, &p, f, &hosts[src], &hosts[dst])?;
            let offset = if n > 1 {
                Duration::from_nanos(
                    u64::try_from(spread.as_nanos() * k as u128 / n as u128).unwrap_or(u64::MAX),
                )
            } else {
                Duration::ZERO
            };
            instances.push(FlowInstance {
                index: k as u32,
                from: src,
                to: dst,
                paths,
                start: start + offset,
                stop,
            });
        }
        out.push(Flow {
            name: f.name.clone(),
            kind,
            instances,
        });
    }
    Ok(out)
}

/// The transactions of a `quic` flow: present with `request_size` and `response_size`
/// (both or neither), with `interval` and `count` optional.
fn quic_transactions(
    ctx: &Ctx<'_>,
    p: &str,
    f: &RawFlow,
) -> Result<Option<QuicTransactions>, Error> {
    let (request, response) = match (f.request_size, f.response_size) {
        (None, None) => {
            if f.interval.is_some() {
                return Err(ctx.err(
                    &format!("{p}.interval"),
                    "`interval` applies to a quic flow only with `request_size`",
                ));
            }
            return Ok(None);
        }
        (Some(q), Some(r)) => (q.0, r.0),
        _ => {
            return Err(ctx.err(
                p,
                "a quic flow with transactions needs both `request_size` and `response_size`",
            ));
        }
    };
    if request == 0 || response == 0 {
        return Err(ctx.err(p, "request and response sizes must be positive"));
    }
    let interval = f.interval.map(|i| i.0);
    if interval.is_some_and(|i| i.is_zero()) {
        return Err(ctx.err(&format!("{p}.interval"), "interval must be positive"));
    }
    if f.count == Some(0) {
        return Err(ctx.err(&format!("{p}.count"), "count must be positive"));
    }
    Ok(Some(QuicTransactions {
        request,
        response,
        interval,
        count: f.count,
    }))
}

fn flow_kind(ctx: &Ctx<'_>, p: &str, f: &RawFlow) -> Result<FlowKind, Error> {
    let set: [(&str, bool); 20] = [
        ("bytes", f.bytes.is_some()),
        ("stack", f.stack.is_some()),
        ("direction", f.direction.is_some()),
        ("scheduler", f.scheduler.is_some()),
        ("cc", f.cc.is_some()),
        ("path_manager", f.path_manager.is_some()),
        ("port", f.port.is_some()),
        ("options", f.options.is_some()),
        ("rate", f.rate.is_some()),
        ("packet_size", f.packet_size.is_some()),
        ("on", f.on.is_some()),
        ("off", f.off.is_some()),
        ("dist", f.dist.is_some()),
        ("request_size", f.request_size.is_some()),
        ("response_size", f.response_size.is_some()),
        ("interval", f.interval.is_some()),
        ("command", f.command.is_some()),
        ("mptcp", f.mptcp.is_some()),
        ("devices", f.devices.is_some()),
        ("message_size", f.message_size.is_some()),
    ];
    let allowed: &[&str] = match f.kind {
        RawFlowKind::Quic => &[
            "bytes",
            "direction",
            "scheduler",
            "cc",
            "path_manager",
            "stack",
            "port",
            "options",
            "request_size",
            "response_size",
            "interval",
            "rate",
            "message_size",
        ],
        RawFlowKind::Cbr => &["rate", "packet_size", "bytes", "devices"],
        RawFlowKind::Onoff => &["rate", "packet_size", "bytes", "on", "off", "dist"],
        RawFlowKind::Reqresp => &["request_size", "response_size", "interval", "packet_size"],
        RawFlowKind::Command => &["command", "port"],
        RawFlowKind::Tcp => &["mptcp", "cc", "rate", "bytes", "port", "message_size"],
    };
    if let Some((name, _)) = set.iter().find(|(n, s)| *s && !allowed.contains(n)) {
        return Err(ctx.err(
            &format!("{p}.{name}"),
            format!("`{name}` does not apply to this flow kind"),
        ));
    }
    if f.count.is_some() && f.kind != RawFlowKind::Reqresp && f.request_size.is_none() {
        return Err(ctx.err(
            &format!("{p}.count"),
            "`count` only applies to reqresp flows and quic flows with `request_size`",
        ));
    }
    let packet_size = |default: u64| -> Result<u32, Error> {
        let s = f.packet_size.map(|s| s.0).unwrap_or(default);
        if !(48..=65535).contains(&s) {
            return Err(ctx.err(
                &format!("{p}.packet_size"),
                "packet_size must be 48..=65535 bytes (IP packet)",
            ));
        }
        Ok(s as u32)
    };
    let message_size = || -> Result<Option<u64>, Error> {
        let Some(m) = f.message_size else {
            return Ok(None);
        };
        if f.rate.is_none() {
            return Err(ctx.err(
                &format!("{p}.message_size"),
                "`message_size` sizes the writes of a rate-limited sender: it needs `rate`",
            ));
        }
        if m.0 == 0 {
            return Err(ctx.err(
                &format!("{p}.message_size"),
                "message_size must be positive",
            ));
        }
        Ok(Some(m.0))
    };
    let rate = || -> Result<f64, Error> {
        let r = f
            .rate
            .ok_or_else(|| ctx.err(p, "this flow kind needs `rate`"))?
            .0;
        if r <= 0.0 {
            return Err(ctx.err(&format!("{p}.rate"), "rate must be positive"));
        }
        Ok(r)
    };
    Ok(match f.kind {
        RawFlowKind::Quic => {
            let transactions = quic_transactions(ctx, p, f)?;
            let bytes = match (transactions, f.bytes) {
                (None, Some(b)) => b.0,
                (None, None) => {
                    return Err(ctx.err(
                        p,
                        "a quic flow needs `bytes` (or `request_size` and `response_size`)",
                    ));
                }
                (Some(_), None) => 0,
                (Some(_), Some(_)) => {
                    return Err(ctx.err(
                        &format!("{p}.bytes"),
                        "`bytes` does not apply to a quic flow with `request_size`",
                    ));
                }
            };
            if transactions.is_some() && f.rate.is_some() {
                return Err(ctx.err(
                    &format!("{p}.rate"),
                    "`rate` does not apply to a quic flow with `request_size`",
                ));
            }
            if transactions.is_some() && f.direction.is_some() {
                return Err(ctx.err(
                    &format!("{p}.direction"),
                    "`direction` does not apply to a quic flow with `request_size`",
                ));
            }
            FlowKind::Quic(QuicFlow {
                bytes,
                direction: match f.direction.unwrap_or(RawDirection::Upload) {
                    RawDirection::Upload => TransferDirection::Upload,
                    RawDirection::Download => TransferDirection::Download,
                },
                transactions,
                scheduler: f.scheduler.clone().unwrap_or_else(|| "default".into()),
                cc: f.cc.clone().unwrap_or_else(|| "cubic".into()),
                path_manager: f.path_manager.clone().unwrap_or_else(|| "default".into()),
                stack: f.stack.clone().unwrap_or_else(|| "polypath".into()),
                port: f.port.unwrap_or(4433),
                rate: f.rate.is_some().then(rate).transpose()?,
                message_size: message_size()?,
                options: f.options.clone().unwrap_or_default(),
            })
        }
        RawFlowKind::Cbr => FlowKind::Cbr(CbrFlow {
            rate: rate()?,
            devices: match f.devices {
                None => 1,
                Some(0) => {
                    return Err(ctx.err(&format!("{p}.devices"), "devices must be at least 1"));
                }
                Some(n) => n,
            },
            packet_size: packet_size(1500)?,
            bytes: f.bytes.map(|b| b.0),
        }),
        RawFlowKind::Onoff => {
            let on =
                f.on.ok_or_else(|| ctx.err(p, "an onoff flow needs `on`"))?
                    .0;
            let off = f
                .off
                .ok_or_else(|| ctx.err(p, "an onoff flow needs `off`"))?
                .0;
            if on.is_zero() {
                return Err(ctx.err(&format!("{p}.on"), "on period must be positive"));
            }
            FlowKind::OnOff(OnOffFlow {
                rate: rate()?,
                packet_size: packet_size(1500)?,
                on,
                off,
                dist: match f.dist.unwrap_or(RawDist::Fixed) {
                    RawDist::Fixed => PeriodDist::Fixed,
                    RawDist::Exponential => PeriodDist::Exponential,
                },
                bytes: f.bytes.map(|b| b.0),
            })
        }
        RawFlowKind::Reqresp => {
            let request_size = f
                .request_size
                .ok_or_else(|| ctx.err(p, "a reqresp flow needs `request_size`"))?
                .0;
            let response_size = f
                .response_size
                .ok_or_else(|| ctx.err(p, "a reqresp flow needs `response_size`"))?
                .0;
            if request_size == 0 || response_size == 0 {
                return Err(ctx.err(p, "request and response sizes must be positive"));
            }
            let interval = f
                .interval
                .ok_or_else(|| ctx.err(p, "a reqresp flow needs `interval`"))?
                .0;
            if interval.is_zero() {
                return Err(ctx.err(&format!("{p}.interval"), "interval must be positive"));
            }
            FlowKind::RequestResponse(RequestResponseFlow {
                request_size,
                response_size,
                interval,
                count: f.count,
                packet_size: packet_size(1500)?,
            })
        }
        RawFlowKind::Command => {
            let command = f
                .command
                .clone()
                .filter(|c| !c.trim().is_empty())
                .ok_or_else(|| ctx.err(p, "a command flow needs a non-empty `command`"))?;
            FlowKind::Command(CommandFlow {
                command,
                port: f.port,
            })
        }
        RawFlowKind::Tcp => {
            if f.bytes.is_some_and(|b| b.0 == 0) {
                return Err(ctx.err(&format!("{p}.bytes"), "bytes must be positive"));
            }
            if f.cc.as_deref().is_some_and(|c| c.trim().is_empty()) {
                return Err(ctx.err(&format!("{p}.cc"), "cc must name a congestion controller"));
            }
            FlowKind::Tcp(TcpFlow {
                mptcp: f.mptcp.unwrap_or(false),
                cc: f.cc.clone(),
                rate: f.rate.is_some().then(rate).transpose()?,
                message_size: message_size()?,
                bytes: f.bytes.map(|b| b.0),
                port: f.port.unwrap_or(5201),
            })
        }
    })
}
