//! The `[radio]` section of a scenario, as serde types. Every key is documented in
//! `crates/ran/README.md`; examples live under `scenarios/`.

use crate::channel::{Environment, LifiParams, LosMode};
use crate::dist::DelayDist;
use crate::mobility::{MobilityConfig, Point};
use crate::phy::{self, CqiTable};
use polypath_link::{MeasEvent, RadioType};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A configuration problem: the dotted path of the offending key and what is wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("radio.{field}: {message}")]
pub struct ConfigError {
    /// Dotted key path below `radio`, e.g. `cells[2].bandwidth_mhz`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// The radio access model configuration (`[radio]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RadioConfig {
    /// Measurement period and layer-3 filtering.
    #[serde(default)]
    pub measurement: MeasurementConfig,
    /// Channel model switches.
    #[serde(default)]
    pub channel: ChannelConfig,
    /// Handover and NR-DC procedure timing and loss mechanisms.
    #[serde(default)]
    pub handover: HandoverConfig,
    /// Measurement events configured by the network.
    #[serde(default)]
    pub rrc: RrcConfig,
    /// Throughput predictors whose outputs are emitted as `predicted_throughput` events.
    #[serde(default)]
    pub predictors: Vec<PredictorConfig>,
    /// Cells and access points.
    pub cells: Vec<CellConfig>,
    /// User equipments.
    pub ues: Vec<UeConfig>,
}

/// `[radio.measurement]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MeasurementConfig {
    /// Period at which the UE measures all cells and the model updates capacities (ms).
    pub period_ms: f64,
    /// Layer-3 filter coefficient k (TS 38.331 §5.5.3.2: a = 1/2^(k/4)); 0 disables filtering.
    pub filter_coefficient: u8,
    /// Emit a `measurement` event every this many periods (0: never).
    pub emit_every: u32,
    /// Cells weaker than this RSRP (dBm) are not detected, reported or chosen.
    pub detect_threshold_dbm: f64,
    /// While a link stays up on one cell, its capacity changes only when a multiple of
    /// this many ms has passed (held in between, as a throughput trace replayed at that
    /// granularity would be); a link coming up or moving to another cell gets its rate at
    /// once. 0: the capacity follows every measurement period.
    pub rate_hold_ms: f64,
}

impl Default for MeasurementConfig {
    fn default() -> Self {
        MeasurementConfig {
            period_ms: 40.0,
            filter_coefficient: 4,
            emit_every: 1,
            detect_threshold_dbm: -140.0,
            rate_hold_ms: 0.0,
        }
    }
}

/// `[radio.channel]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChannelConfig {
    /// LOS state of 3GPP links: `stochastic` (TR 38.901 probability), `los` or `nlos`.
    pub los: LosMode,
    /// Spatially correlated log-normal shadow fading on/off.
    pub shadowing: bool,
    /// Correlation of shadow fading between the links from one UE to different sites
    /// (0 = independent, 0.5 = 3GPP calibration value).
    pub inter_site_correlation: f64,
    /// UE receiver noise figure (dB).
    pub ue_noise_figure_db: f64,
    /// Base-station receiver noise figure (dB), for the uplink.
    pub bs_noise_figure_db: f64,
    /// UE transmit power (dBm), for the uplink.
    pub ue_tx_power_dbm: f64,
    /// Fraction of time co-channel cells transmit (interference load, 0..=1).
    pub interference_load: f64,
    /// Receiver implementation gap in dB used for CQI selection (SINR − gap vs Shannon).
    pub implementation_gap_db: f64,
    /// Path-loss exponent of the Wi-Fi log-distance model.
    pub wifi_path_loss_exponent: f64,
    /// Wi-Fi shadow-fading σ (dB).
    pub wifi_shadowing_db: f64,
    /// Wi-Fi shadow-fading correlation distance (m).
    pub wifi_shadowing_corr_m: f64,
    /// Multiplies every correlation distance of the LOS state and of shadow fading (TR
    /// 38.901's for the 3GPP cells, `wifi_shadowing_corr_m` for Wi-Fi): above 1 the
    /// channel changes more slowly along the UE's path (1 = the tables').
    pub correlation_scale: f64,
}

impl Default for ChannelConfig {
    fn default() -> Self {
        ChannelConfig {
            los: LosMode::Stochastic,
            shadowing: true,
            inter_site_correlation: 0.5,
            ue_noise_figure_db: 9.0,
            bs_noise_figure_db: 5.0,
            ue_tx_power_dbm: 23.0,
            interference_load: 1.0,
            implementation_gap_db: 1.0,
            wifi_path_loss_exponent: 3.0,
            wifi_shadowing_db: 4.0,
            wifi_shadowing_corr_m: 10.0,
            correlation_scale: 1.0,
        }
    }
}

/// A cell's longest burst of slots to one backlogged UE unless it sets `max_burst_slots`.
pub const DEFAULT_MAX_BURST_SLOTS: u32 = 40;

/// What happens to the packets the source cell had in flight when the UE releases its
/// link-layer context at handover execution (M2HO finding 2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContextReleaseConfig {
    /// Probability that a handover leaves a gap (M2HO: duplicate ACKs in 18.4 % of handovers).
    pub gap_probability: f64,
    /// Bytes at the head of the link queue that are in the source's RLC/HARQ window.
    pub window_bytes: u64,
    /// Largest gap in packets (uniform 1..=max).
    pub max_gap_packets: u32,
    /// Probability that a gap packet is delivered later by the target (reordered) rather
    /// than lost.
    pub redeliver_probability: f64,
}

