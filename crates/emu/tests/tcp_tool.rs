//! The TCP bulk tool over loopback through its library API: byte counts on both sides, the
//! congestion controller asked for, TCP_INFO figures, intervals, MPTCP and a bad controller.

use polypath_emu::tcp::{self, Amount, RecvConfig, Report, Role, SendConfig, TcpToolError};
use std::time::Duration;

const BYTES: u64 = 20_000_000;

/// Runs one transfer of `BYTES` over 127.0.0.1; returns (sender, receiver) reports.
fn transfer(mptcp: bool, cc: &str) -> Result<(Report, Report), TcpToolError> {
    let mut recv_config = RecvConfig::new("127.0.0.1:0".parse().unwrap());
    recv_config.mptcp = mptcp;
    recv_config.cc = Some(cc.to_owned());
    recv_config.interval = Duration::from_millis(50);
    let listener = tcp::listen(&recv_config)?;
    assert_eq!(listener.is_mptcp(), mptcp);
    let addr = listener.local_addr();
    let receiver = std::thread::spawn(move || tcp::recv_one(&listener, &recv_config));
    let mut send_config = SendConfig::new(addr, Amount::Bytes(BYTES));
    send_config.mptcp = mptcp;
    send_config.cc = Some(cc.to_owned());
    send_config.interval = Duration::from_millis(50);
    let sent = tcp::send(&send_config)?;
    let received = receiver.join().expect("receiver thread panicked")?;
    Ok((sent, received))
}

fn check(sent: &Report, received: &Report, mptcp: bool, cc: &str) {
    eprintln!("sender: {}", serde_json::to_string(sent).unwrap());
    eprintln!("receiver: {}", serde_json::to_string(received).unwrap());
    assert_eq!(sent.role, Role::Send);
    assert_eq!(received.role, Role::Recv);
    assert_eq!(sent.bytes, BYTES);
    assert_eq!(received.bytes, sent.bytes);
    assert_eq!(sent.peer, received.local);
    assert_eq!(received.peer, sent.local);
    assert_eq!(sent.cc.as_deref(), Some(cc));
    assert_eq!(received.cc.as_deref(), Some(cc));
    assert_eq!(sent.mptcp, mptcp);
    assert_eq!(received.mptcp, mptcp);
    assert_eq!(
        received.pattern_ok,
        Some(true),
        "the stream arrived byte-exact"
    );
    assert_eq!(sent.pattern_ok, None);
    for r in [sent, received] {
        assert!(r.seconds > 0.0);
        assert!(r.goodput_mbps > 0.0);
        assert!(!r.intervals.is_empty());
        let interval_bytes: u64 = r.intervals.iter().map(|i| i.bytes).sum();
        assert_eq!(interval_bytes, r.bytes, "intervals add up to the total");
        assert!(r.intervals.windows(2).all(|w| w[0].t_s <= w[1].t_s));
        assert!(r.tcp_info.is_some());
    }
    assert!(
        sent.rtt_ms.is_some_and(|r| r > 0.0),
        "rtt {:?}",
        sent.rtt_ms
    );
    assert!(sent.rttvar_ms.is_some());
    assert!(sent.cwnd_segments.is_some_and(|c| c > 0));
    assert!(sent.cwnd_bytes.is_some_and(|c| c > 0));
    assert!(sent.retransmits.is_some());
    for i in &sent.intervals {
        assert!(i.rtt_ms.is_some() && i.cwnd_bytes.is_some() && i.retrans.is_some());
        // Time stalled by the receiver's window, or by the sender's own buffer, is part of
        // the interval, give or take the kernel's clock tick (it counts in jiffies: 10 ms at
        // most, HZ = 100) and 1 ms for the reads around the interval's boundaries.
        for stalled in [i.rwnd_limited_ms, i.sndbuf_limited_ms]
            .into_iter()
            .flatten()
        {
            assert!(stalled <= i.seconds * 1000.0 + 11.0, "interval {i:?}");
        }
    }
    assert!(received.rtt_ms.is_none() && received.intervals[0].rtt_ms.is_none());
    let info = sent.tcp_info.expect("checked above");
    if let Some(acked) = info.bytes_acked {
        assert!(acked >= BYTES, "bytes_acked {acked}");
    }
    // Kernels from 6.7 count timeouts: the intervals' counts add up to the total.
    if let Some(total) = info.total_rto {
        let summed: u32 = sent.intervals.iter().filter_map(|i| i.rtos).sum();
        assert_eq!(summed, u32::from(total), "timeouts per interval");
        assert!(sent.intervals.iter().all(|i| i.rtos.is_some()));
    }
    if !mptcp {
        assert_eq!(sent.subflows, None);
        assert_eq!(received.subflows, None);
        assert_eq!(sent.mptcp_info, None);
    }
    let json = serde_json::to_value(sent).unwrap();
    for field in [
        "role",
        "peer",
        "bytes",
        "seconds",
        "goodput_mbps",
        "cc",
        "mptcp",
        "subflows",
        "rtt_ms",
        "cwnd_bytes",
        "retransmits",
        "intervals",
    ] {
        assert!(json.get(field).is_some(), "JSON report has no {field}");
    }
}

