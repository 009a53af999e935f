//! Processes the emulator runs inside hosts' namespaces: `command` flows, the real
//! `polypath` client and server of `quic` flows, and the TCP tool's sender and receiver of
//! `tcp` flows.
//!
//! Each process enters its host's namespace before `exec` (`setns`), leads a process group
//! of its own (stopped as a group), and dies with the emulator (`PR_SET_PDEATHSIG`). That
//! signal reaches the direct child only: what it started itself outlives a SIGKILLed
//! emulator until `polypath emu clean` (run at the start of every run) kills everything
//! left in the run's namespaces. Its stdout and stderr go to files in the run's
//! `procs/` folder; its exit status is kept.

use std::fs::File;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::sync::Arc;

use polypath_sim::{Record, SimTime};
use serde::Serialize;

use crate::error::EmuError;
use crate::udpgen::Shared;

/// What a process is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A `command` flow.
    Command,
    /// The server of a `quic` flow (stopped at the end of the run).
    QuicServer,
    /// The client of a `quic` flow.
    QuicClient,
    /// The receiver (`polypath tcp recv`) of a `tcp` flow (stopped at the end of the run).
    TcpReceiver,
    /// The sender (`polypath tcp send`) of a `tcp` flow.
    TcpSender,
}

/// A process's record, as `summary.json` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessReport {
    /// The scenario flow.
    pub flow: String,
    /// The flow instance.
    pub instance: u32,
    /// What it was for.
    pub role: Role,
    /// The host it ran on.
    pub host: String,
    /// The command line (after substitutions).
    pub command: String,
    /// When it started (seconds of the run's clock).
    pub started_s: Option<f64>,
    /// When it ended.
    pub ended_s: Option<f64>,
    /// Its exit code, if it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// Whether the emulator stopped it (its flow's `stop`, or the end of the run).
    pub stopped_by_emulator: bool,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

impl ProcessReport {
    /// The report of a process not started yet: `command` on `host` for `flow`'s instance,
    /// its output in `out` + `.stdout` / `.stderr`.
    pub(crate) fn planned(
        flow: &str,
        instance: u32,
        role: Role,
        host: &str,
        command: String,
        out: &str,
    ) -> Self {
        ProcessReport {
            flow: flow.to_string(),
            instance,
            role,
            host: host.to_string(),
            command,
            started_s: None,
            ended_s: None,
            exit_code: None,
            signal: None,
            stopped_by_emulator: false,
            stdout: format!("{out}.stdout"),
            stderr: format!("{out}.stderr"),
        }
    }
}

/// A process to start, running, or ended.
pub(crate) struct Proc {
    pub report: ProcessReport,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    ns_fd: i32,
    /// When to start it (ns of the run's clock).
    pub start_at: u64,
    /// When to stop it, if ever.
    pub stop_at: Option<u64>,
    /// Started only once this file has a first line (a server's "listening on"), and
    /// never if the process at this index of the run's list ended before that.
    pub after: Option<(PathBuf, usize)>,
    child: Option<Child>,
    term_sent: Option<Instant>,
    /// It has ended (or will never start).
    pub finished: bool,
    /// For a QUIC client: where its flow's completions go, and the transfer's size.
    pub app: Option<(Arc<Shared>, u64)>,
}

impl Proc {
    /// A process for `report`, to run `argv` in namespace `ns_fd` with `env`.
    pub fn new(
        report: ProcessReport,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        ns_fd: i32,
        start_at: u64,
        stop_at: Option<u64>,
    ) -> Proc {
        Proc {
            report,
            argv,
            env,
            ns_fd,
            start_at,
            stop_at,
            after: None,
            child: None,
            term_sent: None,
            finished: false,
            app: None,
        }
    }