impl Default for ContextReleaseConfig {
    fn default() -> Self {
        ContextReleaseConfig {
            gap_probability: 0.184,
            window_bytes: 64_000,
            max_gap_packets: 8,
            redeliver_probability: 0.5,
        }
    }
}

/// `[radio.handover]`: procedure timing (each a [`DelayDist`]) and loss mechanisms.
/// Defaults from M2HO §3.3/§4.2/§4.3: interruption 27.0 ms mean, command→execution 32.7 ms
/// mean, report→execution 178.9 ms mean (so report→command 146.2 ms) and at most 310.2 ms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HandoverConfig {
    /// Measurement report to handover command (network decision and preparation).
    pub report_to_command: DelayDist,
    /// Handover command to execution (UE leaves the source).
    pub command_to_execution: DelayDist,
    /// Execution to random access complete on the target (data interruption).
    pub interruption: DelayDist,
    /// Report to SN addition complete (random access on the new PSCell).
    pub sn_addition: DelayDist,
    /// Report to SN release.
    pub sn_release: DelayDist,
    /// Wi-Fi/LiFi re-association interruption.
    pub wlan_reassociation: DelayDist,
    /// Source-cell link-layer context release.
    pub context_release: ContextReleaseConfig,
    /// An A1 report (the serving cell became good again) cancels a handover the network
    /// has decided on but not yet commanded: the handovers M2HO's first fallback is for
    /// (M2HO Sec. 4.2). Off by default.
    pub cancel_on_a1: bool,
    /// Radio link failure on a serving cell whose downlink quality stays bad: a fall back
    /// without a measurement report (M2HO Sec. 6.3.1). Off by default.
    pub radio_link_failure: Option<RlfConfig>,
}

/// Radio link failure (TS 38.331 5.3.10.3, simplified): the serving cell's SINR below
/// `qout_sinr_db` (out of sync, N310 in a row) for `t310_ms` declares a failure; the UE
/// re-establishes on the strongest detected cell after an interruption, with no report and
/// no handover command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RlfConfig {
    /// Out-of-sync SINR threshold, dB (Qout: about 10 % PDCCH block errors).
    pub qout_sinr_db: f64,
    /// Time out of sync before the failure is declared, ms (T310; 1000 ms, a common
    /// operator setting among the values TS 38.331 allows).
    pub t310_ms: f64,
    /// Serving cell types the failure applies to (default: mmWave).
    pub rats: Vec<RadioType>,
}

impl Default for RlfConfig {
    fn default() -> Self {
        RlfConfig {
            qout_sinr_db: -8.0,
            t310_ms: 1000.0,
            rats: vec![RadioType::NrFr2],
        }
    }
}

impl Default for HandoverConfig {
    fn default() -> Self {
        HandoverConfig {
            // 146.2 + 32.7 = 178.9 ms mean; 146.2 + 131.4 + 32.7 = 310.3 ms max.
            report_to_command: DelayDist::normal_symmetric(146.2, 45.0, 131.4),
            command_to_execution: DelayDist::normal_symmetric(32.7, 8.0, 20.0),
            interruption: DelayDist::normal_symmetric(27.0, 6.0, 15.0),
            sn_addition: DelayDist::normal_symmetric(120.0, 30.0, 60.0),
            sn_release: DelayDist::Constant { ms: 20.0 },
            wlan_reassociation: DelayDist::normal_symmetric(60.0, 15.0, 40.0),
            context_release: ContextReleaseConfig::default(),
            cancel_on_a1: false,
            radio_link_failure: None,
        }
    }
}

/// `[radio.rrc]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RrcConfig {
    /// Configured measurement events (`[[radio.rrc.events]]`). Default: one A3 event
    /// (offset 3 dB, hysteresis 1 dB, TTT 160 ms) that triggers handover.
    #[serde(default = "RrcConfig::default_events")]
    pub events: Vec<EventConfig>,
}

impl RrcConfig {
    fn default_events() -> Vec<EventConfig> {
        vec![EventConfig {
            id: 1,
            event: MeasEvent::A3,
            offset_db: 3.0,
            action: EventAction::Handover,
            ..EventConfig::base()
        }]
    }
}

impl Default for RrcConfig {
    fn default() -> Self {
        RrcConfig {
            events: Self::default_events(),
        }
    }
}

/// The measurement quantity an event compares (TS 38.331 `triggerQuantity`).
#[derive(Debug, Copy, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Quantity {
    /// RSRP (dBm).
    #[default]
    Rsrp,
    /// RSRQ (dB).
    Rsrq,
    /// SINR (dB).
    Sinr,
}

/// Which cell group an event is evaluated on.
#[derive(Debug, Copy, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CellGroup {
    /// Master cell group: serving cell = the MN's PCell.
    #[default]
    Mcg,
    /// Secondary cell group: serving cell = the SN's PSCell (NR-DC only).
    Scg,
}

/// What the network does when it receives a report of this event.
#[derive(Debug, Copy, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventAction {
    /// Nothing: report only (e.g. the A4/A2 hints LAMP5G uses for path management).
    #[default]
    None,
    /// Handover of this cell group to the best reported (or, for A2, best measured)
    /// neighbour. On the MCG of a DC UE the SN is released; on the SCG this is an SN change.
    Handover,
    /// Inter-MN handover without SN change (TS 37.340 §10.7.2): the MCG moves, the SN stays.
    MnHandoverKeepSn,
    /// Add a secondary node on the best reported neighbour (NR-DC, when no SN is present).
    SnAddition,
    /// Release the secondary node.
    SnRelease,
}

