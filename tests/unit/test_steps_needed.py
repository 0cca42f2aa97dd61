"""How many steps an unresolved phase would need (attribution/steps_needed.py): the formula
on hand-built rows, and the law under it (the bootstrap part of an interval falls as
1/√steps, the rest does not) on simulated runs of an issue-20 loop (benchmarks/ref_loops_sim.py)."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

import pytest

from jouleprof.attribution.result import unresolved
from jouleprof.attribution.steps_needed import need, text

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _row(note, e=10.0, lo=2.0, hi=18.0, noise=6.0, n_rows=500, n=1000, time_s=2.0):
    r = unresolved("p", time_s, n, "regression", note)
    from dataclasses import replace

    return replace(r, estimate_j=e, estimate_lo_j=lo, estimate_hi_j=hi, noise_hw_j=noise,
                   n_rows=n_rows)  # fmt: skip


WIDE = "its 95% interval [2, 18] J is wider than the estimate 10 J"


def test_a_wide_interval_needs_the_steps_its_noise_part_says():
    # ±80 %: noise 60 %, fixed √(0.8² − 0.6²) = 52.9 % > 50 %: steps alone cannot resolve it.
    u = need(_row(WIDE), 0.05, 300.0)
    assert u.kind == "wide" and u.steps_to_resolve is None
    assert u.fixed_rel == pytest.approx(math.sqrt(0.8**2 - 0.6**2))
    assert "more steps alone will not resolve it" in text(u)
    # ±80 %, nearly all noise (fixed 10 %): N = n · ν² / (0.5² − φ²).
    noise = math.sqrt(8.0**2 - 1.0**2)
    u = need(_row(WIDE, noise=noise), 0.05, 300.0)
    expect = math.ceil(1000 * (noise / 10) ** 2 / (0.25 - 0.01))
    assert u.steps_to_resolve == expect
    assert u.seconds_to_resolve == pytest.approx(expect * 0.05)
    assert u.steps_to_target is None  # ±5 % < the 10 % fixed part
    assert f"~{expect:,} steps" in text(u) and "out of reach" in text(u)
    # A move of the buffer window (J, not yet in the interval) adds to the fixed part.
    moved = need(_row(WIDE, noise=noise), 0.05, 300.0, moved_j=4.0)
    assert moved.fixed_rel == pytest.approx(math.hypot(0.1, 0.4))
    assert moved.steps_to_resolve > u.steps_to_resolve


def test_too_few_rows_scale_with_the_steps():
    u = need(_row("only 5 sensor intervals overlap it (need 20)", noise=1.0, lo=9, hi=11,
                  n_rows=5), 0.05, 300.0)  # fmt: skip
    assert u.kind == "rows" and u.steps_to_resolve == 4000
    assert u.steps_to_target is None or u.steps_to_target >= u.steps_to_resolve
    # One row, its interval mostly the sensor model's spread (a run of 0.2 s): that spread is
    # no floor, since more rows narrow it too, so the steps for 20 rows are what it says.
    one = need(_row("only 1 sensor interval overlaps it (need 20)", noise=0.5, lo=1, hi=19,
                    n_rows=1, n=300), 0.0007, 300.0)  # fmt: skip
    assert one.kind == "rows" and one.steps_to_resolve == 6000 and one.lower_bound
    assert not one.more_steps_cannot
    assert "at least ~6,000 steps" in text(one) and "enough sensor intervals" in text(one)
    assert "will not" not in text(one)


def test_a_phase_pinned_at_a_bound_is_sized_by_its_time_share_and_said_a_lower_bound():
    note = "the fit pins its power at 0 W: the data cannot separate it from its neighbours"
    u = need(_row(note, e=0.0, lo=0.0, hi=100.0, noise=50.0), 0.05, 250.0)
    # size: 2 s × 250 W = 500 J; ±10 % all noise → already narrow enough; the target: 4×.
    assert u.kind == "bound" and u.lower_bound
    assert u.steps_to_target == math.ceil(1000 * 0.1**2 / 0.05**2)
    assert "at least" in text(u) and "excitation" in text(u)
    why = "its neighbour q's fit is unphysical (x), so the two traded energy: only p+q"
    partner = need(unresolved("p", 1.0, 10, "regression", why), 0.05, 1.0)
    assert partner.kind == "partner" and partner.steps_to_resolve is None


def _sim():
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module("ref_loops_sim")


def test_the_noise_part_falls_as_one_over_root_steps_and_unresolved_notes_say_so(tmp_path):
    from jouleprof.attribution.api import attribute

    sim = _sim()
    loop = sim.SIM_LOOPS["user4"]
    res = {}
    for secs in (6.0, 24.0):
        d = tmp_path / f"r{secs:g}"
        sim.write_fine(loop, d, secs, seed=2)
        res[secs] = attribute(d, "regression").devices[0]
    short, long_ = res[6.0], res[24.0]
    ratio = math.sqrt(short.n_steps / long_.n_steps)  # ~0.5
    checked = 0
    for name in ("copy", "spin", "tiny"):
        a, b = short.phase(name), long_.phase(name)
        if a.noise_hw_j is None or b.noise_hw_j is None:
            continue
        size_a = a.energy_j if a.resolved else a.estimate_j
        size_b = b.energy_j if b.resolved else b.estimate_j
        got = (b.noise_hw_j / size_b) / (a.noise_hw_j / size_a)
        assert 0.6 * ratio < got < 1.5 * ratio, (name, got, ratio)
        checked += 1
    assert checked >= 2
    notes = [p for p in long_.phases if not p.resolved and p.phase != "idle"]
    assert notes, "the fixed schedule leaves the short phases unresolved"
    listed = {u["phase"] for u in long_.diagnostics["steps_needed_unresolved"]}
    for p in notes:
        assert p.phase in listed
        assert "would need" in p.note or "more steps alone" in p.note, p.note
