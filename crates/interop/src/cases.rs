//! The cases of the matrix. Each runs on a fresh connection (or two) between a client of
//! one stack and a server of the other, and returns what it measured or why it failed.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::hq::{SECRET, Site};
use crate::nat::{NatPlan, RebindPlan, Rebinding};
use crate::peer::{ALPN, CaseError, Conn, Pair, PathBytes, RecvS, SendS, Setup, Tls};
use crate::report::Stack;

/// One case of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// Handshake completes and both sides agree on the ALPN protocol.
    Handshake,
    /// The server validates the client's address with a Retry first; the handshake then
    /// completes (the client must echo the token and check retry_source_connection_id).
    Retry,
    /// The client sends the transfer size on one stream; SHA-256 compared.
    Upload,
    /// The client asks for the transfer size on a bidirectional stream and the server
    /// sends it; SHA-256 compared.
    Download,
    /// More bidirectional streams than the peer allows at once ([`STREAM_COUNT`] echo
    /// exchanges), so MAX_STREAMS must come as streams complete.
    Streams,
    /// RESET_STREAM and STOP_SENDING codes reach the peer.
    StreamReset,
    /// 1000 DATAGRAM frames (RFC 9221) each way; see [`DATAGRAM_PASS_PERCENT`].
    Datagrams,
    /// 1-RTT key updates forced on both sides during an upload.
    KeyUpdate,
    /// Application close codes reach the peer (client closes; then, on a second
    /// connection, the server closes).
    Close,
    /// Both sides negotiate the multipath extension (initial_max_path_id).
    MultipathHandshake,
    /// The client opens a second path from 127.0.0.2; both sides see it validated.
    MultipathSecondPath,
    /// Upload over two paths; both carry data; the client abandons the second path
    /// mid-transfer; the transfer completes intact.
    MultipathUpload,
    /// Download over two paths, with the same checks as [`Case::MultipathUpload`].
    MultipathDownload,
    /// The client marks the second path backup, then available again; the server sees
    /// each status (PATH_STATUS_BACKUP, PATH_STATUS_AVAILABLE).
    MultipathPathStatus,
    /// Upload over two paths where the server abandons the second path mid-transfer.
    MultipathServerAbandon,
    /// With two paths allowed at once, the client opens a second path, abandons it, and
    /// opens a third (path ID 2) which needs the peer to raise its limit (MAX_PATH_ID);
    /// an upload then uses the new path.
    MultipathReopen,
    /// The key-update case with two paths open (the draft's per-path nonces under new
    /// keys).
    MultipathKeyUpdate,
    /// Download over two paths where the client abandons path 0 (the handshake's path)
    /// mid-transfer; the rest goes over the second path.
    MultipathAbandonInitial,
    /// HTTP/0.9 (ALPN `hq-interop`): the client downloads four files (1 kB to the transfer
    /// size, one in a subdirectory) over parallel streams; each arrives byte for byte; a
    /// request for a file outside the served directory is answered with RESET_STREAM.
    HqInterop,
    /// The client offers ChaCha20-Poly1305 only: the handshake agrees on it (as polypath
    /// reports) and an upload passes.
    ChaCha20,
    /// The handshake and an upload over IPv6 loopback (`::1`); each side sees an IPv6 peer.
    Ipv6,
    /// ECN (RFC 9000 section 13.4) over loopback, an upload then a download: polypath's
    /// marks validate (the peer read the ECT(0) codepoints and reported them in ACK_ECN
    /// frames that add up), and the peer's marks keep coming to the end (it validated
    /// polypath's reports in turn, or it would have stopped marking).
    Ecn,
    /// hq-interop with [`MULTIPLEX_FILES`] files at once under small flow-control windows
    /// and stream limits ([`crate::peer::SMALL_WINDOWS`]), so that MAX_STREAMS,
    /// MAX_STREAM_DATA and MAX_DATA must keep coming.
    Multiplexing,
    /// A download through a NAT that gives the client a new port twice mid-transfer
    /// ([`REBIND_AFTER_BYTES`]): the server follows each new address (RFC 9000 section
    /// 9.3), validating it with PATH_CHALLENGE, and the file arrives intact.
    RebindPort,
    /// Like [`Case::RebindPort`], each rebinding giving the client a new address and port
    /// (127.0.0.11, 127.0.0.12).
    RebindAddr,
    /// Active migration (RFC 9000 section 9.2): a quarter into a download, the client moves
    /// to a new local address (127.0.0.2); the server follows and validates it, and the
    /// file arrives intact.
    Migration,
    /// Session resumption: after an upload on a first connection (which receives the
    /// server's session ticket), the client connects again with the same TLS client
    /// configuration; the polypath side reports the first handshake full and the second
    /// resumed, and an upload passes on it.
    Resumption,
    /// 0-RTT: after an upload on a first connection (whose ticket allows early data), the
    /// client connects again and writes a request on a stream in 0-RTT, before its
    /// handshake completes; the server reads it intact, the client learns the early data
    /// was accepted, and the polypath side counts 0-RTT packets (sent or opened).
    ZeroRtt,
}

/// The one-way delay of the NAT of the resumption and 0-RTT cases (matrix and runner): a
/// 100 ms round trip, as on a cellular path. On bare loopback the handshake completes in
/// about a millisecond, and the noq client, which writes its requests right after it
/// starts the connection, often sent them in 1-RTT packets after the handshake: 9 of 10
/// attempts on loopback, 3 of 10 behind a 20 ms round trip, none of 10 behind 100 ms (also
/// with both cores busy).
pub const RESUMPTION_ONE_WAY_DELAY: Duration = Duration::from_millis(50);

/// Bytes forwarded (both directions) after which the NAT of [`Case::RebindPort`] and
/// [`Case::RebindAddr`] rebinds: twice, well inside the default 10 MiB download.
pub const REBIND_AFTER_BYTES: [u64; 2] = [1_500_000, 5_000_000];

/// Files of [`Case::Multiplexing`] (1 kB to 33 kB each, two past the stream window).
pub const MULTIPLEX_FILES: usize = 200;

impl Case {
    /// Every case, in the order the matrix runs them.
    pub const ALL: [Case; 28] = [
        Case::Handshake,
        Case::Retry,
        Case::Upload,
        Case::Download,
        Case::Streams,
        Case::StreamReset,
        Case::Datagrams,
        Case::KeyUpdate,
        Case::Close,
        Case::ChaCha20,
        Case::Ipv6,
        Case::Ecn,
        Case::HqInterop,
        Case::Multiplexing,
        Case::RebindPort,
        Case::RebindAddr,
        Case::Migration,
        Case::Resumption,
        Case::ZeroRtt,
        Case::MultipathHandshake,
        Case::MultipathSecondPath,
        Case::MultipathPathStatus,
        Case::MultipathUpload,
        Case::MultipathDownload,
        Case::MultipathAbandonInitial,
        Case::MultipathServerAbandon,
        Case::MultipathReopen,
        Case::MultipathKeyUpdate,
    ];