/// One `[[radio.rrc.events]]` entry (a `ReportConfigNR` with event trigger, bound to a
/// measurement identity).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventConfig {
    /// Measurement identity (reported in events and reports; unique).
    pub id: u32,
    /// Event type: `A1` .. `A5`, `B1`, `B2`.
    #[serde(rename = "type")]
    pub event: MeasEvent,
    /// Trigger quantity.
    #[serde(default)]
    pub quantity: Quantity,
    /// Threshold for A1, A2, A4, B1 (dBm for RSRP, dB otherwise).
    #[serde(default)]
    pub threshold: Option<f64>,
    /// Threshold1 (serving) for A5, B2.
    #[serde(default)]
    pub threshold1: Option<f64>,
    /// Threshold2 (neighbour) for A5, B2.
    #[serde(default)]
    pub threshold2: Option<f64>,
    /// A3 offset `Off` (dB).
    #[serde(default)]
    pub offset_db: f64,
    /// Hysteresis `Hys` (dB).
    #[serde(default = "EventConfig::default_hysteresis")]
    pub hysteresis_db: f64,
    /// Time to trigger (ms).
    #[serde(default = "EventConfig::default_ttt")]
    pub time_to_trigger_ms: f64,
    /// Report interval while the event stays triggered (ms).
    #[serde(default = "EventConfig::default_interval")]
    pub report_interval_ms: f64,
    /// Number of reports per triggering (0 = unlimited).
    #[serde(default = "EventConfig::default_amount")]
    pub report_amount: u32,
    /// Also report when a cell leaves the triggered list.
    #[serde(default)]
    pub report_on_leave: bool,
    /// Serving-cell types the event applies to (empty: all).
    #[serde(default)]
    pub serving_types: Vec<RadioType>,
    /// Neighbour types considered (empty: same RAT family as serving for A events, other
    /// 3GPP RAT for B events).
    #[serde(default)]
    pub targets: Vec<RadioType>,
    /// Cell group the event is evaluated on.
    #[serde(default)]
    pub group: CellGroup,
    /// What the network does on a report.
    #[serde(default)]
    pub action: EventAction,
}

impl EventConfig {
    fn default_hysteresis() -> f64 {
        1.0
    }
    fn default_ttt() -> f64 {
        160.0
    }
    fn default_interval() -> f64 {
        240.0
    }
    fn default_amount() -> u32 {
        1
    }

    /// An event with every optional key at its default (id 1, A3).
    pub fn base() -> Self {
        EventConfig {
            id: 1,
            event: MeasEvent::A3,
            quantity: Quantity::Rsrp,
            threshold: None,
            threshold1: None,
            threshold2: None,
            offset_db: 0.0,
            hysteresis_db: Self::default_hysteresis(),
            time_to_trigger_ms: Self::default_ttt(),
            report_interval_ms: Self::default_interval(),
            report_amount: Self::default_amount(),
            report_on_leave: false,
            serving_types: Vec::new(),
            targets: Vec::new(),
            group: CellGroup::Mcg,
            action: EventAction::None,
        }
    }

    /// [`EventConfig::targets_type`] with the serving type fixed.
    pub fn targets_type_fn(&self, s: RadioType) -> impl Fn(RadioType) -> bool + '_ {
        move |n| self.targets_type(s, n)
    }

    /// Whether a neighbour of type `n` is a candidate when the serving cell is of type `s`.
    pub fn targets_type(&self, s: RadioType, n: RadioType) -> bool {
        if !self.targets.is_empty() {
            return self.targets.contains(&n);
        }
        if !n.is_3gpp() {
            return false;
        }
        let same_family = s.is_nr() == n.is_nr();
        match self.event {
            MeasEvent::B1 | MeasEvent::B2 => !same_family,
            _ => same_family,
        }
    }
}

