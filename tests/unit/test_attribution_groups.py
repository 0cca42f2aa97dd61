"""Phases weighed together on request (`attribute(..., joint=["a+b"])`, `--joint a+b`).

A group's row comes from the same fit as the phases: its estimate is the members' sum, its
interval is taken over the sum (where the fit trades energy between neighbours it is narrower
than their half-widths added), it holds the summed truth of a simulated GPU, and asking for it
changes no other row. Bad groups get one clear line, naming what was wrong.
"""

from __future__ import annotations

import functools
import subprocess
import sys

import pytest

from jouleprof.attribution import attribute
from jouleprof.attribution.common import build_timeline
from jouleprof.attribution.groups import parse_groups
from jouleprof.attribution.regression import attribute_regression
from jouleprof.attribution.regression_config import RegressionConfig
from jouleprof.errors import AttributionError
from jouleprof.sensors.simulated_workload import PhaseSpec, simulate_training
from jouleprof.store.rundir import RunDir
from jouleprof.types import RunRecord, Span

PHASES = [
    PhaseSpec("data", 0.008, 150.0),
    PhaseSpec("forward", 0.120, 480.0),
    PhaseSpec("backward", 0.200, 600.0),
    PhaseSpec("optimizer", 0.012, 430.0),
    PhaseSpec("ema", 0.006, 495.0),
]


@functools.cache
def _sim(seed: int = 3):
    run = simulate_training(PHASES, 200, span_noise_s=50e-6, seed=seed)
    samples = run.samples_frame()
    tl = build_timeline(run.spans_frame(), samples["t_s"].min(), samples["t_s"].max())
    return run, samples, tl


def _write_run(path, sim):
    """The simulated run as a run directory (samples.csv, spans.csv) on gpu0."""
    rd = RunDir.create(path, RunRecord(run_id=path.name, kind="simulated"))
    w = rd.sample_writer()
    w.write(sim.samples)
    w.close()
    w = rd.span_writer()
    w.write([Span(s.step, s.phase, float(s.t0_s), float(s.t1_s)) for s in sim.spans])
    w.close()
    return path


def _fit(joint=()):
    run, samples, tl = _sim()
    res = attribute_regression(samples, tl, "gpu0", RegressionConfig(joint=tuple(joint)))
    return res, run.true_energy_in_steps_j(set(tl.analysed_steps))


def test_groups_are_parsed_and_bad_ones_refused_with_a_reason():
    assert parse_groups(None) == ()
    assert parse_groups("gemm+copy") == (("gemm", "copy"),)
    assert parse_groups(["a+b", " a + b ", "c+d+e"]) == (("a", "b"), ("c", "d", "e"))
    for bad, why in [("gemm", "fewer than two"), ("a+", "empty"), ("a+a", "fewer than two")]:
        with pytest.raises(ValueError, match=why):
            parse_groups(bad)
    with pytest.raises(ValueError, match="twice"):
        parse_groups("a+b+a")
    # The config keeps them in one spelling
    assert RegressionConfig(joint=("a + b",)).joint == ("a+b",)


def test_a_group_prices_its_members_together_and_holds_their_summed_truth():
    res, truth = _fit(["optimizer+ema", "forward+ema", "backward+optimizer"])
    by = {p.phase: p for p in res.phases}
    for name in ("optimizer+ema", "forward+ema", "backward+optimizer"):
        g = by[name]
        members = name.split("+")
        want = sum(truth[m] for m in members)
        assert g.resolved and "on request" in g.note, g
        assert g.energy_lo_j <= want <= g.energy_hi_j, (name, g, want)
        assert g.time_s == pytest.approx(sum(by[m].time_s for m in members))
        resolved = [by[m] for m in members if by[m].resolved]
        if len(resolved) == len(members):  # the point estimate is the members' sum
            assert g.energy_j == pytest.approx(sum(m.energy_j for m in resolved), rel=1e-9)
    # Neighbours the fit trades energy between: their sum is pinned better than their
    # half-widths added.
    bo, b, o = by["backward+optimizer"], by["backward"], by["optimizer"]
    half = lambda p: 0.5 * (p.energy_hi_j - p.energy_lo_j)  # noqa: E731
    assert half(bo) < half(b) + half(o)


def test_asking_for_a_group_changes_no_other_row():
    plain, _ = _fit()
    asked, _ = _fit(["forward+ema"])
    rows = [p for p in asked.phases if p.phase != "forward+ema"]
    assert rows == plain.phases
    assert [p.phase for p in asked.phases][-1] == "forward+ema"


