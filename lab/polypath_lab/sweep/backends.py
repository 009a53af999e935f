"""Where jobs run: ``local`` (a process pool on this machine) or ``ray`` (one Ray task per
job, ``num_cpus=1``, on a local Ray instance or a cluster). Both call
:func:`polypath_lab.sweep.jobs.execute` and yield its records as jobs finish."""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from ..sim import LabError
from .jobs import Job, execute
from .table import LOST

#: The backends by name.
BACKENDS = ("local", "ray")


def cores() -> int:
    """The cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def lost(job: Job, error: str) -> dict[str, Any]:
    """The record of a job that never returned."""
    return {"key": job.key, "status": LOST, "error": error, "figures": {}}


def run_local(jobs: list[Job], binary: Path, work: Path, workers: int | None
              ) -> Iterator[dict[str, Any]]:
    """Runs the jobs in a process pool (``workers`` processes, default one per core)."""
    n = workers or cores()
    with concurrent.futures.ProcessPoolExecutor(max_workers=n) as pool:
        futures = {pool.submit(execute, j, str(binary), str(work), False, True): j
                   for j in jobs}
        try:
            for fut in concurrent.futures.as_completed(futures):
                try:
                    yield fut.result()
                except concurrent.futures.process.BrokenProcessPool as e:
                    yield lost(futures[fut], f"worker process died: {e}")
        finally:
            for f in futures:
                f.cancel()


def stage(jobs: list[Job], binary: Path, where: Path) -> Path:
    """A folder for Ray's runtime environment (``working_dir``): ``bin/polypath`` and every
    file the jobs name as ``files/SHA256``. Files are hard-linked where possible."""
    if where.exists():
        shutil.rmtree(where)
    (where / "bin").mkdir(parents=True)
    (where / "files").mkdir()

    def put(src: Path, dst: Path) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    put(binary, where / "bin" / binary.name)
    for job in jobs:
        for path, sha in job.files.items():
            dst = where / "files" / sha
            if not dst.exists():
                put(Path(path), dst)
    return where


def _package_dirs() -> list[str]:
    """The Python packages a worker needs to run :func:`execute` that a cluster node may
    not have: this lab and tomli-w (pure Python both)."""
    import tomli_w

    import polypath_lab

    return [str(Path(polypath_lab.__file__).parent), str(Path(tomli_w.__file__).parent)]


def _init(ray: Any, kwargs: dict[str, Any], tries: int = 2) -> None:
    """``ray.init(**kwargs)``, tried again once: on a machine busy enough, a local Ray
    instance can miss its start-up deadline once and start the next time."""
    for attempt in range(1, tries + 1):
        try:
            ray.init(**kwargs)
            return
        except Exception as e:  # Ray raises bare Exception for a start-up timeout
            ray.shutdown()
            if attempt == tries:
                args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
                raise LabError(f"ray.init({args}) failed {tries} times: "
                               f"{type(e).__name__}: {e}") from e
            print(f"ray.init failed ({type(e).__name__}: {str(e).splitlines()[0]}); "
                  "trying again", file=sys.stderr)


def run_ray(jobs: list[Job], binary: Path, work: Path, address: str | None,
            workers: int | None, ship: bool, staging: Path,
            timings: dict[str, float] | None = None) -> Iterator[dict[str, Any]]:
    """Runs each job as a Ray task with ``num_cpus=1``.

    Without ``address`` a local Ray instance is started with ``workers`` CPUs (default one
    per core) and no dashboard, and stopped at the end; with one (``auto``, ``HOST:6379``
    or ``ray://HOST:10001``) the campaign joins that cluster. ``ship``: the binary, the
    trace files and the lab's code travel in the runtime environment (``working_dir`` and
    ``py_modules``), for nodes that do not share this machine's file system; otherwise the
    workers use this machine's paths (one machine, or a shared file system). ``timings``
    gets ``startup_s``: the time to start or join Ray."""
    try:
        import ray
    except ImportError as e:
        raise LabError("the ray backend needs Ray: `make lab-deps` installs it into "
                       f"lab/.venv ({e})") from e
    runtime_env: dict[str, Any] = {}
    if ship:
        runtime_env = {"working_dir": str(stage(jobs, binary, staging)),
                       "py_modules": _package_dirs()}
    started = not ray.is_initialized()
    t0 = time.monotonic()
    if started:
        kwargs: dict[str, Any] = {"runtime_env": runtime_env or None,
                                  "logging_level": "WARNING", "log_to_driver": True}
        if address:
            kwargs["address"] = address
        else:
            kwargs.update(num_cpus=workers or cores(), include_dashboard=False)
        _init(ray, kwargs)
    if timings is not None:
        timings["startup_s"] = time.monotonic() - t0
    remote = ray.remote(num_cpus=1, max_retries=1)(execute)
    options = {"runtime_env": runtime_env} if ship and not started else {}
    try:
        pending = {remote.options(**options).remote(j, str(binary), str(work), ship, not ship): j
                   for j in jobs}
        while pending:
            # Every job finished by now (at least one), in one pass.
            ready, _ = ray.wait(list(pending), num_returns=1)
            more, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
            for ref in dict.fromkeys(ready + more):
                job = pending.pop(ref)
                try:
                    yield ray.get(ref)
                except ray.exceptions.RayError as e:
                    yield lost(job, f"ray: {type(e).__name__}: {str(e).splitlines()[0]}")
    finally:
        if started:
            ray.shutdown()