/// One `[[radio.cells]]` entry: a cell, Wi-Fi access point or LiFi access point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CellConfig {
    /// Cell identity (unique).
    pub id: u32,
    /// `nr_fr1`, `nr_fr2`, `lte`, `wifi` or `lifi`.
    #[serde(rename = "type")]
    pub rat: RadioType,
    /// Position in metres.
    pub position: Point,
    /// TR 38.901 scenario of a 3GPP cell's links: `umi` (street-canyon small cell, the
    /// default) or `uma` (macro cell above the rooftops).
    #[serde(default)]
    pub environment: Option<Environment>,
    /// Antenna height (m). Default 10 m (UMi), 25 m (UMa), 3 m for Wi-Fi/LiFi (ceiling).
    #[serde(default)]
    pub height_m: Option<f64>,
    /// Carrier frequency (GHz). Default 3.5 (FR1), 28 (FR2), 1.8 (LTE), 5.2 (Wi-Fi).
    #[serde(default)]
    pub carrier_ghz: Option<f64>,
    /// Channel bandwidth (MHz). Default 100 (FR1, FR2), 20 (LTE, LiFi), 80 (Wi-Fi).
    #[serde(default)]
    pub bandwidth_mhz: Option<f64>,
    /// Subcarrier spacing (kHz), numerology μ = log2(scs/15); slot = 1 ms / 2^μ.
    /// Default 30 (FR1), 120 (FR2), 15 otherwise.
    #[serde(default)]
    pub scs_khz: Option<u32>,
    /// Resource blocks; default from the 3GPP bandwidth tables.
    #[serde(default)]
    pub n_rb: Option<u16>,
    /// Total transmit power (dBm). Default 44 (FR1), 35 (FR2), 46 (LTE), 20 (Wi-Fi).
    #[serde(default)]
    pub tx_power_dbm: Option<f64>,
    /// Combined antenna/beamforming gain (dBi). Default 8 (FR1, LTE), 24 (FR2), 3 (Wi-Fi).
    #[serde(default)]
    pub antenna_gain_dbi: Option<f64>,
    /// Combined antenna gain (dBi) with which this cell's signal reaches a UE it does not
    /// serve: the gain its interference arrives with. Default `antenna_gain_dbi`, except
    /// FR2 (8, or the antenna gain if lower): a mmWave cell steers its beam to its own UEs
    /// and the UE steers its beam to its serving cell, so interference gets neither array
    /// gain, only the element gain.
    #[serde(default)]
    pub interference_gain_dbi: Option<f64>,
    /// Maximum MIMO layers. Default 4 (FR1), 2 otherwise, 1 for LiFi.
    #[serde(default)]
    pub mimo_layers: Option<u8>,
    /// Overhead fraction OH of TS 38.306 (default 0.14 FR1, 0.18 FR2, 0.25 LTE, 0.2 others).
    #[serde(default)]
    pub overhead: Option<f64>,
    /// Downlink fraction of air time (TDD pattern); the uplink gets the rest. Default 0.75
    /// for NR and Wi-Fi/LiFi, 1.0 for LTE (FDD: the uplink has its own carrier).
    #[serde(default)]
    pub dl_fraction: Option<f64>,
    /// CQI table (`table1` 64QAM or `table2` 256QAM; default table2, table1 for LTE).
    #[serde(default)]
    pub cqi_table: Option<CqiTable>,
    /// Operator (UEs attach only to their operator's cells). Default `default`.
    #[serde(default = "CellConfig::default_operator")]
    pub operator: String,
    /// The most of the cell's resources one UE can get (background load); the modelled
    /// UEs attached to a cell share it equally: share = ue_share / attached UEs.
    #[serde(default = "CellConfig::default_share")]
    pub ue_share: f64,
    /// How the cell gives a UE its `ue_share`: `"slots"` (default) or `"rate"`.
    #[serde(default)]
    pub share_as: ShareAs,
    /// Per-UE downlink buffer in the cell (bytes), drop-tail. Default 1 MB (FR1),
    /// 4 MB (FR2), 0.5 MB (LTE, LiFi), 1 MB (Wi-Fi).
    #[serde(default)]
    pub buffer_bytes: Option<u64>,
    /// Longest burst of slots the cell gives one backlogged UE before it serves the others
    /// ([`crate::reflink::SlotScheduler`]); the gap after a burst grows with its length, so
    /// this also bounds the gap. Default 40.
    #[serde(default)]
    pub max_burst_slots: Option<u32>,
    /// Cell individual offset Ocn/Ocp (dB).
    #[serde(default)]
    pub cio_db: f64,
    /// Frequency-specific offset Ofn/Ofp (dB).
    #[serde(default)]
    pub offset_freq_db: f64,
    /// Wi-Fi: hard coverage limit (m), e.g. walls; none by default.
    #[serde(default)]
    pub range_m: Option<f64>,
    /// LiFi luminaire and receiver parameters.
    #[serde(default)]
    pub lifi: Option<LifiParams>,
}

impl CellConfig {
    fn default_operator() -> String {
        "default".into()
    }
    fn default_share() -> f64 {
        1.0
    }

    /// A cell of type `rat` at `position` with every optional key at its default.
    pub fn new(id: u32, rat: RadioType, position: Point) -> Self {
        CellConfig {
            id,
            rat,
            position,
            environment: None,
            height_m: None,
            carrier_ghz: None,
            bandwidth_mhz: None,
            scs_khz: None,
            n_rb: None,
            tx_power_dbm: None,
            antenna_gain_dbi: None,
            interference_gain_dbi: None,
            mimo_layers: None,
            overhead: None,
            dl_fraction: None,
            cqi_table: None,
            operator: Self::default_operator(),
            ue_share: Self::default_share(),
            share_as: ShareAs::default(),
            buffer_bytes: None,
            max_burst_slots: None,
            cio_db: 0.0,
            offset_freq_db: 0.0,
            range_m: None,
            lifi: None,
        }
    }
}

/// How a cell gives one UE its `ue_share` of its resources.
#[derive(Debug, Copy, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShareAs {
    /// A share of the slots: the UE gets every RB of a slot, in bursts, and waits while
    /// the cell serves the others ([`crate::reflink::SlotScheduler`]): a loaded cell.
    #[default]
    Slots,
    /// A share of every slot's bytes: the UE is served in every slot, each RB carrying
    /// `ue_share` of the bytes it carries at the UE's MCS, with no turns of other UEs to
    /// wait for: the same cell scaled down (an emulator that cannot carry a whole cell's
    /// rate). A burst then lasts as long as the UE's queue holds data.
    Rate,
}

/// A cell with every default filled in and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct CellParams {
    /// Identity.
    pub id: u32,
    /// Radio type.
    pub rat: RadioType,
    /// Position.
    pub position: Point,
    /// TR 38.901 scenario of the cell's links (3GPP cells; `Umi` for Wi-Fi and LiFi, which never use it).
    pub environment: Environment,
    /// Antenna height (m).
    pub height_m: f64,
    /// Carrier (GHz).
    pub carrier_ghz: f64,
    /// Bandwidth (Hz).
    pub bandwidth_hz: f64,
    /// Subcarrier spacing (kHz).
    pub scs_khz: u32,
    /// Resource blocks.
    pub n_rb: u16,
    /// Slot length (ns).
    pub slot_ns: u64,
    /// Transmit power (dBm).
    pub tx_power_dbm: f64,
    /// Antenna gain (dBi).
    pub antenna_gain_dbi: f64,
    /// Antenna gain (dBi) of this cell's interference at UEs it does not serve.
    pub interference_gain_dbi: f64,
    /// Maximum MIMO layers.
    pub mimo_layers: u8,
    /// Overhead fraction.
    pub overhead: f64,
    /// Downlink air-time fraction.
    pub dl_fraction: f64,
    /// CQI table.
    pub cqi_table: CqiTable,
    /// Operator.
    pub operator: String,
    /// Per-UE share cap.
    pub ue_share: f64,
    /// How the share is given.
    pub share_as: ShareAs,
    /// Per-UE buffer (bytes).
    pub buffer_bytes: u64,
    /// Longest burst of slots to one backlogged UE.
    pub max_burst_slots: u32,
    /// Ocn (dB).
    pub cio_db: f64,
    /// Ofn (dB).
    pub offset_freq_db: f64,
    /// Wi-Fi range limit (m).
    pub range_m: Option<f64>,
    /// LiFi parameters (LiFi cells only).
    pub lifi: LifiParams,
}

