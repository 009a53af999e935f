"""Parameter sweeps (``python -m polypath_lab sweep``): spec parsing and its errors, job
keys, and a small campaign run with the local backend and on a local Ray instance (the two
tables identical, a second run skipping every finished job)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from polypath_lab.sim import REPO, polypath_binary
from polypath_lab.sweep import campaign, jobs, spec, table

SMALL = Path(__file__).parent / "sweeps" / "small.toml"


def write_spec(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "s.toml"
    p.write_text(text)
    return p


def test_paths_select_index_name_and_every_element_and_merge_tables():
    s = {"link": [{"name": "a", "down": {"rate": "1Mbit/s"}}, {"name": "b"}],
         "flow": [{"name": "f", "options": {"scheduler": {"weights": "1,1"}}}]}
    spec.apply(s, "link[b].delay", "5ms")
    spec.apply(s, "link[*].down.predictor", {"kind": "oracle"})
    spec.apply(s, "link[0].down.predictor", {"bias": 0.5})
    spec.apply(s, "flow[0].options.scheduler", {"cwnd_limited": "n"})
    spec.apply(s, "link[-1].down", {"rate": spec.UNSET})
    assert s["link"][1] == {"name": "b", "delay": "5ms", "down": {"predictor": {"kind": "oracle"}}}
    assert s["link"][0]["down"] == {"rate": "1Mbit/s",
                                    "predictor": {"kind": "oracle", "bias": 0.5}}
    assert s["flow"][0]["options"]["scheduler"] == {"weights": "1,1", "cwnd_limited": "n"}
    spec.apply(s, "link[a].down.rate", spec.UNSET)
    assert "rate" not in s["link"][0]["down"]
    for bad, why in [("link[c].delay", "no element named 'c'"), ("link[5].delay", "out of range"),
                     ("flow.scheduler", "is an array of tables: select"), ("link[0]..x", "bad path segment")]:
        with pytest.raises(spec.SpecError, match=why):
            spec.apply(s, bad, 1)


def test_grid_times_zip_times_cases_with_templates(tmp_path):
    p = write_spec(tmp_path, """
