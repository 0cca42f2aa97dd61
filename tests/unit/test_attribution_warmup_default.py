"""The default warm-up of `attribute` follows the run: a run that recorded its steps only after
its warm-up settled (`jouleprof profile`, study cells: run.json `extra.measured_segment`) keeps
every recorded step, as `profile` itself attributed it; any other run loses its leading
unsettled steps by the rule. `jouleprof attribute` on a run with a report.html rebuilds it from
the phases it just wrote."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from jouleprof.attribution import attribute
from jouleprof.attribution.api import recorded_after_warmup
from jouleprof.sensors.simulated_workload import PhaseSpec, simulate_training
from jouleprof.store.rundir import RunDir
from jouleprof.types import RunRecord, Span

PHASES = [PhaseSpec("forward", 0.030, 450.0), PhaseSpec("backward", 0.050, 600.0)]


def _write_run(path, extra):
    run = simulate_training(PHASES, 120, seed=1)
    spans = run.spans
    # the first steps run slow, as warm-up does: the rule would drop them
    slow = {s.step for s in spans if s.step < 6}
    shift = {}
    t_add = 0.0
    out = []
    for s in sorted(spans, key=lambda s: (s.step, s.t0_s)):
        if s.step not in shift:
            shift[s.step] = t_add
        d = (s.t1_s - s.t0_s) * (2.0 if s.step in slow else 1.0)
        t0 = s.t0_s + shift[s.step]
        out.append(Span(s.step, s.phase, float(t0), float(t0 + d)))
        if s.step in slow:
            t_add += d / 2.0
    rd = RunDir.create(path, RunRecord(run_id=path.name, kind="simulated", extra=extra))
    w = rd.sample_writer()
    samples = run.samples
    w.write(samples)
    w.close()
    w = rd.span_writer()
    w.write(out)
    w.close()
    return path


def test_recorded_after_warmup_reads_the_measured_segment():
    assert recorded_after_warmup({"measured_segment": {"first_recorded_step": 0}})
    assert not recorded_after_warmup({"measured_segment": {"first_recorded_step": None}})
    assert not recorded_after_warmup({})


def test_a_run_recorded_after_its_warmup_keeps_every_step(tmp_path):
    seg = {"measured_segment": {"t0_s": 0.0, "t1_s": 1.0, "steps": 120, "first_recorded_step": 0}}
    after = _write_run(tmp_path / "after", seg)
    plain = _write_run(tmp_path / "plain", {})
    kept = attribute(after, "proportional").devices[0]
    ruled = attribute(plain, "proportional").devices[0]
    assert kept.warmup_steps == 0 and kept.n_steps == 120
    assert ruled.warmup_steps >= 6 and ruled.n_steps == 120 - ruled.warmup_steps
    # an explicit count still wins
    assert attribute(after, "proportional", warmup_steps=3).devices[0].warmup_steps == 3
    assert np.isfinite(kept.step_time_s)


def test_the_cli_rebuilds_an_existing_report(tmp_path):
    seg = {"measured_segment": {"t0_s": 0.0, "t1_s": 1.0, "steps": 120, "first_recorded_step": 0}}
    run = _write_run(tmp_path / "r", seg)
    (run / "report.html").write_text("<html>a stale report</html>")
    r = subprocess.run(
        [sys.executable, "-m", "jouleprof.cli.main", "attribute", str(run), "--method",
         "proportional"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert "120 steps (0 warm-up excluded)" in r.stdout
    html = (run / "report.html").read_text()
    assert "a stale report" not in html and "forward" in html
    assert "updated" in r.stderr and "report.html" in r.stderr