impl CellParams {
    /// Fills in defaults and validates; `at` is the key path used in errors.
    pub fn resolve(c: &CellConfig, at: &str) -> Result<CellParams, ConfigError> {
        use RadioType::*;
        let rat = c.rat;
        let err = |k: &str, m: &str| ConfigError::new(format!("{at}.{k}"), m);
        let finite_pos = |v: f64| v.is_finite() && v > 0.0;
        if c.environment.is_some() && !rat.is_3gpp() {
            return Err(err("environment", "applies to 3GPP cells only"));
        }
        let environment = c.environment.unwrap_or_default();
        let height_m = c.height_m.unwrap_or(if matches!(rat, Wifi | Lifi) {
            3.0
        } else {
            environment.default_height_m()
        });
        if !finite_pos(height_m) {
            return Err(err("height_m", "must be positive"));
        }
        let carrier_ghz = c.carrier_ghz.unwrap_or(match rat {
            NrFr1 => 3.5,
            NrFr2 => 28.0,
            Lte => 1.8,
            Wifi => 5.2,
            Lifi => 5.0e5, // ~600 nm light; only used for reporting
        });
        if !finite_pos(carrier_ghz) {
            return Err(err("carrier_ghz", "must be positive"));
        }
        if rat.is_3gpp() && !(0.5..=100.0).contains(&carrier_ghz) {
            return Err(err(
                "carrier_ghz",
                "TR 38.901 UMi and UMa are valid for 0.5..=100 GHz",
            ));
        }
        let bandwidth_mhz = c.bandwidth_mhz.unwrap_or(match rat {
            NrFr1 | NrFr2 => 100.0,
            Lte | Lifi => 20.0,
            Wifi => 80.0,
        });
        if !finite_pos(bandwidth_mhz) {
            return Err(err("bandwidth_mhz", "must be positive"));
        }
        let scs_khz = c.scs_khz.unwrap_or(match rat {
            NrFr1 => 30,
            NrFr2 => 120,
            _ => 15,
        });
        if ![15, 30, 60, 120, 240].contains(&scs_khz) {
            return Err(err("scs_khz", "must be 15, 30, 60, 120 or 240"));
        }
        let n_rb = match c.n_rb {
            Some(n) if n > 0 => n,
            Some(_) => return Err(err("n_rb", "must be positive")),
            None if rat.is_3gpp() => phy::n_rb(rat, bandwidth_mhz, scs_khz).ok_or_else(|| {
                err(
                    "bandwidth_mhz",
                    "no RB count in the TS 38.101/36.101 tables for this bandwidth and SCS; set n_rb",
                )
            })?,
            // Wi-Fi/LiFi: a nominal grid of 180 kHz blocks, for RB-level reporting only.
            None => ((bandwidth_mhz * 1e3 / 180.0).floor() as u16).max(1),
        };
        let tx_power_dbm = c.tx_power_dbm.unwrap_or(match rat {
            NrFr1 => 44.0,
            NrFr2 => 35.0,
            Lte => 46.0,
            Wifi | Lifi => 20.0,
        });
        let antenna_gain_dbi = c.antenna_gain_dbi.unwrap_or(match rat {
            NrFr1 | Lte => 8.0,
            NrFr2 => 24.0,
            Wifi => 3.0,
            Lifi => 0.0,
        });
        if !tx_power_dbm.is_finite() {
            return Err(err("tx_power_dbm", "must be a number"));
        }
        if !antenna_gain_dbi.is_finite() {
            return Err(err("antenna_gain_dbi", "must be a number"));
        }
        // FR2: the element gain alone, TR 38.901 Table 7.3-1 (G_E,max = 8 dBi), never more
        // than the cell's own gain.
        let interference_gain_dbi = c.interference_gain_dbi.unwrap_or(match rat {
            NrFr2 => antenna_gain_dbi.min(8.0),
            _ => antenna_gain_dbi,
        });
        if !interference_gain_dbi.is_finite() {
            return Err(err("interference_gain_dbi", "must be a number"));
        }
        let mimo_layers = c.mimo_layers.unwrap_or(match rat {
            NrFr1 => 4,
            Lifi => 1,
            _ => 2,
        });
        if !(1..=8).contains(&mimo_layers) {
            return Err(err("mimo_layers", "must be 1..=8"));
        }
        let overhead = c.overhead.unwrap_or(phy::default_overhead(rat));
        if !(0.0..1.0).contains(&overhead) {
            return Err(err("overhead", "must be in [0, 1)"));
        }
        let dl_fraction = c.dl_fraction.unwrap_or(if rat == Lte { 1.0 } else { 0.75 });
        if !(dl_fraction > 0.0 && dl_fraction <= 1.0) {
            return Err(err("dl_fraction", "must be in (0, 1]"));
        }
        let cqi_table = c.cqi_table.unwrap_or(if rat == Lte {
            CqiTable::Table1
        } else {
            CqiTable::Table2
        });
        if !(c.ue_share > 0.0 && c.ue_share <= 1.0) {
            return Err(err("ue_share", "must be in (0, 1]"));
        }
        let buffer_bytes = c.buffer_bytes.unwrap_or(match rat {
            NrFr1 | Wifi => 1_000_000,
            NrFr2 => 4_000_000,
            Lte | Lifi => 500_000,
        });
        if buffer_bytes == 0 {
            return Err(err("buffer_bytes", "must be positive"));
        }
        let max_burst_slots = c.max_burst_slots.unwrap_or(DEFAULT_MAX_BURST_SLOTS);
        if max_burst_slots == 0 {
            return Err(err("max_burst_slots", "must be positive"));
        }
        if !c.cio_db.is_finite() || !c.offset_freq_db.is_finite() {
            return Err(err("cio_db", "offsets must be numbers"));
        }
        if let Some(r) = c.range_m
            && !finite_pos(r)
        {
            return Err(err("range_m", "must be positive"));
        }
        if !(c.position[0].is_finite() && c.position[1].is_finite()) {
            return Err(err("position", "must be finite"));
        }
        let lifi = c.lifi.clone().unwrap_or_default();
        lifi.validate().map_err(|m| err("lifi", &m))?;
        Ok(CellParams {
            id: c.id,
            rat,
            position: c.position,
            environment,
            height_m,
            carrier_ghz,
            bandwidth_hz: bandwidth_mhz * 1e6,
            scs_khz,
            n_rb,
            slot_ns: phy::slot_ns(scs_khz),
            tx_power_dbm,
            antenna_gain_dbi,
            interference_gain_dbi,
            mimo_layers,
            overhead,
            dl_fraction,
            cqi_table,
            operator: c.operator.clone(),
            ue_share: c.ue_share,
            share_as: c.share_as,
            buffer_bytes,
            max_burst_slots,
            cio_db: c.cio_db,
            offset_freq_db: c.offset_freq_db,
            range_m: c.range_m,
            lifi,
        })
    }
}