    /// The name used in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Case::Handshake => "handshake",
            Case::Retry => "retry",
            Case::Upload => "upload",
            Case::Download => "download",
            Case::Streams => "streams",
            Case::StreamReset => "stream-reset",
            Case::Datagrams => "datagrams",
            Case::KeyUpdate => "key-update",
            Case::Close => "close",
            Case::MultipathHandshake => "mp-handshake",
            Case::MultipathSecondPath => "mp-second-path",
            Case::MultipathPathStatus => "mp-path-status",
            Case::MultipathUpload => "mp-upload",
            Case::MultipathDownload => "mp-download",
            Case::MultipathAbandonInitial => "mp-abandon-initial",
            Case::MultipathServerAbandon => "mp-server-abandon",
            Case::MultipathReopen => "mp-reopen",
            Case::MultipathKeyUpdate => "mp-key-update",
            Case::HqInterop => "hq-interop",
            Case::ChaCha20 => "chacha20",
            Case::Ipv6 => "ipv6",
            Case::Ecn => "ecn",
            Case::Multiplexing => "multiplexing",
            Case::RebindPort => "rebind-port",
            Case::RebindAddr => "rebind-addr",
            Case::Migration => "migration",
            Case::Resumption => "resumption",
            Case::ZeroRtt => "zero-rtt",
        }
    }

    /// The case with this name.
    pub fn from_name(name: &str) -> Option<Case> {
        Case::ALL.into_iter().find(|c| c.name() == name)
    }

    fn setup(self) -> Setup {
        Setup {
            retry: self == Case::Retry,
            small_windows: self == Case::Multiplexing,
            ipv6: self == Case::Ipv6,
            max_paths: (self == Case::MultipathReopen).then_some(2),
            migration: self == Case::Migration,
            nat: match self {
                Case::RebindPort => Some(Rebinding::Port),
                Case::RebindAddr => Some(Rebinding::Address),
                _ => None,
            }
            .map(|kind| NatPlan {
                rebind: Some(RebindPlan {
                    kind,
                    after_bytes: REBIND_AFTER_BYTES.to_vec(),
                }),
                one_way_delay: Duration::ZERO,
            })
            .or_else(|| {
                matches!(self, Case::Resumption | Case::ZeroRtt).then_some(NatPlan {
                    rebind: None,
                    one_way_delay: RESUMPTION_ONE_WAY_DELAY,
                })
            }),
            multipath: matches!(
                self,
                Case::MultipathHandshake
                    | Case::MultipathSecondPath
                    | Case::MultipathPathStatus
                    | Case::MultipathUpload
                    | Case::MultipathDownload
                    | Case::MultipathAbandonInitial
                    | Case::MultipathKeyUpdate
                    | Case::MultipathServerAbandon
                    | Case::MultipathReopen
            ),
        }
    }
}

/// Sizes of the cases.
#[derive(Debug, Clone)]
pub struct Sizes {
    /// Bytes of each stream transfer.
    pub transfer_bytes: usize,
    /// Datagrams sent each way in [`Case::Datagrams`].
    pub datagrams: usize,
}

impl Default for Sizes {
    fn default() -> Self {
        Sizes {
            transfer_bytes: 10 * 1024 * 1024,
            datagrams: 1000,
        }
    }
}

/// Least share of datagrams that must arrive (each intact, none twice), or be accounted
/// for by a loss the sender saw, for [`Case::Datagrams`] to pass. DATAGRAM frames are never
/// retransmitted, so a loss on loopback (a full socket buffer, frequent when the machine is
/// busy) is legal, and the sender's loss detection sees it; beyond 1 % of datagrams missing
/// without such a loss points to a bug.
pub const DATAGRAM_PASS_PERCENT: usize = 99;

/// The per-path byte count the receiver must see on each path, before the abandonment,
/// for a multipath transfer to count as carried on both paths.
pub const MIN_BYTES_PER_PATH: u64 = 16 * 1024;

/// Shared inputs of every case of a run.
pub struct Context {
    /// TLS configurations.
    pub tls: Tls,
    /// TLS configurations offering `hq-interop`.
    pub hq_tls: Tls,
    /// TLS configurations whose client offers ChaCha20-Poly1305 only.
    pub chacha_tls: Tls,

    /// The data every transfer sends.
    pub data: Bytes,
    /// Case sizes.
    pub sizes: Sizes,
}

impl Context {
    /// Generates the transfer data (pseudo-random, fixed seed) and a certificate.
    pub fn new(sizes: Sizes) -> Result<Self, CaseError> {
        Ok(Context {
            tls: Tls::new()?,
            hq_tls: Tls::with_alpn(crate::hq::ALPN)?,
            chacha_tls: Tls::with(ALPN, polypath_quic::crypto::CipherSuites::ChaCha20Only)?,

            data: pattern(sizes.transfer_bytes, 0x5eed),
            sizes,
        })
    }
}

/// `len` pseudo-random bytes from `seed` (xorshift64*), incompressible and reproducible;
/// different seeds give different streams.
pub(crate) fn pattern(len: usize, seed: u64) -> Bytes {
    // Multiplying by an odd constant maps distinct seeds to distinct states; the only
    // state xorshift cannot use is 0.
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).max(1);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out.into()
}

/// Runs one case between a fresh client and server and returns its detail on success.
pub async fn run(
    ctx: &Context,
    case: Case,
    client: Stack,
    server: Stack,
) -> Result<String, CaseError> {
    // Resumption gets configurations of its own, fresh for each direction: their session
    // stores (the client's tickets, the server's sessions) must start empty.
    let fresh;
    let tls = match case {
        Case::HqInterop | Case::Multiplexing => &ctx.hq_tls,
        Case::ChaCha20 => &ctx.chacha_tls,
        Case::Resumption => {
            fresh = Tls::with_session_tickets()?;
            &fresh
        }
        Case::ZeroRtt => {
            fresh = Tls::with_zero_rtt()?;
            &fresh
        }
        _ => &ctx.tls,
    };
    let mut pair = Pair::connect(client, server, tls, case.setup()).await?;
    let result = match case {
        Case::Handshake => handshake(&pair),
        Case::Retry => retry(&pair),
        Case::Upload => transfer(ctx, &pair, Direction::Upload, |_| {})
            .await
            .map(|t| t.summary()),
        Case::Download => transfer(ctx, &pair, Direction::Download, |_| {})
            .await
            .map(|t| t.summary()),
        Case::Streams => streams(&pair).await,
        Case::StreamReset => stream_reset(&pair).await,
        Case::Datagrams => datagrams(ctx, &pair).await,
        Case::KeyUpdate => key_update(ctx, &pair).await,
        Case::MultipathHandshake => multipath_handshake(&pair),
        Case::MultipathSecondPath => second_path(&pair).await.map(|(_, d)| d),
        Case::MultipathPathStatus => path_status(&pair).await,
        Case::MultipathUpload => {
            multipath_transfer(ctx, &pair, Direction::Upload, Abandon::Second).await
        }
        Case::MultipathDownload => {
            multipath_transfer(ctx, &pair, Direction::Download, Abandon::Second).await
        }
        Case::MultipathKeyUpdate => match second_path(&pair).await {
            Ok((id, _)) => key_update(ctx, &pair).await.map(|d| {
                format!(
                    "paths 0 and {id} open; {d}; client (sender) paths [{}]",
                    show_paths(&pair.client.path_bytes(), pair.client.stack())
                )
            }),
            Err(e) => Err(e),
        },
        Case::MultipathReopen => reopen(ctx, &pair).await,
        Case::MultipathServerAbandon => {
            multipath_transfer(ctx, &pair, Direction::Upload, Abandon::SecondByServer).await
        }
        Case::MultipathAbandonInitial => {
            multipath_transfer(ctx, &pair, Direction::Download, Abandon::Initial).await
        }
        Case::Close => close(ctx, &pair).await,
        Case::ChaCha20 => chacha20(ctx, &pair).await,
        Case::Ipv6 => ipv6(ctx, &pair).await,
        Case::Ecn => ecn(ctx, &pair).await,
        Case::RebindPort | Case::RebindAddr => rebinding(ctx, &pair).await,
        Case::Migration => migration(ctx, &pair).await,
        Case::Resumption => resumption(ctx, &mut pair, tls, case.setup()).await,
        Case::ZeroRtt => zero_rtt(ctx, &mut pair, tls, case.setup()).await,
        Case::HqInterop => {
            let files = [
                ("/small".to_string(), 1000),
                ("/medium".to_string(), 100_000),
                ("/large".to_string(), ctx.sizes.transfer_bytes),
                ("/dir/nested".to_string(), 5000),
            ];
            hq(&pair, case, &files).await
        }
        Case::Multiplexing => {
            let files: Vec<(String, usize)> = (0..MULTIPLEX_FILES)
                .map(|i| (format!("/f{i:03}"), 1000 + (i * 4999) % 32_000))
                .collect();
            hq(&pair, case, &files).await
        }
    };
    pair.shutdown().await;
    result
}