    /// For a QUIC client that exited successfully with a verified transfer: a `transfer`
    /// completion of its flow, from the process's start to its exit (handshake, path
    /// validation and transfer, as the simulator counts from the instance's start to the
    /// last byte read).
    pub fn record_completion(&self) {
        let Some((shared, bytes)) = &self.app else {
            return;
        };
        let (Some(start), Some(end), Some(0)) = (
            self.report.started_s,
            self.report.ended_s,
            self.report.exit_code,
        ) else {
            return;
        };
        if self.report.stopped_by_emulator {
            return;
        }
        let verified = std::fs::read_to_string(&self.report.stdout)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v.get("verified").and_then(serde_json::Value::as_bool))
            .unwrap_or(false);
        if !verified {
            return;
        }
        if let Ok(mut r) = shared.records.lock() {
            r.push(Record::Completion {
                label: "transfer".into(),
                started: SimTime((start * 1e9) as u64),
                finished: SimTime((end * 1e9) as u64),
                bytes: *bytes,
            });
        }
    }

    /// Whether the emulator should not wait for it before ending the run.
    pub fn is_daemon(&self) -> bool {
        matches!(self.report.role, Role::QuicServer | Role::TcpReceiver)
    }

    /// Starts, stops or reaps the process as the clock says (`now` in ns).
    pub fn poll(&mut self, now: u64) -> Result<(), EmuError> {
        if self.finished {
            return Ok(());
        }
        if self.child.is_none() {
            let ready = self.after.as_ref().is_none_or(|(p, _)| has_a_line(p));
            if now >= self.start_at && ready {
                self.spawn(now)?;
            }
            return Ok(());
        }
        if let Some(child) = self.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            self.report.exit_code = status.code();
            self.report.signal = status.signal();
            self.report.ended_s = Some(now as f64 / 1e9);
            self.child = None;
            self.finished = true;
            return Ok(());
        }
        if self.stop_at.is_some_and(|t| now >= t) {
            self.terminate();
        }
        Ok(())
    }

    fn spawn(&mut self, now: u64) -> Result<(), EmuError> {
        let Some((prog, args)) = self.argv.split_first() else {
            self.finished = true;
            return Ok(());
        };
        let out =
            File::create(&self.report.stdout).map_err(|e| EmuError::io(&self.report.stdout, e))?;
        let err =
            File::create(&self.report.stderr).map_err(|e| EmuError::io(&self.report.stderr, e))?;
        let ns_fd = self.ns_fd;
        let mut cmd = Command::new(prog);
        cmd.args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(ns_fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                libc::setpgid(0, 0);
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| {
            EmuError::Setup(format!(
                "flow `{}`: cannot start `{}`: {e}",
                self.report.flow, self.report.command
            ))
        })?;
        self.report.started_s = Some(now as f64 / 1e9);
        self.child = Some(child);
        Ok(())
    }

    /// Sends SIGTERM to the process group, then SIGKILL if it is still there after a
    /// grace period (on a later call).
    pub fn terminate(&mut self) {
        let Some(child) = self.child.as_ref() else {
            if !self.finished {
                self.finished = true;
            }
            return;
        };
        let pgid = child.id() as i32;
        match self.term_sent {
            None => {
                self.report.stopped_by_emulator = true;
                // SAFETY: signalling the process group we created.
                unsafe {
                    libc::kill(-pgid, libc::SIGTERM);
                }
                self.term_sent = Some(Instant::now());
            }
            Some(t) if t.elapsed() > Duration::from_secs(2) => {
                // SAFETY: as above.
                unsafe {
                    libc::kill(-pgid, libc::SIGKILL);
                }
            }
            Some(_) => {}
        }
    }

    /// Stops it now and waits for it (the end of the run).
    pub fn kill_and_reap(&mut self, now: u64) {
        if let Some(mut child) = self.child.take() {
            let pgid = child.id() as i32;
            self.report.stopped_by_emulator = true;
            // SAFETY: signalling the process group we created.
            unsafe {
                libc::kill(-pgid, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(2);
            let status = loop {
                match child.try_wait() {
                    Ok(Some(s)) => break Some(s),
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    _ => {
                        // SAFETY: killing the process group we created.
                        unsafe {
                            libc::kill(-pgid, libc::SIGKILL);
                        }
                        break child.wait().ok();
                    }
                }
            };
            if let Some(s) = status {
                self.report.exit_code = s.code();
                self.report.signal = s.signal();
            }
            self.report.ended_s = Some(now as f64 / 1e9);
            // Anything else left in its group.
            // SAFETY: as above; ESRCH when the group is empty.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
        self.finished = true;
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pgid = child.id() as i32;
            // SAFETY: killing the process group we created.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
            let _ = child.wait();
        }
    }
}

fn has_a_line(path: &Path) -> bool {
    std::fs::read(path).is_ok_and(|b| b.contains(&b'\n'))
}