/// One `[[radio.ues]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UeConfig {
    /// UE identity (unique).
    pub id: u32,
    /// Antenna height (m); TR 38.901 UMi allows 1.5..=22.5.
    #[serde(default = "UeConfig::default_height")]
    pub height_m: f64,
    /// How the UE moves.
    pub mobility: MobilityConfig,
    /// Radio interfaces, in order; each becomes one path (a DC cellular interface two).
    pub interfaces: Vec<InterfaceConfig>,
}

impl UeConfig {
    fn default_height() -> f64 {
        1.5
    }
}

/// The kind of a UE interface.
#[derive(Debug, Copy, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InterfaceKind {
    /// A 3GPP modem (NR and/or LTE) with RRC-driven handover.
    Cellular,
    /// A Wi-Fi station.
    Wifi,
    /// A LiFi receiver.
    Lifi,
}

/// One `[[radio.ues.interfaces]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterfaceConfig {
    /// Interface name (used for the path name; the SCG path gets `-scg` appended).
    pub name: String,
    /// `cellular`, `wifi` or `lifi`.
    pub kind: InterfaceKind,
    /// Operator whose cells this modem uses (cellular; default `default`).
    #[serde(default)]
    pub operator: Option<String>,
    /// Cell types the modem can be served by (cellular; default all 3GPP types).
    #[serde(default)]
    pub rats: Vec<RadioType>,
    /// NR dual connectivity: the interface becomes two paths, MCG and SCG.
    #[serde(default)]
    pub dual_connectivity: bool,
    /// Initial serving cell (MN PCell); default: strongest allowed cell.
    #[serde(default)]
    pub initial_cell: Option<u32>,
    /// Initial SN PSCell (DC only); default: none until an SN-addition event.
    #[serde(default)]
    pub initial_sn: Option<u32>,
    /// Cellular: measurement events for this modem, replacing `[radio.rrc] events` (the
    /// network may configure UEs differently, e.g. a DC UE and a single-connectivity UE).
    #[serde(default)]
    pub events: Option<Vec<EventConfig>>,
    /// Wi-Fi/LiFi: minimum SINR (dB) to associate / stay associated.
    #[serde(default = "InterfaceConfig::default_min_sinr")]
    pub min_sinr_db: f64,
    /// Wi-Fi/LiFi: roam to another AP when it is this much better (dB).
    #[serde(default = "InterfaceConfig::default_roam")]
    pub roam_hysteresis_db: f64,
}

impl InterfaceConfig {
    fn default_min_sinr() -> f64 {
        3.0
    }
    fn default_roam() -> f64 {
        6.0
    }

    /// A cellular interface with defaults.
    pub fn cellular(name: &str) -> Self {
        InterfaceConfig {
            name: name.into(),
            kind: InterfaceKind::Cellular,
            operator: None,
            rats: Vec::new(),
            dual_connectivity: false,
            initial_cell: None,
            initial_sn: None,
            events: None,
            min_sinr_db: Self::default_min_sinr(),
            roam_hysteresis_db: Self::default_roam(),
        }
    }
}

/// The kind of throughput predictor.
#[derive(Debug, Copy, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PredictorKind {
    /// The current true capacity.
    Oracle,
    /// The true capacity × bias × log-normal noise.
    NoisyOracle,
    /// Harmonic mean of the last `window` rate samples.
    HarmonicMean,
    /// Exponentially weighted moving average of rate samples.
    Ewma,
    /// Gradient-boosted trees loaded from `model`.
    Gbt,
}

