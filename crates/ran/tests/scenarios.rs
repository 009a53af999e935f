//! Every example scenario under `scenarios/` with a `[radio]` section parses, validates and
//! runs; the GPS, Wi-Fi and LiFi examples behave as described in their comments.

mod common;
use common::*;
use polypath_link::{DownReason, LinkEventKind, MeasEvent, RadioType};
use polypath_ran::{LinkAction, RadioModel, RadioOutput};

#[test]
fn all_scenarios_load_and_run() {
    let dir = scenario_path("");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        let text = std::fs::read_to_string(&p).unwrap();
        let table: toml::Table = toml::from_str(&text).unwrap();
        if !table.contains_key("radio") {
            continue; // a scenario without the radio model
        }
        let cfg = load_radio(&name);
        let mut m = RadioModel::new(&cfg, 1).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!m.paths().is_empty(), "{name}");
        assert!(!m.advance(5_000_000_000).is_empty(), "{name}");
        n += 1;
    }
    assert!(n >= 5);
}

#[test]
fn gps_track_drives_handovers_and_inter_rat_events() {
    let cfg = load_radio("gps-raca5g.toml");
    let out = run(&cfg, 2, 430.0);
    let evs = events(&out);
    let hos = evs
        .iter()
        .filter(|e| matches!(e.event, LinkEventKind::HandoverExecution { .. }))
        .count();
    println!("GPS replay: {hos} handovers in the 428 s track");
    assert!(hos >= 2);
    // The UE moved ~1.3 km west along the track.
    let mut m = RadioModel::new(&cfg, 2).unwrap();
    m.advance(430_000_000_000);
    let p = m.position(0).unwrap();
    assert!(
        (p[0] + 1307.0).abs() < 30.0 && (p[1] - 227.0).abs() < 30.0,
        "{p:?}"
    );
    assert!(evs.iter().any(|e| matches!(
        e.event,
        LinkEventKind::MeasurementReport { event: MeasEvent::B1 | MeasEvent::B2, .. }
    ) || matches!(e.event, LinkEventKind::Measurement { ref cells, .. } if cells.iter().any(|c| c.rat == RadioType::Lte))));
}

#[test]
fn lifi_only_inside_the_cone_and_wifi_stays_up() {
    let cfg = load_radio("indoor-wifi-lifi.toml");
    let out = run(&cfg, 4, 120.0);
    let evs = events(&out);
    let lifi_roams = evs
        .iter()
        .filter(|e| {
            e.iface == 2
                && matches!(
                    e.event,
                    LinkEventKind::LinkDown {
                        reason: DownReason::Reassociation | DownReason::NoCoverage,
                        ..
                    }
                )
        })
        .count();
    let lifi_ups = evs
        .iter()
        .filter(|e| e.iface == 2 && matches!(e.event, LinkEventKind::LinkUp { .. }))
        .count();
    println!("LiFi: {lifi_ups} link-ups, {lifi_roams} losses/re-associations in 120 s");
    assert!(lifi_ups >= 3, "the LiFi link follows the luminaires");
    assert!(lifi_roams >= 2);
    assert!(
        !evs.iter()
            .any(|e| e.iface == 1 && matches!(e.event, LinkEventKind::LinkDown { .. })),
        "Wi-Fi covers the office"
    );
    // Each path has a positive rate while up.
    for iface in 0..3u16 {
        assert!(
            out.iter()
                .any(|o| matches!(o, RadioOutput::Link(c) if c.iface == iface
            && matches!(c.action, LinkAction::Up { dl_bps, .. } if dl_bps > 0))),
            "iface {iface}"
        );
    }
    assert!(evs.iter().any(|e| matches!(&e.event, LinkEventKind::PredictedThroughput { predictor, .. } if predictor == "oracle-under")));
}