name = "t"
seeds = [1, 2]
[at]
w = []
[format]
"flow[0].options.scheduler.weights" = "{w},{v},1"
[grid]
v = [10, 20]
[[zip]]
w = [1, 2, 3]
"flow[0].cc" = ["cubic", "bbr", "olia"]
[[case]]
name = "clarity"
base = "clarity-static"
[[case]]
name = "again"
base = "%s/scenarios/clarity-static.toml"
""" % REPO)
    s = spec.load(p)
    assert s.param_names == ["v", "w", "flow[0].cc"]
    assert len(s.points) == 2 * 2 * 3
    sc = s.scenario(s.points[4])
    assert s.points[4].params == {"v": 20, "w": 2, "flow[0].cc": "bbr"}
    assert sc["flow"][0]["options"]["scheduler"]["weights"] == "2,20,1"
    assert sc["flow"][0]["cc"] == "bbr"
    assert {pt.case for pt in s.points} == {"clarity", "again"}


@pytest.mark.parametrize("text, where", [
    ('base = "nrdc-two-path"\nscheds = 1\n', r"s.toml:2: field `scheds`: unknown key"),
    ('base = "nrdc-two-path"\n[grid]\n"flow[0].cc" = []\n', r"s.toml:3: field `grid.flow\[0\].cc`"),
    ('base = "nrdc-two-path"\n[[zip]]\na = [1, 2]\nb = [1]\n', r"s.toml:3: field `zip.a`: .*lengths"),
    ('base = "nrdc-two-path"\n[grid]\n"link[xx].delay" = ["1ms"]\n',
     r"s.toml:3: field `grid.link\[xx\].delay`: .*no element named 'xx'"),
    ('base = "no-such-scenario"\n', r"s.toml:1: field `base`: .*no-such-scenario.toml"),
    ('base = "nrdc-two-path"\nmetrics = ["speed"]\n', r"s.toml:2: field `metrics`: unknown metric"),
    ('base = "nrdc-two-path"\n[format]\n"sim.duration" = "{nope}s"\n',
     r"s.toml:3: field `format.sim.duration`: template"),
    ('base = "nrdc-two-path"\n[[plot]]\nkind = "pie"\n', r"s.toml:3: field `plot.kind`"),
    ('base = "nrdc-two-path"\nseeds = [1, 1]\n', r"s.toml:2: field `seeds`: a seed is listed twice"),
])
def test_spec_errors_name_file_line_and_field(tmp_path, text, where):
    with pytest.raises(spec.SpecError, match=where):
        spec.load(write_spec(tmp_path, text))


def test_job_key_follows_file_content_not_location(tmp_path):
    trace = REPO / "traces/lumos5g/5G/5g_trace_59_driving"
    copy = tmp_path / "elsewhere"
    shutil.copy(trace, copy)
    s = {"link": [{"name": "a", "rate": {"trace": str(trace), "format": "lumos5g"}}]}
    moved = {"link": [{"name": "a", "rate": {"trace": str(copy), "format": "lumos5g"}}]}
    sha = jobs.sha256_file(trace)
    k = jobs.job_key(s, 1, {str(trace): sha}, "bin")
    assert k == jobs.job_key(moved, 1, {str(copy): sha}, "bin")
    assert k != jobs.job_key(s, 2, {str(trace): sha}, "bin")
    assert k != jobs.job_key(s, 1, {str(trace): sha}, "other-bin")
    assert k != jobs.job_key(s, 1, {str(trace): "0" * 64}, "bin")


def test_a_parameter_that_changes_nothing_is_an_error(tmp_path):
    """Two points that make the same scenario would be the same job: the spec is wrong."""
    p = write_spec(tmp_path, 'base = "nrdc-two-path"\n[at]\nlabel = []\n'
                             '[grid]\nlabel = ["a", "b"]\n')
    with pytest.raises(Exception, match="changes nothing"):
        jobs.make_jobs(spec.load(p), "bin")


def test_flatten_report_leaves_out_wall_time():
    report = {"sim_time_s": 2.0, "wall_time_s": 0.3, "speedup": 6.0, "events_per_s": 1e6,
              "output_hash": "ab", "files": [["flows.csv", "x"]],
              "flows": [{"name": "f", "kind": "quic", "bytes": 5}],
              "links": [{"link": "mn", "dir": "down", "drops": 1}],
              "radio": {"handovers": 2, "interruptions": [{"t": 1}]}}
    flat = jobs.flatten_report(report)
    assert flat == {
        "file.flows.csv": "x", "sim_time_s": 2.0, "output_hash": "ab", "flow.f.kind": "quic",
        "flow.f.bytes": 5, "link.mn.down.drops": 1, "radio.handovers": 2}
    report["files"] += [["links.csv", "l"], ["completions.csv", "c"]]
    assert len(jobs.flatten_report(report)["decisions_hash"]) == 64


def test_table_types_and_csv(tmp_path):
    rows = [{"job": 0, "a": 1, "b": 0.5, "c": "x", "d": True, "e": None},
            {"job": 1, "a": 2, "b": 1, "c": 3, "d": False, "e": None}]
    parquet, path_csv = table.write(rows, tmp_path, {"k": "v"})
    back = table.read(parquet)
    assert back == [{"job": 0, "a": 1, "b": 0.5, "c": "x", "d": True, "e": None},
                    {"job": 1, "a": 2, "b": 1.0, "c": "3", "d": False, "e": None}]
    assert path_csv.read_text().splitlines() == ["job,a,b,c,d,e", "0,1,0.5,x,True,",
                                                 "1,2,1.0,3,False,"]


def journal_lines(out: Path) -> list[str]:
    return (out / "jobs.jsonl").read_text().splitlines()


def test_small_sweep_local_and_ray_tables_identical_and_resumed(tmp_path):
    """The small campaign with the local backend, then on a local Ray instance with two
    CPUs: the same table byte for byte. Run again, every finished job (failed ones too) is
    skipped; with two journal lines removed, exactly those two jobs run again."""
    import pyarrow.parquet as pq

    s = spec.load(SMALL)
    local = campaign.run(s, tmp_path / "local", "local", progress=False)
    assert (local.jobs, local.ran, local.skipped, local.failed) == (6, 6, 0, 2)
    rows = table.read(local.parquet)
    for r in rows:
        print({k: r[k] for k in ("scheduler", "cc", "status", "completion_s", "output_hash")})
    ok = [r for r in rows if r["status"] == "ok"]
    failed = [r for r in rows if r["status"] == "failed"]
    assert [(r["scheduler"], r["cc"]) for r in ok] == [
        ("minrtt", "cubic"), ("minrtt", "bbr"), ("roundrobin", "cubic"), ("roundrobin", "bbr")]
    assert all(r["completion_s"] > 0 and r["transfers_completed"] == 1 for r in ok)
    assert all(r["flow.file.kind"] == "quic" for r in ok)
    assert len({r["output_hash"] for r in ok}) == 4, "every scheduler x cc is a different run"
    assert len(failed) == 2 and all("no-such-cc" in r["error"] for r in failed)
    assert all(str(tmp_path) not in r["error"] for r in failed), "no machine paths in errors"
    assert (tmp_path / "local" / "heatmap-completion_s-by-cc.png").stat().st_size > 1000
    assert "minrtt" in (tmp_path / "local" / "index.md").read_text()

    ray_run = campaign.run(s, tmp_path / "ray", "ray", workers=2, progress=False)
    assert (ray_run.ran, ray_run.failed) == (6, 2)
    assert {json.loads(line)["backend"] for line in journal_lines(tmp_path / "ray")} == {"ray"}
    assert pq.read_table(ray_run.parquet).equals(pq.read_table(local.parquet))
    assert (tmp_path / "ray" / "results.csv").read_bytes() == \
        (tmp_path / "local" / "results.csv").read_bytes()

    before = journal_lines(tmp_path / "local")
    again = campaign.run(s, tmp_path / "local", "local", progress=False)
    assert (again.ran, again.skipped) == (0, 6)
    assert journal_lines(tmp_path / "local") == before
    assert table.read(again.parquet) == rows

    kept = [line for line in before if json.loads(line)["key"] not in
            {rows[0]["key"], rows[4]["key"]}]
    (tmp_path / "local" / "jobs.jsonl").write_text("\n".join(kept) + "\n")
    resumed = campaign.run(s, tmp_path / "local", "local", progress=False)
    assert (resumed.ran, resumed.skipped) == (2, 4)
    assert table.read(resumed.parquet) == rows


def test_shipped_job_runs_from_its_staged_copy(tmp_path, monkeypatch):
    """What a Ray worker does with --ship, without Ray: the binary and the traces staged as
    bin/polypath and files/SHA256, the job run from that folder with its file names
    rewritten, the output folder removed afterwards."""
    from polypath_lab.sweep import backends

    p = write_spec(tmp_path, f"""
