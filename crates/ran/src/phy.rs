//! From SINR to bit rate: resource-block grids, the TS 38.214 CQI tables, rank selection and
//! the TS 38.306 peak-rate formula; and the attenuated-Shannon mapping used for Wi-Fi/LiFi.

use polypath_link::RadioType;
use serde::{Deserialize, Serialize};

/// One row of a 4-bit CQI table.
#[derive(Debug, Copy, Clone, PartialEq)]
pub struct CqiEntry {
    /// Modulation order Q_m (bits per symbol): 2 QPSK, 4 16QAM, 6 64QAM, 8 256QAM.
    pub qm: u8,
    /// Code rate × 1024.
    pub code_rate_x1024: u16,
    /// Spectral efficiency in bit/s/Hz (per layer) as printed in the table.
    pub efficiency: f64,
}

const fn e(qm: u8, code_rate_x1024: u16, efficiency: f64) -> CqiEntry {
    CqiEntry {
        qm,
        code_rate_x1024,
        efficiency,
    }
}

//= 3GPP TS 38.214 V17 §5.2.2.1, Table 5.2.2.1-2: 4-bit CQI Table 1
//# CQI index | modulation | code rate x 1024 | efficiency
//# 0 out of range; 1 QPSK 78 0.1523; 2 QPSK 120 0.2344; 3 QPSK 193 0.3770;
//# 4 QPSK 308 0.6016; 5 QPSK 449 0.8770; 6 QPSK 602 1.1758; 7 16QAM 378 1.4766;
//# 8 16QAM 490 1.9141; 9 16QAM 616 2.4063; 10 64QAM 466 2.7305; 11 64QAM 567 3.3223;
//# 12 64QAM 666 3.9023; 13 64QAM 772 4.5234; 14 64QAM 873 5.1152; 15 64QAM 948 5.5547
/// CQI Table 1 (up to 64QAM), index 0 ("out of range") has zero efficiency. LTE uses the same
/// values (TS 36.213 Table 7.2.3-1).
pub const CQI_TABLE_1: [CqiEntry; 16] = [
    e(0, 0, 0.0),
    e(2, 78, 0.1523),
    e(2, 120, 0.2344),
    e(2, 193, 0.3770),
    e(2, 308, 0.6016),
    e(2, 449, 0.8770),
    e(2, 602, 1.1758),
    e(4, 378, 1.4766),
    e(4, 490, 1.9141),
    e(4, 616, 2.4063),
    e(6, 466, 2.7305),
    e(6, 567, 3.3223),
    e(6, 666, 3.9023),
    e(6, 772, 4.5234),
    e(6, 873, 5.1152),
    e(6, 948, 5.5547),
];

//= 3GPP TS 38.214 V17 §5.2.2.1, Table 5.2.2.1-3: 4-bit CQI Table 2
//# 0 out of range; 1 QPSK 78 0.1523; 2 QPSK 193 0.3770; 3 QPSK 449 0.8770;
//# 4 16QAM 378 1.4766; 5 16QAM 490 1.9141; 6 16QAM 616 2.4063; 7 64QAM 466 2.7305;
//# 8 64QAM 567 3.3223; 9 64QAM 666 3.9023; 10 64QAM 772 4.5234; 11 64QAM 873 5.1152;
//# 12 256QAM 711 5.5547; 13 256QAM 797 6.2266; 14 256QAM 885 6.9141; 15 256QAM 948 7.4063
/// CQI Table 2 (up to 256QAM).
pub const CQI_TABLE_2: [CqiEntry; 16] = [
    e(0, 0, 0.0),
    e(2, 78, 0.1523),
    e(2, 193, 0.3770),
    e(2, 449, 0.8770),
    e(4, 378, 1.4766),
    e(4, 490, 1.9141),
    e(4, 616, 2.4063),
    e(6, 466, 2.7305),
    e(6, 567, 3.3223),
    e(6, 666, 3.9023),
    e(6, 772, 4.5234),
    e(6, 873, 5.1152),
    e(8, 711, 5.5547),
    e(8, 797, 6.2266),
    e(8, 885, 6.9141),
    e(8, 948, 7.4063),
];

/// Which CQI table a cell uses.
#[derive(Debug, Copy, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CqiTable {
    /// Table 5.2.2.1-2 (64QAM).
    Table1,
    /// Table 5.2.2.1-3 (256QAM), the default for NR.
    #[default]
    Table2,
}

