"""The README's example commands, run as written (with ``$P`` the binary under test), and
what their comments claim, checked. A command removed from the README, or one that no
longer does what its comment says, fails here."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from polypath_lab.sim import REPO, polypath_binary

#: Longest any one example may take (a busy machine, a debug build).
TIMEOUT_S = 600


def readme_block(marker: str) -> list[str]:
    """The commands of the README's ``sh`` block that contains ``marker``: continuation
    lines joined, comments and blank lines dropped."""
    blocks = re.findall(r"```sh\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    [block] = [b for b in blocks if marker in b]
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        command = line.split("#", 1)[0].strip()
        if command:
            commands.append(command)
    return commands


def as_run(command: str) -> str:
    """The command with the README's ways of naming the binary replaced by ``$P``."""
    return command.replace("cargo run --release -p polypath --", "$P")


@pytest.fixture
def workdir(tmp_path):
    """A scratch directory that sees the repository's scenarios and traces as the README's
    commands expect (they run from the repository's root)."""
    for name in ("scenarios", "traces"):
        (tmp_path / name).symlink_to(REPO / name)
    return tmp_path


def run(command: str, cwd: Path) -> str:
    env = dict(os.environ, P=str(polypath_binary().resolve()))
    done = subprocess.run(["bash", "-c", as_run(command)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, f"{command}\n{done.stderr}"
    return done.stdout


def start(command: str, cwd: Path) -> subprocess.Popen:
    """Starts a background command (``... &``) and waits for its first line."""
    env = dict(os.environ, P=str(polypath_binary().resolve()))
    proc = subprocess.Popen(["bash", "-c", "exec " + as_run(command.rstrip("&").strip())],
                            cwd=cwd, env=env, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert first, f"{command} printed nothing"
    return proc


def read_until(proc: subprocess.Popen, json_lines: int, timeout_s: float) -> str:
    """Reads a background command's output until it has printed ``json_lines`` lines of
    JSON (or ended), for at most ``timeout_s``; a server prints a connection's line when the
    connection ends on its side, which can be after the client has exited."""
    got: list[str] = []

    def reader() -> None:
        assert proc.stdout is not None
        count = 0
        for line in proc.stdout:
            got.append(line)
            count += line.startswith("{")
            if count >= json_lines:
                return

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return "".join(got)


def stop(proc: subprocess.Popen) -> str:
    """Interrupts a background command; returns the rest of its output."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    return out


def test_sim_run_writes_its_files_byte_identically(workdir):
    [command] = [c for c in readme_block("sim run") if "sim run" in c]
    summary = json.loads(run(command, workdir))
    out = workdir / "out"
    files = ["flows.csv", "paths.csv", "links.csv", "completions.csv", "summary.json"]
    first = {f: (out / f).read_bytes() for f in files}
    assert summary["output_hash"], summary
    out.rename(workdir / "out.1")
    run(command, workdir)
    assert {f: (out / f).read_bytes() for f in files} == first


def test_transfer_examples_do_what_their_comments_say(workdir):
    commands = readme_block("$P server")
    assert commands[0].startswith("P="), commands[0]
    background: list[subprocess.Popen] = []
    seen: set[str] = set()
    served_lines = ""
    try:
        for command in commands[1:]:
            if command.endswith("&"):
                background.append(start(command, workdir))
                continue
            out = run(command, workdir)
            kind = check_example(command, out, workdir)
            assert kind not in seen, f"two examples of {kind}"
            seen.add(kind)
        served_lines = read_until(background[0], 4, 60.0)
    finally:
        outputs = [stop(p) for p in background]
    assert seen == {"upload", "download", "multipath", "lossy", "bench loopback",
                    "bench sim", "bench server"}, seen
    # The server printed one verified line per client, with its own view.
    served = [json.loads(line) for line in (served_lines + outputs[0]).splitlines()
              if line.startswith("{")]
    assert len(served) == 4, served
    for s in served:
        assert s["verified"] and s["connection"]["side"] == "server", s
        assert s["connection"]["handshake_ms"] > 0 and s["goodput_mbps"] > 0, s


def check_example(command: str, out: str, cwd: Path) -> str:
    """Checks what the comment above ``command`` claims; returns which example it is."""
    if " bench loopback" in command:
        r = json.loads(out)
        for stack in ("polypath", "noq", "polypath_two_paths"):
            assert r[stack]["median_mbps"] > 0 and len(r[stack]["runs"]) == r["rounds"], r
        assert r["ratio"]["of_medians"] > 0 and r["two_path_ratio"]["of_medians"] > 0, r
        for stack in ("polypath", "noq"):
            assert r[stack]["median_cpu_s_per_gbit"] > 0, r
        return "bench loopback"
    if " bench sim" in command:
        r = json.loads(out)
        [case] = r["cases"]
        m = case["median"]
        assert case["name"] == "nrdc-cubic" and case["hashes_agree"], case
        # The whole 300 MB moved (IP bytes over both links, both directions).
        assert m["simulated_gbit"] > 2.4 and m["sim_s"] > 0, m
        assert m["sim_per_cpu_s"] > 0 and m["events_per_cpu_s"] > 0 and m["gbit_per_cpu_s"] > 0, m
        assert len(m["output_hash"]) == 64, m
        return "bench sim"
    if " bench server" in command:
        m = re.search(r"completed (\d+) failed (\d+)", out)
        assert m and (int(m[1]), int(m[2])) == (100, 0), out
        assert "server RSS" in out, out
        return "bench server"
    s = json.loads(out)
    assert s["verified"] and s["bytes"] > 0, s
    if "--weights-at" in command:
        # Two paths; weights 1:3 (path 1 carries more) until the change, 3:1 after it.
        assert s["multipath"] and len(s["sender"]["paths"]) == 2, s
        [change] = s["weight_changes"]
        assert change["applied"] and change["due_s"] == 0.5, change
        before = change["path_bytes_sent"]
        total = [p["bytes"] for p in s["sender"]["paths"]]
        after = [t - b for t, b in zip(total, before)]
        assert before[1] > before[0], (before, after)
        assert after[0] > after[1], (before, after)
        assert any((cwd / "qlog").iterdir()), "no qlog written"
        return "multipath"
    if ":5000" in command:
        lost = s["sender"]["lost_fraction"]
        assert 0.02 < lost < 0.10, f"5 % loss, the sender lost {lost}"
        return "lossy"
    if "--download" in command:
        assert s["direction"] == "download" and s["sender"]["side"] == "server", s
        return "download"
    assert s["direction"] == "upload" and s["sender"]["side"] == "client", s
    return "upload"
