"""How many steps of fine measurement an unresolved phase would need (pure functions).

The regression reports a phase unresolved when its interval is wider than its estimate, when
too few sensor intervals overlap it, or when the fit pins its power at 0 W or above anything
the sensor read (it cannot be told from a neighbour). For each, this says how many steps (and
seconds, at the run's step time) would resolve it, from the fit the run has:

- **too few rows**: the intervals overlapping a phase grow in proportion to the steps, so
  ``n · min_rows / rows`` steps give it enough (at least: an interval fitted from so few rows
  is mostly the sensor model's spread, no floor, and is judged again once the rows are there);
- **interval too wide**: an interval has two parts. The block bootstrap's (the noise) falls as
  1/√steps, each block of steps an independent draw of the same noise; the sensor model's
  spread (its grids, the buffer kernel's shape) and how far other bin and buffer-window
  lengths move the phase do not. With noise ν and fixed part φ (relative) from n steps, the
  half-width √(φ² + ν² n / N) reaches ±50 % (resolved: the interval narrower than the
  estimate) at ``N = n ν² / (0.5² − φ²)`` steps, the target ±t at ``n ν² / (t² − φ²)``, and
  never where φ is already at or above it;
- **pinned at a bound or absorbing a neighbour**: its own estimate is no measure of its size,
  so r is its bootstrap half-width over its time-share energy (its time × the step's mean
  power). That is a lower bound: on a fixed schedule the rows stay nearly collinear however
  many steps are measured, and excitation (`timeline.excite`) is the remedy, not length;
- **its partner is unphysical** (demoted): not a matter of steps (None).

The 1/√steps law was checked on simulated runs of issue-20-like loops
(tests/unit/test_steps_needed.py: a run four times longer halves the half-width to within
the bootstrap's own scatter).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from jouleprof.attribution.result import DeviceAttribution, PhaseResult, pct_text

RESOLVED_REL = 0.5
"""A phase is resolved when its interval is narrower than its estimate: half-width ≤ 50 %."""


@dataclass(frozen=True)
class UnresolvedNeed:
    """For one unresolved phase: why, and the steps (seconds) that would resolve it.

    Attributes:
        phase: the phase's label.
        kind: "rows" (too few sensor intervals), "wide" (interval wider than the estimate),
            "bound" (pinned at 0 W or above the sensor's ceiling), "partner" (its neighbour's
            fit is unphysical), "none" (no estimate).
        n_steps: steps analysed now.
        rel_halfwidth: the half-width now, relative to its size (None where unknown).
        noise_rel, fixed_rel: its parts: the bootstrap's (falls as 1/√steps) and the rest
            (the sensor model's spread, the bin and buffer-window moves: does not).
        steps_to_resolve: steps for its interval to be narrower than its estimate; None when
            more steps alone would not say.
        steps_to_target: steps for ±target; None likewise.
        seconds_to_resolve, seconds_to_target: the same at the run's step time.
        lower_bound: the figure is a lower bound (kind "bound"; kind "rows": the steps that
            give it enough rows, after which its interval may still need more).
    """

    phase: str
    kind: str
    n_steps: int
    rel_halfwidth: float | None
    noise_rel: float | None
    fixed_rel: float | None
    steps_to_resolve: int | None
    steps_to_target: int | None
    seconds_to_resolve: float | None
    seconds_to_target: float | None
    target_rel: float
    lower_bound: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def more_steps_cannot(self) -> bool:
        """More steps alone will not resolve it: its interval's floor is the sensor model's
        (`fixed_rel`), or its joint-row partner was fitted unphysically (`text` says which)."""
        return self.steps_to_resolve is None and (
            self.kind == "partner" or self.fixed_rel is not None
        )


def _kind(p: PhaseResult) -> str:
    note = p.note or ""
    if "neighbour" in note and "traded" in note:
        return "partner"
    if p.estimate_j is None:
        return "none"
    if "sensor intervals overlap it" in note or "sensor interval overlaps it" in note:
        return "rows"
    if "pins its power at 0 W" in note or "above any the sensor read" in note:
        return "bound"
    return "wide"


def _steps(n: int, noise_rel: float, fixed_rel: float, want: float) -> int | None:
    """Steps at which hypot(fixed, noise × √(n / steps)) falls to `want`; None: never."""
    if fixed_rel >= want:
        return None
    return max(n + 1, math.ceil(n * noise_rel**2 / (want**2 - fixed_rel**2)))


def need(
    p: PhaseResult,
    step_time_s: float,
    step_power_w: float | None,
    target_rel: float = 0.05,
    min_rows: int = 20,
    moved_j: float = 0.0,
) -> UnresolvedNeed:
    """What an unresolved regression phase `p` would need (module docstring).

    `moved_j`: how far the bin-length and buffer-window checks move it (J, in quadrature),
    which more steps do not shrink; already inside the interval of a phase those checks made
    unresolved."""
    n = max(int(p.n_steps), 1)
    kind = _kind(p)
    rel = noise_rel = fixed_rel = None
    res = tgt = None
    if kind in ("rows", "wide", "bound") and p.estimate_lo_j is not None:
        hw_j = 0.5 * (p.estimate_hi_j - p.estimate_lo_j)
        size_j = p.estimate_j
        if kind == "bound" or not size_j or size_j <= 0:
            size_j = p.time_s * step_power_w if step_power_w else None
        if size_j and size_j > 0 and hw_j > 0:
            noise_j = min(p.noise_hw_j if p.noise_hw_j is not None else hw_j, hw_j)
            fixed_j = math.sqrt(max(hw_j**2 - noise_j**2, 0.0))
            if "widened by how much" not in (p.note or ""):
                fixed_j = math.hypot(fixed_j, moved_j)
            rel = math.hypot(noise_j, fixed_j) / size_j
            noise_rel, fixed_rel = noise_j / size_j, fixed_j / size_j
            res = _steps(n, noise_rel, fixed_rel, RESOLVED_REL) if rel > RESOLVED_REL else n + 1
            tgt = _steps(n, noise_rel, fixed_rel, target_rel)
    if kind == "rows":
        # Enough sensor intervals come first. An interval fitted from so few rows is mostly the
        # sensor model's spread over them, which more rows narrow too: it is no floor here.
        rows_need = max(n + 1, math.ceil(n * min_rows / max(p.n_rows or 0, 1)))
        res = max(res or 0, rows_need)
        tgt = max(tgt, res) if tgt is not None else None
    elif res is not None and tgt is not None:
        tgt = max(tgt, res)  # ±target is never reached before the phase is resolved

    def secs(k: int | None) -> float | None:
        return None if k is None or not step_time_s else k * step_time_s

    return UnresolvedNeed(
        p.phase, kind, n, rel, noise_rel, fixed_rel, res, tgt, secs(res), secs(tgt),
        target_rel, kind in ("bound", "rows"),
    )  # fmt: skip


def text(u: UnresolvedNeed) -> str:
    """One clause for a user, appended to the phase's note."""
    if u.steps_to_resolve is None:
        if u.kind == "partner":
            return "more steps alone will not split it (see the joint row)"
        if u.fixed_rel is not None:
            return (
                f"more steps alone will not resolve it: ±{pct_text(100 * u.fixed_rel)}% of its "
                "interval is the sensor model's spread and the bin/buffer-window moves, which "
                "do not shrink with steps (excitation varies the step, and a phase with no "
                "side effects can be replayed: docs/excitation.md)"
            )
        return "no estimate to scale: how many steps it needs is unknown"
    at_least = "at least " if u.lower_bound else ""
    s = f"would need {at_least}~{u.steps_to_resolve:,} steps"
    if u.seconds_to_resolve:
        s += f" (~{_dur(u.seconds_to_resolve)})"
    if u.kind == "rows":
        return (
            s + " of fine measurement for enough sensor intervals to overlap it (then run "
            "attribute again to see what more it needs)"
        )
    s += " of fine measurement to be resolved"
    if u.steps_to_target:
        s += f", ~{u.steps_to_target:,} for ±{pct_text(100 * u.target_rel)}%"
    elif u.fixed_rel is not None:
        s += f" (±{pct_text(100 * u.target_rel)}% is out of reach by steps alone)"
    s += " (its noise falls as 1/√steps)"
    if u.kind == "bound":
        s += "; a fixed schedule may keep it tied to its neighbour: excitation varies the step"
    return s


def _dur(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def annotate(res: DeviceAttribution, target_rel: float = 0.05, min_rows: int = 20) -> None:
    """Append each unresolved phase's need to its note, and all of them to
    ``diagnostics["steps_needed_unresolved"]`` (in place; regression results only)."""
    if res.method != "regression":
        return
    step_w = None
    if res.step_energy_j and res.step_time_s and res.n_steps:
        step_w = res.step_energy_j / (res.step_time_s * res.n_steps)
    d = res.diagnostics
    bins = ((d.get("bins") or {}).get("length_check") or {}).get("moved_j", {})
    unkept = (d.get("bins_choice") or {}).get("moved_j", {}) if not d.get("bins") else {}
    window = (d.get("buffer_window_choice") or {}).get("moved_j", {})
    needs = []
    out = []
    for p in res.phases:
        if p.resolved or p.phase in ("idle",):
            out.append(p)
            continue
        moved = math.hypot(bins.get(p.phase, 0.0), unkept.get(p.phase, 0.0))
        moved = math.hypot(moved, window.get(p.phase, 0.0))
        u = need(p, res.step_time_s, step_w, target_rel, min_rows, moved)
        needs.append(u.to_json())
        out.append(replace(p, note=f"{p.note}; {text(u)}" if p.note else text(u)))
    res.phases = out
    res.diagnostics["steps_needed_unresolved"] = needs