impl CqiTable {
    /// The rows of the table.
    pub fn entries(self) -> &'static [CqiEntry; 16] {
        match self {
            CqiTable::Table1 => &CQI_TABLE_1,
            CqiTable::Table2 => &CQI_TABLE_2,
        }
    }

    /// The CQI a UE reports at `sinr_db`: the highest index whose efficiency fits under the
    /// gap-adjusted Shannon bound `log2(1 + SINR / Γ)`, with `gap_db` = 10·log10(Γ) the
    /// implementation gap of the receiver. (TS 38.214 §5.2.2.1 defines CQI as the highest
    /// index whose transport block would be received with BLER ≤ 0.1; the SINR at which that
    /// holds is receiver-specific, and the Shannon-gap rule is the usual abstraction of it.)
    pub fn cqi_for_sinr(self, sinr_db: f64, gap_db: f64) -> u8 {
        if !sinr_db.is_finite() {
            return 0;
        }
        let bound = (1.0 + 10f64.powf((sinr_db - gap_db) / 10.0)).log2();
        let mut cqi = 0u8;
        for (i, row) in self.entries().iter().enumerate().skip(1) {
            if row.efficiency <= bound {
                cqi = i as u8;
            }
        }
        cqi
    }

    /// Efficiency (bit/s/Hz per layer) of a CQI index; 0 for index 0 or out of range.
    pub fn efficiency(self, cqi: u8) -> f64 {
        self.entries()
            .get(cqi as usize)
            .map(|r| r.efficiency)
            .unwrap_or(0.0)
    }
}

/// Number of resource blocks for a channel bandwidth and subcarrier spacing, from the
/// maximum transmission bandwidth configuration tables: TS 38.101-1 Table 5.3.2-1 (FR1),
/// TS 38.101-2 Table 5.3.2-1 (FR2) and TS 36.101 Table 5.6-1 (LTE, 15 kHz). `None` when the
/// combination is not in the table.
pub fn n_rb(rat: RadioType, bandwidth_mhz: f64, scs_khz: u32) -> Option<u16> {
    const FR1_15: &[(u32, u16)] = &[
        (5, 25),
        (10, 52),
        (15, 79),
        (20, 106),
        (25, 133),
        (30, 160),
        (40, 216),
        (50, 270),
    ];
    const FR1_30: &[(u32, u16)] = &[
        (5, 11),
        (10, 24),
        (15, 38),
        (20, 51),
        (25, 65),
        (30, 78),
        (40, 106),
        (50, 133),
        (60, 162),
        (70, 189),
        (80, 217),
        (90, 245),
        (100, 273),
    ];
    const FR1_60: &[(u32, u16)] = &[
        (10, 11),
        (15, 18),
        (20, 24),
        (25, 31),
        (30, 38),
        (40, 51),
        (50, 65),
        (60, 79),
        (70, 93),
        (80, 107),
        (90, 121),
        (100, 135),
    ];
    const FR2_60: &[(u32, u16)] = &[(50, 66), (100, 132), (200, 264)];
    const FR2_120: &[(u32, u16)] = &[(50, 32), (100, 66), (200, 132), (400, 264)];
    const LTE: &[(u32, u16)] = &[(3, 15), (5, 25), (10, 50), (15, 75), (20, 100)];
    if bandwidth_mhz.fract() != 0.0 && !(rat == RadioType::Lte && bandwidth_mhz == 1.4) {
        return None;
    }
    if rat == RadioType::Lte && bandwidth_mhz == 1.4 && scs_khz == 15 {
        return Some(6);
    }
    let table = match (rat, scs_khz) {
        (RadioType::NrFr1, 15) => FR1_15,
        (RadioType::NrFr1, 30) => FR1_30,
        (RadioType::NrFr1, 60) => FR1_60,
        (RadioType::NrFr2, 60) => FR2_60,
        (RadioType::NrFr2, 120) => FR2_120,
        (RadioType::Lte, 15) => LTE,
        _ => return None,
    };
    let bw = bandwidth_mhz as u32;
    table.iter().find(|(b, _)| *b == bw).map(|(_, n)| *n)
}

/// Slot length in nanoseconds for a subcarrier spacing: 1 ms / 2^μ with SCS = 15·2^μ kHz
/// (TS 38.211 §4.3.2). Non-NR technologies use the 15 kHz / 1 ms value.
pub fn slot_ns(scs_khz: u32) -> u64 {
    let mu_pow = (scs_khz / 15).max(1) as u64;
    1_000_000 / mu_pow
}

