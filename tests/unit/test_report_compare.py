"""report/compare.py: runs side by side, a difference marked only where it exceeds both runs'
intervals combined; different sources flagged, never compared silently."""

from __future__ import annotations

import pandas as pd
import pytest

from jouleprof.report.compare import Value, compare_runs, diff, write_compare_html
from jouleprof.store.rundir import RunDir
from jouleprof.types import Figure, RunRecord, RunStatus, Source


def run(path, energy, lo, hi, thr, phases=None, source=Source.MEASURED):
    rec = RunRecord(run_id=path.name, kind="test", status=RunStatus.COMPLETE)
    rec.summary["energy_per_sample_j"] = Figure(energy, "J", source, lo=lo, hi=hi)
    rec.summary["throughput_samples_per_s"] = Figure.measured(thr, "samples/s")
    rec.summary["cpu_energy_j"] = Figure.unavailable("J", "no RAPL")
    rd = RunDir.create(path, rec)
    if phases:
        rows = [
            {"phase": p, "time_s": 1.0, "energy_j": e * 10, "energy_lo_j": (e - w) * 10,
             "energy_hi_j": (e + w) * 10, "method": "regression", "n_steps": 10, "resolved": True}
            for p, (e, w) in phases.items()
        ]  # fmt: skip
        rd.write_phases(pd.DataFrame(rows), "phases_regression.csv")
    return path


def test_differences_beyond_their_uncertainty_are_marked(tmp_path):
    a = run(tmp_path / "a", 10.0, 9.8, 10.2, 30.0, {"forward": (4.0, 0.1), "backward": (6.0, 0.1)})
    b = run(tmp_path / "b", 10.1, 9.9, 10.3, 31.0, {"forward": (4.05, 0.1), "backward": (7.0, 0.2)})
    cmp = compare_runs([a, b])
    fig = {r.key: r for r in cmp.figures}
    e = fig["energy_per_sample_j"].diffs[0]
    assert e.abs == pytest.approx(0.1) and e.uncertainty == pytest.approx((0.2**2 * 2) ** 0.5)
    assert not e.significant  # 0.1 J apart, ±0.28 J: not a difference
    assert not fig["throughput_samples_per_s"].diffs[0].significant  # no interval: never marked
    assert fig["cpu_energy_j"].values[0].value is None
    ph = {r.key: r.diffs[0] for r in cmp.phases}
    assert not ph["regression: forward"].significant
    assert ph["regression: backward"].significant  # +1.0 J/step, ±0.22
    assert ph["regression: backward"].abs == pytest.approx(1.0)
    assert cmp.n_significant == 1
    js = cmp.to_json()
    assert js["reference"] == "a" and js["phases"][1]["diffs_vs_first"][0]["significant"] is True
    html = write_compare_html(cmp, tmp_path / "c.html").read_text()
    assert html.count('class="diff sig"') == 1 and "regression: backward" in html


def test_different_sources_are_flagged_not_compared():
    d = diff(Value(10.0, 9.9, 10.1, "measured"), Value(20.0, 19.9, 20.1, "simulated"))
    assert not d.significant and "sources differ" in d.note


def test_compare_needs_two_readable_runs(tmp_path):
    a = run(tmp_path / "a", 1.0, 0.9, 1.1, 1.0)
    with pytest.raises(ValueError, match="at least two"):
        compare_runs([a])
    from jouleprof.errors import RunDirError

    with pytest.raises(RunDirError, match="not a run directory"):
        compare_runs([a, tmp_path / "nothing"])
