//! The one registry of the built-in policies: every scheduler, congestion controller and
//! path manager by name, with its aliases, a one-line summary, its factory and where it
//! runs. The CLI and the simulator look names up here and nowhere else, so both accept the
//! same names and treat each policy alike (e.g. which path managers the server runs too).
//!
//! Parameters stay the policies' own: typed on their factories (such as
//! [`WrrFactory::with_weight_list`](crate::sched::WrrFactory::with_weight_list)), and as
//! `key=value` strings through `configure` for the command line and scenario files.

use crate::cc::{
    BbrConfig, ControllerFactory, CubicConfig, LiaFactory, NewRenoConfig, OliaFactory,
};
use crate::pm::{
    FastFailoverFactory, FullMeshFactory, MakeBeforeBreakFactory, ManualFactory,
    PathManagerFactory, ThroughputTrigger,
};
use crate::sched::{
    BlestFactory, EcfFactory, Lamp5gFactory, MinRttFactory, PathStatus, QosPolicyFactory,
    RedundantFactory, RoundRobinFactory, SchedulerFactory, WrrFactory,
};
use std::sync::Arc;

/// One built-in policy of kind `F` (a scheduler, congestion controller or path manager
/// factory), with `X` what the drivers need to know of that kind ([`PathManagerTraits`] for
/// path managers, nothing for the others).
pub struct Policy<F: ?Sized + 'static, X: 'static = ()> {
    /// The name the documentation uses.
    pub name: &'static str,
    /// Other names that select the same policy.
    pub aliases: &'static [&'static str],
    /// What the policy does, in one line.
    pub summary: &'static str,
    /// What the drivers need to know of it.
    pub traits: X,
    factory: fn() -> Arc<F>,
}

impl<F: ?Sized, X> Policy<F, X> {
    /// A new factory with the policy's default parameters.
    pub fn build(&self) -> Arc<F> {
        (self.factory)()
    }

    /// The name and the aliases.
    pub fn names(&self) -> impl Iterator<Item = &'static str> {
        std::iter::once(self.name).chain(self.aliases.iter().copied())
    }

    /// Whether `name` selects this policy (ASCII case ignored).
    pub fn is_named(&self, name: &str) -> bool {
        self.names().any(|n| n.eq_ignore_ascii_case(name))
    }
}

/// What the drivers (CLI, simulator, emulator) need to know of a path manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathManagerTraits {
    /// The status of the paths the client opens at the start after the first one.
    pub extra_paths: PathStatus,
    /// The path manager opens the client's paths itself (the client only waits for them).
    pub opens_paths: bool,
    /// The client's path manager is told its local addresses (`locals`).
    pub takes_locals: bool,
    /// The server runs it too, splitting the window of the paths the client adds
    /// (`split_peer_paths`): LAMP5G's window split must reach the sender whichever end sends.
    pub at_server: bool,
}

const PLAIN: PathManagerTraits = PathManagerTraits {
    extra_paths: PathStatus::Available,
    opens_paths: false,
    takes_locals: false,
    at_server: false,
};

const MAKE_BEFORE_BREAK: PathManagerTraits = PathManagerTraits {
    takes_locals: true,
    at_server: true,
    ..PLAIN
};

/// The built-in packet schedulers.
pub const SCHEDULERS: &[Policy<dyn SchedulerFactory>] = &[
    Policy {
        name: "minrtt",
        aliases: &["min_rtt", "default"],
        summary: "the path with the lowest smoothed RTT among those with room (the MPTCP default)",
        traits: (),
        factory: || Arc::new(MinRttFactory),
    },
    Policy {
        name: "roundrobin",
        aliases: &["round_robin", "rr"],
        summary: "paths in turn",
        traits: (),
        factory: || Arc::new(RoundRobinFactory),
    },
    Policy {
        name: "redundant",
        aliases: &[],
        summary: "every packet on every path",
        traits: (),
        factory: || Arc::new(RedundantFactory),
    },
    Policy {
        name: "wrr",
        aliases: &["weighted_round_robin"],
        summary: "5G-CLARITY's weighted round robin (`weights`, `cwnd_limited`)",
        traits: (),
        factory: || Arc::new(WrrFactory::default()),
    },
    Policy {
        name: "ecf",
        aliases: &[],
        summary: "earliest completion first",
        traits: (),
        factory: || Arc::new(EcfFactory::default()),
    },
    Policy {
        name: "blest",
        aliases: &[],
        summary: "blocking estimation, against head-of-line blocking",
        traits: (),
        factory: || Arc::new(BlestFactory::default()),
    },
    Policy {
        name: "lamp5g",
        aliases: &[],
        summary: "LAMP5G's link-aware ranking (RTT, loss, throughput, window)",
        traits: (),
        factory: || Arc::new(Lamp5gFactory::default()),
    },
    Policy {
        name: "qos",
        aliases: &[],
        summary: "CHYMP/MPF's QoS policy modes per traffic class",
        traits: (),
        factory: || Arc::new(QosPolicyFactory::default()),
    },
];