/// Default overhead OH of TS 38.306 §4.1.2 for a radio type (downlink): 0.14 in FR1, 0.18 in
/// FR2; LTE uses 0.25 (control region, CRS and sync signals; a common planning value).
pub fn default_overhead(rat: RadioType) -> f64 {
    match rat {
        RadioType::NrFr1 => 0.14,
        RadioType::NrFr2 => 0.18,
        RadioType::Lte => 0.25,
        RadioType::Wifi | RadioType::Lifi => 0.2,
    }
}

//= 3GPP TS 38.306 V17 §4.1.2
//# data rate (in Mbps) = 10^-6 · Σ_j ( v_Layers · Q_m · f · R_max · (N_PRB^{BW(j),μ} · 12) / T_s^μ · (1 − OH) )
//# with T_s^μ = 10^-3 / (14 · 2^μ) the average OFDM symbol duration
/// Downlink bit rate in bit/s for `layers` MIMO layers at per-layer spectral efficiency
/// `efficiency` (Q_m · R from the CQI table, which stands in for Q_m · f · R_max), over
/// `n_rb` resource blocks at subcarrier spacing `scs_khz`, with overhead fraction `overhead`.
pub fn nr_rate_bps(layers: u8, efficiency: f64, n_rb: u16, scs_khz: u32, overhead: f64) -> f64 {
    let ts = 1e-3 / (14.0 * (scs_khz as f64 / 15.0));
    layers as f64 * efficiency * (n_rb as f64 * 12.0) / ts * (1.0 - overhead)
}

/// Result of link adaptation for one UE on one cell.
#[derive(Debug, Copy, Clone, PartialEq)]
pub struct LinkAdaptation {
    /// Reported CQI.
    pub cqi: u8,
    /// Number of MIMO layers used.
    pub layers: u8,
    /// Per-layer spectral efficiency (bit/s/Hz).
    pub efficiency: f64,
}

/// SINR (dB) needed before rank `L` (index `L − 1`) may be used: spatial multiplexing of
/// `L` streams needs a well-conditioned channel, which at these SINRs the abstraction
/// assumes. Rank 1 is always allowed.
pub const RANK_SINR_THRESHOLDS_DB: [f64; 8] =
    [f64::NEG_INFINITY, 8.0, 14.0, 20.0, 24.0, 27.0, 30.0, 33.0];

/// Rank and CQI selection: with `max_layers` available, ranks whose SINR threshold
/// ([`RANK_SINR_THRESHOLDS_DB`]) is met are candidates; transmit power is split evenly
/// across `L` layers (each layer sees SINR − 10·log10(L)) and the candidate maximising
/// `L · efficiency(CQI(SINR_L))` is chosen — a simple abstraction of rank adaptation
/// (documented model, not a 3GPP procedure).
pub fn adapt(table: CqiTable, sinr_db: f64, gap_db: f64, max_layers: u8) -> LinkAdaptation {
    let mut best = LinkAdaptation {
        cqi: 0,
        layers: 1,
        efficiency: 0.0,
    };
    for l in 1..=max_layers.clamp(1, 8) {
        if sinr_db < RANK_SINR_THRESHOLDS_DB[(l - 1) as usize] {
            break;
        }
        let s = sinr_db - 10.0 * (l as f64).log10();
        let cqi = table.cqi_for_sinr(s, gap_db);
        let eff = table.efficiency(cqi);
        if l as f64 * eff > best.layers as f64 * best.efficiency {
            best = LinkAdaptation {
                cqi,
                layers: l,
                efficiency: eff,
            };
        }
    }
    best
}