#[test]
fn tcp_transfer_with_cubic_and_reno() {
    for cc in ["cubic", "reno"] {
        let (sent, received) = transfer(false, cc).unwrap_or_else(|e| panic!("{cc}: {e}"));
        check(&sent, &received, false, cc);
    }
}

#[test]
fn mptcp_transfer_on_loopback() {
    let (sent, received) = match transfer(true, "cubic") {
        Ok(reports) => reports,
        Err(e) if e.is_mptcp_unsupported() => {
            eprintln!("SKIPPED: the kernel has no MPTCP: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    check(&sent, &received, true, "cubic");
    for r in [&sent, &received] {
        match (&r.mptcp_info, r.subflows) {
            (Some(info), Some(n)) => {
                assert!(n >= 1, "{:?}: {n} subflows, {info:?}", r.role);
            }
            (None, None) => eprintln!("{:?}: MPTCP_INFO not available", r.role),
            other => panic!("{:?}: mptcp_info and subflows disagree: {other:?}", r.role),
        }
    }
    if let Some(sent_info) = sent.mptcp_info
        && let Some(bytes_sent) = sent_info.bytes_sent
    {
        assert!(bytes_sent >= BYTES, "mptcpi_bytes_sent {bytes_sent}");
    }
}

#[test]
fn time_limited_send() {
    let recv_config = RecvConfig::new("127.0.0.1:0".parse().unwrap());
    let listener = tcp::listen(&recv_config).unwrap();
    let addr = listener.local_addr();
    let receiver = std::thread::spawn(move || tcp::recv_one(&listener, &recv_config));
    let mut send_config = SendConfig::new(addr, Amount::Time(Duration::from_millis(300)));
    send_config.interval = Duration::from_millis(100);
    let sent = tcp::send(&send_config).unwrap();
    let received = receiver.join().unwrap().unwrap();
    assert!(sent.bytes > 0);
    assert_eq!(received.bytes, sent.bytes);
    assert!(sent.seconds >= 0.3);
    assert!(sent.cc.is_some());
}

/// `rate` paces the writes: half a second at 16 Mbit/s sends what the pacing allows by
/// then (at most 1 MB and a piece) however fast loopback is.
#[test]
fn rate_limited_send() {
    let recv_config = RecvConfig::new("127.0.0.1:0".parse().unwrap());
    let listener = tcp::listen(&recv_config).unwrap();
    let addr = listener.local_addr();
    let receiver = std::thread::spawn(move || tcp::recv_one(&listener, &recv_config));
    let mut send_config = SendConfig::new(addr, Amount::Time(Duration::from_millis(500)));
    send_config.rate = Some(16e6);
    let sent = tcp::send(&send_config).unwrap();
    let received = receiver.join().unwrap().unwrap();
    assert_eq!(received.bytes, sent.bytes);
    let most = polypath_sim::traffic::AppRate::new(16e6)
        .unwrap()
        .allowed(Duration::from_millis(500));
    println!("sent {} bytes, pacing allows {most}", sent.bytes);
    assert!(sent.bytes <= most, "{} > {most}", sent.bytes);
    // Loopback is never the limit; only a stalled machine could leave it far below.
    assert!(sent.bytes >= most / 2, "{} < {most} / 2", sent.bytes);
    let mut bad = SendConfig::new(addr, Amount::Bytes(1));
    bad.rate = Some(0.0);
    assert!(matches!(tcp::send(&bad), Err(TcpToolError::Config(_))));
}

#[test]
fn unknown_congestion_controller_is_named() {
    let listener = tcp::listen(&RecvConfig::new("127.0.0.1:0".parse().unwrap())).unwrap();
    let mut config = SendConfig::new(listener.local_addr(), Amount::Bytes(1000));
    config.cc = Some("no-such-cc".into());
    let err = tcp::send(&config).unwrap_err();
    eprintln!("{err}");
    assert!(matches!(err, TcpToolError::UnknownCongestionControl { .. }));
    let text = err.to_string();
    assert!(text.contains("\"no-such-cc\""), "{text}");
    assert!(text.contains("tcp_available_congestion_control"), "{text}");
    assert!(text.contains("cubic"), "{text}");

    let mut recv_config = RecvConfig::new("127.0.0.1:0".parse().unwrap());
    recv_config.cc = Some("no-such-cc".into());
    let err = tcp::listen(&recv_config).unwrap_err();
    assert!(err.to_string().contains("\"no-such-cc\""), "{err}");
}

#[test]
fn connect_error_names_the_address() {
    // A port just freed is very likely closed.
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let err = tcp::send(&SendConfig::new(addr, Amount::Bytes(1))).unwrap_err();
    let text = err.to_string();
    assert!(text.contains(&addr.to_string()), "{text}");
}