/// hq-interop: the server serves `files` from a fresh directory; the client downloads them
/// all at once and, on one more stream, asks for the file beside the directory.
async fn hq(pair: &Pair, case: Case, files: &[(String, usize)]) -> Result<String, CaseError> {
    let base = std::env::temp_dir().join(format!(
        "pp-interop-{}-{}-{}",
        std::process::id(),
        case.name(),
        pair.client.stack()
    ));
    let site = Site::create(base.join("site"), files)?;
    let out = base.join("downloads");
    let www = site.www();
    let paths = site.paths();
    let started = Instant::now();
    let server = async {
        match &pair.server {
            Conn::Polypath(c) => polypath_cli::hq::serve_connection(c, &www)
                .await
                .map(|s| (s.files, s.refused)),
            Conn::Noq { conn, .. } => crate::hq::noq_serve(conn, &www)
                .await
                .map(|s| (s.files, s.refused)),
        }
    };
    let client = async {
        let fetched = match &pair.client {
            Conn::Polypath(c) => polypath_cli::hq::fetch(c, &paths, &out)
                .await
                .map(|f| f.len()),
            Conn::Noq { conn, .. } => crate::hq::noq_fetch(conn, &paths, &out)
                .await
                .map(|f| f.len()),
        };
        let elapsed = started.elapsed();
        let traversal = async {
            let (mut s, mut r) = pair.client.open_bi().await?;
            s.write_all(format!("GET /../{SECRET}\r\n").as_bytes())
                .await?;
            s.finish()?;
            r.read_until_reset().await
        }
        .await;
        // The server serves until the client closes.
        pair.client.close(0, b"done");
        (fetched, elapsed, traversal)
    };
    let (served, (fetched, elapsed, traversal)) = tokio::join!(server, client);
    let count = fetched?;
    let bytes = site.check_downloads(&out)?;
    let _ = std::fs::remove_dir_all(&base);
    let (served_files, refused) = served?;
    let (read, code) = traversal?;
    if code != Some(polypath_cli::hq::ERROR_BAD_REQUEST) || read != 0 {
        return Err(format!(
            "GET /../{SECRET}: {read} bytes then {code:?}, expected RESET_STREAM {} at once",
            polypath_cli::hq::ERROR_BAD_REQUEST
        ));
    }
    if count != paths.len() || served_files != paths.len() as u64 || refused.len() != 1 {
        return Err(format!(
            "{count} of {} files downloaded, the server served {served_files} and refused {refused:?}",
            paths.len()
        ));
    }
    let mut detail = format!(
        "{count} files ({bytes} B) downloaded over parallel streams, SHA-256 equal, {:.0} ms; \
         GET /../{SECRET} refused (RESET_STREAM {}): {}",
        elapsed.as_secs_f64() * 1e3,
        polypath_cli::hq::ERROR_BAD_REQUEST,
        refused[0]
    );
    if case == Case::Multiplexing {
        detail = format!("{detail}; {}", flow_control_frames(pair)?);
    }
    Ok(detail)
}

/// The flow-control frames the server (stream limit) and the client (data windows) sent,
/// as noq counted them (sent when noq is that side, received otherwise); fails if a limit
/// was never raised, which would mean the small windows were not in force.
fn flow_control_frames(pair: &Pair) -> Result<String, CaseError> {
    let (noq, noq_is_server) = if pair.server.stack() == Stack::Noq {
        (&pair.server, true)
    } else {
        (&pair.client, false)
    };
    let (tx, rx) = noq
        .noq_frame_stats()
        .ok_or("the multiplexing case needs a noq side")?;
    let (from_server, from_client) = if noq_is_server { (tx, rx) } else { (rx, tx) };
    let detail = format!(
        "server sent MAX_STREAMS(bidi) {}, client sent MAX_STREAM_DATA {} MAX_DATA {}, \
         client sent STREAMS_BLOCKED {} (noq's counts)",
        from_server.max_streams_bidi,
        from_client.max_stream_data,
        from_client.max_data,
        from_client.streams_blocked_bidi
    );
    if from_server.max_streams_bidi == 0 || from_client.max_stream_data == 0 {
        return Err(format!("limits never raised: {detail}"));
    }
    Ok(detail)
}

async fn chacha20(ctx: &Context, pair: &Pair) -> Result<String, CaseError> {
    let polypath = if pair.client.stack() == Stack::Polypath {
        &pair.client
    } else {
        &pair.server
    };
    let suite = polypath.cipher_suite();
    if suite != Some(rustls::CipherSuite::TLS13_CHACHA20_POLY1305_SHA256) {
        return Err(format!("the handshake agreed on {suite:?}"));
    }
    let t = transfer(ctx, pair, Direction::Upload, |_| {}).await?;
    Ok(format!(
        "{suite:?} agreed (client offered only it); upload: {}",
        t.summary(),
        suite = suite.unwrap_or(rustls::CipherSuite::Unknown(0))
    ))
}

/// Of the marked packets a peer sends, the share that must arrive marked after the first
/// few: a peer whose validation of polypath's reports failed stops marking after ten or so.
const ECN_MARKED_SHARE: f64 = 0.9;

async fn ecn(ctx: &Context, pair: &Pair) -> Result<String, CaseError> {
    let up = transfer(ctx, pair, Direction::Upload, |_| {}).await?;
    let down = transfer(ctx, pair, Direction::Download, |_| {}).await?;
    let polypath = if pair.client.stack() == Stack::Polypath {
        &pair.client
    } else {
        &pair.server
    };
    let Some((ecn, received)) = polypath.ecn() else {
        return Err("polypath reports no path".into());
    };
    if ecn.state != polypath_quic::ecn::EcnState::Capable {
        return Err(format!(
            "polypath's marks did not validate: {} ({})",
            ecn.state.name(),
            ecn.failure.unwrap_or("no reason")
        ));
    }
    let marked = ecn.received_ect0 + ecn.received_ect1 + ecn.received_ce;
    if (marked as f64) < ECN_MARKED_SHARE * received as f64 {
        return Err(format!(
            "only {marked} of the {received} packets from the peer carried an ECN mark"
        ));
    }
    Ok(format!(
        "polypath's marks validated ({} sent ECT(0), the peer reported {}); {marked} of \
         {received} packets from the peer marked ECT(0); upload: {}; download: {}",
        ecn.marked_sent,
        ecn.peer_reported_ect0,
        up.summary(),
        down.summary()
    ))
}

