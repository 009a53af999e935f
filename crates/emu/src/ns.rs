//! Network namespaces, TUN devices and what a run leaves behind.
//!
//! Every run has an id, `ppemu-<pid>x<n>`, and names its namespaces `<id>.<host>`. While it
//! runs it holds an exclusive `flock` on `/run/polypath-emu/<id>.lock`; [`clean`] removes
//! the namespaces (and kills the processes in them) of every run whose lock nobody holds,
//! so a run killed with SIGKILL is cleaned by the next run or by `polypath emu clean`, and a
//! live run (another test, another user) is never touched. Nothing here touches the host's
//! own interfaces, routes or firewall: every device and route lives inside a namespace the
//! run created.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::EmuError;

/// The prefix of every namespace the emulator creates.
pub const PREFIX: &str = "ppemu-";
/// Where runs keep their locks and feed sockets.
pub const RUN_DIR: &str = "/run/polypath-emu";
const NETNS_DIR: &str = "/run/netns";

static RUNS: AtomicU32 = AtomicU32::new(0);

/// Runs `ip` with `args`; an error carries the command line and what `ip` printed.
pub(crate) fn ip(args: &[&str]) -> Result<(), EmuError> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| EmuError::Setup(format!("cannot run `ip` (is iproute2 installed?): {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(EmuError::Setup(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// A run's id, lock and folder. Dropping it releases the lock and removes the folder.
pub(crate) struct RunLock {
    /// `ppemu-<pid>x<n>`.
    pub id: String,
    /// `/run/polypath-emu/<id>`: the run's feed sockets.
    pub dir: PathBuf,
    lock_path: PathBuf,
    _lock: File,
}

impl RunLock {
    /// Takes a fresh run id and its lock.
    pub fn acquire() -> Result<RunLock, EmuError> {
        let n = RUNS.fetch_add(1, Ordering::Relaxed);
        let id = format!("{PREFIX}{}x{n}", std::process::id());
        fs::create_dir_all(RUN_DIR).map_err(|e| EmuError::io(RUN_DIR, e))?;
        let lock_path = Path::new(RUN_DIR).join(format!("{id}.lock"));
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| EmuError::io(&lock_path, e))?;
        // SAFETY: flock on a file descriptor we own.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(EmuError::io(&lock_path, io::Error::last_os_error()));
        }
        let dir = Path::new(RUN_DIR).join(&id);
        fs::create_dir_all(&dir).map_err(|e| EmuError::io(&dir, e))?;
        Ok(RunLock {
            id,
            dir,
            lock_path,
            _lock: lock,
        })
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
        let _ = fs::remove_file(&self.lock_path);
    }
}

/// One network namespace of a run. Dropping it kills what still runs inside and deletes it.
pub(crate) struct Netns {
    /// Its name (`<run id>.<host>`).
    pub name: String,
    fd: OwnedFd,
}