base = "lumos5g-replay"
[set]
"sim.duration" = "2s"
"link[0].up.rate.trace" = "{REPO}/traces/lumos5g/5G/5g_trace_59_driving"
""")
    binary = polypath_binary().resolve()
    (job,) = jobs.make_jobs(spec.load(p), jobs.sha256_file(binary))
    staged = backends.stage([job], binary, tmp_path / "stage")
    (sha,) = job.files.values()
    assert (staged / "files" / sha).read_bytes() == \
        (REPO / "traces/lumos5g/5G/5g_trace_59_driving").read_bytes()
    monkeypatch.chdir(staged)
    rec = jobs.execute(job, "/nowhere/polypath", str(tmp_path / "work"), True, False)
    assert rec["status"] == "ok", rec["error"]
    assert rec["figures"]["sim_time_s"] > 0
    assert not (tmp_path / "work" / job.key).exists()
    shutil.rmtree(staged / "files")
    rec = jobs.execute(job, "/nowhere/polypath", str(tmp_path / "work"), True, False)
    assert rec["status"] == "failed" and sha in rec["error"], rec["error"]


def test_cli_reports_spec_errors(tmp_path, capsys):
    from polypath_lab.__main__ import main

    p = write_spec(tmp_path, 'base = "nrdc-two-path"\n[grid]\n"flow[0].cc" = "bbr"\n')
    assert main(["sweep", str(p), "--out", str(tmp_path / "out")]) == 1
    assert "s.toml:3: field `grid.flow[0].cc`: a non-empty list" in capsys.readouterr().err


def test_plots_draw_and_refuse_a_missing_column(tmp_path):
    from polypath_lab.sweep import plots

    rows = [{"status": "ok", "a": a, "b": b, "k": k, "y": a * b}
            for a in (1, 2) for b in (1, 2, 3) for k in ("x", "m")]
    with pytest.raises(ValueError, match="no column 'c'"):
        plots.draw("line", {"x": "a", "y": "c"}, rows, tmp_path)
    fig = plots.draw("heatmap", {"x": "a", "y": "b", "value": "y", "stat": "max"}, rows,
                     tmp_path)
    assert fig.table == (["b \\ a", "1", "2"], [["1", "1.000", "2.000"], ["2", "2.000", "4.000"],
                                                ["3", "3.000", "6.000"]])
    line = plots.draw("line", {"x": "a", "y": "y", "group": "b", "where": {"k": "x"},
                               "marks": {"column": "b", "values": [3]}}, rows, tmp_path)
    cdf = plots.draw("cdf", {"value": "y", "group": "k", "file": "c.png"}, rows, tmp_path)
    for f in (fig, line, cdf):
        assert (tmp_path / f.file).stat().st_size > 1000
