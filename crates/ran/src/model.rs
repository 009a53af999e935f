//! The radio model: UEs moving among cells, measured every period, reporting RRC events,
//! handed over by the network, with per-path capacities, interruptions and link events.

use crate::action::{ContextRelease, LinkAction, LinkChange, SlotParams};
use crate::channel::{self, Environment, LargeScale};
use crate::config::{
    CellGroup, CellParams, ConfigError, EventAction, InterfaceKind, PredictorConfig, PredictorKind,
    RadioConfig, ShareAs,
};
use crate::dist::{DelayDist, ms_to_ns};
use crate::mobility::{Mobility, Point, TraceError, distance};
use crate::phy;
use crate::predict::{AnyPredictor, GbtModel, ModelError, Observation, Predictor};
use crate::rrc::{EventMachine, EventOutput, L3Filter, Measured};
use polypath_link::{
    CellId, CellMeasurement, DownReason, HandoverDirection, LinkEvent, LinkEventKind, MeasEvent,
    RadioType,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

/// Why a model could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RadioError {
    /// Bad configuration value.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Bad GPS trace.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// Bad predictor model file.
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// What a path is.
#[derive(Debug, Copy, Clone, PartialEq, Eq)]
pub enum PathKind {
    /// A cellular interface's master cell group (or its only group without DC).
    Mcg,
    /// A DC cellular interface's secondary cell group.
    Scg,
    /// A Wi-Fi interface.
    Wifi,
    /// A LiFi interface.
    Lifi,
}

/// Static description of one path (one UE interface / radio leg).
#[derive(Debug, Clone, PartialEq)]
pub struct PathInfo {
    /// UE.
    pub ue: u32,
    /// Interface index within the UE (the `iface` of events and changes).
    pub iface: u16,
    /// Name (`<interface name>` or `<interface name>-scg`).
    pub name: String,
    /// Kind.
    pub kind: PathKind,
}

/// One output of the model, in time order.
#[derive(Debug, Clone, PartialEq)]
pub enum RadioOutput {
    /// Something for the simulator's link to apply.
    Link(LinkChange),
    /// A link-layer event (hint) for the UE's transport and for the event log.
    Event(LinkEvent),
}

impl RadioOutput {
    /// Time of the output.
    pub fn t_ns(&self) -> u64 {
        match self {
            RadioOutput::Link(c) => c.t_ns,
            RadioOutput::Event(e) => e.t_ns,
        }
    }
}

/// Current state of a path, for inspection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PathState {
    /// Serving cell.
    pub serving: Option<CellId>,
    /// Whether the path carries data now.
    pub up: bool,
    /// Downlink rate (bit/s) while up.
    pub dl_bps: u64,
    /// Uplink rate (bit/s) while up.
    pub ul_bps: u64,
}

/// Instantaneous radio quantities of one UE–cell pair.
#[derive(Debug, Clone, Copy)]
struct Radio {
    rsrp: f64,
    rsrq: f64,
    sinr: f64,
    /// Path loss plus shadowing minus antenna gain (dB), for the uplink.
    coupling_db: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Down,
    Up,
    Interrupted,
}

#[derive(Debug, Clone)]
struct PredState {
    cfg: usize,
    p: AnyPredictor,
    next_ns: u64,
    cap_bits: f64,
    delivered_bytes: u64,
    fed: bool,
}

#[derive(Debug, Clone)]
struct Leg {
    iface: u16,
    serving: Option<usize>,
    status: Status,
    busy: bool,
    /// Incremented when a decided handover is cancelled: a pending command of an older
    /// epoch is not sent.
    ho_epoch: u64,
    /// Since when the serving cell has been out of sync (radio link failure monitoring).
    out_of_sync_since: Option<u64>,
    last: Option<(u64, u64)>,
    slot: Option<SlotParams>,
    preds: Vec<PredState>,
}

#[derive(Debug, Clone)]
struct Modem {
    operator: String,
    rats: Vec<RadioType>,
    mcg: Leg,
    scg: Option<Leg>,
    mcg_events: Vec<EventMachine>,
    scg_events: Vec<EventMachine>,
}

#[derive(Debug, Clone)]
struct Wlan {
    rat: RadioType,
    leg: Leg,
    min_sinr_db: f64,
    roam_db: f64,
}

