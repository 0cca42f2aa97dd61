"""A phase the fit can only weigh together with a short neighbour is resolved by bounding the
neighbour between the lowest and highest power the sensors read (no guess at their boundary)."""

from __future__ import annotations

import pytest

from jouleprof.attribution.regression_results import _bounded_splits
from jouleprof.attribution.result import PhaseResult, unresolved

N = 600  # steps


def _resolved(name: str, e: float, lo: float, hi: float, t: float) -> PhaseResult:
    return PhaseResult(name, t, t / N, e, lo, hi, e / t, 50.0, "regression", True,
                       note="jointly: ...", device="gpu0", n_steps=N, noise_hw_j=1.0)  # fmt: skip


def _unresolved(name: str, t: float, estimate: float | None = None) -> PhaseResult:
    r = unresolved(name, t, N, "regression", "the fit pins its power at 0 W", "gpu0")
    return PhaseResult(**{**r.__dict__, "estimate_j": estimate})


def test_a_long_phase_glued_to_a_short_one_is_the_joint_less_the_short_ones_range():
    # backward 10 ms and optimizer 0.3 ms a step, 600 steps: joint 5,760 J ± 4.8 %.
    t_b, t_o = 0.010 * N, 0.0003 * N
    joint = _resolved("backward+optimizer", 5760.0, 5483.0, 6037.0, t_b + t_o)
    rows = [_unresolved("backward", t_b), _unresolved("optimizer", t_o, estimate=-5.0), joint]
    out = {r.phase: r for r in _bounded_splits(rows, 130.0, 670.0, "gpu0")}
    b = out["backward"]
    o_lo, o_hi = 130.0 * t_o, 670.0 * t_o  # 23.4 … 120.6 J
    assert b.resolved and "bounded: optimizer" in b.note
    assert b.energy_lo_j == pytest.approx(5483.0 - o_hi)
    assert b.energy_hi_j == pytest.approx(6037.0 - o_lo)
    # The optimizer's own estimate (−5 J, unphysical) is held at its floor: the point.
    assert b.energy_j == pytest.approx(5760.0 - o_lo)
    # Any split of the joint that gives the optimizer a physical energy lies inside.
    for o in (o_lo, o_hi):
        for j in (5483.0, 6037.0):
            assert b.energy_lo_j <= j - o <= b.energy_hi_j
    assert not out["optimizer"].resolved and out["backward+optimizer"] is joint


def test_a_partner_too_long_to_bound_leaves_the_phase_unresolved():
    # Two 5 ms phases: the partner's range (130–670 W × 5 ms) is wider than what is left.
    t = 0.005 * N
    joint = _resolved("a+b", 3000.0, 2900.0, 3100.0, 2 * t)
    rows = [_unresolved("a", t), _unresolved("b", t), joint]
    out = _bounded_splits(rows, 130.0, 670.0, "gpu0")
    assert [r.resolved for r in out] == [False, False, True]


def test_a_partner_fitted_above_the_ceiling_bounds_nothing():
    # A short phase can truly draw more than any reading shows, and a fit above the ceiling
    # says this one may: no bounded split (simulated: all three such splits missed their truth).
    t_b, t_o = 0.040 * N, 0.006 * N
    joint = _resolved("p0+p1", 13_400.0, 13_100.0, 13_600.0, t_b + t_o)
    above = _unresolved("p0", t_o, estimate=700.0 * t_o)
    out = _bounded_splits([above, _unresolved("p1", t_b), joint], 90.0, 570.0, "gpu0")
    assert [r.resolved for r in out] == [False, False, True]


def test_a_phase_itself_fitted_above_the_ceiling_is_not_split_out():
    # An optimizer fitted at 1,471 W has taken a third phase's energy, and so has its joint
    # row with the EMA: subtracting the EMA's range would keep that energy (simulated: 76 %).
    t_o, t_e = 0.006 * N, 0.0035 * N
    joint = _resolved("optimizer+ema", 4408.0, 4117.0, 4715.0, t_o + t_e)
    opt = _unresolved("optimizer", t_o, estimate=1471.0 * t_o)
    out = _bounded_splits([opt, _unresolved("ema", t_e, estimate=0.0), joint], 89.0, 806.0, "gpu0")
    assert [r.resolved for r in out] == [False, False, True]