def test_a_group_the_fit_already_weighs_together_is_not_repeated():
    # A 0.6 ms and a 0.5 ms phase that the fit cannot split get an automatic joint row; asking
    # for the same pair (in either order) gives that row once.
    phases = [
        PhaseSpec("forward", 0.140, 480.0),
        PhaseSpec("backward", 0.220, 600.0),
        PhaseSpec("opt", 0.0006, 430.0),
        PhaseSpec("ema", 0.0005, 520.0),
    ]
    run = simulate_training(phases, 120, span_noise_s=50e-6, seed=0)
    samples = run.samples_frame()
    tl = build_timeline(run.spans_frame(), samples["t_s"].min(), samples["t_s"].max())
    res = attribute_regression(samples, tl, "gpu0", RegressionConfig(joint=("ema+opt",)))
    assert [p.phase for p in res.phases if "+" in p.phase] == ["opt+ema"]


def test_an_unknown_phase_is_named_with_the_runs_phases(tmp_path):
    d = _write_run(tmp_path / "run", _sim()[0])
    with pytest.raises(AttributionError, match="no phase 'fwd'.*forward"):
        attribute(d, "regression", joint=["fwd+backward"])
    with pytest.raises(AttributionError, match="fewer than two"):
        attribute(d, "regression", joint=["forward"])


def test_the_cli_says_what_was_wrong_in_one_line(tmp_path):
    d = _write_run(tmp_path / "run", _sim()[0])
    jp = [sys.executable, "-m", "jouleprof.cli.main", "attribute", str(d)]

    def run(*args):
        return subprocess.run([*jp, *args], capture_output=True, text=True, timeout=120)

    for args, why in [
        (["--joint", "forward"], "fewer than two phases"),
        (["--joint", "fwd+backward"], "no phase 'fwd'"),
        (["--joint", "forward+backward", "--method", "proportional"], "--joint weighs"),
    ]:
        r = run(*args)
        assert r.returncode != 0 and why in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr
    r = run("--joint", "backward+optimizer")
    assert r.returncode == 0, r.stderr
    assert "backward+optimizer" in r.stdout
    # a joint row overlaps its phases: the table says why its shares add past 100 %
    assert "shares add past 100%" in " ".join(r.stdout.split())


def test_a_long_group_name_takes_a_line_per_member_and_cuts_no_figure(tmp_path):
    import os

    d = _write_run(tmp_path / "run", _sim()[0])
    r = subprocess.run(
        [sys.executable, "-m", "jouleprof.cli.main", "attribute", str(d),
         "--joint", "backward+optimizer+ema"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "80"},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    (i,) = [k for k, ln in enumerate(lines) if ln.strip().startswith("backward+ ")]
    assert lines[i + 1].strip() == "optimizer+" and lines[i + 2].strip() == "ema"
    assert " J " in lines[i] and "…" not in r.stdout
    assert all(len(ln) <= 80 for ln in lines)


def test_an_unresolved_phase_is_weighed_with_the_neighbour_it_trades_energy_with():
    # "loss" sits between "encoder" and "log" in every step; the bootstrap shows it trading
    # energy with "log" (their powers move against each other), not with "encoder". Its joint
    # row must be loss+log, whose sum is well measured. The encoder is as frequent a
    # neighbour (both are in every step), so frequency cannot choose; the first neighbour seen
    # would make encoder+loss, whose interval is as wide as the loss's own.
    from types import SimpleNamespace

    import numpy as np
    import pandas as pd

    from jouleprof.attribution.regression_results import _joint_results

    step_s, dur = 0.020, {"encoder": 0.009, "loss": 0.003, "log": 0.002}
    rows = []
    for k in range(100):
        t = 1.0 + k * step_s
        for name, d in dur.items():
            rows.append((k, name, t, t + d))
            t += d
    spans = pd.DataFrame(rows, columns=["step", "phase", "t0_s", "t1_s"])
    tl = build_timeline(spans, 1.0, 1.0 + 100 * step_s, warmup_steps=0)
    col_of = {name: i for i, name in enumerate(dur)}
    power = np.array([700.0, 300.0, 150.0])
    rng = np.random.default_rng(0)
    trade = rng.normal(0, 200.0, 500)
    boot = power + np.column_stack([rng.normal(0, 10.0, 500), trade, -1.5 * trade])
    sens_w = np.zeros((1, 3))
    cfg = SimpleNamespace(confidence=0.95, min_rel_halfwidth=0.0)
    results = [
        SimpleNamespace(phase="encoder", resolved=True),
        SimpleNamespace(phase="loss", resolved=False),
        SimpleNamespace(phase="log", resolved=True),
    ]

    def terms(names):
        return [col_of[n] for n in names], np.array([tl.time_s[n] for n in names])

    step_e = float(power @ np.array(list(dur.values()))) * tl.n_steps
    joint = _joint_results(
        tl, col_of, terms, power, boot, sens_w, cfg, "gpu0", 1.0, results, step_e
    )
    assert [r.phase for r in joint] == ["loss+log"]
    e = joint[0].energy_j
    assert e == pytest.approx((300.0 * 0.003 + 150.0 * 0.002) * tl.n_steps, rel=1e-9)
