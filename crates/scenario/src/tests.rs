//! Whole-file tests of the schema: resolution and error positions.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::*;

const TWO_PATH: &str = r#"
name = "two"
[sim]
duration = "30s"
seed = 9

[output]
bin = "50ms"

[[host]]
name = "client"
interfaces = [
  { name = "nr", addr = "10.0.1.1", link = "nr", side = "a" },
  { name = "lte", addr = "10.0.2.1", link = "lte", side = "a" },
]

[[host]]
name = "server"
interfaces = [
  { name = "nr", addr = "10.9.1.1", link = "nr", side = "b" },
  { name = "lte", addr = "10.9.2.1", link = "lte", side = "b" },
]

[[link]]
name = "nr"
rate = "300Mbit/s"
delay = "5ms"
loss = 0.0004
queue = "1bdp"
[link.down]
rate = "200Mbit/s"

[[link]]
name = "lte"
rate = { schedule = [{ at = "0s", rate = "100Mbit/s" }, { at = "10s", rate = "20Mbit/s" }], period = "20s" }
delay = "8ms"
loss = { model = "gilbert-elliott", mean = 0.01, burst = 4 }
outages = [{ at = "5s", duration = "500ms" }]
steps = [{ at = "15s", delay = "30ms" }]

[[flow]]
name = "bulk"
kind = "quic"
from = "client"
to = "server"
bytes = "1GB"
scheduler = "minrtt"
[flow.options]
max_paths = 4
"#;

fn parse(src: &str) -> Result<Scenario, Error> {
    Scenario::parse(src, Path::new("test.toml"))
}

#[test]
fn resolves_two_path() {
    let s = parse(TWO_PATH).unwrap();
    assert_eq!(s.name, "two");
    assert_eq!(s.sim.seed, 9);
    assert_eq!(s.sim.duration, Duration::from_secs(30));
    assert_eq!(s.output.bin, Duration::from_millis(50));
    assert_eq!(s.links[0].up.rate, RateModel::Constant(300e6));
    assert_eq!(s.links[0].down.rate, RateModel::Constant(200e6));
    assert_eq!(s.links[0].down.loss, LossModel::Bernoulli(0.0004));
    assert_eq!(s.links[0].up.queue, QueueLimit::Bdp(1.0));
    match &s.links[1].up.loss {
        LossModel::GilbertElliott { p, r, k, h } => {
            assert!((r - 0.25).abs() < 1e-12);
            assert!((p - 0.01 * 0.25 / 0.99).abs() < 1e-12);
            assert_eq!((*k, *h), (1.0, 0.0));
        }
        other => panic!("{other:?}"),
    }
    assert!((s.links[1].up.loss.mean_loss() - 0.01).abs() < 1e-12);
    assert_eq!(s.links[1].down.outages.len(), 1);
    assert_eq!(
        s.links[1].outage_signal,
        OutageSignal::Silent,
        "outages are silent unless asked"
    );
    let signalled = TWO_PATH.replace(
        "outages = [{ at = \"5s\", duration = \"500ms\" }]",
        "outages = [{ at = \"5s\", duration = \"500ms\" }]\noutage_signal = true",
    );
    assert_eq!(
        parse(&signalled).unwrap().links[1].outage_signal,
        OutageSignal::BothEnds
    );
    let device_only = signalled.replace("outage_signal = true", "outage_signal = \"a\"");
    assert_eq!(
        parse(&device_only).unwrap().links[1].outage_signal,
        OutageSignal::End(Side::A)
    );
    let e = err_of(&signalled.replace("outage_signal = true", "outage_signal = \"c\""));
    assert_eq!(e.field.as_deref(), Some("link[1].outage_signal"), "{e}");
    assert_eq!(
        s.links[1].up.steps[0].delay,
        Some(Duration::from_millis(30))
    );
    let f = &s.flows[0];
    let FlowKind::Quic(q) = &f.kind else { panic!() };
    assert_eq!(q.bytes, 1_000_000_000);
    assert_eq!(q.scheduler, "minrtt");
    assert_eq!(q.cc, "cubic");
    assert_eq!(q.stack, "polypath");
    assert_eq!(
        q.options.get("max_paths").and_then(|v| v.as_integer()),
        Some(4)
    );
    let inst = &f.instances[0];
    assert_eq!(inst.paths.len(), 2);
    assert_eq!(inst.paths[1].local, "10.0.2.1".parse::<IpAddr>().unwrap());
    assert_eq!(inst.paths[1].remote, "10.9.2.1".parse::<IpAddr>().unwrap());
}

