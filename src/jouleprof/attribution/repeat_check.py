"""Does a replayed phase's second run cost what its first does? Repetition assumes it: a step
that ran a phase twice holds one more of that phase's energy, and the fit gives the two runs
one power. A phase that follows one of much higher or lower power can break that. On the H200
and the H100, a 1 GiB copy right after an 800 W GEMM drew 572-580 W, and its replay, right
after the copy, 376-491 W (within -7 to +4 % of the copy looped alone): the one-power fit
mixed the two and came 4.5-12 % above the copy run alone
(benchmarks/results/ref_loops/README.md, "A replayed phase's second run").

So where a run repeated phases, the regression is fitted once more with each step's second
and later runs of a replayed phase named apart (`<phase>#2`). Where the first runs' power,
fitted so, differs from the one power by more than the first runs' own half-width, the
phase's interval is widened by that move (added in quadrature, as the other model checks do).
A note gives the powers either way. The check cannot tell a phase that truly costs more after
its neighbour from a neighbour whose uneven power leaks into it (on a simulated GPU whose
GEMM throttles within each run, the copy's first runs came 10 % low); it widens in both cases.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

REPLAY_SUFFIX = "#2"
"""Appended to the name of a phase's second and later runs in a step for the check's fit."""


def relabel_replays(spans, phases: Iterable[str]):
    """`spans` (a copy) with each step's second and later spans of a replayed phase (named by
    its leaf, at any depth) renamed `<phase>#2`."""
    names = set(phases)
    out = spans.copy()
    if not names or len(spans) == 0:
        return out
    leaf = spans["phase"].astype(str).str.rsplit("/", n=1).str[-1]
    occurrence = spans.groupby(["step", "phase"]).cumcount()
    later = leaf.isin(names) & (occurrence >= 1)
    out.loc[later, "phase"] = spans.loc[later, "phase"].astype(str) + REPLAY_SUFFIX
    return out


def _power(p) -> float | None:
    """A phase's fitted power: its energy (or an unresolved phase's estimate) over its time."""
    e = p.energy_j if p.energy_j is not None else p.estimate_j
    return None if e is None or not p.time_s else e / p.time_s


def _halfwidth_w(p) -> float | None:
    """A resolved phase's interval half-width, in W of its power."""
    if not p.resolved or p.energy_j is None or not p.time_s:
        return None
    return 0.5 * (p.energy_hi_j - p.energy_lo_j) / p.time_s


def check_replays(res, split, phases: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Widen each replayed phase of `res` (the fit with one power per phase, in place) by how
    far its energy moves when its first runs get their own power in `split` (the fit with the
    replays named apart): |P_first − P_one| × its whole time, where that difference exceeds the
    first runs' own 95 % half-width (within it, the first runs alone are too loosely pinned to
    tell: on a loop whose every step runs the phase after the same neighbour, they are the
    plain loop's unidentified phase again). Adds a note and returns, per phase, the two fits'
    powers and the move."""
    from jouleprof.attribution.regression_choice import widen_by

    leaves = set(phases)
    by_name = {p.phase: p for p in split.phases}
    found: dict[str, dict[str, Any]] = {}
    moved: dict[str, float] = {}
    for p in res.phases:
        if p.phase.rsplit("/", 1)[-1] not in leaves:
            continue
        first, again = by_name.get(p.phase), by_name.get(p.phase + REPLAY_SUFFIX)
        one_w = _power(p)
        first_w = None if first is None else _power(first)
        again_w = None if again is None else _power(again)
        first_hw = None if first is None else _halfwidth_w(first)
        row = {"one_power_w": one_w, "first_runs_w": first_w, "first_runs_hw_w": first_hw,
               "replays_w": again_w, "moved_j": 0.0,
               "first_run_extra_j_per_step": _extra_per_step(first, first_w, again_w)}  # fmt: skip
        if one_w is not None and first_hw is not None and abs(first_w - one_w) > first_hw:
            moved[p.phase] = abs(first_w - one_w) * p.time_s
            row["moved_j"] = moved[p.phase]
        found[p.phase] = row
    widen_by(res, moved, "its first runs fitted apart from its replays")
    for name, row in found.items():
        if row["first_runs_w"] is None or row["replays_w"] is None:
            res.notes.append(
                f"replay check: {name}'s first runs and replays could not be fitted apart"
            )
            continue
        if row["moved_j"] > 0:
            said = "its interval carries the difference"
        elif row["first_runs_hw_w"] is None or row["one_power_w"] is None:
            said = "its first runs alone are unresolved: not widened"
        else:
            said = f"within the first runs' own ±{row['first_runs_hw_w']:.0f} W: not widened"
        extra = row["first_run_extra_j_per_step"]
        shared = (
            f"; its first run draws {abs(extra):.3g} J a step {'more' if extra > 0 else 'less'} "
            "than at its replays' power: energy it shares with the phase before it"
            if extra is not None and row["moved_j"] > 0
            else ""
        )
        res.notes.append(
            f"replay check: {name} draws {row['first_runs_w']:.0f} W in its first run of a step "
            f"and {row['replays_w']:.0f} W in its replays (one power for both: "
            f"{row['one_power_w']:.0f} W); {said}{shared}"
        )
    res.diagnostics["replay_check"] = found
    return found


def _extra_per_step(first, first_w: float | None, again_w: float | None) -> float | None:
    """J a step that a phase's first runs draw beyond what they would at its replays' power:
    (P_first − P_replays) × the first runs' time per step. Where a phase runs once a step and
    its replay follows itself, this is the energy it shares with the phase before it (on an
    H100, user4's copy after its GEMM: 2.42 J, against 1.8-2.2 J between the copy's "step
    less it" reference and its alone and added ones; benchmarks/results/ref_loops/README.md,
    "A third reference")."""
    if first is None or first_w is None or again_w is None or not first.time_per_step_s:
        return None
    return (first_w - again_w) * first.time_per_step_s


def with_replay_check(
    res, fit_split: Callable[[Any], Any], spans, phases: Iterable[str], cfg: Any
) -> Any:
    """`res` after the check, where the config asks for intervals and phases were replayed:
    `fit_split(relabelled_spans)` is the same regression on spans with the replays named
    apart. A split fit that fails leaves `res` as it was, with a note saying why."""
    from jouleprof.errors import AttributionError

    phases = tuple(phases)
    if not phases or not getattr(cfg, "intervals", True):  # None: the defaults, intervals on
        return res
    try:
        split = fit_split(relabel_replays(spans, phases))
    except AttributionError as e:
        res.notes.append(f"replay check: not made ({e})")
        return res
    check_replays(res, split, phases)
    return res


__all__ = ["REPLAY_SUFFIX", "check_replays", "relabel_replays", "with_replay_check"]