async fn ipv6(ctx: &Context, pair: &Pair) -> Result<String, CaseError> {
    let (c, s) = (pair.client.peer_addr(), pair.server.peer_addr());
    if !c.is_some_and(|a| a.is_ipv6()) || !s.is_some_and(|a| a.is_ipv6()) {
        return Err(format!(
            "peer addresses: client sees {c:?}, server sees {s:?}"
        ));
    }
    let t = transfer(ctx, pair, Direction::Upload, |_| {}).await?;
    Ok(format!(
        "client sees server {}, server sees client {}; upload: {}",
        c.map(|a| a.to_string()).unwrap_or_default(),
        s.map(|a| a.to_string()).unwrap_or_default(),
        t.summary()
    ))
}

/// [`Case::Resumption`]: an upload, a second connection, an upload on it.
async fn resumption(
    ctx: &Context,
    pair: &mut Pair,
    tls: &Tls,
    setup: Setup,
) -> Result<String, CaseError> {
    let first = transfer(ctx, pair, Direction::Upload, |_| {}).await?;
    let polypath = |pair: &Pair| {
        if pair.client.stack() == Stack::Polypath {
            pair.client.is_resumed()
        } else {
            pair.server.is_resumed()
        }
    };
    let before = polypath(pair);
    pair.reconnect(tls, &setup).await?;
    let after = polypath(pair);
    if before != Some(false) || after != Some(true) {
        return Err(format!(
            "polypath reports resumed {before:?} on the first connection and {after:?} on the \
             second (expected false, true)"
        ));
    }
    let second = transfer(ctx, pair, Direction::Upload, |_| {}).await?;
    Ok(format!(
        "first connection full handshake, second resumed ({:.1} ms); uploads: {}; {}",
        pair.handshake_time.as_secs_f64() * 1e3,
        first.summary(),
        second.summary()
    ))
}

/// [`Case::ZeroRtt`]: an upload, then a request in early data on a second connection.
async fn zero_rtt(
    ctx: &Context,
    pair: &mut Pair,
    tls: &Tls,
    setup: Setup,
) -> Result<String, CaseError> {
    transfer(ctx, pair, Direction::Upload, |_| {}).await?;
    let request = pattern(1000, 0x0e7);
    // The case runs through a NAT with a 100 ms round trip (RESUMPTION_ONE_WAY_DELAY), so
    // the request, written as soon as the connection starts, leaves before the handshake
    // completes.
    let (received, accepted) = pair.reconnect_early(tls, &setup, &request).await?;
    if received != request[..] {
        return Err(format!(
            "the server read {} B, not the {} B request",
            received.len(),
            request.len()
        ));
    }
    if !accepted {
        return Err("the server rejected the early data".into());
    }
    let (polypath, role) = if pair.client.stack() == Stack::Polypath {
        (&pair.client, "sent")
    } else {
        (&pair.server, "opened")
    };
    if polypath.is_resumed() != Some(true) {
        return Err("polypath reports no resumption".into());
    }
    let packets = polypath.zero_rtt_packets().unwrap_or(0);
    if packets == 0 {
        return Err(format!(
            "polypath {role} no 0-RTT packet (the request arrived intact, in 1-RTT)"
        ));
    }
    Ok(format!(
        "{} B request in early data, accepted; polypath {role} {packets} 0-RTT \
         packet(s); second handshake {:.1} ms",
        request.len(),
        pair.handshake_time.as_secs_f64() * 1e3
    ))
}

fn handshake(pair: &Pair) -> Result<String, CaseError> {
    let client = pair.client.alpn();
    let server = pair.server.alpn();
    let show = |a: &Option<Vec<u8>>| {
        a.as_deref()
            .map(|p| format!("{:?}", String::from_utf8_lossy(p)))
            .unwrap_or_else(|| "none".into())
    };
    if client.as_deref() != Some(ALPN) || server.as_deref() != Some(ALPN) {
        return Err(format!(
            "ALPN not agreed: client {}, server {}, offered {:?}",
            show(&client),
            show(&server),
            String::from_utf8_lossy(ALPN)
        ));
    }
    let polypath = if pair.client.stack() == Stack::Polypath {
        &pair.client
    } else {
        &pair.server
    };
    Ok(format!(
        "ALPN {} on both sides; cipher suite {:?}; handshake {:.1} ms",
        show(&client),
        polypath
            .cipher_suite()
            .unwrap_or(rustls::CipherSuite::Unknown(0)),
        pair.handshake_time.as_secs_f64() * 1e3
    ))
}