#[test]
fn host_groups_expand_with_addresses_and_spread() {
    let src = r#"
[sim]
duration = "1s"
[[host]]
name = "ue"
count = 300
interfaces = [{ name = "r", addr = "10.0.0.1", link = "bh", side = "a" }]
[[host]]
name = "srv"
interfaces = [{ name = "e", addr = "10.9.0.1", link = "bh", side = "b" }]
[[link]]
name = "bh"
rate = "500Mbit/s"
[[flow]]
name = "m"
kind = "cbr"
from = "ue"
to = "srv"
rate = "100kbit/s"
packet_size = 100
start_spread = "300ms"
"#;
    let s = parse(src).unwrap();
    assert_eq!(s.hosts.len(), 301);
    assert_eq!(s.hosts[299].name, "ue299");
    assert_eq!(
        s.hosts[299].interfaces[0].addr,
        "10.0.1.44".parse::<IpAddr>().unwrap()
    );
    let f = &s.flows[0];
    assert_eq!(f.instances.len(), 300);
    assert_eq!(f.instances[10].start, Duration::from_millis(10));
    assert_eq!(f.instances[10].to, 300);
}

fn err_of(src: &str) -> Error {
    match parse(src) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    }
}

#[test]
fn syntax_and_type_errors_name_line_and_field() {
    let bad = TWO_PATH.replace("delay = \"8ms\"", "delay = \"8 parsecs\"");
    let e = err_of(&bad);
    let line = bad.lines().position(|l| l.contains("parsecs")).unwrap() + 1;
    assert_eq!(e.line, Some(line), "{e}");
    assert_eq!(e.field.as_deref(), Some("link[1].delay"), "{e}");
    assert!(e.to_string().starts_with("test.toml:"), "{e}");

    let bad = TWO_PATH.replace("loss = 0.0004", "los = 0.0004");
    let e = err_of(&bad);
    let line = bad.lines().position(|l| l.starts_with("los =")).unwrap() + 1;
    assert_eq!(e.line, Some(line), "{e}");
    assert!(e.message.contains("los"), "{e}");
}

/// A bare number where a duration or a rate goes is refused with the field, and the unit
/// the message suggests is one of that quantity's.
#[test]
fn bare_numbers_are_refused_with_a_unit_of_their_kind() {
    for (from, to, field, suggested, not) in [
        (
            "delay = \"8ms\"",
            "delay = 8",
            "link[1].delay",
            "\"8ms\"",
            "Mbit/s",
        ),
        (
            "delay = \"8ms\"",
            "delay = 2.5",
            "link[1].delay",
            "\"2.5ms\"",
            "Mbit/s",
        ),
        (
            "rate = \"300Mbit/s\"",
            "rate = 300",
            "link[0].rate",
            "\"300Mbit/s\"",
            "ms\"",
        ),
    ] {
        let bad = TWO_PATH.replacen(from, to, 1);
        let e = err_of(&bad);
        assert_eq!(e.field.as_deref(), Some(field), "{e}");
        assert!(e.message.contains(suggested), "{e}");
        assert!(!e.message.contains(not), "{e}");
    }
}

#[test]
fn semantic_errors_name_line_and_field() {
    let bad = TWO_PATH.replace(
        "link = \"lte\", side = \"b\"",
        "link = \"lte5\", side = \"b\"",
    );
    let e = err_of(&bad);
    let line = bad.lines().position(|l| l.contains("lte5")).unwrap() + 1;
    assert_eq!(e.line, Some(line), "{e}");
    assert_eq!(e.field.as_deref(), Some("host[1].interfaces[1].link"));

    let bad = TWO_PATH.replace(
        "rate = \"200Mbit/s\"",
        "rate = \"200Mbit/s\"\nduplicate = 2.0",
    );
    let e = err_of(&bad);
    assert_eq!(e.field.as_deref(), Some("link[0].down.duplicate"), "{e}");
    let line = bad
        .lines()
        .position(|l| l.starts_with("duplicate"))
        .unwrap()
        + 1;
    assert_eq!(e.line, Some(line));

    let bad = TWO_PATH.replace(
        "scheduler = \"minrtt\"",
        "scheduler = \"minrtt\"\npacket_size = 100",
    );
    let e = err_of(&bad);
    assert_eq!(e.field.as_deref(), Some("flow[0].packet_size"), "{e}");

    let bad = TWO_PATH.replace("to = \"server\"", "to = \"nobody\"");
    let e = err_of(&bad);
    assert_eq!(e.field.as_deref(), Some("flow[0].to"));
    let line = bad.lines().position(|l| l.contains("nobody")).unwrap() + 1;
    assert_eq!(e.line, Some(line));
}