/// One `[[radio.predictors]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PredictorConfig {
    /// Which predictor.
    pub kind: PredictorKind,
    /// Name in the emitted events (default: the kind).
    #[serde(default)]
    pub name: Option<String>,
    /// How often a prediction is emitted and a rate sample taken (ms).
    #[serde(default = "PredictorConfig::default_period")]
    pub period_ms: f64,
    /// Noisy oracle: multiplicative bias (1.0 = unbiased; 0.5 = under-estimates by half).
    #[serde(default = "PredictorConfig::default_bias")]
    pub bias: f64,
    /// Noisy oracle: σ of the log-normal noise (natural log units; 0 = none).
    #[serde(default)]
    pub noise_sigma: f64,
    /// Harmonic mean: number of samples.
    #[serde(default = "PredictorConfig::default_window")]
    pub window: usize,
    /// EWMA: weight of the newest sample.
    #[serde(default = "PredictorConfig::default_alpha")]
    pub alpha: f64,
    /// GBT: model JSON file (relative paths resolved by the scenario loader; default the
    /// model shipped with the crate).
    #[serde(default)]
    pub model: Option<std::path::PathBuf>,
}

impl PredictorConfig {
    fn default_period() -> f64 {
        1000.0
    }
    fn default_bias() -> f64 {
        1.0
    }
    fn default_window() -> usize {
        5
    }
    fn default_alpha() -> f64 {
        0.3
    }

    /// Checks the ranges serde cannot; on error, the offending key (`period_ms`, `bias`,
    /// `noise_sigma`, `window`, `alpha`) and what is wrong.
    pub fn check(&self) -> Result<(), (&'static str, &'static str)> {
        if !(self.period_ms.is_finite() && self.period_ms >= 1.0) {
            return Err(("period_ms", "must be at least 1 ms"));
        }
        if !(self.bias.is_finite() && self.bias > 0.0) {
            return Err(("bias", "must be positive"));
        }
        if !(self.noise_sigma.is_finite() && self.noise_sigma >= 0.0) {
            return Err(("noise_sigma", "must be at least 0"));
        }
        if self.window == 0 {
            return Err(("window", "must be positive"));
        }
        if !(self.alpha > 0.0 && self.alpha <= 1.0) {
            return Err(("alpha", "must be in (0, 1]"));
        }
        Ok(())
    }

    /// A predictor of `kind` with defaults.
    pub fn new(kind: PredictorKind) -> Self {
        PredictorConfig {
            kind,
            name: None,
            period_ms: Self::default_period(),
            bias: Self::default_bias(),
            noise_sigma: 0.0,
            window: Self::default_window(),
            alpha: Self::default_alpha(),
            model: None,
        }
    }
}

impl RadioConfig {
    /// Makes relative file paths (GPS tracks, predictor models) relative to `base`.
    pub fn resolve_paths(&mut self, base: &Path) {
        for ue in &mut self.ues {
            if let MobilityConfig::GpsTrack { file, .. } = &mut ue.mobility
                && file.is_relative()
            {
                *file = base.join(&*file);
            }
        }
        for p in &mut self.predictors {
            if let Some(m) = &mut p.model
                && m.is_relative()
            {
                *m = base.join(&*m);
            }
        }
    }