impl Netns {
    /// Creates the namespace `name` with its loopback up.
    pub fn create(name: &str) -> Result<Netns, EmuError> {
        ip(&["netns", "add", name])?;
        let path = Path::new(NETNS_DIR).join(name);
        let fd = match File::open(&path) {
            Ok(f) => OwnedFd::from(f),
            Err(e) => {
                let _ = ip(&["netns", "del", name]);
                return Err(EmuError::io(&path, e));
            }
        };
        let ns = Netns {
            name: name.to_string(),
            fd,
        };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Runs `ip -n <name> args`.
    pub fn ip(&self, args: &[&str]) -> Result<(), EmuError> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// Sets sysctls (`key=value`) inside the namespace.
    pub fn sysctl(&self, settings: &[String]) -> Result<(), EmuError> {
        let mut args = vec!["netns", "exec", self.name.as_str(), "sysctl", "-q", "-w"];
        args.extend(settings.iter().map(String::as_str));
        ip(&args)
    }

    /// The namespace's file descriptor (for `setns`).
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Opens TUN devices named `names` inside the namespace (down, no address yet); the
    /// descriptors are non-blocking and close-on-exec.
    pub fn open_tuns(&self, names: &[String]) -> Result<Vec<OwnedFd>, EmuError> {
        let ns_fd = self.raw_fd();
        std::thread::scope(|s| {
            s.spawn(move || -> Result<Vec<OwnedFd>, EmuError> {
                // This short-lived thread moves into the namespace; the devices it
                // creates stay there.
                // SAFETY: setns on this thread only, with a namespace fd we own.
                if unsafe { libc::setns(ns_fd, libc::CLONE_NEWNET) } != 0 {
                    return Err(EmuError::Setup(format!(
                        "cannot enter a network namespace: {}",
                        io::Error::last_os_error()
                    )));
                }
                names.iter().map(|n| open_tun(n)).collect()
            })
            .join()
            .map_err(|_| EmuError::Setup("the TUN setup thread panicked".into()))?
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        kill_inside(&self.name);
        let _ = ip(&["netns", "del", &self.name]);
    }
}

fn open_tun(name: &str) -> Result<OwnedFd, EmuError> {
    polypath_tun::open(name).map_err(|e| EmuError::Setup(e.to_string()))
}

/// Kills every process inside namespace `name` (SIGKILL).
fn kill_inside(name: &str) {
    let Ok(out) = Command::new("ip")
        .args(["netns", "pids", name])
        .stderr(Stdio::null())
        .output()
    else {
        return;
    };
    for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        if let Ok(pid) = pid.parse::<i32>()
            && pid > 1
        {
            // SAFETY: kill(2) on a pid that lives in our own namespace.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// What [`clean`] removed.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct CleanReport {
    /// Namespaces deleted.
    pub namespaces: Vec<String>,
    /// Runs whose leftovers were removed.
    pub runs: Vec<String>,
    /// Namespaces of live runs, left alone.
    pub live: Vec<String>,
}

/// Removes what runs that no longer hold their lock left behind: their namespaces (after
/// killing the processes inside), locks and feed sockets.
pub fn clean() -> Result<CleanReport, EmuError> {
    let mut report = CleanReport::default();
    let mut names: Vec<String> = match fs::read_dir(NETNS_DIR) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.starts_with(PREFIX))
            .collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(EmuError::io(NETNS_DIR, e)),
    };
    names.sort();
    let mut runs: Vec<String> = names
        .iter()
        .map(|n| n.split('.').next().unwrap_or(n).to_string())
        .collect();
    if let Ok(rd) = fs::read_dir(RUN_DIR) {
        for e in rd.filter_map(|e| e.ok()) {
            if let Ok(n) = e.file_name().into_string()
                && n.starts_with(PREFIX)
            {
                runs.push(n.trim_end_matches(".lock").to_string());
            }
        }
    }
    runs.sort();
    runs.dedup();
    for run in runs {
        if is_live(&run) {
            report.live.extend(
                names
                    .iter()
                    .filter(|n| n.starts_with(&format!("{run}.")))
                    .cloned(),
            );
            continue;
        }
        for n in names.iter().filter(|n| n.starts_with(&format!("{run}."))) {
            kill_inside(n);
            ip(&["netns", "del", n])?;
            report.namespaces.push(n.clone());
        }
        let _ = fs::remove_dir_all(Path::new(RUN_DIR).join(&run));
        let _ = fs::remove_file(Path::new(RUN_DIR).join(format!("{run}.lock")));
        report.runs.push(run);
    }
    Ok(report)
}

/// Whether the run `id` still holds its lock.
fn is_live(id: &str) -> bool {
    let path = Path::new(RUN_DIR).join(format!("{id}.lock"));
    let Ok(f) = OpenOptions::new().write(true).open(&path) else {
        return false;
    };
    // SAFETY: flock on a descriptor we own; released when `f` closes.
    let got = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    !got
}

/// Whether this process may create network namespaces (root with `ip` available).
pub fn available() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("the emulator needs root (network namespaces and TUN devices)".into());
    }
    if !Path::new("/dev/net/tun").exists() {
        return Err("/dev/net/tun is missing".into());
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err("`ip` (iproute2) is not installed".into()),
    }
}
