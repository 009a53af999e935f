//! `polypath relay`: a userspace UDP relay that drops datagrams at random and delays the
//! others, to put loss and delay between `polypath client` and `polypath server` on a
//! machine without netem.

use clap::Args;
use polypath_io::relay::{Relay, RelayConfig};
use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

/// `polypath relay`.
#[derive(Debug, Args)]
pub struct RelayArgs {
    /// Address clients send to (port 0 picks a free port; the first line printed tells it).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Where their datagrams go (the server).
    #[arg(long, value_name = "ADDR")]
    to: SocketAddr,
    /// Probability (0 to 1) of dropping each datagram, in either direction.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Seed of the drop decisions.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How long each datagram waits before it is forwarded, in either direction (e.g.
    /// `25ms`: the round-trip time grows by twice this).
    #[arg(long, default_value = "0s", value_parser = polypath_scenario::units::parse_duration)]
    delay: Duration,
    /// Stop after this many seconds and print what was forwarded and dropped as JSON
    /// (default: run until killed).
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
}

/// Runs the relay.
pub fn run(args: RelayArgs) -> Result<(), String> {
    if !(0.0..=1.0).contains(&args.loss) {
        return Err(format!("--loss {} is not a probability", args.loss));
    }
    let duration = match args.duration {
        Some(s) if !(s.is_finite() && s > 0.0) => {
            return Err(format!(
                "--duration {s} is not a positive number of seconds"
            ));
        }
        Some(s) => Some(Duration::from_secs_f64(s)),
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(async {
        let relay = Relay::start(RelayConfig {
            listen: args.listen,
            upstream: args.to,
            loss: args.loss,
            seed: args.seed,
            one_way_delay: args.delay,
        })
        .await
        .map_err(|e| format!("relay on {}: {e}", args.listen))?;
        println!("relaying {} -> {}", relay.local_addr(), args.to);
        std::io::stdout().flush().map_err(|e| e.to_string())?;
        match duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending::<()>().await,
        }
        let stats = relay.stats();
        println!(
            "{}",
            serde_json::json!({
                "forwarded": stats.forwarded,
                "dropped": stats.dropped,
                "blackholed": stats.blackholed,
            })
        );
        Ok(())
    })
}