    /// Checks everything that serde cannot: ranges, references, uniqueness.
    pub fn validate(&self) -> Result<Vec<CellParams>, ConfigError> {
        let m = &self.measurement;
        if !(m.period_ms.is_finite() && m.period_ms >= 1.0) {
            return Err(ConfigError::new(
                "measurement.period_ms",
                "must be at least 1 ms",
            ));
        }
        if !(m.rate_hold_ms.is_finite() && m.rate_hold_ms >= 0.0) {
            return Err(ConfigError::new(
                "measurement.rate_hold_ms",
                "must be a finite number of ms, 0 or more",
            ));
        }
        if m.filter_coefficient > 19 {
            return Err(ConfigError::new(
                "measurement.filter_coefficient",
                "TS 38.331 FilterCoefficient is 0..=19",
            ));
        }
        let c = &self.channel;
        if !(0.0..=1.0).contains(&c.inter_site_correlation) {
            return Err(ConfigError::new(
                "channel.inter_site_correlation",
                "must be in [0, 1]",
            ));
        }
        if !(0.0..=1.0).contains(&c.interference_load) {
            return Err(ConfigError::new(
                "channel.interference_load",
                "must be in [0, 1]",
            ));
        }
        if !(c.correlation_scale.is_finite() && c.correlation_scale > 0.0) {
            return Err(ConfigError::new(
                "channel.correlation_scale",
                "must be a finite number above 0",
            ));
        }
        let h = &self.handover;
        for (k, d) in [
            ("report_to_command", &h.report_to_command),
            ("command_to_execution", &h.command_to_execution),
            ("interruption", &h.interruption),
            ("sn_addition", &h.sn_addition),
            ("sn_release", &h.sn_release),
            ("wlan_reassociation", &h.wlan_reassociation),
        ] {
            d.validate()
                .map_err(|e| ConfigError::new(format!("handover.{k}"), e))?;
        }
        let cr = &h.context_release;
        for (k, p) in [
            ("gap_probability", cr.gap_probability),
            ("redeliver_probability", cr.redeliver_probability),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(ConfigError::new(
                    format!("handover.context_release.{k}"),
                    "must be a probability",
                ));
            }
        }
        if let Some(r) = &h.radio_link_failure
            && !(r.t310_ms.is_finite() && r.t310_ms >= 0.0 && r.qout_sinr_db.is_finite())
        {
            return Err(ConfigError::new(
                "handover.radio_link_failure",
                "t310_ms must be a non-negative number and qout_sinr_db a number",
            ));
        }
        validate_events(&self.rrc.events, "rrc.events")?;
        let mut cells = Vec::with_capacity(self.cells.len());
        let mut cell_ids = std::collections::BTreeSet::new();
        for (i, c) in self.cells.iter().enumerate() {
            if !cell_ids.insert(c.id) {
                return Err(ConfigError::new(format!("cells[{i}].id"), "duplicate id"));
            }
            cells.push(CellParams::resolve(c, &format!("cells[{i}]"))?);
        }
        let mut ue_ids = std::collections::BTreeSet::new();
        for (i, u) in self.ues.iter().enumerate() {
            let at = format!("ues[{i}]");
            if !ue_ids.insert(u.id) {
                return Err(ConfigError::new(format!("{at}.id"), "duplicate id"));
            }
            if !(1.0..=22.5).contains(&u.height_m) {
                return Err(ConfigError::new(
                    format!("{at}.height_m"),
                    "must be in 1..=22.5 m",
                ));
            }
            let mut paths = 0usize;
            for (j, f) in u.interfaces.iter().enumerate() {
                let at = format!("{at}.interfaces[{j}]");
                paths += if f.dual_connectivity { 2 } else { 1 };
                if f.kind != InterfaceKind::Cellular
                    && (f.dual_connectivity || f.initial_cell.is_some() || f.initial_sn.is_some())
                {
                    return Err(ConfigError::new(
                        format!("{at}.kind"),
                        "dual_connectivity / initial_cell / initial_sn are for cellular interfaces",
                    ));
                }
                if let Some(evs) = &f.events {
                    validate_events(evs, &format!("{at}.events"))?;
                }
                if f.initial_sn.is_some() && !f.dual_connectivity {
                    return Err(ConfigError::new(
                        format!("{at}.initial_sn"),
                        "needs dual_connectivity",
                    ));
                }
                for (k, id) in [
                    ("initial_cell", f.initial_cell),
                    ("initial_sn", f.initial_sn),
                ] {
                    if let Some(id) = id
                        && !cell_ids.contains(&id)
                    {
                        return Err(ConfigError::new(
                            format!("{at}.{k}"),
                            format!("no cell {id}"),
                        ));
                    }
                }
                if f.rats.iter().any(|r| !r.is_3gpp()) {
                    return Err(ConfigError::new(
                        format!("{at}.rats"),
                        "only nr_fr1, nr_fr2, lte",
                    ));
                }
                if !f.min_sinr_db.is_finite()
                    || !f.roam_hysteresis_db.is_finite()
                    || f.roam_hysteresis_db < 0.0
                {
                    return Err(ConfigError::new(
                        format!("{at}.min_sinr_db"),
                        "must be numbers, hysteresis >= 0",
                    ));
                }
            }
            if paths > u16::MAX as usize {
                return Err(ConfigError::new(format!("{at}.interfaces"), "too many"));
            }
        }
        for (i, p) in self.predictors.iter().enumerate() {
            p.check().map_err(|(key, message)| {
                ConfigError::new(format!("predictors[{i}].{key}"), message)
            })?;
        }
        Ok(cells)
    }
}

fn validate_events(events: &[EventConfig], at: &str) -> Result<(), ConfigError> {
    let mut ids = std::collections::BTreeSet::new();
    for (i, e) in events.iter().enumerate() {
        let at = format!("{at}[{i}]");
        if !ids.insert(e.id) {
            return Err(ConfigError::new(format!("{at}.id"), "duplicate id"));
        }
        let need = |k: &str, v: Option<f64>| {
            v.filter(|x| x.is_finite()).map(|_| ()).ok_or_else(|| {
                ConfigError::new(format!("{at}.{k}"), "required for this event type")
            })
        };
        match e.event {
            MeasEvent::A1 | MeasEvent::A2 | MeasEvent::A4 | MeasEvent::B1 => {
                need("threshold", e.threshold)?
            }
            MeasEvent::A5 | MeasEvent::B2 => {
                need("threshold1", e.threshold1)?;
                need("threshold2", e.threshold2)?;
            }
            MeasEvent::A3 => {}
        }
        for (k, v) in [
            ("offset_db", e.offset_db),
            ("hysteresis_db", e.hysteresis_db),
            ("time_to_trigger_ms", e.time_to_trigger_ms),
            ("report_interval_ms", e.report_interval_ms),
        ] {
            if !v.is_finite() || (k != "offset_db" && v < 0.0) {
                return Err(ConfigError::new(
                    format!("{at}.{k}"),
                    "must be a non-negative number",
                ));
            }
        }
        if e.report_interval_ms < 1.0 {
            return Err(ConfigError::new(
                format!("{at}.report_interval_ms"),
                "must be at least 1 ms",
            ));
        }
        let needs_neighbour = matches!(
            e.action,
            EventAction::Handover | EventAction::MnHandoverKeepSn | EventAction::SnAddition
        );
        if needs_neighbour && !e.event.has_neighbour() && e.action != EventAction::Handover {
            return Err(ConfigError::new(
                format!("{at}.action"),
                "this action needs an event with a neighbour cell (A3, A4, A5, B1, B2)",
            ));
        }
        if e.group == CellGroup::Scg
            && matches!(
                e.action,
                EventAction::MnHandoverKeepSn | EventAction::SnAddition
            )
        {
            return Err(ConfigError::new(
                format!("{at}.action"),
                "not available on the SCG",
            ));
        }
    }
    Ok(())
}
