"""How many steps a regression needs to pin each phase to a target precision (pure functions).

A regression's interval has two parts: noise, which falls as 1/√(steps analysed) (on the H200
V-JEPA2 step, 168 steps put the optimizer at ±28 % and 1,185 steps at ±11 %, 28 / √(1185/168)
= 10.5: benchmarks/results/attr_vith_b8, run5 and run6), and what more steps do not shrink:
where long phases are cut into bins, how far bins twice as long move the phase, and where
the power buffer's rows are used, how far the neighbouring kernel lengths move it
(`regression_choice`, each added to the interval in quadrature). This splits a phase's half-width
into the two and says how many steps would bring it to the target, or that more steps alone
would not, because the fixed part exceeds it. The move is measured on the same noisy readings,
so part of it is noise too: counting all of it as fixed makes the estimate a cautious one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from jouleprof.attribution.result import DeviceAttribution, pct_text


@dataclass(frozen=True)
class StepsNeeded:
    """For one phase: its half-width now, its fixed part, the steps the target needs.

    Attributes:
        phase: the phase's label.
        rel_halfwidth: the interval's half-width relative to the estimate (0.17: ±17 %).
        fixed_rel: the part that more steps do not shrink (relative), 0 where none.
        n_steps: steps analysed now.
        steps_needed: steps for the target half-width; None when the fixed part alone
            reaches it.
    """

    phase: str
    rel_halfwidth: float
    fixed_rel: float
    n_steps: int
    steps_needed: int | None


def steps_needed(
    rel_halfwidth: float, n_steps: int, target_rel: float, fixed_rel: float = 0.0
) -> int | None:
    """Steps at which a half-width of `rel_halfwidth` from `n_steps` falls to `target_rel`,
    the noise part shrinking as 1/√steps and `fixed_rel` staying (both added in quadrature).
    None: `fixed_rel` alone is at or above the target."""
    if not (rel_halfwidth > 0 and n_steps > 0 and target_rel > 0 and fixed_rel >= 0):
        raise ValueError(
            f"need positive half-width, steps and target (got {rel_halfwidth}, {n_steps}, "
            f"{target_rel}) and a non-negative fixed part ({fixed_rel})"
        )
    if fixed_rel >= target_rel:
        return None
    noise2 = max(rel_halfwidth**2 - fixed_rel**2, 0.0)
    return max(n_steps, math.ceil(n_steps * noise2 / (target_rel**2 - fixed_rel**2)))


def plan(res: DeviceAttribution, target_rel: float) -> list[StepsNeeded]:
    """Each resolved phase of `res` whose interval is wider than ±`target_rel`, with the steps
    it would need (its fixed part: the bin-length check's and the buffer window choice's moves
    in quadrature, where the fit made them)."""
    d = res.diagnostics
    bins = ((d.get("bins") or {}).get("length_check") or {}).get("moved_j", {})
    window = (d.get("buffer_window_choice") or {}).get("moved_j", {})
    out = []
    for p in res.phases:
        hw = p.rel_halfwidth
        if not p.resolved or hw is None or hw <= target_rel or not p.n_steps:
            continue
        moved_j = float(np.hypot(bins.get(p.phase, 0.0), window.get(p.phase, 0.0)))
        fixed = min(moved_j / abs(p.energy_j), hw)
        if p.noise_hw_j is not None:  # all but the bootstrap's part (the sensor model's too)
            noise = min(p.noise_hw_j / abs(p.energy_j), hw)
            fixed = max(fixed, float(np.sqrt(max(hw**2 - noise**2, 0.0))))
        n = steps_needed(hw, p.n_steps, target_rel, fixed)
        out.append(StepsNeeded(p.phase, hw, fixed, p.n_steps, n))
    return out


def plan_text(need: StepsNeeded, target_rel: float, step_time_s: float | None) -> str:
    """One line for a user: what the phase has, what the target would take."""
    head = (
        f"{need.phase}: ±{pct_text(100 * need.rel_halfwidth)}% from {need.n_steps:,} steps; "
        f"±{pct_text(100 * target_rel)}% "
    )
    if need.steps_needed is None:
        return head + (
            f"is out of reach by more steps alone while the sensor model's spread and other "
            f"bin or buffer-window lengths account for ±{pct_text(100 * need.fixed_rel)}% (that "
            "part is partly noise and may shrink; otherwise the sensor or the long phases "
            "beside it need a finer model, or excitation: docs/excitation.md)"
        )
    time = ""
    if step_time_s:
        minutes = need.steps_needed * step_time_s / 60
        time = f" (~{minutes:,.0f} min of steps)" if minutes >= 1 else ""
    return head + (
        f"would need ~{need.steps_needed:,} steps{time}, if its noise falls as 1/√steps "
        "(runs of one step can also be pooled: benchmarks/attribution_pool.py)"
    )
