"""`jouleprof compare`, `collect` and `report --html` end to end (a subprocess runs them)."""

from __future__ import annotations

import json

import pandas as pd

from conftest import jouleprof_many
from jouleprof.store.rundir import RunDir
from jouleprof.types import Figure, RunRecord, RunStatus


def make_run(path, energy, half):
    rec = RunRecord(run_id=path.name, kind="test", status=RunStatus.COMPLETE)
    rec.summary["energy_per_sample_j"] = Figure.measured(
        energy, "J", signal="counter", lo=energy - half, hi=energy + half
    )
    rec.summary["throughput_samples_per_s"] = Figure.measured(20.0, "samples/s", signal="timer")
    RunDir.create(path, rec)
    return path


def test_compare_marks_what_differs_beyond_its_uncertainty(tmp_path):
    a, b = make_run(tmp_path / "a", 10.0, 0.1), make_run(tmp_path / "b", 12.0, 0.1)
    r, text, bad = jouleprof_many(
        [
            ["compare", a, b, "--json", "--html", tmp_path / "c.html"],
            ["compare", a, b],
            ["compare", a, tmp_path / "nope"],
        ]
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    row = next(f for f in out["figures"] if f["key"] == "energy_per_sample_j")
    assert row["values"][1]["value"] == 12.0 and row["diffs_vs_first"][0]["significant"] is True
    assert 'class="diff sig"' in (tmp_path / "c.html").read_text()
    assert text.returncode == 0 and "*" in text.stdout
    assert (
        bad.returncode == 2
        and "not a run directory" in bad.stderr
        and "Traceback" not in bad.stderr
    )


def test_a_count_of_one_is_said_in_the_singular(tmp_path):
    a, b = make_run(tmp_path / "s" / "a", 10.0, 0.1), make_run(tmp_path / "b", 10.0, 0.1)
    for p in (a, b):  # one figure that is neither a main one nor different: hidden
        rd = RunDir(p)
        rec = rd.read_record()
        rec.summary["wall_time_s"] = Figure.measured(5.0, "s", signal="timer")
        rd.write_record(rec)
    cmp, coll = jouleprof_many([["compare", a, b], ["collect", tmp_path / "s"]])
    assert cmp.returncode == 0, cmp.stderr
    assert "1 more figure without a marked difference" in cmp.stderr, cmp.stderr
    assert coll.returncode == 0, coll.stderr
    assert "1 run indexed in" in coll.stderr, coll.stderr


def test_collect_lists_what_did_not_finish_and_report_html_goes_where_asked(tmp_path):
    make_run(tmp_path / "s" / "r1", 1.0, 0.1)
    (tmp_path / "s" / "r2").mkdir()
    (tmp_path / "s" / "r2" / "run.json").write_text("{not json")
    r, html, nope = jouleprof_many(
        [
            ["collect", tmp_path / "s"],
            ["report", tmp_path / "s" / "r1", "--html", tmp_path / "mine.html"],
            ["collect", tmp_path / "nope"],
        ]
    )
    assert r.returncode == 0, r.stderr
    assert "2 runs indexed" in r.stderr and "corrupt" in r.stderr
    df = pd.read_csv(tmp_path / "s" / "runs.csv").set_index("cell_id")
    assert df.loc["r1", "status"] == "complete" and df.loc["r2", "status"] == "corrupt"
    assert html.returncode == 0, html.stderr
    assert "energy_per_sample_j" in (tmp_path / "mine.html").read_text()
    assert nope.returncode == 2
