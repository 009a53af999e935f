//! A QUIC flow's `[flow.options]`: the adapter's settings, scheduler and path-manager
//! parameters (tried on a probe policy so a bad one is reported with its field before the
//! run), scheduler changes during the run, and the path manager a flow names.

use super::*;

/// The adapter's settings from a flow's `[flow.options]`.
#[derive(Debug, Default)]
pub(super) struct Options {
    pub(super) qlog: bool,
    pub(super) scheduler: Vec<(String, String)>,
    pub(super) scheduler_changes: Vec<SchedulerChange>,
    pub(super) path_manager: Vec<(String, String)>,
    pub(super) idle_timeout: Option<Option<Duration>>,
    /// `initial_paths = "first"`: the client opens only the first path at the start and
    /// leaves the others to its path manager.
    pub(super) first_path_only: bool,
    /// `receive_window`: both endpoints' connection-level receive window (initial_max_data),
    /// fixed (without it, windows start smaller and auto-tune).
    pub(super) receive_window: Option<u64>,
    /// `stream_receive_window`: both endpoints' per-stream receive window, fixed.
    pub(super) stream_receive_window: Option<u64>,
}

/// Parses a receive window as the simulator's flow options and the CLI take it: a size
/// (`"256kB"`, `"3MiB"`, a byte count) or `linux` for
/// [`polypath_quic::config::LINUX_RECEIVE_WINDOW`].
pub fn parse_receive_window(text: &str) -> Result<u64, String> {
    if text.trim().eq_ignore_ascii_case("linux") {
        return Ok(polypath_quic::config::LINUX_RECEIVE_WINDOW);
    }
    let bytes = match text.trim().parse::<u64>() {
        Ok(n) => n,
        Err(_) => polypath_scenario::units::parse_size(text)?,
    };
    if bytes == 0 {
        return Err(format!("receive window {text:?} is zero"));
    }
    Ok(bytes)
}

/// Reads a table of plug-in parameters (`{ key = "value", ... }`) as `key=value` text
/// pairs, checking each with `probe` (a freshly built plug-in's `configure`).
pub(super) fn parameter_table(
    scenario: &Scenario,
    field: &str,
    value: &toml::Value,
    what: &str,
    mut probe: impl FnMut(&str, &str) -> Result<(), String>,
) -> Result<Vec<(String, String)>, SimError> {
    let table = value.as_table().ok_or_else(|| {
        scenario.error_at(
            field,
            format!("`{what}` must be a table of parameters, e.g. {{ key = \"value\" }}"),
        )
    })?;
    let mut out = Vec::new();
    for (k, v) in table {
        let text = match v {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_) => {
                v.to_string()
            }
            _ => {
                return Err(scenario
                    .error_at(
                        &format!("{field}.{k}"),
                        format!("a {what} parameter is a string, number or boolean"),
                    )
                    .into());
            }
        };
        probe(k, &text).map_err(|e| scenario.error_at(&format!("{field}.{k}"), e))?;
        out.push((k.clone(), text));
    }
    Ok(out)
}

/// Tries a scheduler parameter on a probe scheduler of a flow with `paths` paths: the
/// scheduler's own check, then, for `weights`, one weight per path.
pub(super) fn configure_for_paths(
    probe: &mut dyn Scheduler,
    key: &str,
    value: &str,
    paths: usize,
) -> Result<(), String> {
    probe.configure(key, value)?;
    if key == "weights" {
        polypath_quic::sched::check_weight_count(value, paths)?;
    }
    Ok(())
}

