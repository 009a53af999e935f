//! Helpers shared by the integration tests.
#![allow(dead_code)]

use polypath_link::{LinkEvent, LinkEventKind};
use polypath_ran::{RadioConfig, RadioModel, RadioOutput};
use std::path::PathBuf;

/// Path of a file under the workspace's `scenarios/`.
pub fn scenario_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(name)
}

/// Loads the `[radio]` section of a scenario file.
pub fn load_radio(name: &str) -> RadioConfig {
    let path = scenario_path(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let table: toml::Table = toml::from_str(&text).unwrap();
    let radio = table.get("radio").cloned().expect("[radio] section");
    let mut cfg: RadioConfig = radio.try_into().unwrap();
    cfg.resolve_paths(path.parent().unwrap());
    cfg
}

/// Runs a model to `end_s` and returns all outputs.
pub fn run(cfg: &RadioConfig, seed: u64, end_s: f64) -> Vec<RadioOutput> {
    let mut m = RadioModel::new(cfg, seed).unwrap();
    m.advance((end_s * 1e9) as u64)
}

/// The events among outputs.
pub fn events(out: &[RadioOutput]) -> Vec<LinkEvent> {
    out.iter()
        .filter_map(|o| match o {
            RadioOutput::Event(e) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

/// Seconds of a timestamp.
pub fn secs(t_ns: u64) -> f64 {
    t_ns as f64 / 1e9
}

/// First event of a UE matching a predicate.
pub fn first(evs: &[LinkEvent], ue: u32, f: impl Fn(&LinkEventKind) -> bool) -> Option<&LinkEvent> {
    evs.iter().find(|e| e.ue == ue && f(&e.event))
}