/// A host's kernel TCP buffers default to Linux's own; set ones are kept; a wrong count or
/// order is refused with the field and its line.
#[test]
fn tcp_buffers_default_to_linux_and_are_checked() {
    let s = parse(TWO_PATH).unwrap();
    assert_eq!(s.hosts[0].tcp_buffers.rmem, [4096, 131_072, 6_291_456]);
    assert_eq!(s.hosts[0].tcp_buffers.wmem, [4096, 16_384, 4_194_304]);

    let set = TWO_PATH.replacen(
        "name = \"client\"",
        "name = \"client\"\ntcp_rmem = [314573, 943718, 2516582]",
        1,
    );
    let s = parse(&set).unwrap();
    assert_eq!(s.hosts[0].tcp_buffers.rmem, [314_573, 943_718, 2_516_582]);
    assert_eq!(s.hosts[0].tcp_buffers.wmem, TcpBuffers::default().wmem);
    assert_eq!(s.hosts[1].tcp_buffers, TcpBuffers::default());

    for (value, says) in [
        ("[4096, 131072]", "needs 3 sizes"),
        ("[4096, 131072, 65536]", "minimum <= initial <= largest"),
        ("[0, 131072, 6291456]", "1 <= minimum"),
        ("[4096, 131072, 4294967296]", "largest <= 2147483647"),
    ] {
        let bad = TWO_PATH.replacen(
            "name = \"server\"",
            &format!("name = \"server\"\ntcp_wmem = {value}"),
            1,
        );
        let e = err_of(&bad);
        assert_eq!(e.field.as_deref(), Some("host[1].tcp_wmem"), "{e}");
        let line = bad.lines().position(|l| l.starts_with("tcp_wmem")).unwrap() + 1;
        assert_eq!(e.line, Some(line), "{e}");
        assert!(e.message.contains(says), "{value}: {e}");
    }
}

#[test]
fn error_at_for_consumers() {
    let s = parse(TWO_PATH).unwrap();
    let e = s.error_at("flow[0].scheduler", "unknown scheduler");
    let line = TWO_PATH
        .lines()
        .position(|l| l.starts_with("scheduler"))
        .unwrap()
        + 1;
    assert_eq!(e.line, Some(line));
}