/// The built-in congestion controllers.
pub const CONGESTION_CONTROLLERS: &[Policy<dyn ControllerFactory>] = &[
    Policy {
        name: "cubic",
        aliases: &[],
        summary: "CUBIC (RFC 9438)",
        traits: (),
        factory: || Arc::new(CubicConfig::default()),
    },
    Policy {
        name: "newreno",
        aliases: &["new_reno", "reno"],
        summary: "NewReno (RFC 9002)",
        traits: (),
        factory: || Arc::new(NewRenoConfig::default()),
    },
    Policy {
        name: "bbr",
        aliases: &[],
        summary: "BBR",
        traits: (),
        factory: || Arc::new(BbrConfig::default()),
    },
    Policy {
        name: "lia",
        aliases: &[],
        summary: "coupled LIA (RFC 6356)",
        traits: (),
        factory: || Arc::new(LiaFactory::new()),
    },
    Policy {
        name: "olia",
        aliases: &[],
        summary: "coupled OLIA",
        traits: (),
        factory: || Arc::new(OliaFactory::new()),
    },
];

/// The built-in path managers.
pub const PATH_MANAGERS: &[Policy<dyn PathManagerFactory, PathManagerTraits>] = &[
    Policy {
        name: "default",
        aliases: &["manual", "none"],
        summary: "paths only as the application opens them: one per local address, all available",
        traits: PLAIN,
        factory: || Arc::new(ManualFactory),
    },
    Policy {
        name: "backup",
        aliases: &[],
        summary: "as default, but the paths after the first are backups",
        traits: PathManagerTraits {
            extra_paths: PathStatus::Backup,
            ..PLAIN
        },
        factory: || Arc::new(ManualFactory),
    },
    Policy {
        name: "fullmesh",
        aliases: &["full_mesh"],
        summary: "opens and re-opens a path from every local address",
        traits: PathManagerTraits {
            opens_paths: true,
            takes_locals: true,
            ..PLAIN
        },
        factory: || Arc::new(FullMeshFactory::default()),
    },
    Policy {
        name: "lamp5g",
        aliases: &["make_before_break", "mbb"],
        summary: "LAMP5G's make-before-break on RRC events, with the window split",
        traits: MAKE_BEFORE_BREAK,
        factory: || Arc::new(MakeBeforeBreakFactory::default()),
    },
    Policy {
        name: "lamp5g_throughput",
        aliases: &[],
        summary: "LAMP5G's make-before-break on predicted-throughput thresholds",
        traits: MAKE_BEFORE_BREAK,
        factory: || {
            Arc::new(MakeBeforeBreakFactory::with_triggers(vec![Arc::new(
                ThroughputTrigger::default(),
            )]))
        },
    },
    Policy {
        name: "failover",
        aliases: &["fast_failover"],
        summary: "abandons a path that stopped acknowledging while another works",
        traits: PLAIN,
        factory: || Arc::new(FastFailoverFactory::default()),
    },
];

/// The policy of `list` that `name` selects (ASCII case ignored).
pub fn find<F: ?Sized, X>(
    list: &'static [Policy<F, X>],
    name: &str,
) -> Option<&'static Policy<F, X>> {
    list.iter().find(|p| p.is_named(name))
}

/// The names of `list` for an error message: `minrtt (min_rtt, default), roundrobin (...)`.
pub fn known<F: ?Sized, X>(list: &[Policy<F, X>]) -> String {
    list.iter()
        .map(|p| {
            if p.aliases.is_empty() {
                p.name.to_string()
            } else {
                format!("{} ({})", p.name, p.aliases.join(", "))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every name and alias of `list`, in order.
pub fn all_names<F: ?Sized, X>(list: &[Policy<F, X>]) -> Vec<&'static str> {
    list.iter().flat_map(Policy::names).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No name selects two policies, and each factory builds what its name says.
    #[test]
    fn names_are_unique_and_build() {
        for names in [
            all_names(SCHEDULERS),
            all_names(CONGESTION_CONTROLLERS),
            all_names(PATH_MANAGERS),
        ] {
            let mut lower: Vec<String> = names.iter().map(|n| n.to_ascii_lowercase()).collect();
            lower.sort();
            let before = lower.len();
            lower.dedup();
            assert_eq!(before, lower.len(), "a name twice in {names:?}");
        }
        for p in SCHEDULERS {
            p.build().build();
        }
        for p in PATH_MANAGERS {
            p.build().build();
        }
        assert_eq!(find(SCHEDULERS, "RR").map(|p| p.name), Some("roundrobin"));
        assert_eq!(
            find(PATH_MANAGERS, "mbb").map(|p| p.traits.at_server),
            Some(true)
        );
        assert!(find(CONGESTION_CONTROLLERS, "vegas").is_none());
        assert!(known(PATH_MANAGERS).contains("lamp5g (make_before_break, mbb)"));
    }
}