#[derive(Debug, Clone)]
struct Ue {
    id: u32,
    height: f64,
    mobility: Mobility,
    pos: Point,
    speed_mps: f64,
    chan: Vec<LargeScale>,
    /// The UE's site-independent shadowing component of UMi links.
    common: LargeScale,
    /// The same for UMa links, when some cell is a UMa cell (drawn after every other
    /// channel, so a scenario without UMa cells draws what it drew before they existed).
    common_uma: Option<LargeScale>,
    filt: Vec<[L3Filter; 3]>,
    radio: Vec<Option<Radio>>,
    meas: Vec<Option<CellMeasurement>>,
    modems: Vec<Modem>,
    wlans: Vec<Wlan>,
    rng_chan: ChaCha8Rng,
    rng_proc: ChaCha8Rng,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LegRef {
    Mcg(usize),
    Scg(usize),
    Wlan(usize),
}

#[derive(Debug, Clone)]
enum Pending {
    HoCommand {
        ue: usize,
        modem: usize,
        group: CellGroup,
        target: usize,
        keeps_sn: bool,
        epoch: u64,
    },
    HoExecute {
        ue: usize,
        modem: usize,
        group: CellGroup,
        target: usize,
        keeps_sn: bool,
    },
    Attach {
        ue: usize,
        leg: LegRef,
        cell: usize,
        sn_addition: bool,
    },
    SnRelease {
        ue: usize,
        modem: usize,
    },
}

/// SplitMix64, to derive independent seeds from the run seed.
fn mix(seed: u64, a: u64, b: u64) -> u64 {
    let mut z =
        seed ^ a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Power (mW) at which a cell received at `rx_dbm` by its own UEs interferes at a UE it
/// does not serve: with its interference gain instead of its antenna gain.
fn interference_at_others_mw(c: &CellParams, rx_dbm: f64) -> f64 {
    dbm_to_mw(rx_dbm + (c.interference_gain_dbi - c.antenna_gain_dbi))
}

fn dbm_to_mw(x: f64) -> f64 {
    10f64.powf(x / 10.0)
}

fn mw_to_dbm(x: f64) -> f64 {
    10.0 * x.max(1e-30).log10()
}

/// The radio access model. Build it with [`RadioModel::new`], then call
/// [`RadioModel::advance`] with increasing virtual times; it returns everything that
/// happened up to that time, in time order.
#[derive(Debug, Clone)]
pub struct RadioModel {
    cfg: RadioConfig,
    cells: Vec<CellParams>,
    ues: Vec<Ue>,
    paths: Vec<PathInfo>,
    period_ns: u64,
    /// `measurement.rate_hold_ms` in ns (0: no hold).
    rate_hold_ns: u64,
    next_tick_ns: u64,
    tick: u64,
    now_ns: u64,
    started: bool,
    pending: BTreeMap<(u64, u64), Pending>,
    seq: u64,
    seed: u64,
    out: Vec<RadioOutput>,
}

impl RadioModel {
    /// Builds the model: validates the configuration, resolves mobility (reading GPS tracks),
    /// loads predictor models and draws the initial channels from `seed`.
    pub fn new(config: &RadioConfig, seed: u64) -> Result<RadioModel, RadioError> {
        let cells = config.validate()?;
        let mut models: BTreeMap<usize, GbtModel> = BTreeMap::new();
        for (i, p) in config.predictors.iter().enumerate() {
            if p.kind == PredictorKind::Gbt {
                let m = match &p.model {
                    Some(path) => {
                        let text = std::fs::read_to_string(path).map_err(|e| ModelError {
                            file: path.display().to_string(),
                            message: e.to_string(),
                        })?;
                        GbtModel::from_json(&text, &path.display().to_string())?
                    }
                    None => GbtModel::bundled()?,
                };
                models.insert(i, m);
            }
        }
        let mut ues = Vec::new();
        let mut paths = Vec::new();
        for u in &config.ues {
            let mobility = Mobility::from_config(&u.mobility)?;
            let mut rng_chan = ChaCha8Rng::seed_from_u64(mix(seed, u.id as u64, 1));
            let rng_proc = ChaCha8Rng::seed_from_u64(mix(seed, u.id as u64, 2));
            let scale = config.channel.correlation_scale;
            let common = LargeScale::new(Environment::Umi, None, scale, &mut rng_chan);
            let chan = cells
                .iter()
                .map(|c| {
                    let corr =
                        (c.rat == RadioType::Wifi).then_some(config.channel.wifi_shadowing_corr_m);
                    LargeScale::new(c.environment, corr, scale, &mut rng_chan)
                })
                .collect();
            let common_uma = cells
                .iter()
                .any(|c| c.environment == Environment::Uma)
                .then(|| LargeScale::new(Environment::Uma, None, scale, &mut rng_chan));
            let k = config.measurement.filter_coefficient;
            let mut iface: u16 = 0;
            let mut modems = Vec::new();
            let mut wlans = Vec::new();
            let mk_leg = |iface: u16| Leg {
                iface,
                serving: None,
                status: Status::Down,
                busy: false,
                ho_epoch: 0,
                out_of_sync_since: None,
                last: None,
                slot: None,
                preds: config
                    .predictors
                    .iter()
                    .enumerate()
                    .filter_map(|(i, pc)| {
                        AnyPredictor::from_config(
                            pc,
                            mix(seed, u.id as u64, 100 + iface as u64 * 64 + i as u64),
                            models.get(&i),
                        )
                        .map(|p| PredState {
                            cfg: i,
                            p,
                            next_ns: ms_to_ns(pc.period_ms),
                            cap_bits: 0.0,
                            delivered_bytes: 0,
                            fed: false,
                        })
                    })
                    .collect(),
            };
            for f in &u.interfaces {
                match f.kind {
                    InterfaceKind::Cellular => {
                        paths.push(PathInfo {
                            ue: u.id,
                            iface,
                            name: f.name.clone(),
                            kind: PathKind::Mcg,
                        });
                        let mcg = mk_leg(iface);
                        iface += 1;
                        let scg = if f.dual_connectivity {
                            paths.push(PathInfo {
                                ue: u.id,
                                iface,
                                name: format!("{}-scg", f.name),
                                kind: PathKind::Scg,
                            });
                            let l = mk_leg(iface);
                            iface += 1;
                            Some(l)
                        } else {
                            None
                        };
                        let evs = |g: CellGroup| {
                            f.events
                                .as_ref()
                                .unwrap_or(&config.rrc.events)
                                .iter()
                                .filter(|e| e.group == g)
                                .map(|e| EventMachine::new(e.clone()))
                                .collect::<Vec<_>>()
                        };
                        modems.push(Modem {
                            operator: f.operator.clone().unwrap_or_else(|| "default".into()),
                            rats: if f.rats.is_empty() {
                                vec![RadioType::NrFr1, RadioType::NrFr2, RadioType::Lte]
                            } else {
                                f.rats.clone()
                            },
                            mcg,
                            scg_events: if scg.is_some() {
                                evs(CellGroup::Scg)
                            } else {
                                Vec::new()
                            },
                            scg,
                            mcg_events: evs(CellGroup::Mcg),
                        });
                    }
                    InterfaceKind::Wifi | InterfaceKind::Lifi => {
                        let rat = if f.kind == InterfaceKind::Wifi {
                            RadioType::Wifi
                        } else {
                            RadioType::Lifi
                        };
                        paths.push(PathInfo {
                            ue: u.id,
                            iface,
                            name: f.name.clone(),
                            kind: if rat == RadioType::Wifi {
                                PathKind::Wifi
                            } else {
                                PathKind::Lifi
                            },
                        });
                        wlans.push(Wlan {
                            rat,
                            leg: mk_leg(iface),
                            min_sinr_db: f.min_sinr_db,
                            roam_db: f.roam_hysteresis_db,
                        });
                        iface += 1;
                    }
                }
            }
            let pos = mobility.position(0.0);
            ues.push(Ue {
                id: u.id,
                height: u.height_m,
                mobility,
                pos,
                speed_mps: 0.0,
                chan,
                common,
                common_uma,
                filt: vec![[L3Filter::new(k); 3]; cells.len()],
                radio: vec![None; cells.len()],
                meas: vec![None; cells.len()],
                modems,
                wlans,
                rng_chan,
                rng_proc,
            });
        }
        // Initial cells given in the configuration.
        let mut model = RadioModel {
            period_ns: ms_to_ns(config.measurement.period_ms).max(1),
            rate_hold_ns: ms_to_ns(config.measurement.rate_hold_ms),
            cfg: config.clone(),
            cells,
            ues,
            paths,
            next_tick_ns: 0,
            tick: 0,
            now_ns: 0,
            started: false,
            pending: BTreeMap::new(),
            seq: 0,
            seed,
            out: Vec::new(),
        };
        for (ui, u) in config.ues.iter().enumerate() {
            let mut mi = 0;
            for f in &u.interfaces {
                if f.kind != InterfaceKind::Cellular {
                    continue;
                }
                let idx =
                    |id: Option<u32>| id.and_then(|id| model.cells.iter().position(|c| c.id == id));
                let (initial, initial_sn) = (idx(f.initial_cell), idx(f.initial_sn));
                if let Some(c) = initial {
                    model.schedule(
                        0,
                        Pending::Attach {
                            ue: ui,
                            leg: LegRef::Mcg(mi),
                            cell: c,
                            sn_addition: false,
                        },
                    );
                    model.ues[ui].modems[mi].mcg.busy = true;
                }
                if let Some(c) = initial_sn
                    && let Some(scg) = model.ues[ui].modems[mi].scg.as_mut()
                {
                    scg.busy = true;
                    model.schedule(
                        0,
                        Pending::Attach {
                            ue: ui,
                            leg: LegRef::Scg(mi),
                            cell: c,
                            sn_addition: true,
                        },
                    );
                }
                mi += 1;
            }
        }
        Ok(model)
    }

    /// The paths, in `(ue, iface)` order of creation.
    pub fn paths(&self) -> &[PathInfo] {
        &self.paths
    }

    /// The resolved cells.
    pub fn cells(&self) -> &[CellParams] {
        &self.cells
    }

    /// Time up to which the model has advanced.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// The next time at which the model has something to do (a measurement tick or a
    /// scheduled procedure step); a simulator should call [`RadioModel::advance`] then.
    pub fn next_wakeup_ns(&self) -> u64 {
        let p = self.pending.keys().next().map(|k| k.0).unwrap_or(u64::MAX);
        p.min(self.next_tick_ns)
    }

    /// Position of a UE now.
    pub fn position(&self, ue: u32) -> Option<Point> {
        self.ues.iter().find(|u| u.id == ue).map(|u| u.pos)
    }

    /// The current state of a path.
    pub fn path_state(&self, ue: u32, iface: u16) -> Option<PathState> {
        let u = self.ues.iter().find(|u| u.id == ue)?;
        let leg = u
            .modems
            .iter()
            .flat_map(|m| std::iter::once(&m.mcg).chain(m.scg.as_ref()))
            .chain(u.wlans.iter().map(|w| &w.leg))
            .find(|l| l.iface == iface)?;
        let (dl, ul) = leg.last.unwrap_or((0, 0));
        Some(PathState {
            serving: leg
                .serving
                .and_then(|c| self.cells.get(c))
                .map(|c| CellId(c.id)),
            up: leg.status == Status::Up,
            dl_bps: dl,
            ul_bps: ul,
        })
    }

    /// Tells the predictors of a path how many bytes were actually delivered on it (the
    /// simulator calls this as packets arrive). Without such reports, the history-based
    /// predictors see the path's capacity (what a saturating flow would get).
    pub fn report_delivered(&mut self, ue: u32, iface: u16, bytes: u64) {
        if let Some(u) = self.ues.iter_mut().find(|u| u.id == ue) {
            for leg in u
                .modems
                .iter_mut()
                .flat_map(|m| std::iter::once(&mut m.mcg).chain(m.scg.as_mut()))
                .chain(u.wlans.iter_mut().map(|w| &mut w.leg))
                .filter(|l| l.iface == iface)
            {
                for p in &mut leg.preds {
                    p.delivered_bytes += bytes;
                    p.fed = true;
                }
            }
        }
    }

    /// Runs the model up to and including `until_ns` and returns what happened, in time
    /// order. Calling it with a time earlier than a previous call returns nothing.
    pub fn advance(&mut self, until_ns: u64) -> Vec<RadioOutput> {
        loop {
            let p = self.pending.keys().next().map(|k| k.0);
            let t = match p {
                Some(tp) if tp < self.next_tick_ns => tp,
                _ => self.next_tick_ns,
            };
            if t > until_ns {
                break;
            }
            self.now_ns = t;
            if p == Some(t) && (t < self.next_tick_ns || self.started) {
                if let Some((_, a)) = self.pending.pop_first() {
                    self.run_pending(t, a);
                }
                continue;
            }
            self.run_tick(t);
            self.started = true;
            self.tick += 1;
            self.next_tick_ns = self.tick * self.period_ns;
        }
        self.now_ns = self.now_ns.max(until_ns);
        std::mem::take(&mut self.out)
    }

    fn schedule(&mut self, t: u64, a: Pending) {
        self.seq += 1;
        self.pending.insert((t, self.seq), a);
    }

    fn emit(&mut self, t: u64, ue: usize, iface: u16, event: LinkEventKind) {
        let id = self.ues[ue].id;
        self.out
            .push(RadioOutput::Event(LinkEvent::new(t, id, iface, event)));
    }

    fn change(&mut self, t: u64, ue: usize, iface: u16, action: LinkAction) {
        let id = self.ues[ue].id;
        self.out.push(RadioOutput::Link(LinkChange {
            t_ns: t,
            ue: id,
            iface,
            action,
        }));
    }

    fn leg_mut(&mut self, ue: usize, r: LegRef) -> Option<&mut Leg> {
        let u = self.ues.get_mut(ue)?;
        match r {
            LegRef::Mcg(m) => u.modems.get_mut(m).map(|m| &mut m.mcg),
            LegRef::Scg(m) => u.modems.get_mut(m).and_then(|m| m.scg.as_mut()),
            LegRef::Wlan(w) => u.wlans.get_mut(w).map(|w| &mut w.leg),
        }
    }

    fn leg(&self, ue: usize, r: LegRef) -> Option<&Leg> {
        let u = self.ues.get(ue)?;
        match r {
            LegRef::Mcg(m) => u.modems.get(m).map(|m| &m.mcg),
            LegRef::Scg(m) => u.modems.get(m).and_then(|m| m.scg.as_ref()),
            LegRef::Wlan(w) => u.wlans.get(w).map(|w| &w.leg),
        }
    }

    fn all_legs(&self) -> Vec<(usize, LegRef)> {
        let mut v = Vec::new();
        for (ui, u) in self.ues.iter().enumerate() {
            for (mi, m) in u.modems.iter().enumerate() {
                v.push((ui, LegRef::Mcg(mi)));
                if m.scg.is_some() {
                    v.push((ui, LegRef::Scg(mi)));
                }
            }
            for wi in 0..u.wlans.len() {
                v.push((ui, LegRef::Wlan(wi)));
            }
        }
        v
    }

    fn sample(&mut self, ue: usize, d: &DelayDist) -> u64 {
        d.sample_ns(&mut self.ues[ue].rng_proc)
    }

    fn cell_id(&self, c: usize) -> CellId {
        CellId(self.cells.get(c).map(|c| c.id).unwrap_or(u32::MAX))
    }

    // ---------------------------------------------------------------- measurement tick

    fn run_tick(&mut self, t: u64) {
        let t_s = t as f64 / 1e9;
        let period_s = self.period_ns as f64 / 1e9;
        for ui in 0..self.ues.len() {
            let u = &mut self.ues[ui];
            let p = u.mobility.position(t_s);
            let moved = distance(p, u.pos);
            u.speed_mps = if t == 0 { 0.0 } else { moved / period_s };
            u.pos = p;
            u.common.advance(moved, &mut u.rng_chan);
            for ch in &mut u.chan {
                ch.advance(moved, &mut u.rng_chan);
            }
            if let Some(c) = &mut u.common_uma {
                c.advance(moved, &mut u.rng_chan);
            }
            self.measure(ui);
        }
        self.evaluate_events(t);
        self.wlan_association(t);
        self.cellular_recovery(t);
        self.update_rates(t);
        let every = self.cfg.measurement.emit_every as u64;
        if every > 0 && self.tick.is_multiple_of(every) {
            self.emit_measurements(t);
        }
        self.run_predictors(t);
    }

    fn measure(&mut self, ui: usize) {
        let ch = self.cfg.channel.clone();
        let detect = self.cfg.measurement.detect_threshold_dbm;
        let cells = &self.cells;
        let u = &mut self.ues[ui];
        // Wideband received powers first (mW): as the cell's own UE receives it, and as
        // interference at a UE the cell does not serve.
        let mut rx_mw = vec![0.0f64; cells.len()];
        let mut interference_mw = vec![0.0f64; cells.len()];
        let mut info: Vec<Option<(f64, f64)>> = vec![None; cells.len()]; // (rsrp or rx dBm, coupling)
        let mut lifi_snr = vec![None; cells.len()];
        for (ci, c) in cells.iter().enumerate() {
            let d2d = distance(u.pos, c.position);
            match c.rat {
                RadioType::Lifi => {
                    if let Some((rx, snr)) =
                        c.lifi.receive(d2d, c.height_m - u.height, c.bandwidth_hz)
                    {
                        info[ci] = Some((rx, 0.0));
                        lifi_snr[ci] = Some(snr);
                    }
                }
                RadioType::Wifi => {
                    if c.range_m.is_some_and(|r| d2d > r) {
                        continue;
                    }
                    let pl = channel::wifi_path_loss_db(
                        channel::d3d(d2d, c.height_m, u.height),
                        c.carrier_ghz,
                        ch.wifi_path_loss_exponent,
                    );
                    let sf = if ch.shadowing {
                        u.chan[ci].shadow_db(
                            true,
                            ch.wifi_shadowing_db,
                            &u.common,
                            ch.inter_site_correlation,
                        )
                    } else {
                        0.0
                    };
                    let coupling = pl + sf - c.antenna_gain_dbi;
                    let rx = c.tx_power_dbm - coupling;
                    rx_mw[ci] = dbm_to_mw(rx);
                    interference_mw[ci] = interference_at_others_mw(c, rx);
                    info[ci] = Some((rx, coupling));
                }
                _ => {
                    let env = c.environment;
                    let los = u.chan[ci].is_los(env, d2d, u.height, ch.los);
                    let pl = env.path_loss_db(los, d2d, c.carrier_ghz, c.height_m, u.height);
                    let sf = if ch.shadowing {
                        let common = match (env, &u.common_uma) {
                            (Environment::Uma, Some(c)) => c,
                            _ => &u.common,
                        };
                        u.chan[ci].shadow_db(
                            los,
                            env.shadowing_std_db(los),
                            common,
                            ch.inter_site_correlation,
                        )
                    } else {
                        0.0
                    };
                    let coupling = pl + sf - c.antenna_gain_dbi;
                    let rx = c.tx_power_dbm - coupling;
                    rx_mw[ci] = dbm_to_mw(rx);
                    interference_mw[ci] = interference_at_others_mw(c, rx);
                    // RSRP: power of one resource element of the reference signal, with the
                    // total power spread evenly over the 12·N_RB subcarriers.
                    let rsrp = rx - 10.0 * (12.0 * c.n_rb as f64).log10();
                    info[ci] = Some((rsrp, coupling));
                }
            }
        }
        for (ci, c) in cells.iter().enumerate() {
            let Some((level, coupling)) = info[ci] else {
                u.radio[ci] = None;
                u.meas[ci] = None;
                u.filt[ci].iter_mut().for_each(L3Filter::reset);
                continue;
            };
            let radio = if c.rat == RadioType::Lifi {
                let snr = lifi_snr[ci].unwrap_or(f64::NEG_INFINITY);
                Radio {
                    rsrp: level,
                    rsrq: -10.0 * (1.0 + 10f64.powf(-snr / 10.0)).log10(),
                    sinr: snr,
                    coupling_db: coupling,
                }
            } else {
                let noise = dbm_to_mw(channel::thermal_noise_dbm(
                    c.bandwidth_hz,
                    ch.ue_noise_figure_db,
                ));
                let interf: f64 = cells
                    .iter()
                    .enumerate()
                    .filter(|(cj, o)| *cj != ci && o.carrier_ghz == c.carrier_ghz && o.rat == c.rat)
                    .map(|(cj, _)| interference_mw[cj])
                    .sum::<f64>()
                    * ch.interference_load;
                let s = rx_mw[ci];
                let sinr = mw_to_dbm(s) - mw_to_dbm(interf + noise);
                //= 3GPP TS 38.215 V17 §5.1.3
                //# SS-RSRQ is defined as the ratio of N×SS-RSRP / NR carrier RSSI, where N is the
                //# number of resource blocks in the NR carrier RSSI measurement bandwidth
                let rssi = s + interf + noise;
                let rsrq = if c.rat == RadioType::Wifi {
                    mw_to_dbm(s) - mw_to_dbm(rssi)
                } else {
                    10.0 * (c.n_rb as f64).log10() + level - mw_to_dbm(rssi)
                };
                Radio {
                    rsrp: level,
                    rsrq,
                    sinr,
                    coupling_db: coupling,
                }
            };
            if radio.rsrp < detect && c.rat.is_3gpp() {
                u.radio[ci] = None;
                u.meas[ci] = None;
                u.filt[ci].iter_mut().for_each(L3Filter::reset);
                continue;
            }
            u.radio[ci] = Some(radio);
            let f = &mut u.filt[ci];
            u.meas[ci] = Some(CellMeasurement {
                cell: CellId(c.id),
                rat: c.rat,
                rsrp_dbm: f[0].update(radio.rsrp),
                rsrq_db: f[1].update(radio.rsrq),
                sinr_db: f[2].update(radio.sinr),
            });
        }
    }

    fn measured(&self, ui: usize, ci: usize) -> Option<Measured> {
        let m = self.ues.get(ui)?.meas.get(ci)?.clone()?;
        let c = self.cells.get(ci)?;
        Some(Measured {
            m,
            cio_db: c.cio_db,
            offset_freq_db: c.offset_freq_db,
        })
    }

    // ---------------------------------------------------------------- RRC events

    fn evaluate_events(&mut self, t: u64) {
        for ui in 0..self.ues.len() {
            for mi in 0..self.ues[ui].modems.len() {
                for group in [CellGroup::Mcg, CellGroup::Scg] {
                    self.evaluate_group(t, ui, mi, group);
                }
            }
        }
    }

    fn evaluate_group(&mut self, t: u64, ui: usize, mi: usize, group: CellGroup) {
        let r = match group {
            CellGroup::Mcg => LegRef::Mcg(mi),
            CellGroup::Scg => LegRef::Scg(mi),
        };
        let Some(leg) = self.leg(ui, r) else { return };
        if leg.status != Status::Up {
            return;
        }
        let iface = leg.iface;
        let Some(sc) = leg.serving else { return };
        let Some(serving) = self.measured(ui, sc) else {
            return;
        };
        let modem = &self.ues[ui].modems[mi];
        let other_group_cell = match group {
            CellGroup::Mcg => modem.scg.as_ref().and_then(|l| l.serving),
            CellGroup::Scg => modem.mcg.serving,
        };
        let candidates: Vec<(usize, Measured)> = (0..self.cells.len())
            .filter(|ci| *ci != sc && Some(*ci) != other_group_cell)
            .filter(|ci| {
                let c = &self.cells[*ci];
                c.operator == modem.operator && modem.rats.contains(&c.rat)
            })
            .filter_map(|ci| self.measured(ui, ci).map(|m| (ci, m)))
            .collect();
        let n_events = match group {
            CellGroup::Mcg => modem.mcg_events.len(),
            CellGroup::Scg => modem.scg_events.len(),
        };
        let serving_rat = self.cells[sc].rat;
        for ei in 0..n_events {
            let modem = &mut self.ues[ui].modems[mi];
            let em = match group {
                CellGroup::Mcg => &mut modem.mcg_events[ei],
                CellGroup::Scg => &mut modem.scg_events[ei],
            };
            let cfg = em.config().clone();
            if !cfg.serving_types.is_empty() && !cfg.serving_types.contains(&serving_rat) {
                continue;
            }
            let neigh: Vec<Measured> = candidates
                .iter()
                .filter(|(_, m)| cfg.targets_type(serving_rat, m.rat()))
                .map(|(_, m)| m.clone())
                .collect();
            let outs = em.evaluate(t, &serving, &neigh);
            for o in outs {
                match o {
                    EventOutput::Entered(cell) => self.emit(
                        t,
                        ui,
                        iface,
                        LinkEventKind::RrcEventEntered {
                            meas_id: cfg.id,
                            event: cfg.event,
                            serving: serving.m.cell,
                            cell,
                        },
                    ),
                    EventOutput::Left(cell) => self.emit(
                        t,
                        ui,
                        iface,
                        LinkEventKind::RrcEventLeft {
                            meas_id: cfg.id,
                            event: cfg.event,
                            serving: serving.m.cell,
                            cell,
                        },
                    ),
                    EventOutput::Report {
                        serving: s,
                        neighbours,
                        on_leave,
                    } => {
                        let best = neighbours
                            .first()
                            .and_then(|n| self.cells.iter().position(|c| c.id == n.cell.0));
                        self.emit(
                            t,
                            ui,
                            iface,
                            LinkEventKind::MeasurementReport {
                                meas_id: cfg.id,
                                event: cfg.event,
                                serving: s,
                                neighbours,
                                on_leave,
                            },
                        );
                        if !on_leave && cfg.event == MeasEvent::A1 && self.cfg.handover.cancel_on_a1
                        {
                            self.cancel_handover(ui, mi, group);
                        }
                        if !on_leave {
                            self.network_decision(
                                t,
                                ui,
                                mi,
                                group,
                                cfg.action,
                                best,
                                &candidates,
                                &cfg.targets_type_fn(serving_rat),
                            );
                        }
                    }
                }
            }
        }
    }

    /// The serving node's reaction to a measurement report.
    #[allow(clippy::too_many_arguments)]
    fn network_decision(
        &mut self,
        t: u64,
        ui: usize,
        mi: usize,
        group: CellGroup,
        action: EventAction,
        best_reported: Option<usize>,
        candidates: &[(usize, Measured)],
        allowed: &dyn Fn(RadioType) -> bool,
    ) {
        let ho = self.cfg.handover.clone();
        let leg_ref = match group {
            CellGroup::Mcg => LegRef::Mcg(mi),
            CellGroup::Scg => LegRef::Scg(mi),
        };
        // For events without a neighbour (A1/A2), the network picks the strongest measured
        // allowed neighbour.
        let best_measured = || {
            candidates
                .iter()
                .filter(|(_, m)| allowed(m.rat()))
                .max_by(|a, b| {
                    a.1.m
                        .rsrp_dbm
                        .total_cmp(&b.1.m.rsrp_dbm)
                        .then(b.0.cmp(&a.0))
                })
                .map(|(ci, _)| *ci)
        };
        match action {
            EventAction::None => {}
            EventAction::Handover | EventAction::MnHandoverKeepSn => {
                let Some(target) = best_reported.or_else(best_measured) else {
                    return;
                };
                let Some(leg) = self.leg_mut(ui, leg_ref) else {
                    return;
                };
                if leg.busy || leg.status != Status::Up {
                    return;
                }
                leg.busy = true;
                let epoch = leg.ho_epoch;
                let d = self.sample(ui, &ho.report_to_command);
                self.schedule(
                    t + d,
                    Pending::HoCommand {
                        ue: ui,
                        modem: mi,
                        group,
                        target,
                        keeps_sn: action == EventAction::MnHandoverKeepSn,
                        epoch,
                    },
                );
            }
            EventAction::SnAddition => {
                let Some(target) = best_reported else { return };
                let Some(scg) = self.ues[ui].modems[mi].scg.as_mut() else {
                    return;
                };
                if scg.busy || scg.serving.is_some() {
                    return;
                }
                scg.busy = true;
                let d = self.sample(ui, &ho.sn_addition);
                self.schedule(
                    t + d,
                    Pending::Attach {
                        ue: ui,
                        leg: LegRef::Scg(mi),
                        cell: target,
                        sn_addition: true,
                    },
                );
            }
            EventAction::SnRelease => {
                let Some(scg) = self.ues[ui].modems[mi].scg.as_mut() else {
                    return;
                };
                if scg.busy || scg.serving.is_none() {
                    return;
                }
                scg.busy = true;
                let d = self.sample(ui, &ho.sn_release);
                self.schedule(t + d, Pending::SnRelease { ue: ui, modem: mi });
            }
        }
    }

    /// The serving node drops a handover it decided on and has not commanded yet (an A1
    /// report: the serving cell is good again).
    fn cancel_handover(&mut self, ui: usize, mi: usize, group: CellGroup) {
        let r = match group {
            CellGroup::Mcg => LegRef::Mcg(mi),
            CellGroup::Scg => LegRef::Scg(mi),
        };
        let pending = self.pending.values().any(|p| {
            matches!(p, Pending::HoCommand { ue, modem, group: g, .. } if *ue == ui && *modem == mi && *g == group)
        });
        if let Some(leg) = self.leg_mut(ui, r)
            && leg.busy
            && leg.status == Status::Up
            && pending
        {
            leg.ho_epoch += 1;
            leg.busy = false;
        }
    }

    // ---------------------------------------------------------------- procedures

    fn run_pending(&mut self, t: u64, a: Pending) {
        match a {
            Pending::HoCommand {
                ue,
                modem,
                group,
                target,
                keeps_sn,
                epoch,
            } => {
                let r = match group {
                    CellGroup::Mcg => LegRef::Mcg(modem),
                    CellGroup::Scg => LegRef::Scg(modem),
                };
                let Some(leg) = self.leg(ue, r) else { return };
                if leg.ho_epoch != epoch {
                    // Cancelled (the serving cell recovered): nothing is sent.
                    return;
                }
                let (iface, source) = (leg.iface, leg.serving);
                let Some(source) = source.filter(|_| leg.status == Status::Up) else {
                    if let Some(l) = self.leg_mut(ue, r) {
                        l.busy = false;
                    }
                    return;
                };
                let (srat, trat) = (self.cells[source].rat, self.cells[target].rat);
                self.emit(
                    t,
                    ue,
                    iface,
                    LinkEventKind::HandoverCommand {
                        source: self.cell_id(source),
                        target: self.cell_id(target),
                        target_rat: trat,
                        direction: HandoverDirection::between(srat, trat),
                        keeps_sn,
                    },
                );
                let d = self.sample(ue, &self.cfg.handover.command_to_execution.clone());
                self.schedule(
                    t + d,
                    Pending::HoExecute {
                        ue,
                        modem,
                        group,
                        target,
                        keeps_sn,
                    },
                );
            }
            Pending::HoExecute {
                ue,
                modem,
                group,
                target,
                keeps_sn,
            } => self.execute_handover(t, ue, modem, group, target, keeps_sn),
            Pending::Attach {
                ue,
                leg,
                cell,
                sn_addition,
            } => self.attach(t, ue, leg, cell, sn_addition),
            Pending::SnRelease { ue, modem } => self.release_sn(t, ue, modem, false),
        }
    }

    fn execute_handover(
        &mut self,
        t: u64,
        ue: usize,
        modem: usize,
        group: CellGroup,
        target: usize,
        keeps_sn: bool,
    ) {
        let r = match group {
            CellGroup::Mcg => LegRef::Mcg(modem),
            CellGroup::Scg => LegRef::Scg(modem),
        };
        let Some(leg) = self.leg(ue, r) else { return };
        let iface = leg.iface;
        let Some(source) = leg.serving.filter(|_| leg.status == Status::Up) else {
            if let Some(l) = self.leg_mut(ue, r) {
                l.busy = false;
            }
            return;
        };
        self.emit(
            t,
            ue,
            iface,
            LinkEventKind::HandoverExecution {
                source: self.cell_id(source),
                target: self.cell_id(target),
            },
        );
        let cr_cfg = self.cfg.handover.context_release.clone();
        let (gap, seed) = {
            let rng = &mut self.ues[ue].rng_proc;
            (
                rng.random::<f64>() < cr_cfg.gap_probability,
                rng.random::<u64>(),
            )
        };
        self.change(
            t,
            ue,
            iface,
            LinkAction::ContextRelease(ContextRelease {
                gap,
                window_bytes: cr_cfg.window_bytes,
                max_gap_packets: cr_cfg.max_gap_packets,
                redeliver_probability: cr_cfg.redeliver_probability,
                seed,
            }),
        );
        self.change(
            t,
            ue,
            iface,
            LinkAction::Interrupt {
                buffer_limit_bytes: self.cells[target].buffer_bytes,
                reason: DownReason::Handover,
            },
        );
        self.emit(
            t,
            ue,
            iface,
            LinkEventKind::LinkDown {
                cell: Some(self.cell_id(source)),
                reason: DownReason::Handover,
            },
        );
        if let Some(l) = self.leg_mut(ue, r) {
            l.status = Status::Interrupted;
            l.serving = Some(target);
            l.last = None;
        }
        let m = &mut self.ues[ue].modems[modem];
        let events = match group {
            CellGroup::Mcg => &mut m.mcg_events,
            CellGroup::Scg => &mut m.scg_events,
        };
        events.iter_mut().for_each(EventMachine::reset);
        // An MN handover without "keep SN" releases the SN (TS 37.340 §10.7.1 inter-MN
        // handover with SN release); with it, the SN continues (§10.7.2).
        if group == CellGroup::Mcg
            && !keeps_sn
            && m.scg.as_ref().is_some_and(|s| s.serving.is_some())
        {
            self.release_sn(t, ue, modem, true);
        }
        let d = self.sample(ue, &self.cfg.handover.interruption.clone());
        self.schedule(
            t + d,
            Pending::Attach {
                ue,
                leg: r,
                cell: target,
                sn_addition: false,
            },
        );
    }

    /// Random access on `cell` completes: the leg comes up there.
    fn attach(&mut self, t: u64, ue: usize, r: LegRef, cell: usize, sn_addition: bool) {
        let Some(leg) = self.leg(ue, r) else { return };
        let iface = leg.iface;
        if sn_addition {
            // The SN may not be the MN's cell.
            if let LegRef::Scg(m) = r
                && self.ues[ue].modems[m].mcg.serving == Some(cell)
            {
                if let Some(l) = self.leg_mut(ue, r) {
                    l.busy = false;
                }
                return;
            }
            self.emit(
                t,
                ue,
                iface,
                LinkEventKind::SnAddition {
                    cell: self.cell_id(cell),
                    rat: self.cells[cell].rat,
                },
            );
        }
        if self.cells[cell].rat.is_3gpp() {
            self.emit(
                t,
                ue,
                iface,
                LinkEventKind::RandomAccessComplete {
                    cell: self.cell_id(cell),
                },
            );
        }
        if let Some(l) = self.leg_mut(ue, r) {
            l.serving = Some(cell);
            l.status = Status::Up;
            l.busy = false;
            l.last = None;
        }
        if let LegRef::Scg(m) = r {
            self.ues[ue].modems[m]
                .scg_events
                .iter_mut()
                .for_each(EventMachine::reset);
        }
        self.emit(
            t,
            ue,
            iface,
            LinkEventKind::LinkUp {
                cell: self.cell_id(cell),
            },
        );
        // Rates: computed now so that Up carries them.
        let shares = self.attached_counts();
        let (dl, ul, slot) = self.rates(ue, cell, &shares);
        let limit = self.cells[cell].buffer_bytes;
        self.change(
            t,
            ue,
            iface,
            LinkAction::Up {
                dl_bps: dl,
                ul_bps: ul,
                buffer_limit_bytes: limit,
                slot,
            },
        );
        if let Some(l) = self.leg_mut(ue, r) {
            l.last = Some((dl, ul));
            l.slot = Some(slot);
        }
    }

    fn release_sn(&mut self, t: u64, ue: usize, modem: usize, immediate_with_mn_ho: bool) {
        let Some(scg) = self.ues[ue].modems[modem].scg.as_ref() else {
            return;
        };
        let iface = scg.iface;
        let Some(cell) = scg.serving else {
            if let Some(s) = self.ues[ue].modems[modem].scg.as_mut() {
                s.busy = false;
            }
            return;
        };
        self.emit(
            t,
            ue,
            iface,
            LinkEventKind::SnRelease {
                cell: self.cell_id(cell),
            },
        );
        self.emit(
            t,
            ue,
            iface,
            LinkEventKind::LinkDown {
                cell: Some(self.cell_id(cell)),
                reason: DownReason::SnRelease,
            },
        );
        self.change(
            t,
            ue,
            iface,
            LinkAction::Down {
                reason: DownReason::SnRelease,
            },
        );
        let m = &mut self.ues[ue].modems[modem];
        if let Some(s) = m.scg.as_mut() {
            s.serving = None;
            s.status = Status::Down;
            s.last = None;
            // A release that rides on an MN handover leaves an SN procedure in flight alone.
            if !immediate_with_mn_ho {
                s.busy = false;
            }
        }
        m.scg_events.iter_mut().for_each(EventMachine::reset);
    }

    // ---------------------------------------------------------------- coverage

    /// Radio link failure and re-establishment on cellular MCG legs; SCG legs whose cell is
    /// no longer detected are released.
    fn cellular_recovery(&mut self, t: u64) {
        let reest = self.cfg.handover.interruption.clone();
        let failed = self.radio_link_failures(t);
        for ui in 0..self.ues.len() {
            for mi in 0..self.ues[ui].modems.len() {
                let m = &self.ues[ui].modems[mi];
                let mcg = &m.mcg;
                let meas = &self.ues[ui].meas;
                let lost =
                    |c: Option<usize>| c.is_some_and(|c| meas.get(c).is_none_or(Option::is_none));
                let mcg_lost = !mcg.busy && mcg.status == Status::Up && lost(mcg.serving)
                    || failed.contains(&(ui, mi));
                let scg_lost = m
                    .scg
                    .as_ref()
                    .is_some_and(|s| !s.busy && s.status == Status::Up && lost(s.serving));
                if mcg_lost {
                    let (iface, cell) = (mcg.iface, mcg.serving.map(|c| self.cell_id(c)));
                    self.emit(
                        t,
                        ui,
                        iface,
                        LinkEventKind::LinkDown {
                            cell,
                            reason: DownReason::NoCoverage,
                        },
                    );
                    self.change(
                        t,
                        ui,
                        iface,
                        LinkAction::Down {
                            reason: DownReason::NoCoverage,
                        },
                    );
                    let m = &mut self.ues[ui].modems[mi];
                    m.mcg.status = Status::Down;
                    m.mcg.serving = None;
                    m.mcg.last = None;
                    m.mcg_events.iter_mut().for_each(EventMachine::reset);
                    if m.scg
                        .as_ref()
                        .is_some_and(|s| s.serving.is_some() && !s.busy)
                    {
                        self.release_sn(t, ui, mi, false);
                    }
                }
                if scg_lost && !mcg_lost {
                    self.release_sn(t, ui, mi, false);
                }
                let m = &self.ues[ui].modems[mi];
                if !m.mcg.busy && m.mcg.status == Status::Down {
                    // (Re-)establishment on the strongest allowed, detected cell; with radio
                    // link failure monitoring, only on a cell in sync (a suitable cell).
                    let scg_cell = m.scg.as_ref().and_then(|s| s.serving);
                    let qout = self
                        .cfg
                        .handover
                        .radio_link_failure
                        .as_ref()
                        .map(|r| r.qout_sinr_db);
                    let radio = &self.ues[ui].radio;
                    let best = (0..self.cells.len())
                        .filter(|ci| Some(*ci) != scg_cell)
                        .filter(|ci| qout.is_none_or(|q| radio[*ci].is_some_and(|r| r.sinr >= q)))
                        .filter(|ci| {
                            let c = &self.cells[*ci];
                            c.operator == m.operator && m.rats.contains(&c.rat)
                        })
                        .filter_map(|ci| self.ues[ui].meas[ci].as_ref().map(|x| (ci, x.rsrp_dbm)))
                        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
                    if let Some((ci, _)) = best {
                        self.ues[ui].modems[mi].mcg.busy = true;
                        let d = if t == 0 { 0 } else { self.sample(ui, &reest) };
                        self.schedule(
                            t + d,
                            Pending::Attach {
                                ue: ui,
                                leg: LegRef::Mcg(mi),
                                cell: ci,
                                sn_addition: false,
                            },
                        );
                    }
                }
            }
        }
    }

    /// MCG legs whose serving cell has been out of sync (SINR below Qout) for T310 now:
    /// radio link failure, with no report and no command. A leg in a handover procedure
    /// (`busy`) is not monitored.
    fn radio_link_failures(&mut self, t: u64) -> Vec<(usize, usize)> {
        let Some(rlf) = self.cfg.handover.radio_link_failure.clone() else {
            return Vec::new();
        };
        let t310 = crate::dist::ms_to_ns(rlf.t310_ms);
        let mut failed = Vec::new();
        for ui in 0..self.ues.len() {
            for mi in 0..self.ues[ui].modems.len() {
                let leg = &self.ues[ui].modems[mi].mcg;
                let bad = !leg.busy
                    && leg.status == Status::Up
                    && leg.serving.is_some_and(|c| {
                        rlf.rats.contains(&self.cells[c].rat)
                            && self.ues[ui].radio[c].is_none_or(|r| r.sinr < rlf.qout_sinr_db)
                    });
                let leg = &mut self.ues[ui].modems[mi].mcg;
                if !bad {
                    leg.out_of_sync_since = None;
                    continue;
                }
                let since = *leg.out_of_sync_since.get_or_insert(t);
                if t >= since + t310 {
                    leg.out_of_sync_since = None;
                    failed.push((ui, mi));
                }
            }
        }
        failed
    }

    fn wlan_association(&mut self, t: u64) {
        let delay = self.cfg.handover.wlan_reassociation.clone();
        for ui in 0..self.ues.len() {
            for wi in 0..self.ues[ui].wlans.len() {
                let w = &self.ues[ui].wlans[wi];
                if w.leg.busy {
                    continue;
                }
                let sinr = |ci: usize| self.ues[ui].radio[ci].map(|r| r.sinr);
                let best = (0..self.cells.len())
                    .filter(|ci| self.cells[*ci].rat == w.rat)
                    .filter_map(|ci| sinr(ci).map(|s| (ci, s)))
                    .filter(|(_, s)| *s >= w.min_sinr_db)
                    .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
                let cur = w.leg.serving.and_then(|c| sinr(c).map(|s| (c, s)));
                let iface = w.leg.iface;
                let status = w.leg.status;
                let (min, roam) = (w.min_sinr_db, w.roam_db);
                match (status, cur, best) {
                    (Status::Down, _, Some((ci, _))) => {
                        self.ues[ui].wlans[wi].leg.busy = true;
                        let d = if t == 0 { 0 } else { self.sample(ui, &delay) };
                        self.schedule(
                            t + d,
                            Pending::Attach {
                                ue: ui,
                                leg: LegRef::Wlan(wi),
                                cell: ci,
                                sn_addition: false,
                            },
                        );
                    }
                    (Status::Up, c, b) => {
                        let cur_ok = c.is_some_and(|(_, s)| s >= min);
                        let roam_to = match (c, b) {
                            (Some((cc, cs)), Some((bc, bs)))
                                if bc != cc && (bs > cs + roam || !cur_ok) =>
                            {
                                Some(bc)
                            }
                            (None, Some((bc, _))) => Some(bc),
                            _ => None,
                        };
                        let old = self.ues[ui].wlans[wi].leg.serving.map(|c| self.cell_id(c));
                        if let Some(target) = roam_to {
                            let limit = self.cells[target].buffer_bytes;
                            self.change(
                                t,
                                ui,
                                iface,
                                LinkAction::Interrupt {
                                    buffer_limit_bytes: limit,
                                    reason: DownReason::Reassociation,
                                },
                            );
                            self.emit(
                                t,
                                ui,
                                iface,
                                LinkEventKind::LinkDown {
                                    cell: old,
                                    reason: DownReason::Reassociation,
                                },
                            );
                            let l = &mut self.ues[ui].wlans[wi].leg;
                            l.status = Status::Interrupted;
                            l.serving = Some(target);
                            l.busy = true;
                            l.last = None;
                            let d = self.sample(ui, &delay);
                            self.schedule(
                                t + d,
                                Pending::Attach {
                                    ue: ui,
                                    leg: LegRef::Wlan(wi),
                                    cell: target,
                                    sn_addition: false,
                                },
                            );
                        } else if !cur_ok {
                            self.change(
                                t,
                                ui,
                                iface,
                                LinkAction::Down {
                                    reason: DownReason::NoCoverage,
                                },
                            );
                            self.emit(
                                t,
                                ui,
                                iface,
                                LinkEventKind::LinkDown {
                                    cell: old,
                                    reason: DownReason::NoCoverage,
                                },
                            );
                            let l = &mut self.ues[ui].wlans[wi].leg;
                            l.status = Status::Down;
                            l.serving = None;
                            l.last = None;
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    // ---------------------------------------------------------------- rates

    /// Number of legs (of all UEs) attached to each cell (up or interrupted towards it).
    fn attached_counts(&self) -> Vec<u32> {
        let mut n = vec![0u32; self.cells.len()];
        for (ui, r) in self.all_legs() {
            if let Some(l) = self.leg(ui, r)
                && l.status != Status::Down
                && let Some(c) = l.serving
                && let Some(x) = n.get_mut(c)
            {
                *x += 1;
            }
        }
        n
    }

    /// (downlink bit/s, uplink bit/s, slot parameters) of UE `ui` on cell `ci`.
    fn rates(&self, ui: usize, ci: usize, attached: &[u32]) -> (u64, u64, SlotParams) {
        let c = &self.cells[ci];
        let ch = &self.cfg.channel;
        let share = c.ue_share / attached.get(ci).copied().unwrap_or(1).max(1) as f64;
        let radio = self.ues[ui].radio[ci];
        let slots_per_s = 1e9 / c.slot_ns as f64;
        let (dl_full, ul_full) = match radio {
            None => (0.0, 0.0),
            Some(r) => {
                let ul_fraction = if c.dl_fraction >= 1.0 {
                    1.0
                } else {
                    1.0 - c.dl_fraction
                };
                let ul_noise = channel::thermal_noise_dbm(c.bandwidth_hz, ch.bs_noise_figure_db);
                let ul_sinr = ch.ue_tx_power_dbm - r.coupling_db - ul_noise;
                if c.rat.is_3gpp() {
                    let la =
                        phy::adapt(c.cqi_table, r.sinr, ch.implementation_gap_db, c.mimo_layers);
                    let dl =
                        phy::nr_rate_bps(la.layers, la.efficiency, c.n_rb, c.scs_khz, c.overhead);
                    let lu = phy::adapt(c.cqi_table, ul_sinr, ch.implementation_gap_db, 1);
                    let ul_oh = if c.rat == RadioType::NrFr2 {
                        0.10
                    } else {
                        0.08
                    };
                    let ul = phy::nr_rate_bps(1, lu.efficiency, c.n_rb, c.scs_khz, ul_oh);
                    (dl * c.dl_fraction, ul * ul_fraction)
                } else {
                    let layers = (1..=c.mimo_layers)
                        .take_while(|l| {
                            r.sinr >= phy::RANK_SINR_THRESHOLDS_DB[(*l as usize - 1).min(7)]
                        })
                        .last()
                        .unwrap_or(1);
                    let max_eff = phy::CQI_TABLE_2[15].efficiency;
                    let eff = phy::attenuated_shannon(
                        r.sinr - 10.0 * (layers as f64).log10(),
                        0.6,
                        -10.0,
                        max_eff,
                    );
                    let dl = layers as f64 * eff * c.bandwidth_hz * (1.0 - c.overhead);
                    // Wi-Fi/LiFi uplink: same air interface, the rest of the air time; LiFi
                    // uplinks are typically infrared at similar quality.
                    let ul_eff = if c.rat == RadioType::Lifi {
                        eff
                    } else {
                        phy::attenuated_shannon(ul_sinr, 0.6, -10.0, max_eff)
                    };
                    (
                        dl * c.dl_fraction,
                        ul_eff * c.bandwidth_hz * (1.0 - c.overhead) * ul_fraction,
                    )
                }
            }
        };
        let bytes_per_rb = dl_full / 8.0 / slots_per_s / c.n_rb as f64;
        // The same rate either way: a share of the slots at full bytes per RB, or the
        // attached UEs' turns at the share's bytes per RB.
        let (slot_share, slot_bytes_per_rb) = match c.share_as {
            ShareAs::Slots => (share, bytes_per_rb),
            ShareAs::Rate => (share / c.ue_share, bytes_per_rb * c.ue_share),
        };
        (
            (dl_full * share).round() as u64,
            (ul_full * share).round() as u64,
            SlotParams {
                cell: CellId(c.id),
                slot_ns: c.slot_ns,
                total_rbs: c.n_rb,
                dl_bytes_per_rb: slot_bytes_per_rb,
                share: slot_share,
                max_burst_slots: c.max_burst_slots,
            },
        )
    }

    fn update_rates(&mut self, t: u64) {
        let counts = self.attached_counts();
        let period_s = self.period_ns as f64 / 1e9;
        // With a hold, a link that keeps its rate changes it only on the first tick at or
        // after a multiple of the hold.
        let hold = self.rate_hold_ns;
        let on_boundary = hold == 0 || t / hold != t.saturating_sub(self.period_ns) / hold;
        for (ui, r) in self.all_legs() {
            let Some(l) = self.leg(ui, r) else { continue };
            let (iface, status, serving, last) = (l.iface, l.status, l.serving, l.last);
            let last_cell = l.slot.map(|s| s.cell);
            let cur = match (status, serving) {
                (Status::Up, Some(c)) => Some(self.rates(ui, c, &counts)),
                _ => None,
            };
            if let Some((dl, ul, slot)) = cur
                && last != Some((dl, ul))
                && (last.is_none() || last_cell != Some(slot.cell) || on_boundary)
            {
                self.change(
                    t,
                    ui,
                    iface,
                    LinkAction::Rate {
                        dl_bps: dl,
                        ul_bps: ul,
                        slot,
                    },
                );
                if let Some(l) = self.leg_mut(ui, r) {
                    l.last = Some((dl, ul));
                    l.slot = Some(slot);
                }
            }
            // What the link carries: the rate last given to it while it is up.
            let dl_now = match (cur, self.leg(ui, r).and_then(|l| l.last)) {
                (Some(_), Some((dl, _))) => dl as f64,
                _ => 0.0,
            };
            if let Some(l) = self.leg_mut(ui, r) {
                for p in &mut l.preds {
                    p.cap_bits += dl_now * period_s;
                }
            }
        }
    }

    // ---------------------------------------------------------------- outputs

    fn emit_measurements(&mut self, t: u64) {
        for ui in 0..self.ues.len() {
            let mut lists: Vec<(u16, Option<usize>, Vec<usize>)> = Vec::new();
            for m in &self.ues[ui].modems {
                let cells: Vec<usize> = (0..self.cells.len())
                    .filter(|ci| {
                        let c = &self.cells[*ci];
                        c.operator == m.operator && m.rats.contains(&c.rat)
                    })
                    .collect();
                lists.push((m.mcg.iface, m.mcg.serving, cells.clone()));
                if let Some(s) = &m.scg {
                    lists.push((s.iface, s.serving, cells));
                }
            }
            for w in &self.ues[ui].wlans {
                let cells = (0..self.cells.len())
                    .filter(|ci| self.cells[*ci].rat == w.rat)
                    .collect();
                lists.push((w.leg.iface, w.leg.serving, cells));
            }
            for (iface, serving, cells) in lists {
                let u = &self.ues[ui];
                let mut v: Vec<CellMeasurement> = Vec::new();
                if let Some(s) = serving.and_then(|s| u.meas[s].clone()) {
                    v.push(s);
                }
                let mut others: Vec<CellMeasurement> = cells
                    .iter()
                    .filter(|ci| Some(**ci) != serving)
                    .filter_map(|ci| u.meas[*ci].clone())
                    .collect();
                others.sort_by(|a, b| b.rsrp_dbm.total_cmp(&a.rsrp_dbm).then(a.cell.cmp(&b.cell)));
                others.truncate(8);
                v.extend(others);
                if v.is_empty() {
                    continue;
                }
                let serving = serving.map(|s| self.cell_id(s));
                self.emit(
                    t,
                    ui,
                    iface,
                    LinkEventKind::Measurement { serving, cells: v },
                );
            }
        }
    }

    fn run_predictors(&mut self, t: u64) {
        let preds: Vec<PredictorConfig> = self.cfg.predictors.clone();
        if preds.is_empty() {
            return;
        }
        for (ui, r) in self.all_legs() {
            let Some(l) = self.leg(ui, r) else { continue };
            let iface = l.iface;
            let (cap, serving) = (l.last.map(|x| x.0).unwrap_or(0) as f64, l.serving);
            let m = serving.and_then(|c| self.ues[ui].meas[c].clone());
            let is_5g = serving.is_some_and(|c| self.cells[c].rat.is_nr());
            let cqi = serving
                .and_then(|c| {
                    let cell = &self.cells[c];
                    self.ues[ui].radio[c].map(|r| {
                        phy::adapt(
                            cell.cqi_table,
                            r.sinr,
                            self.cfg.channel.implementation_gap_db,
                            cell.mimo_layers,
                        )
                        .cqi as f64
                    })
                })
                .unwrap_or(0.0);
            let speed = self.ues[ui].speed_mps;
            let mut events = Vec::new();
            if let Some(l) = self.leg_mut(ui, r) {
                for p in &mut l.preds {
                    if t < p.next_ns {
                        continue;
                    }
                    let Some(pc) = preds.get(p.cfg) else { continue };
                    let period = ms_to_ns(pc.period_ms).max(1);
                    let secs = period as f64 / 1e9;
                    let delivered = if p.fed {
                        p.delivered_bytes as f64 * 8.0 / secs
                    } else {
                        p.cap_bits / secs
                    };
                    p.next_ns = t + period;
                    p.cap_bits = 0.0;
                    p.delivered_bytes = 0;
                    let obs = Observation {
                        delivered_bps: delivered,
                        capacity_bps: cap,
                        rsrp_dbm: m.as_ref().map(|m| m.rsrp_dbm).unwrap_or(-140.0),
                        rsrq_db: m.as_ref().map(|m| m.rsrq_db).unwrap_or(-20.0),
                        sinr_db: m.as_ref().map(|m| m.sinr_db).unwrap_or(-20.0),
                        cqi,
                        speed_mps: speed,
                        is_5g,
                    };
                    let bps = p.p.observe_and_predict(&obs);
                    let name = pc.name.clone().unwrap_or_else(|| {
                        serde_json::to_value(pc.kind)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_default()
                    });
                    events.push(LinkEventKind::PredictedThroughput {
                        bps: if bps.is_finite() { bps } else { 0.0 },
                        predictor: name,
                        horizon_ms: pc.period_ms.round() as u32,
                    });
                }
            }
            for e in events {
                self.emit(t, ui, iface, e);
            }
        }
    }

    /// The run seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{CellConfig, InterfaceConfig, UeConfig};
    use crate::mobility::MobilityConfig;

    fn ue(id: u32, mobility: MobilityConfig) -> UeConfig {
        UeConfig {
            id,
            height_m: 1.5,
            mobility,
            interfaces: vec![InterfaceConfig::cellular("nr0")],
        }
    }

    fn cfg(cells: Vec<CellConfig>, ues: Vec<UeConfig>) -> RadioConfig {
        let mut c: RadioConfig = serde_json::from_str(r#"{"cells": [], "ues": []}"#).unwrap();
        c.cells = cells;
        c.ues = ues;
        c.channel.shadowing = false;
        c.channel.los = channel::LosMode::Los;
        c
    }

    /// The downlink rate and slot parameters last given to UE `ue`.
    fn last_rate(out: &[RadioOutput], ue: u32) -> Option<(u64, SlotParams)> {
        out.iter()
            .filter_map(|o| match o {
                RadioOutput::Link(LinkChange {
                    ue: u,
                    action:
                        LinkAction::Up { dl_bps, slot, .. } | LinkAction::Rate { dl_bps, slot, .. },
                    ..
                }) if *u == ue => Some((*dl_bps, *slot)),
                _ => None,
            })
            .next_back()
    }

    fn up_rate(out: &[RadioOutput], ue: u32) -> u64 {
        last_rate(out, ue).map_or(0, |(dl_bps, _)| dl_bps)
    }

    #[test]
    fn cell_capacity_is_shared_among_attached_ues() {
        let cell = CellConfig::new(1, RadioType::NrFr1, [0.0, 0.0]);
        let at = |id| {
            ue(
                id,
                MobilityConfig::Static {
                    position: [100.0, 0.0],
                },
            )
        };
        let mut one = RadioModel::new(&cfg(vec![cell.clone()], vec![at(0)]), 1).unwrap();
        let single = up_rate(&one.advance(1_000_000_000), 0);
        let mut two = RadioModel::new(&cfg(vec![cell], vec![at(0), at(1)]), 1).unwrap();
        let out = two.advance(1_000_000_000);
        let (a, b) = (up_rate(&out, 0), up_rate(&out, 1));
        assert!(single > 100_000_000, "{single}");
        assert_eq!(a, b);
        assert!(
            (a as f64 / single as f64 - 0.5).abs() < 1e-6,
            "{a} vs {single}"
        );
        assert_eq!(two.path_state(1, 0).unwrap().dl_bps, b);
    }

    #[test]
    fn a_share_given_as_rate_keeps_the_rate_and_serves_every_slot() {
        let at = MobilityConfig::Static {
            position: [100.0, 0.0],
        };
        let run = |share_as, ues: u32| {
            let mut cell = CellConfig::new(1, RadioType::NrFr1, [0.0, 0.0]);
            cell.ue_share = 0.15;
            cell.share_as = share_as;
            let ues = (0..ues).map(|i| ue(i, at.clone())).collect();
            let out = RadioModel::new(&cfg(vec![cell], ues), 1)
                .unwrap()
                .advance(1_000_000_000);
            last_rate(&out, 0).unwrap()
        };
        for ues in [1, 2] {
            let (slots_bps, by_slots) = run(ShareAs::Slots, ues);
            let (rate_bps, by_rate) = run(ShareAs::Rate, ues);
            let attached = f64::from(ues);
            assert_eq!(slots_bps, rate_bps, "the same rate");
            assert!((by_slots.share - 0.15 / attached).abs() < 1e-12);
            assert!(
                (by_rate.share - 1.0 / attached).abs() < 1e-12,
                "only the UEs' turns"
            );
            assert!((by_rate.dl_bytes_per_rb / by_slots.dl_bytes_per_rb - 0.15).abs() < 1e-12);
            assert!((by_rate.dl_bps() / by_slots.dl_bps() - 1.0).abs() < 1e-12);
        }
    }

    #[test]
    fn a_macro_cell_is_a_uma_cell_on_a_25_m_mast_and_wifi_has_no_3gpp_environment() {
        let mut macro_cell = CellConfig::new(1, RadioType::NrFr1, [0.0, 0.0]);
        macro_cell.environment = Some(channel::Environment::Uma);
        let p = CellParams::resolve(&macro_cell, "radio.cells[0]").unwrap();
        assert_eq!(p.environment, channel::Environment::Uma);
        assert_eq!(p.height_m, 25.0);
        let small = CellConfig::new(2, RadioType::NrFr1, [0.0, 0.0]);
        let p = CellParams::resolve(&small, "radio.cells[1]").unwrap();
        assert_eq!(
            (p.environment, p.height_m),
            (channel::Environment::Umi, 10.0)
        );
        let mut ap = CellConfig::new(3, RadioType::Wifi, [0.0, 0.0]);
        ap.environment = Some(channel::Environment::Uma);
        let e = CellParams::resolve(&ap, "radio.cells[2]").unwrap_err();
        assert_eq!(e.field, "radio.cells[2].environment");
    }

    /// SINR (dB) of a static UE at the origin served by the first of `cells`, after one
    /// measurement period.
    fn sinr_at_origin(cells: Vec<CellConfig>) -> f64 {
        let at = MobilityConfig::Static {
            position: [0.0, 0.0],
        };
        let mut m = RadioModel::new(&cfg(cells, vec![ue(0, at)]), 1).unwrap();
        m.advance(100_000_000);
        m.ues[0].radio[0].unwrap().sinr
    }

    #[test]
    fn a_mmwave_neighbour_interferes_without_its_beam_gain() {
        // Two cells of a type, 120 m either side of the UE: the same received power.
        let pair = |rat, interference_gain_dbi| {
            let mut a = CellConfig::new(1, rat, [-120.0, 0.0]);
            let mut b = CellConfig::new(2, rat, [120.0, 0.0]);
            a.interference_gain_dbi = interference_gain_dbi;
            b.interference_gain_dbi = interference_gain_dbi;
            vec![a, b]
        };
        let alone = |rat| sinr_at_origin(vec![CellConfig::new(1, rat, [-120.0, 0.0])]);
        // Sub-6 GHz: the neighbour interferes with its full antenna gain, so the SINR is
        // below 0 dB (equal powers, plus noise).
        let fr1 = sinr_at_origin(pair(RadioType::NrFr1, None));
        assert!((-1.0..0.0).contains(&fr1), "{fr1}");
        // mmWave: 24 dBi for the serving beam, 8 dBi for the neighbour's interference, so
        // the signal-to-interference ratio alone is 16 dB.
        let snr = alone(RadioType::NrFr2);
        let fr2 = sinr_at_origin(pair(RadioType::NrFr2, None));
        let s_over_i = 16.0;
        let expected = -10.0 * (10f64.powf(-s_over_i / 10.0) + 10f64.powf(-snr / 10.0)).log10();
        assert!(
            (fr2 - expected).abs() < 1e-9,
            "{fr2} vs {expected} (SNR {snr})"
        );
        // The key restores the interference-limited mmWave cell.
        let full = sinr_at_origin(pair(RadioType::NrFr2, Some(24.0)));
        assert!((-1.0..0.0).contains(&full), "{full}");
    }

    #[test]
    fn static_ue_has_constant_rate_and_closer_is_faster() {
        let cell = CellConfig::new(1, RadioType::NrFr1, [0.0, 0.0]);
        let mut m = RadioModel::new(
            &cfg(
                vec![cell.clone()],
                vec![ue(
                    0,
                    MobilityConfig::Static {
                        position: [50.0, 0.0],
                    },
                )],
            ),
            1,
        )
        .unwrap();
        let out = m.advance(2_000_000_000);
        let changes = out
            .iter()
            .filter(|o| matches!(o, RadioOutput::Link(c) if matches!(c.action, LinkAction::Rate { .. })))
            .count();
        assert_eq!(changes, 0);
        let near = up_rate(&out, 0);
        let mut far = RadioModel::new(
            &cfg(
                vec![cell],
                vec![ue(
                    0,
                    MobilityConfig::Static {
                        position: [600.0, 0.0],
                    },
                )],
            ),
            1,
        )
        .unwrap();
        assert!(up_rate(&far.advance(1_000_000_000), 0) < near);
    }

    #[test]
    fn coverage_loss_and_return() {
        let cell = CellConfig::new(1, RadioType::NrFr2, [0.0, 0.0]);
        let mut c = cfg(
            vec![cell],
            vec![ue(
                0,
                MobilityConfig::Waypoints {
                    points: vec![[20.0, 0.0], [3000.0, 0.0]],
                    speed_mps: 100.0,
                    repeat: true,
                },
            )],
        );
        c.measurement.detect_threshold_dbm = -120.0;
        // NLOS at 28 GHz: undetectable (RSRP < -120 dBm) beyond about 600 m.
        c.channel.los = channel::LosMode::Nlos;
        let mut m = RadioModel::new(&c, 1).unwrap();
        let out = m.advance(70_000_000_000);
        let kinds: Vec<&LinkEventKind> = out
            .iter()
            .filter_map(|o| match o {
                RadioOutput::Event(e) => Some(&e.event),
                _ => None,
            })
            .filter(|k| {
                matches!(
                    k,
                    LinkEventKind::LinkUp { .. } | LinkEventKind::LinkDown { .. }
                )
            })
            .collect();
        assert!(matches!(kinds[0], LinkEventKind::LinkUp { .. }));
        assert!(matches!(
            kinds[1],
            LinkEventKind::LinkDown {
                reason: DownReason::NoCoverage,
                ..
            }
        ));
        assert!(
            matches!(kinds[2], LinkEventKind::LinkUp { .. }),
            "{kinds:?}"
        );
    }

    #[test]
    fn config_errors_name_the_field() {
        type Spoil = fn(&mut CellConfig);
        let bad_cell: [(Spoil, &str); 2] = [
            (
                |c| c.bandwidth_mhz = Some(33.0),
                "radio.cells[0].bandwidth_mhz",
            ),
            (
                |c| c.max_burst_slots = Some(0),
                "radio.cells[0].max_burst_slots",
            ),
        ];
        for (spoil, field) in bad_cell {
            let mut cell = CellConfig::new(1, RadioType::NrFr1, [0.0, 0.0]);
            spoil(&mut cell);
            let e = RadioModel::new(&cfg(vec![cell], vec![]), 1).unwrap_err();
            assert!(e.to_string().contains(field), "{e}");
        }
        let mut c = cfg(
            vec![CellConfig::new(1, RadioType::NrFr1, [0.0, 0.0])],
            vec![],
        );
        c.rrc.events[0].event = polypath_link::MeasEvent::A4;
        let e = RadioModel::new(&c, 1).unwrap_err();
        assert!(
            e.to_string().contains("radio.rrc.events[0].threshold"),
            "{e}"
        );
        let mut u = ue(
            0,
            MobilityConfig::Static {
                position: [0.0, 0.0],
            },
        );
        u.interfaces[0].initial_cell = Some(9);
        let e = RadioModel::new(
            &cfg(
                vec![CellConfig::new(1, RadioType::NrFr1, [0.0, 0.0])],
                vec![u],
            ),
            1,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("ues[0].interfaces[0].initial_cell"),
            "{e}"
        );
    }

    #[test]
    fn unknown_toml_keys_are_rejected() {
        let text = r#"{"cells": [{"id": 1, "type": "nr_fr1", "position": [0, 0], "colour": 1}], "ues": []}"#;
        let e = serde_json::from_str::<RadioConfig>(text).unwrap_err();
        assert!(e.to_string().contains("colour"), "{e}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(12))]
        /// Whatever the seed and route: outputs are time-ordered, JSON-safe, and every
        /// interruption ends (up or down) before the run does.
        #[test]
        fn outputs_are_ordered_finite_and_interruptions_end(
            seed in proptest::prelude::any::<u64>(),
            y in -200.0f64..200.0,
            speed in 5.0f64..30.0,
        ) {
            let cells = vec![
                CellConfig::new(1, RadioType::NrFr1, [0.0, 0.0]),
                CellConfig::new(2, RadioType::NrFr2, [150.0, 30.0]),
                CellConfig::new(3, RadioType::NrFr1, [400.0, 0.0]),
            ];
            let mut c = cfg(cells, vec![ue(0, MobilityConfig::Line { from: [-100.0, y], to: [500.0, y], speed_mps: speed, start_s: 0.0 })]);
            c.channel.shadowing = true;
            c.channel.los = channel::LosMode::Stochastic;
            let mut m = RadioModel::new(&c, seed).unwrap();
            let end = 600.0 / speed + 2.0;
            let out = m.advance((end * 1e9) as u64);
            proptest::prop_assert!(out.windows(2).all(|w| w[0].t_ns() <= w[1].t_ns()));
            let mut interrupted = false;
            for o in &out {
                match o {
                    RadioOutput::Event(e) => proptest::prop_assert!(e.event.is_finite()),
                    RadioOutput::Link(ch) => match ch.action {
                        LinkAction::Interrupt { .. } => interrupted = true,
                        LinkAction::Up { .. } | LinkAction::Down { .. } => interrupted = false,
                        _ => {}
                    },
                }
            }
            proptest::prop_assert!(!interrupted);
        }
    }
}