#[test]
fn traces_resolve_relative_to_the_file_and_report_trace_lines() {
    let dir = std::env::temp_dir().join(format!("polypath-scenario-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("good.tr"), "1.0\t10\n2.0\t30\n").unwrap();
    std::fs::write(dir.join("bad.tr"), "1.0\t10\n2.0\tx\n").unwrap();
    std::fs::write(dir.join("mm.down"), "0\n0\n1\n2\n").unwrap();
    let mk =
        |rate: &str| format!("[sim]\nduration = \"1s\"\n[[link]]\nname = \"l\"\nrate = {rate}\n");
    let file = dir.join("s.toml");
    let s = Scenario::parse(
        &mk(r#"{ trace = "good.tr", format = "lumos5g", scale = 2.0, loop = false }"#),
        &file,
    )
    .unwrap();
    assert_eq!(
        s.links[0].up.rate,
        RateModel::Schedule {
            points: vec![
                (Duration::ZERO, 20e6),
                (Duration::from_secs(1), 60e6),
                (Duration::from_secs(2), 0.0)
            ],
            period: None
        }
    );
    let s = Scenario::parse(&mk(r#"{ trace = "mm.down", format = "mahimahi" }"#), &file).unwrap();
    assert!(matches!(
        s.links[0].up.rate,
        RateModel::Deliveries { looped: true, .. }
    ));
    let e = Scenario::parse(&mk(r#"{ trace = "bad.tr", format = "lumos5g" }"#), &file).unwrap_err();
    assert_eq!(e.file, dir.join("bad.tr"));
    assert_eq!(e.line, Some(2));
    assert!(e.message.contains("s.toml:5"), "{e}");
    let e = Scenario::parse(
        &mk(r#"{ trace = "missing.tr", format = "lumos5g" }"#),
        &file,
    )
    .unwrap_err();
    assert!(e.message.contains("cannot read"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn rate_tables_are_exclusive() {
    let src = "[sim]\nduration = \"1s\"\n[[link]]\nname = \"l\"\nrate = { source = \"radio\", schedule = [] }\n";
    let e = err_of(src);
    assert_eq!(e.line, Some(5));
    let src = "[sim]\nduration = \"1s\"\n[[link]]\nname = \"l\"\nrate = { source = \"radio\", initial = \"10Mbit/s\" }\n[radio]\nmodel = \"umi\"\n";
    let s = parse(src).unwrap();
    assert_eq!(
        s.links[0].up.rate,
        RateModel::External {
            source: "radio".into(),
            initial: 10e6
        }
    );
    assert!(s.radio.is_some());
}

const RADIO_LINK: &str = r#"[sim]
duration = "1s"
[[link]]
name = "nr"
radio = { ue = 0, iface = 0 }
delay = "10ms"
queue = "64KB"
[[link]]
name = "scg"
radio = { ue = 1, iface = "nr0-scg" }
[radio]
cells = []
ues = []
"#;

#[test]
fn radio_links_bind_a_path_and_take_rates_from_the_model() {
    let s = parse(RADIO_LINK).unwrap();
    let l = &s.links[0];
    assert_eq!(
        l.radio,
        Some(RadioBinding {
            ue: 0,
            path: RadioPathRef::Index(0)
        })
    );
    assert_eq!(l.up.rate, RateModel::Radio);
    assert_eq!(l.down.rate, RateModel::Radio);
    assert_eq!(l.up.delay, Duration::from_millis(10));
    // `queue` is the uplink's; the downlink queues in the cell's buffer.
    assert_eq!(l.up.queue, QueueLimit::Bytes(64000));
    assert_eq!(l.down.queue, QueueLimit::Unlimited);
    assert_eq!(
        s.links[1].radio.as_ref().map(|b| &b.path),
        Some(&RadioPathRef::Name("nr0-scg".into()))
    );
    assert!(!s.output.rb_events);
}

#[test]
fn radio_link_errors_name_the_field() {
    let line_of = |src: &str, pat: &str| src.lines().position(|l| l.contains(pat)).unwrap() + 1;
    let bad = RADIO_LINK.replace("delay = \"10ms\"", "rate = \"1Mbit/s\"");
    let e = err_of(&bad);
    assert_eq!(e.field.as_deref(), Some("link[0].rate"), "{e}");
    assert_eq!(e.line, Some(line_of(&bad, "1Mbit/s")));

    let bad = RADIO_LINK.replace("queue = \"64KB\"", "[link.down]\nqueue = \"64KB\"");
    let e = err_of(&bad);
    assert_eq!(e.field.as_deref(), Some("link[0].down.queue"), "{e}");

    let bad = RADIO_LINK.replace(
        "delay = \"10ms\"",
        "steps = [{ at = \"1s\", rate = \"1Mbit/s\" }]",
    );
    let e = err_of(&bad);
    assert_eq!(e.field.as_deref(), Some("link[0].steps[0].rate"), "{e}");

    let bad = RADIO_LINK.replace(
        "delay = \"10ms\"",
        "outages = [{ at = \"1s\", duration = \"1s\" }]",
    );
    assert_eq!(err_of(&bad).field.as_deref(), Some("link[0].outages"));

    let bad = RADIO_LINK.replace("delay = \"10ms\"", "outage_signal = true");
    let e = err_of(&bad);
    assert_eq!(e.field.as_deref(), Some("link[0].outage_signal"), "{e}");
    assert_eq!(e.line, Some(line_of(&bad, "outage_signal")));

    let bad = RADIO_LINK.replace("iface = 0 }", "iface = -1 }");
    let e = err_of(&bad);
    assert_eq!(e.field.as_deref(), Some("link[0].radio.iface"), "{e}");
    assert_eq!(e.line, Some(line_of(&bad, "iface = -1")));

    let bad = RADIO_LINK.replace("iface = 0 }", "iface = 0, cell = 3 }");
    let e = err_of(&bad);
    assert!(e.message.contains("cell"), "{e}");
    assert_eq!(e.line, Some(line_of(&bad, "cell = 3")));

    let bad = RADIO_LINK.replace("[radio]\ncells = []\nues = []\n", "");
    let e = err_of(&bad);
    assert_eq!(e.field.as_deref(), Some("link[0].radio"), "{e}");
    assert!(e.message.contains("no [radio]"), "{e}");
}

#[test]
fn quic_flows_carry_transactions_with_request_and_response_sizes() {
    let src = TWO_PATH.replace(
        "bytes = \"1GB\"",
        "request_size = 1\nresponse_size = \"2KB\"\ninterval = \"10ms\"\ncount = 500",
    );
    let s = parse(&src).unwrap();
    let FlowKind::Quic(q) = &s.flows[0].kind else {
        panic!("a quic flow");
    };
    assert_eq!(
        q.transactions,
        Some(QuicTransactions {
            request: 1,
            response: 2000,
            interval: Some(Duration::from_millis(10)),
            count: Some(500),
        })
    );
    assert_eq!(q.bytes, 0);
    let back_to_back =
        parse(&TWO_PATH.replace("bytes = \"1GB\"", "request_size = 1\nresponse_size = 1")).unwrap();
    let FlowKind::Quic(q) = &back_to_back.flows[0].kind else {
        panic!("a quic flow");
    };
    assert_eq!(q.transactions.and_then(|t| t.interval), None);

    for (change, field) in [
        (
            "bytes = \"1GB\"\nrequest_size = 1\nresponse_size = 1",
            "flow[0].bytes",
        ),
        ("request_size = 1", "flow[0]"),
        ("bytes = \"1GB\"\ninterval = \"1s\"", "flow[0].interval"),
        ("bytes = \"1GB\"\ncount = 3", "flow[0].count"),
        (
            "request_size = 1\nresponse_size = 1\ncount = 0",
            "flow[0].count",
        ),
        (
            "request_size = 1\nresponse_size = 1\ndirection = \"download\"",
            "flow[0].direction",
        ),
    ] {
        let e = err_of(&TWO_PATH.replace("bytes = \"1GB\"", change));
        assert_eq!(e.field.as_deref(), Some(field), "{change}: {e}");
    }
}

#[test]
fn tcp_flows_and_rate_limited_quic_flows() {
    let tcp = "kind = \"tcp\"\nfrom = \"client\"\nto = \"server\"";
    let src = TWO_PATH.replace(
        "bytes = \"1GB\"\nscheduler = \"minrtt\"\n[flow.options]\nmax_paths = 4\n",
        "bytes = \"1GB\"\nrate = \"100Mbit/s\"\n",
    ) + &format!(
        "[[flow]]\nname = \"t\"\n{tcp}\nmptcp = true\ncc = \"bbr\"\nrate = \"12.5Mbit/s\"\nport = 6000\n\
             [[flow]]\nname = \"plain\"\n{tcp}\nbytes = \"1MB\"\n"
    );
    let s = parse(&src).unwrap();
    let FlowKind::Quic(q) = &s.flows[0].kind else {
        panic!("a quic flow");
    };
    assert_eq!(q.rate, Some(100e6));
    assert_eq!(
        s.flows[1].kind,
        FlowKind::Tcp(TcpFlow {
            mptcp: true,
            cc: Some("bbr".into()),
            rate: Some(12.5e6),
            message_size: None,
            bytes: None,
            port: 6000,
        })
    );
    assert_eq!(
        s.flows[2].kind,
        FlowKind::Tcp(TcpFlow {
            mptcp: false,
            cc: None,
            rate: None,
            message_size: None,
            bytes: Some(1_000_000),
            port: 5201,
        })
    );
    assert_eq!(s.flows[2].kind.name(), "tcp");
    let devices = parse(&format!(
        "{TWO_PATH}[[flow]]\nname = \"d\"\nkind = \"cbr\"\nfrom = \"client\"\nto = \"server\"\n\
         rate = \"0.1Mbit/s\"\npacket_size = 100\ndevices = 5980\n\
         [[flow]]\nname = \"m\"\n{tcp}\nrate = \"1kbit/s\"\nmessage_size = \"100B\"\n"
    ))
    .unwrap();
    let FlowKind::Cbr(c) = &devices.flows[1].kind else {
        panic!("a cbr flow");
    };
    assert_eq!((c.devices, c.rate, c.packet_size), (5980, 1e5, 100));
    let FlowKind::Tcp(t) = &devices.flows[2].kind else {
        panic!("a tcp flow");
    };
    assert_eq!((t.rate, t.message_size), (Some(1e3), Some(100)));
    for (flow, field) in [
        (format!("{tcp}\nscheduler = \"minrtt\""), "flow[1].scheduler"),
        (format!("{tcp}\nrate = \"0Mbit/s\""), "flow[1].rate"),
        (format!("{tcp}\nbytes = 0"), "flow[1].bytes"),
        (format!("{tcp}\ncc = \" \""), "flow[1].cc"),
        (
            "kind = \"cbr\"\nfrom = \"client\"\nto = \"server\"\nrate = \"1Mbit/s\"\nmptcp = true".into(),
            "flow[1].mptcp",
        ),
        (
            "kind = \"quic\"\nfrom = \"client\"\nto = \"server\"\nrequest_size = 1\nresponse_size = 1\nrate = \"1Mbit/s\"".into(),
            "flow[1].rate",
        ),
        (format!("{tcp}\nmessage_size = 100"), "flow[1].message_size"),
        (format!("{tcp}\nrate = \"1Mbit/s\"\nmessage_size = 0"), "flow[1].message_size"),
        (
            "kind = \"cbr\"\nfrom = \"client\"\nto = \"server\"\nrate = \"1Mbit/s\"\ndevices = 0".into(),
            "flow[1].devices",
        ),
        (format!("{tcp}\ndevices = 3"), "flow[1].devices"),
    ] {
        let e = err_of(&format!("{TWO_PATH}[[flow]]\nname = \"x\"\n{flow}\n"));
        assert_eq!(e.field.as_deref(), Some(field), "{flow}: {e}");
    }
}

#[test]
fn link_predictors_resolve_and_load_prediction_files() {
    let dir = std::env::temp_dir().join(format!("polypath-scenario-pred-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("pred.txt"), "0\t12.5\n1\t7\n").unwrap();
    std::fs::write(dir.join("bad.txt"), "0\t12.5\n1\tfast\n").unwrap();
    let mk = |pred: &str| {
        format!(
            "[sim]\nduration = \"1s\"\n[[link]]\nname = \"l\"\nrate = \"10Mbit/s\"\n[link.down]\npredictor = {pred}\n"
        )
    };
    let file = dir.join("s.toml");
    let s = Scenario::parse(
        &mk(r#"{ kind = "ewma", alpha = 0.5, period = "200ms", observe = "delivered" }"#),
        &file,
    )
    .unwrap();
    assert_eq!(s.links[0].up.predictor, None);
    let p = s.links[0].down.predictor.as_ref().unwrap();
    assert_eq!(p.period, Duration::from_millis(200));
    assert_eq!((p.name.as_str(), p.tell), ("ewma", PredictionTell::Sender));
    assert_eq!(p.observe, PredictionInput::Delivered);
    assert_eq!(p.at, "link[0].down.predictor");
    assert!(matches!(&p.source, PredictorSource::Rule(r) if r.alpha == Some(0.5)));

    let s = Scenario::parse(
        &mk(r#"{ file = "pred.txt", tell = "both", name = "lumos" }"#),
        &file,
    )
    .unwrap();
    let p = s.links[0].down.predictor.as_ref().unwrap();
    assert_eq!((p.name.as_str(), p.tell), ("lumos", PredictionTell::Both));
    let PredictorSource::File { trace, .. } = &p.source else {
        panic!("{p:?}")
    };
    assert_eq!(trace.rates_bps, vec![12.5e6, 7e6]);

    // A NumPy file, its format taken from the name: two float64 values.
    let header = "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }";
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    npy.extend_from_slice(&(header.len() as u16).to_le_bytes());
    npy.extend_from_slice(header.as_bytes());
    for v in [3.0f64, 4.5] {
        npy.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(dir.join("pred.npy"), npy).unwrap();
    let s = Scenario::parse(&mk(r#"{ file = "pred.npy", interval = "500ms" }"#), &file).unwrap();
    let p = s.links[0].down.predictor.as_ref().unwrap();
    let PredictorSource::File { trace, .. } = &p.source else {
        panic!("{p:?}")
    };
    assert_eq!(trace.rates_bps, vec![3e6, 4.5e6]);
    assert_eq!(trace.step, Duration::from_millis(500));

    // A bad prediction file: its own line and column, and where the scenario names it.
    let e = Scenario::parse(&mk(r#"{ file = "bad.txt" }"#), &file).unwrap_err();
    assert_eq!(e.file, dir.join("bad.txt"));
    assert_eq!(
        (e.line, e.field.as_deref()),
        (Some(2), Some("rate column 1"))
    );
    assert!(e.message.contains("s.toml:7"), "{e}");
    assert!(e.message.contains("link[0].down.predictor.file"), "{e}");

    // Bad configurations name the scenario's line and the field.
    for (pred, field) in [
        (r#"{ period = "1s" }"#, "link[0].down.predictor"),
        (
            r#"{ kind = "oracle", file = "pred.txt" }"#,
            "link[0].down.predictor",
        ),
        (
            r#"{ kind = "oracle", column = 2 }"#,
            "link[0].down.predictor.column",
        ),
        (
            r#"{ file = "pred.txt", alpha = 0.2 }"#,
            "link[0].down.predictor.alpha",
        ),
        (
            r#"{ kind = "ewma", period = "0s" }"#,
            "link[0].down.predictor.period",
        ),
        (
            r#"{ kind = "harmonic_mean", window = 0 }"#,
            "link[0].down.predictor.window",
        ),
        (
            r#"{ file = "pred.txt", column = 0 }"#,
            "link[0].down.predictor.column",
        ),
    ] {
        let e = Scenario::parse(&mk(pred), &file).unwrap_err();
        assert_eq!(e.field.as_deref(), Some(field), "{pred}: {e}");
        assert_eq!(e.line, Some(7), "{pred}: {e}");
        assert_eq!(e.file, file, "{pred}: {e}");
    }
    let e = Scenario::parse(&mk(r#"{ kind = "oracle", alfa = 0.2 }"#), &file).unwrap_err();
    assert_eq!(e.line, Some(7), "{e}");
    assert!(e.message.contains("alfa"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn capacity_follows_schedules_steps_outages_and_mahimahi() {
    let s = parse(TWO_PATH).unwrap();
    let secs = Duration::from_secs;
    // lte up: 100 Mbit/s for 10 s then 20, looping every 20 s; down 0.5 s from 5 s.
    let lte = &s.links[1].up;
    assert_eq!(lte.capacity_bits(secs(0), secs(1)), Some(100e6));
    assert_eq!(lte.capacity_bits(secs(9), secs(11)), Some(120e6));
    assert_eq!(lte.capacity_bits(secs(25), secs(26)), Some(100e6), "loops");
    assert_eq!(lte.capacity_bits(secs(5), secs(6)), Some(50e6), "outage");
    let nr = &s.links[0].down;
    assert_eq!(nr.capacity_bits(secs(2), secs(4)), Some(400e6));
    let stepped = TWO_PATH.replace(
        "steps = [{ at = \"15s\", delay = \"30ms\" }]",
        "steps = [{ at = \"1500ms\", rate = \"1Mbit/s\" }]",
    );
    let s = parse(&stepped).unwrap();
    assert_eq!(
        s.links[1].up.capacity_bits(secs(1), secs(2)),
        Some(50e6 + 0.5e6)
    );
    // Mahimahi: 4 opportunities in the first 10 ms, looping.
    let trace = Arc::new(trace::parse_mahimahi("0\n0\n5\n10\n", Path::new("t")).unwrap());
    let mm = RateModel::Deliveries {
        trace,
        scale: 1.0,
        looped: true,
    };
    let ms = Duration::from_millis;
    assert_eq!(mm.bits_between(ms(0), ms(10)), Some(3.0 * 12_000.0));
    // [10, 20): the first pass's stamp at 10 and the second pass's 0, 0 and 5.
    assert_eq!(mm.bits_between(ms(10), ms(20)), Some(4.0 * 12_000.0));
}