fn retry(pair: &Pair) -> Result<String, CaseError> {
    let handshake = handshake(pair)?;
    match pair.server_retries {
        Some(0) => Err("the noq server was asked for a Retry but sent none".into()),
        Some(n) => Ok(format!(
            "noq server sent {n} Retry, then accepted the validated attempt; {handshake}"
        )),
        None => Ok(format!(
            "polypath server configured to send a Retry to every new client; {handshake}"
        )),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// Client to server.
    Upload,
    /// Server to client.
    Download,
}

/// What a transfer measured.
struct Transferred {
    bytes: u64,
    elapsed: Duration,
}

impl Transferred {
    fn summary(&self) -> String {
        format!(
            "{} bytes, SHA-256 equal, {:.0} ms ({:.1} Mbit/s)",
            self.bytes,
            self.elapsed.as_secs_f64() * 1e3,
            self.bytes as f64 * 8.0 / self.elapsed.as_secs_f64().max(1e-9) / 1e6
        )
    }
}

/// Moves `ctx.data` over one stream in `direction` and checks length and SHA-256.
/// `progress` is called with the bytes received so far after every chunk the receiver
/// reads, so a case can act mid-transfer.
async fn transfer(
    ctx: &Context,
    pair: &Pair,
    direction: Direction,
    progress: impl FnMut(u64),
) -> Result<Transferred, CaseError> {
    let started = Instant::now();
    let data = &ctx.data;
    // The streams are held until the end, so that none is dropped (and reset or stopped)
    // early.
    let (len, hash, _streams): (u64, [u8; 32], (Vec<SendS>, Vec<RecvS>)) = match direction {
        Direction::Upload => {
            let send = async {
                let mut s = pair.client.open_uni().await?;
                s.write_all(data).await?;
                s.finish()?;
                Ok::<_, CaseError>(s)
            };
            let recv = async {
                let mut r = pair.server.accept_uni().await?;
                let got = read_with_progress(&mut r, progress).await?;
                Ok::<_, CaseError>((got, r))
            };
            let (s, ((len, hash), r)) = tokio::try_join!(send, recv)?;
            (len, hash, (vec![s], vec![r]))
        }
        Direction::Download => {
            let request = format!("GET {}", data.len());
            let client = async {
                let (mut s, mut r) = pair.client.open_bi().await?;
                s.write_all(request.as_bytes()).await?;
                s.finish()?;
                let got = read_with_progress(&mut r, progress).await?;
                Ok::<_, CaseError>((got, s, r))
            };
            let server = async {
                let (mut s, mut r) = pair.server.accept_bi().await?;
                let mut asked = Vec::new();
                while let Some(c) = r.read_chunk().await? {
                    asked.extend_from_slice(&c);
                }
                if asked != request.as_bytes() {
                    return Err(format!(
                        "server got request {:?}, expected {request:?}",
                        String::from_utf8_lossy(&asked)
                    ));
                }
                s.write_all(data).await?;
                s.finish()?;
                Ok::<_, CaseError>((s, r))
            };
            let (((len, hash), cs, cr), ss) = tokio::try_join!(client, server)?;
            (len, hash, (vec![cs, ss.0], vec![cr, ss.1]))
        }
    };
    let elapsed = started.elapsed();
    let expected: [u8; 32] = Sha256::digest(data).into();
    if len != data.len() as u64 || hash != expected {
        return Err(format!(
            "received {len} bytes with SHA-256 {}, sent {} bytes with SHA-256 {}",
            hex::encode(hash),
            data.len(),
            hex::encode(expected)
        ));
    }
    Ok(Transferred {
        bytes: len,
        elapsed,
    })
}

async fn read_with_progress(
    r: &mut RecvS,
    mut progress: impl FnMut(u64),
) -> Result<(u64, [u8; 32]), CaseError> {
    let mut hash = Sha256::new();
    let mut len = 0u64;
    while let Some(chunk) = r.read_chunk().await? {
        len += chunk.len() as u64;
        hash.update(&chunk);
        progress(len);
    }
    Ok((len, hash.finalize().into()))
}

/// [`Case::RebindPort`] and [`Case::RebindAddr`]: a download through the rebinding NAT;
/// then the NAT must have rebound as planned, the server must send to the client's last
/// address, and it must have validated each new one: polypath counts the address changes
/// it followed (each starts a PATH_CHALLENGE), noq counts the PATH_CHALLENGE frames it
/// sent.
async fn rebinding(ctx: &Context, pair: &Pair) -> Result<String, CaseError> {
    let t = transfer(ctx, pair, Direction::Download, |_| {}).await?;
    let nat = pair.nat.as_ref().ok_or("the case has no NAT")?;
    let log = nat.log();
    if let Some(e) = &log.error {
        return Err(format!("the NAT failed: {e}"));
    }
    let planned = REBIND_AFTER_BYTES.len();
    if nat.rebindings() != planned {
        return Err(format!(
            "the NAT rebound {} times, not {planned} ({} B forwarded)",
            nat.rebindings(),
            log.up.1 + log.down.1
        ));
    }
    let last = log.outside.last().copied();
    let seen = pair.server.peer_addr();
    if seen != last {
        return Err(format!(
            "the server sends to {seen:?}, the client is at {last:?} (NAT addresses {:?})",
            log.outside
        ));
    }
    let validated = match (&pair.server, pair.server.noq_frame_stats()) {
        (Conn::Polypath(c), _) => {
            let changes = c.stats().peer_address_changes;
            if changes != planned as u64 {
                return Err(format!(
                    "polypath followed {changes} address changes, the NAT made {planned}"
                ));
            }
            let validated = c.stats().peer_addresses_validated;
            if validated != changes {
                return Err(format!(
                    "polypath followed {changes} address changes and validated {validated}"
                ));
            }
            format!(
                "polypath followed {changes} address changes (PATH_CHALLENGE each) and \
                 validated {validated}"
            )
        }
        (_, Some((sent, _))) => {
            if sent.path_challenge < planned as u64 {
                return Err(format!(
                    "noq sent {} PATH_CHALLENGE for {planned} new addresses",
                    sent.path_challenge
                ));
            }
            format!("noq sent {} PATH_CHALLENGE", sent.path_challenge)
        }
        (_, None) => return Err("no frame counts from the noq server".into()),
    };
    let addrs: Vec<String> = log.outside.iter().map(|a| a.to_string()).collect();
    Ok(format!(
        "{}; the server saw the client at {}; {validated}",
        t.summary(),
        addrs.join(" -> ")
    ))
}

/// [`Case::Migration`]: the client migrates a quarter into a download; then the server
/// must send to the new address and have validated it (polypath counts the address changes
/// it followed and validated, noq the PATH_CHALLENGE frames it sent), and a polypath
/// client must have validated its new path.
async fn migration(ctx: &Context, pair: &Pair) -> Result<String, CaseError> {
    let quarter = ctx.data.len() as u64 / 4;
    let mut moved: Option<Result<std::net::SocketAddr, CaseError>> = None;
    let t = transfer(ctx, pair, Direction::Download, |received| {
        if received >= quarter && moved.is_none() {
            moved = Some(pair.migrate_client());
        }
    })
    .await?;
    let local = moved.ok_or("the download ended before the migration point")??;
    let seen = pair.server.peer_addr();
    if seen.map(|a| a.ip()) != Some(local.ip()) {
        return Err(format!(
            "the client moved to {local}, the server sends to {seen:?}"
        ));
    }
    let mut checks = vec![
        t.summary(),
        format!("the client moved to {local}, the server followed"),
    ];
    match (&pair.server, pair.server.noq_frame_stats()) {
        (Conn::Polypath(c), _) => {
            let s = c.stats();
            if s.peer_address_changes == 0 || s.peer_addresses_validated != s.peer_address_changes {
                return Err(format!(
                    "the polypath server followed {} address changes and validated {}",
                    s.peer_address_changes, s.peer_addresses_validated
                ));
            }
            checks.push(format!(
                "polypath followed {} address change(s) and validated them",
                s.peer_address_changes
            ));
        }
        (_, Some((sent, _))) => {
            if sent.path_challenge == 0 {
                return Err("noq sent no PATH_CHALLENGE to the new address".into());
            }
            checks.push(format!("noq sent {} PATH_CHALLENGE", sent.path_challenge));
        }
        (_, None) => return Err("no frame counts from the noq server".into()),
    }
    if let Conn::Polypath(c) = &pair.client {
        let s = c.stats();
        if (s.migrations, s.migrations_validated) != (1, 1) {
            return Err(format!(
                "the polypath client migrated {} times, {} validated",
                s.migrations, s.migrations_validated
            ));
        }
        checks.push("the polypath client validated its new path".into());
    }
    Ok(checks.join("; "))
}

/// Bidirectional streams of [`Case::Streams`]: more than the 100 both stacks allow at
/// once by default.
pub const STREAM_COUNT: usize = 250;

/// The client opens [`STREAM_COUNT`] bidirectional streams, each carrying 1000 bytes
/// derived from its number; the server echoes each one; the client compares.
async fn streams(pair: &Pair) -> Result<String, CaseError> {
    let message = |i: usize| pattern(1000, 0x5757_0000 + i as u64);
    let client = async {
        let mut open = Vec::with_capacity(STREAM_COUNT);
        for i in 0..STREAM_COUNT {
            let (mut s, r) = pair.client.open_bi().await?;
            s.write_all(&message(i)).await?;
            s.finish()?;
            open.push((s, r));
        }
        for (i, (_s, r)) in open.iter_mut().enumerate() {
            let mut echo = Vec::new();
            while let Some(c) = r.read_chunk().await? {
                echo.extend_from_slice(&c);
            }
            if echo != message(i) {
                return Err(format!(
                    "stream {i}: the echo differs ({} bytes)",
                    echo.len()
                ));
            }
        }
        Ok::<_, CaseError>(open)
    };
    let server = async {
        let mut done = Vec::with_capacity(STREAM_COUNT);
        for _ in 0..STREAM_COUNT {
            let (mut s, mut r) = pair.server.accept_bi().await?;
            let mut got = Vec::new();
            while let Some(c) = r.read_chunk().await? {
                got.extend_from_slice(&c);
            }
            s.write_all(&got).await?;
            s.finish()?;
            done.push((s, r));
        }
        Ok::<_, CaseError>(done)
    };
    let started = Instant::now();
    tokio::try_join!(client, server)?;
    Ok(format!(
        "{STREAM_COUNT} bidirectional streams of 1000 B echoed intact (the limit is 100 at \
         once) in {:.0} ms",
        started.elapsed().as_secs_f64() * 1e3
    ))
}

/// The client resets a unidirectional stream (RESET_STREAM 0x77) and the server sees the
/// code; then the server stops a bidirectional stream (STOP_SENDING 0x78) and the client
/// sees that code.
async fn stream_reset(pair: &Pair) -> Result<String, CaseError> {
    const RESET: u32 = 0x77;
    const STOP: u32 = 0x78;
    let reset = async {
        let mut s = pair.client.open_uni().await?;
        s.write_all(&[7; 4096]).await?;
        s.reset(RESET)?;
        Ok::<_, CaseError>(s)
    };
    let see_reset = async {
        let mut r = pair.server.accept_uni().await?;
        r.read_until_reset().await
    };
    let (_s, (read, code)) = tokio::try_join!(reset, see_reset)?;
    if code != Some(u64::from(RESET)) {
        return Err(format!(
            "the client reset with code {RESET:#x}; the server saw {code:?} after {read} B"
        ));
    }
    let stop = async {
        let (mut s, mut r) = pair.server.accept_bi().await?;
        r.stop(STOP)?;
        Ok::<_, CaseError>((s.finish().ok(), r))
    };
    let see_stop = async {
        let (mut s, r) = pair.client.open_bi().await?;
        s.write_all(&[8; 4096]).await?;
        let code = s.stopped().await?;
        Ok::<_, CaseError>((code, r))
    };
    let (_server_side, (stopped, _r)) = tokio::try_join!(stop, see_stop)?;
    if stopped != Some(u64::from(STOP)) {
        return Err(format!(
            "the server stopped with code {STOP:#x}; the client saw {stopped:?}"
        ));
    }
    Ok(format!(
        "RESET_STREAM {RESET:#x} seen by the server (after {read} B); STOP_SENDING {STOP:#x} \
         seen by the client"
    ))
}

/// Datagram `i` of a run: its index, then bytes derived from it, so that any corruption
/// or mix-up shows.
fn datagram(i: usize, size: usize) -> Bytes {
    let mut d = (i as u64).to_le_bytes().to_vec();
    d.extend_from_slice(&pattern(size.saturating_sub(8), i as u64 + 1));
    d.into()
}

/// What one direction of [`Case::Datagrams`] measured.
struct DatagramRun {
    /// Intact distinct datagrams received.
    good: usize,
    /// Corrupt or duplicate datagrams received.
    bad: usize,
    /// Datagram size.
    size: usize,
    /// Packets the sender declared lost during the run, plus datagrams its send queue
    /// dropped (where its stack counts them): losses the sender saw.
    seen_lost: u64,
}

/// Sends `n` datagrams from `from` to `to`.
async fn datagrams_one_way(from: &Conn, to: &Conn, n: usize) -> Result<DatagramRun, CaseError> {
    let lost_before = from.losses();
    let size = from
        .max_datagram_size()
        .ok_or_else(|| format!("{} sender: the peer accepts no datagrams", from.stack()))?
        .min(1000);
    let send = async {
        for i in 0..n {
            from.send_datagram(datagram(i, size))?;
            // A light pace (20 datagrams a millisecond), so that the test measures the
            // protocol rather than the queue lengths of the two stacks.
            if i % 20 == 19 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        Ok::<_, CaseError>(())
    };
    let recv = async {
        let mut seen = vec![false; n];
        let (mut good, mut bad) = (0, 0);
        while good < n {
            // Stop once nothing has come for a second (the rest is lost).
            let Ok(d) = tokio::time::timeout(Duration::from_secs(1), to.recv_datagram()).await
            else {
                break;
            };
            let d = d?;
            let index = d
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
                .and_then(|i| usize::try_from(i).ok());
            match index {
                Some(i) if i < n && !seen[i] && d == datagram(i, size) => {
                    seen[i] = true;
                    good += 1;
                }
                _ => bad += 1,
            }
        }
        Ok::<_, CaseError>((good, bad))
    };
    let ((), (good, bad)) = tokio::try_join!(send, recv)?;
    Ok(DatagramRun {
        good,
        bad,
        size,
        seen_lost: from.losses().saturating_sub(lost_before),
    })
}

async fn datagrams(ctx: &Context, pair: &Pair) -> Result<String, CaseError> {
    let n = ctx.sizes.datagrams;
    let need = (n * DATAGRAM_PASS_PERCENT).div_ceil(100);
    let mut detail = String::new();
    let mut ok = true;
    for (label, from, to) in [
        ("client->server", &pair.client, &pair.server),
        ("server->client", &pair.server, &pair.client),
    ] {
        let DatagramRun {
            good,
            bad,
            size,
            seen_lost,
        } = datagrams_one_way(from, to, n).await?;
        // A missing datagram is explained if the sender saw a loss (a packet declared lost,
        // a datagram its queue dropped): on a loaded machine, socket buffers overflow.
        let unexplained = (n - good).saturating_sub(usize::try_from(seen_lost).unwrap_or(n));
        ok &= n - unexplained >= need && bad == 0;
        let _ = write!(
            detail,
            "{label}: {good}/{n} of {size} B arrived intact, {bad} corrupt or duplicate, the \
             sender saw {seen_lost} losses; "
        );
    }
    let _ = write!(
        detail,
        "pass rule: each way, at most {}% of the datagrams missing beyond the losses the \
         sender saw, none corrupt or duplicate",
        100 - DATAGRAM_PASS_PERCENT
    );
    if ok { Ok(detail) } else { Err(detail) }
}

/// Key updates in the middle of an upload. The data goes in three thirds; before each
/// third, once the previous one has arrived, a key update is forced: by polypath, then by
/// noq, then by polypath again. polypath may start one only three PTOs after its previous
/// update was acknowledged (RFC 9001 section 6.5), so it is asked again every 10 ms until it
/// starts (at most [`KEY_UPDATE_WAIT`]), sending a PING each time so that a packet of its
/// current key phase gets acknowledged; its second update starting therefore shows that
/// noq acknowledged the first in the new key phase.
async fn key_update(ctx: &Context, pair: &Pair) -> Result<String, CaseError> {
    let (polypath, noq) = match (&pair.client, &pair.server) {
        (p @ Conn::Polypath(_), n @ Conn::Noq { .. })
        | (n @ Conn::Noq { .. }, p @ Conn::Polypath(_)) => (p, n),
        _ => return Err("the key-update case needs one polypath and one noq side".into()),
    };
    let data = &ctx.data;
    let third = data.len().div_ceil(3).max(1);
    let before = polypath.key_updates().unwrap_or(0);
    let (progress_tx, mut progress_rx) = tokio::sync::watch::channel(0u64);
    let started = Instant::now();
    let send = async {
        let mut log = Vec::new();
        let mut s = pair.client.open_uni().await?;
        for (round, piece) in data.chunks(third).enumerate() {
            let sent_so_far = (round * third) as u64;
            progress_rx
                .wait_for(|&r| r >= sent_so_far)
                .await
                .map_err(|_| "the receiver stopped early")?;
            let (who, side) = if round == 1 {
                ("noq", noq)
            } else {
                ("polypath", polypath)
            };
            let asked = Instant::now();
            let ok = if round == 1 {
                noq_key_update(noq, polypath).await
            } else {
                let mut ok = side.force_key_update();
                while !ok && asked.elapsed() < KEY_UPDATE_WAIT {
                    // An update needs an acknowledged packet of the current key phase, and
                    // with no data flowing polypath sends only acknowledgments, which noq
                    // does not acknowledge: after one of noq's own key updates (noq starts
                    // one after a random 10 to 1000 packets) none would ever come.
                    side.ping();
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    ok = side.force_key_update();
                }
                ok
            };
            if !ok {
                return Err(format!(
                    "{who} key update at {sent_so_far} B did not happen within {} ms",
                    KEY_UPDATE_WAIT.as_millis()
                ));
            }
            log.push(format!(
                "{who} update at {sent_so_far} B (after {} ms)",
                asked.elapsed().as_millis()
            ));
            s.write_all(piece).await?;
        }
        s.finish()?;
        Ok::<_, CaseError>((log, s))
    };
    let recv = async {
        let mut r = pair.server.accept_uni().await?;
        let got = read_with_progress(&mut r, |n| {
            progress_tx.send_replace(n);
        })
        .await?;
        Ok::<_, CaseError>((got, r))
    };
    let ((log, _s), ((len, hash), _r)) = tokio::try_join!(send, recv)?;
    let elapsed = started.elapsed();
    let expected: [u8; 32] = Sha256::digest(data).into();
    if len != data.len() as u64 || hash != expected {
        return Err(format!(
            "{}; received {len} bytes with SHA-256 {}, sent {} with SHA-256 {}",
            log.join(", "),
            hex::encode(hash),
            data.len(),
            hex::encode(expected)
        ));
    }
    let seen = polypath.key_updates().unwrap_or(0) - before;
    let detail = format!(
        "{}; polypath went through {seen} key updates (2 started, {} followed); \
         transfer after them: {}",
        log.join(", "),
        seen.saturating_sub(2),
        Transferred {
            bytes: len,
            elapsed
        }
        .summary()
    );
    // polypath counts the updates it starts and those it follows: the two it started
    // (each `force_key_update` above said so) and noq's forced one it followed (its count
    // went up) make three. noq also starts an update of its own after a random number of
    // packets; when that falls within the case, polypath follows it too, and counts four.
    if seen >= 3 { Ok(detail) } else { Err(detail) }
}

/// Asks noq for a key update until polypath has seen it. noq ignores the request, without
/// saying so, while it still holds the keys of the previous update (for three PTOs after
/// it), so the request is repeated every 10 ms, each time followed by a PING for noq to
/// send in its new key phase, until polypath's key update count goes up (at most
/// [`KEY_UPDATE_WAIT`]).
async fn noq_key_update(noq: &Conn, polypath: &Conn) -> bool {
    let before = polypath.key_updates().unwrap_or(0);
    let asked = Instant::now();
    while asked.elapsed() < KEY_UPDATE_WAIT {
        noq.force_key_update();
        noq.ping();
        tokio::time::sleep(Duration::from_millis(10)).await;
        if polypath.key_updates().unwrap_or(0) > before {
            return true;
        }
    }
    false
}

/// How long the key-update case keeps asking for an update.
pub const KEY_UPDATE_WAIT: Duration = Duration::from_secs(5);

/// The client closes `pair`; then the server closes a second connection.
async fn close(ctx: &Context, pair: &Pair) -> Result<String, CaseError> {
    let second = Pair::connect(
        pair.client.stack(),
        pair.server.stack(),
        &ctx.tls,
        Setup::default(),
    )
    .await?;
    let mut detail = String::new();
    for (closer_is_client, code, reason, pair) in [
        (true, 0x42u32, "client done", pair),
        (false, 0x43u32, "server done", &second),
    ] {
        let (closer, peer) = if closer_is_client {
            (&pair.client, &pair.server)
        } else {
            (&pair.server, &pair.client)
        };
        closer.close(code, reason.as_bytes());
        let seen = tokio::time::timeout(Duration::from_secs(5), peer.closed())
            .await
            .map_err(|_| format!("{} never saw the close", peer.stack()))?;
        let who = if closer_is_client { "client" } else { "server" };
        if seen.app_code != Some(u64::from(code)) || seen.reason != reason {
            return Err(format!(
                "{who} closed with code {code:#x} reason {reason:?}; the peer saw: {}",
                seen.text
            ));
        }
        let _ = write!(
            detail,
            "{who} close code {code:#x} reason {reason:?} seen by the peer; "
        );
    }
    second.shutdown().await;
    Ok(detail.trim_end_matches("; ").to_owned())
}

fn multipath_handshake(pair: &Pair) -> Result<String, CaseError> {
    let (c, s) = (pair.client.is_multipath(), pair.server.is_multipath());
    let detail = format!(
        "multipath negotiated: client {c}, server {s} (each side allows {} paths)",
        crate::peer::MAX_PATHS
    );
    if c && s { Ok(detail) } else { Err(detail) }
}

/// Opens the second path and waits until both sides have it; returns its ID.
async fn second_path(pair: &Pair) -> Result<(u32, String), CaseError> {
    let local = pair
        .second_local
        .ok_or("the client has no second local address")?;
    let (client_id, server_id) = tokio::try_join!(
        pair.client.open_path(local, pair.server_addr),
        pair.server.peer_opened_path()
    )?;
    if client_id != server_id {
        return Err(format!(
            "the client opened path {client_id} but the server saw path {server_id}"
        ));
    }
    Ok((
        client_id,
        format!("path {client_id} from {local} validated; the server sees it"),
    ))
}

/// Marks the second path backup and then available again, waiting each time for the
/// server to see the client's new status.
async fn path_status(pair: &Pair) -> Result<String, CaseError> {
    let (id, _) = second_path(pair).await?;
    for backup in [true, false] {
        pair.client.set_path_backup(id, backup)?;
        let name = if backup { "backup" } else { "available" };
        tokio::time::timeout(
            Duration::from_secs(5),
            pair.server.peer_path_status(id, backup),
        )
        .await
        .map_err(|_| format!("the server never saw path {id} become {name}"))??;
    }
    Ok(format!(
        "client set path {id} backup, then available; the server saw both"
    ))
}

/// noq's counts of the frames that move the path ID limit.
fn limit_frames(pair: &Pair) -> String {
    let noq = if pair.client.stack() == Stack::Noq {
        &pair.client
    } else {
        &pair.server
    };
    match noq.noq_frame_stats() {
        Some((tx, rx)) => format!(
            "noq sent MAX_PATH_ID {} PATHS_BLOCKED {} PATH_CIDS_BLOCKED {} PATH_ABANDON {}, \
             received MAX_PATH_ID {} PATHS_BLOCKED {} PATH_CIDS_BLOCKED {} PATH_ABANDON {} \
             PATH_NEW_CONNECTION_ID {}",
            tx.max_path_id,
            tx.paths_blocked,
            tx.path_cids_blocked,
            tx.path_abandon,
            rx.max_path_id,
            rx.paths_blocked,
            rx.path_cids_blocked,
            rx.path_abandon,
            rx.path_new_connection_id
        ),
        None => String::new(),
    }
}

async fn reopen(ctx: &Context, pair: &Pair) -> Result<String, CaseError> {
    let (first, _) = second_path(pair).await?;
    let abandoned_at = Instant::now();
    pair.client.abandon_path(first)?;
    tokio::time::timeout(Duration::from_secs(5), pair.server.path_abandoned(first))
        .await
        .map_err(|_| format!("the server never saw path {first} abandoned"))??;
    let (next, opened) = second_path(pair)
        .await
        .map_err(|e| format!("after abandoning path {first}: {e}; {}", limit_frames(pair)))?;
    let reopen_wait = abandoned_at.elapsed();
    let t = transfer(ctx, pair, Direction::Upload, |_| {}).await?;
    let sent = pair.client.path_bytes();
    let received = pair.server.path_bytes();
    let on = |paths: &[PathBytes], f: fn(&PathBytes) -> u64| {
        paths.iter().find(|p| p.id == next).map(f).unwrap_or(0)
    };
    let detail = format!(
        "2 paths allowed; path {first} opened and abandoned; {opened} ({:.1} ms after the \
         abandonment); {}; upload: client [{}], server [{}]; {}",
        reopen_wait.as_secs_f64() * 1e3,
        limit_frames(pair),
        show_paths(&sent, pair.client.stack()),
        show_paths(&received, pair.server.stack()),
        t.summary()
    );
    if next > first
        && on(&sent, |p| p.stream_tx) > 0
        && on(&received, |p| p.udp_rx) >= MIN_BYTES_PER_PATH
    {
        Ok(detail)
    } else {
        Err(format!("the new path carried no data: {detail}"))
    }
}

fn show_paths(paths: &[PathBytes], sender_stack: Stack) -> String {
    let unit = match sender_stack {
        Stack::Polypath => "stream payload B",
        Stack::Noq => "STREAM frames",
    };
    paths
        .iter()
        .map(|p| {
            format!(
                "path {}: tx {} B rx {} B ({} {unit})",
                p.id, p.udp_tx, p.udp_rx, p.stream_tx
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Which path a two-path transfer abandons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Abandon {
    /// The path opened second (from 127.0.0.2).
    Second,
    /// Path 0, the one of the handshake.
    Initial,
    /// The second path, abandoned by the server.
    SecondByServer,
}

/// Two-path transfer: opens the second path, moves the data, and when half of it has
/// arrived checks that both paths carried data and abandons one.
async fn multipath_transfer(
    ctx: &Context,
    pair: &Pair,
    direction: Direction,
    which: Abandon,
) -> Result<String, CaseError> {
    let (second, _) = second_path(pair).await?;
    let victim = match which {
        Abandon::Second | Abandon::SecondByServer => second,
        Abandon::Initial => 0,
    };
    let (abandoner, other, who, peer) = if which == Abandon::SecondByServer {
        (&pair.server, &pair.client, "server", "client")
    } else {
        (&pair.client, &pair.server, "client", "server")
    };
    let (sender, receiver) = match direction {
        Direction::Upload => (&pair.client, &pair.server),
        Direction::Download => (&pair.server, &pair.client),
    };
    let half = ctx.data.len() as u64 / 2;
    // (sender's paths, receiver's paths, result of the abandonment)
    type AtAbandon = (Vec<PathBytes>, Vec<PathBytes>, Result<(), CaseError>);
    let mut at_abandon: Option<AtAbandon> = None;
    let t = transfer(ctx, pair, direction, |received| {
        if at_abandon.is_none() && received >= half {
            let snapshot = (sender.path_bytes(), receiver.path_bytes());
            let abandoned = abandoner.abandon_path(victim);
            at_abandon = Some((snapshot.0, snapshot.1, abandoned));
        }
    })
    .await?;
    let (sent, received, abandoned) =
        at_abandon.ok_or("the transfer ended before half of it had arrived")?;
    abandoned?;
    tokio::time::timeout(Duration::from_secs(5), other.path_abandoned(victim))
        .await
        .map_err(|_| format!("the {peer} never saw path {victim} abandoned"))??;
    let frames = abandon_exchange(pair).await?;
    let on = |paths: &[PathBytes], id: u32, f: fn(&PathBytes) -> u64| {
        paths.iter().find(|p| p.id == id).map(f).unwrap_or(0)
    };
    let both_carried = [0, second].iter().all(|&id| {
        on(&sent, id, |p| p.stream_tx) > 0 && on(&received, id, |p| p.udp_rx) >= MIN_BYTES_PER_PATH
    });
    let detail = format!(
        "at half ({half} B received): sender [{}]; receiver [{}]; {who} abandoned path {victim} \
         then, {peer} saw it; {frames}; after: sender [{}]; {}",
        show_paths(&sent, sender.stack()),
        show_paths(&received, receiver.stack()),
        show_paths(&sender.path_bytes(), sender.stack()),
        t.summary()
    );
    if both_carried {
        Ok(detail)
    } else {
        Err(format!(
            "not both paths carried data (need stream data sent and >= {MIN_BYTES_PER_PATH} B \
             received on each): {detail}"
        ))
    }
}

/// Waits (at most two seconds) until noq has both sent and received a PATH_ABANDON: the
/// draft requires the endpoint that receives one to answer with its own. Returns noq's
/// multipath frame counts.
//= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.4
//# When an endpoint receives a PATH_ABANDON frame, it MUST send a corresponding
//# PATH_ABANDON frame, if it has not already done so
async fn abandon_exchange(pair: &Pair) -> Result<String, CaseError> {
    let noq = if pair.client.stack() == Stack::Noq {
        &pair.client
    } else {
        &pair.server
    };
    let asked = Instant::now();
    loop {
        let (tx, rx) = noq
            .noq_frame_stats()
            .ok_or("the multipath cases need a noq side")?;
        let counts = format!(
            "noq sent PATH_ABANDON {} PATH_ACK {} PATH_NEW_CONNECTION_ID {}, received \
             PATH_ABANDON {} PATH_ACK {} PATH_NEW_CONNECTION_ID {}",
            tx.path_abandon,
            tx.path_acks,
            tx.path_new_connection_id,
            rx.path_abandon,
            rx.path_acks,
            rx.path_new_connection_id
        );
        if tx.path_abandon >= 1 && rx.path_abandon >= 1 {
            return Ok(counts);
        }
        if asked.elapsed() > Duration::from_secs(2) {
            return Err(format!("PATH_ABANDON not exchanged both ways: {counts}"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for c in Case::ALL {
            assert_eq!(Case::from_name(c.name()), Some(c));
        }
        assert_eq!(Case::from_name("nope"), None);
    }

    #[test]
    fn datagrams_carry_their_index_and_differ() {
        let a = datagram(3, 100);
        assert_eq!(a.len(), 100);
        assert_eq!(&a[..8], &3u64.to_le_bytes());
        assert_ne!(a[8..], datagram(4, 100)[8..]);
        assert_eq!(a, datagram(3, 100));
    }

    #[test]
    fn pattern_is_reproducible() {
        assert_eq!(pattern(1000, 1), pattern(1000, 1));
        for seed in 0..64 {
            assert_ne!(pattern(64, seed), pattern(64, seed + 1));
        }
        assert_eq!(pattern(13, 1).len(), 13);
    }
}