//= 3GPP TR 36.942 V17 Annex A.2 (attenuated and truncated Shannon bound)
//# Thr = 0 for SINR < SINR_MIN; Thr = α · S(SINR) for SINR_MIN ≤ SINR < SINR_MAX;
//# Thr = Thr_MAX for SINR ≥ SINR_MAX, with S(SINR) = log2(1 + SINR)
/// Spectral efficiency (bit/s/Hz) of the attenuated Shannon model used for Wi-Fi and LiFi:
/// `alpha` 0.6, `sinr_min_db` −10 dB, capped at `max_efficiency`.
pub fn attenuated_shannon(sinr_db: f64, alpha: f64, sinr_min_db: f64, max_efficiency: f64) -> f64 {
    if !sinr_db.is_finite() || sinr_db < sinr_min_db {
        return 0.0;
    }
    (alpha * (1.0 + 10f64.powf(sinr_db / 10.0)).log2()).min(max_efficiency)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cqi_tables_match_code_rate() {
        // Each printed efficiency is Q_m · (code rate / 1024), rounded to 4 decimals.
        for t in [CqiTable::Table1, CqiTable::Table2] {
            for row in t.entries().iter().skip(1) {
                let eff = row.qm as f64 * row.code_rate_x1024 as f64 / 1024.0;
                assert!((eff - row.efficiency).abs() < 6e-5, "{row:?}");
            }
            let effs: Vec<f64> = t.entries().iter().map(|r| r.efficiency).collect();
            assert!(effs.windows(2).all(|w| w[0] < w[1]), "strictly increasing");
        }
        assert_eq!(CQI_TABLE_2[15].qm, 8);
        assert_eq!(CQI_TABLE_1[15].qm, 6);
        assert_eq!(CQI_TABLE_2[12].code_rate_x1024, 711);
        assert_eq!(CQI_TABLE_1[7].code_rate_x1024, 378);
    }

    #[test]
    fn cqi_for_sinr_by_hand() {
        // gap 0: bound = log2(1 + 10^(SINR/10)).
        // SINR 0 dB -> bound 1.0 -> Table 2 highest eff <= 1.0 is 0.8770 (CQI 3).
        assert_eq!(CqiTable::Table2.cqi_for_sinr(0.0, 0.0), 3);
        // Table 1 at 0 dB: 0.8770 is CQI 5.
        assert_eq!(CqiTable::Table1.cqi_for_sinr(0.0, 0.0), 5);
        // SINR 20 dB -> bound log2(101) = 6.658 -> Table 2 CQI 13 (6.2266).
        assert_eq!(CqiTable::Table2.cqi_for_sinr(20.0, 0.0), 13);
        // With a 3 dB gap at 20 dB: log2(1 + 50.12) = 5.676 -> CQI 12 (5.5547).
        assert_eq!(CqiTable::Table2.cqi_for_sinr(20.0, 3.0), 12);
        // Very low SINR is out of range; very high saturates at 15.
        assert_eq!(CqiTable::Table2.cqi_for_sinr(-20.0, 0.0), 0);
        assert_eq!(CqiTable::Table2.cqi_for_sinr(40.0, 0.0), 15);
        assert_eq!(CqiTable::Table2.cqi_for_sinr(f64::NAN, 0.0), 0);
    }

    #[test]
    fn n_rb_tables() {
        assert_eq!(n_rb(RadioType::NrFr1, 100.0, 30), Some(273));
        assert_eq!(n_rb(RadioType::NrFr1, 40.0, 30), Some(106)); // M2HO: 106 RBs, 0.5 ms slots
        assert_eq!(n_rb(RadioType::NrFr1, 20.0, 15), Some(106));
        assert_eq!(n_rb(RadioType::NrFr2, 100.0, 120), Some(66));
        assert_eq!(n_rb(RadioType::Lte, 20.0, 15), Some(100));
        assert_eq!(n_rb(RadioType::NrFr1, 33.0, 30), None);
        assert_eq!(slot_ns(30), 500_000);
        assert_eq!(slot_ns(120), 125_000);
    }

    #[test]
    fn peak_rate_formula() {
        // 100 MHz FR1, 30 kHz, 273 RB, 4 layers, 256QAM CQI 15, OH 0.14:
        // 4 · 7.4063 · 3276 / (1e-3 / 28) · 0.86 = 2.3370e9 bit/s.
        let r = nr_rate_bps(4, 7.4063, 273, 30, 0.14);
        let by_hand = 4.0 * 7.4063 * 3276.0 * 28_000.0 * 0.86;
        assert!((r - by_hand).abs() < 1.0);
        assert!((r / 1e9 - 2.3370).abs() < 1e-4);
    }

    #[test]
    fn rank_adaptation_prefers_more_layers_at_high_sinr() {
        let lo = adapt(CqiTable::Table2, 2.0, 0.0, 4);
        let hi = adapt(CqiTable::Table2, 30.0, 0.0, 4);
        assert_eq!(lo.layers, 1);
        assert_eq!(hi.layers, 4);
        assert!(hi.layers as f64 * hi.efficiency > lo.efficiency);
    }

    #[test]
    fn attenuated_shannon_shape() {
        assert_eq!(attenuated_shannon(-11.0, 0.6, -10.0, 4.4), 0.0);
        assert!((attenuated_shannon(10.0, 0.6, -10.0, 4.4) - 0.6 * 11f64.log2()).abs() < 1e-12);
        assert_eq!(attenuated_shannon(60.0, 0.6, -10.0, 4.4), 4.4);
    }
}