pub(super) fn parse_options(
    scenario: &Scenario,
    flow: usize,
    q: &QuicFlow,
    paths: usize,
    factory: Option<&dyn SchedulerFactory>,
    path_manager: &dyn PathManagerFactory,
) -> Result<Options, SimError> {
    let mut opts = Options::default();
    for (key, value) in &q.options {
        let field = format!("flow[{flow}].options.{key}");
        match key.as_str() {
            "qlog" => {
                opts.qlog = value
                    .as_bool()
                    .ok_or_else(|| scenario.error_at(&field, "`qlog` must be true or false"))?;
            }
            "idle_timeout" => {
                let text = value.as_str().ok_or_else(|| {
                    scenario.error_at(
                        &field,
                        "`idle_timeout` is a duration such as \"60s\", or \"none\"",
                    )
                })?;
                opts.idle_timeout = Some(if text == "none" {
                    None
                } else {
                    Some(
                        polypath_scenario::units::parse_duration(text)
                            .map_err(|e| scenario.error_at(&field, e))?,
                    )
                });
            }
            "receive_window" | "stream_receive_window" => {
                let bytes = match value {
                    toml::Value::Integer(n) => u64::try_from(*n).ok().filter(|n| *n > 0),
                    toml::Value::String(text) => parse_receive_window(text).ok(),
                    _ => None,
                }
                .ok_or_else(|| {
                    scenario.error_at(
                        &field,
                        format!(
                            "`{key}` is a positive size such as \"256kB\", a byte count, \
                             or \"linux\""
                        ),
                    )
                })?;
                if key == "receive_window" {
                    opts.receive_window = Some(bytes);
                } else {
                    opts.stream_receive_window = Some(bytes);
                }
            }
            "initial_paths" => {
                opts.first_path_only = match value.as_str() {
                    Some("all") => false,
                    Some("first") => true,
                    _ => {
                        return Err(scenario
                            .error_at(&field, "`initial_paths` is \"all\" or \"first\"")
                            .into());
                    }
                };
            }
            "scheduler" => {
                let Some(factory) = factory else {
                    return Err(scenario
                        .error_at(
                            &field,
                            "scheduler parameters apply to the polypath stack only",
                        )
                        .into());
                };
                let mut probe = factory.build();
                opts.scheduler = parameter_table(scenario, &field, value, "scheduler", |k, v| {
                    configure_for_paths(probe.as_mut(), k, v, paths)
                })?;
            }
            "path_manager" => {
                let mut probe = path_manager.build();
                opts.path_manager =
                    parameter_table(scenario, &field, value, "path_manager", |k, v| {
                        probe.configure(k, v)
                    })?;
            }
            "scheduler_changes" => {
                opts.scheduler_changes =
                    parse_scheduler_changes(scenario, &field, value, factory, paths)?;
            }
            _ => {
                return Err(scenario
                    .error_at(
                        &field,
                        format!(
                            "unknown QUIC flow option `{key}`; known: qlog, idle_timeout, receive_window, stream_receive_window, initial_paths, scheduler, scheduler_changes, path_manager"
                        ),
                    )
                    .into());
            }
        }
    }
    Ok(opts)
}

/// Scheduler parameters applied at a simulated time (`[[flow.options.scheduler_changes]]`):
/// both endpoints of every instance call [`Connection::configure_scheduler`] with them at
/// `at` (simulated time since the run's start), e.g. to change WRR weights during a run as
/// 5G-CLARITY does (the 5G-CLARITY paper, Sections 6.2 and 6.5).
#[derive(Clone, Debug, Default)]
pub(crate) struct SchedulerChange {
    /// When.
    pub at: SimTime,
    /// The parameters, in order.
    pub params: Vec<(String, String)>,
}

/// Parses `scheduler_changes = [{ at = "30s", weights = "2,3,1" }, ...]`: times must
/// increase, and every parameter is tried on a fresh scheduler so a bad one is reported
/// with its field before the run starts.
pub(super) fn parse_scheduler_changes(
    scenario: &Scenario,
    field: &str,
    value: &toml::Value,
    factory: Option<&dyn SchedulerFactory>,
    paths: usize,
) -> Result<Vec<SchedulerChange>, SimError> {
    let list = value.as_array().ok_or_else(|| {
        scenario.error_at(
            field,
            "`scheduler_changes` is a list of tables such as { at = \"30s\", weights = \"3,1\" }",
        )
    })?;
    let Some(factory) = factory else {
        return Err(scenario
            .error_at(
                field,
                "scheduler parameters apply to the polypath stack only",
            )
            .into());
    };
    let mut probe = factory.build();
    let mut changes: Vec<SchedulerChange> = Vec::new();
    for (i, entry) in list.iter().enumerate() {
        let item = format!("{field}[{i}]");
        let table = entry
            .as_table()
            .ok_or_else(|| scenario.error_at(&item, "each change is a table with `at`"))?;
        let at = table
            .get("at")
            .and_then(toml::Value::as_str)
            .ok_or_else(|| {
                scenario.error_at(&format!("{item}.at"), "`at` is a duration such as \"30s\"")
            })?;
        let at = SimTime::from_duration(
            polypath_scenario::units::parse_duration(at)
                .map_err(|e| scenario.error_at(&format!("{item}.at"), e))?,
        );
        if changes.last().is_some_and(|c| c.at > at) {
            return Err(scenario
                .error_at(&format!("{item}.at"), "changes must be in time order")
                .into());
        }
        let mut rest = table.clone();
        rest.remove("at");
        let params = parameter_table(
            scenario,
            &item,
            &toml::Value::Table(rest),
            "scheduler",
            |k, v| configure_for_paths(probe.as_mut(), k, v, paths),
        )?;
        changes.push(SchedulerChange { at, params });
    }
    Ok(changes)
}

/// The path manager `path_manager` names in the registry: the status of the paths the
/// client opens after the first one (every path of the flow is opened at the start), the
/// client's [`PathManager`](polypath_quic::pm::PathManager) plug-in acting on link and path
/// events, and whether the server runs it too.
pub(super) fn path_manager_plan(
    scenario: &Scenario,
    flow: usize,
    name: &str,
) -> Result<&'static Policy<dyn PathManagerFactory, PathManagerTraits>, SimError> {
    registry::find(registry::PATH_MANAGERS, name).ok_or_else(|| {
        scenario
            .error_at(
                &format!("flow[{flow}].path_manager"),
                format!(
                    "unknown path manager `{name}`; known: {}",
                    registry::known(registry::PATH_MANAGERS)
                ),
            )
            .into()
    })
}
