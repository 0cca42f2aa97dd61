"""What every attribution method shares: checked spans, the exclusive time partition
(`build_timeline`; the `Timeline` it returns is in `partition`), warm-up.

The partition turns spans.csv into one label per instant of the run, so that time is never
counted twice and never lost:

- Nested phases are paths ("forward/target" inside "forward"). At every instant the deepest span
  wins: a parent's time not covered by any child is labelled with the parent's own name.
- Time inside a step covered by no phase is ``"untracked"``; time outside every step is
  ``"idle"``. A step's extent is the hull of its phases (the recorder counts a phase opened
  before `step()`, such as a data fetch, with the step it feeds).
- Recorded edges carry a little noise (device timestamps mapped onto the host clock), so
  consecutive spans overlap or leave gaps of some microseconds. Overlaps between spans of the
  same depth, and gaps shorter than `gap_tolerance_s` between two phases (or two steps), are
  closed at their midpoint: the best estimate of where one ended and the next began.
- Warm-up steps are labelled ``"<warmup>"`` as a whole; methods ignore every sensor interval
  that touches them. So is time outside the steps that lasts longer than `max_idle_gap_s`
  (``"<outside>"``): a stretch of seconds between recorded steps is not idle but unrecorded
  work (the uninstrumented blocks of an overhead measurement, isolation replays, evaluation).

Warm-up rule (`auto_warmup_steps`): exclude at least the first step (allocator, cuDNN autotune,
compilation); then keep excluding until `stable_run` consecutive steps each last within
`rel_tol` of the steady-state step time (the median over the second half of the run). At most
half of the steps are excluded.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from jouleprof.attribution.partition import (  # noqa: F401  (the labels, re-exported)
    EXCLUDED,
    IDLE,
    OUTSIDE,
    UNTRACKED,
    WARMUP,
    Timeline,
)
from jouleprof.errors import AttributionError

log = logging.getLogger(__name__)

GAP_TOLERANCE_S = 0.5e-3
"""Default: gaps and overlaps shorter than this between consecutive spans are recording noise."""


def check_spans(spans, samples, device: str, tolerance_s: float = GAP_TOLERANCE_S) -> None:
    """Raise AttributionError if `spans` cannot be attributed against `samples` of `device`.

    Checks: spans exist, their times are finite and ordered, and they lie inside the time range
    of the device's samples.
    """
    if spans is None or len(spans) == 0:
        raise AttributionError(
            "the run has no phase spans (spans.csv is missing or empty): record the run with the "
            "phase recorder (fine mode: `with prof.step(): with prof.phase(...)`) to attribute it"
        )
    import pandas as pd

    t0 = pd.to_numeric(spans["t0_s"], errors="coerce").to_numpy(dtype=float)
    t1 = pd.to_numeric(spans["t1_s"], errors="coerce").to_numpy(dtype=float)
    bad = ~(np.isfinite(t0) & np.isfinite(t1)) | (t1 < t0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise AttributionError(
            f"{int(bad.sum())} span(s) have missing, unreadable or reversed times, e.g. "
            f"step {spans['step'].iloc[i]} {spans['phase'].iloc[i]!r}: "
            f"[{spans['t0_s'].iloc[i]}, {spans['t1_s'].iloc[i]}]; fix or drop those rows"
        )
    d = samples[samples["device"] == device]
    if len(d) == 0:
        raise AttributionError(f"samples.csv has no rows for device {device!r}")
    s0, s1 = float(d["t_s"].min()), float(d["t_s"].max())
    outside = (t0 < s0 - tolerance_s) | (t1 > s1 + tolerance_s)
    if outside.any():
        i = int(np.flatnonzero(outside)[0])
        raise AttributionError(
            f"{int(outside.sum())} of {len(spans)} spans lie outside the time range of "
            f"{device}'s samples [{s0:.3f}, {s1:.3f}] s, e.g. step {spans['step'].iloc[i]} "
            f"{spans['phase'].iloc[i]!r} [{t0[i]:.3f}, {t1[i]:.3f}] s: spans and samples must "
            "share one clock and the sampler must run for the whole workload"
        )


def auto_warmup_steps(
    durations_s: np.ndarray, rel_tol: float = 0.10, stable_run: int = 3, min_steps: int = 1
) -> int:
    """How many leading steps to exclude as warm-up (the rule is in the module docstring)."""
    d = np.asarray(durations_s, dtype=float)
    n = len(d)
    if n <= 1:
        return 0
    steady = float(np.median(d[n // 2 :]))
    ok = np.abs(d - steady) <= rel_tol * steady
    limit = max(min(min_steps, n - 1), n // 2)
    for i in range(min(min_steps, n - 1), limit + 1):
        if ok[i : i + stable_run].all():
            return i
    return limit


@dataclass(frozen=True)
class _Seg:
    t0_s: float
    t1_s: float
    label: str | tuple[str, ...]  # a tuple: contested between same-depth spans (by start)


def _merge(segs: list[_Seg]) -> list[_Seg]:
    out: list[_Seg] = []
    for s in segs:
        if s.t1_s <= s.t0_s:
            continue
        if out and out[-1].label == s.label and math.isclose(out[-1].t1_s, s.t0_s, abs_tol=1e-12):
            out[-1] = _Seg(out[-1].t0_s, s.t1_s, s.label)
        else:
            out.append(s)
    return out


def _step_segments(
    phases: list[tuple[str, float, float]], t0_s: float, t1_s: float, tol_s: float
) -> list[_Seg]:
    """Exclusive segments of one step covering [t0_s, t1_s] (see the module docstring)."""
    edges = sorted({t0_s, t1_s, *(p[1] for p in phases), *(p[2] for p in phases)})
    edges = [e for e in edges if t0_s <= e <= t1_s]
    segs: list[_Seg] = []
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        mid = 0.5 * (a + b)
        cover = [p for p in phases if p[1] <= mid < p[2]]
        if not cover:
            segs.append(_Seg(a, b, UNTRACKED))
            continue
        depth = max(p[0].count("/") for p in cover)
        top = sorted((p for p in cover if p[0].count("/") == depth), key=lambda p: (p[1], p[2]))
        names = tuple(dict.fromkeys(p[0] for p in top))
        segs.append(_Seg(a, b, names[0] if len(names) == 1 else names))
    segs = _merge(segs)
    # Contested time (same-depth spans overlapping) is shared out in order of start.
    fixed: list[_Seg] = []
    for s in segs:
        if isinstance(s.label, tuple):
            if s.t1_s - s.t0_s > tol_s:
                log.warning(
                    "phases %s overlap by %.3f ms; the overlap is split between them",
                    " and ".join(s.label),
                    1e3 * (s.t1_s - s.t0_s),
                )
            cuts = np.linspace(s.t0_s, s.t1_s, len(s.label) + 1)
            fixed += [_Seg(cuts[i], cuts[i + 1], n) for i, n in enumerate(s.label)]
        else:
            fixed.append(s)
    segs = _merge(fixed)
    # Short untracked gaps between two phases are recording noise: close them at the midpoint.
    for i in range(1, len(segs) - 1):
        s = segs[i]
        if s.label == UNTRACKED and s.t1_s - s.t0_s <= tol_s:
            m = 0.5 * (s.t0_s + s.t1_s)
            segs[i - 1] = _Seg(segs[i - 1].t0_s, m, segs[i - 1].label)
            segs[i + 1] = _Seg(m, segs[i + 1].t1_s, segs[i + 1].label)
            segs[i] = _Seg(m, m, UNTRACKED)
    # So are short untracked ends, left where a step's boundary moved to meet its neighbour's.
    if len(segs) > 1:
        first, last = segs[0], segs[-1]
        if first.label == UNTRACKED and first.t1_s - first.t0_s <= tol_s:
            segs[0], segs[1] = (
                _Seg(first.t0_s, first.t0_s, UNTRACKED),
                _Seg(first.t0_s, segs[1].t1_s, segs[1].label),
            )
        if last.label == UNTRACKED and last.t1_s - last.t0_s <= tol_s:
            segs[-2], segs[-1] = (
                _Seg(segs[-2].t0_s, last.t1_s, segs[-2].label),
                _Seg(last.t1_s, last.t1_s, UNTRACKED),
            )
    return _merge(segs)


def build_timeline(
    spans,
    start_s: float,
    end_s: float,
    warmup_steps: int | None = None,
    gap_tolerance_s: float = GAP_TOLERANCE_S,
    max_idle_gap_s: float | None = None,
) -> Timeline:
    """The exclusive partition of [start_s, end_s] (module docstring) from a spans DataFrame.

    Args:
        spans: columns step, phase, t0_s, t1_s.
        start_s, end_s: the range to cover (the samples' time range).
        warmup_steps: leading steps to exclude; None applies `auto_warmup_steps`.
        gap_tolerance_s: gaps and overlaps up to this long are treated as recording noise.
        max_idle_gap_s: time outside the steps longer than this is excluded, not idle; None:
            three median steps, at least 1 s.

    Raises:
        AttributionError: steps overlap by more than the tolerance, or no step is left to analyse.
    """
    if gap_tolerance_s < 0:
        raise ValueError(f"gap_tolerance_s must be ≥ 0, got {gap_tolerance_s}")
    by_step: dict[int, list[tuple[str, float, float]]] = {}
    for step, phase, t0, t1 in spans[["step", "phase", "t0_s", "t1_s"]].itertuples(index=False):
        by_step.setdefault(int(step), []).append((str(phase), float(t0), float(t1)))
    extents = {s: (min(p[1] for p in v), max(p[2] for p in v)) for s, v in by_step.items()}
    steps = sorted(extents, key=lambda s: extents[s])
    for a, b in zip(steps[:-1], steps[1:], strict=True):
        over = extents[a][1] - extents[b][0]
        if over > gap_tolerance_s:
            raise AttributionError(
                f"steps {a} [{extents[a][0]:.4f}, {extents[a][1]:.4f}] s and {b} "
                f"[{extents[b][0]:.4f}, {extents[b][1]:.4f}] s overlap by {1e3 * over:.2f} ms: "
                "each step's spans must lie in its own stretch of time (one process's steps per "
                "spans.csv, numbered in order)"
            )
    n = len(steps)
    if warmup_steps is None:
        durations = np.array([extents[s][1] - extents[s][0] for s in steps])
        n_warm = auto_warmup_steps(durations)
    else:
        if warmup_steps < 0:
            raise AttributionError(f"--warmup-steps must be ≥ 0, got {warmup_steps}")
        n_warm = warmup_steps
    if n_warm >= n:
        raise AttributionError(
            f"the run has {n} step(s) and {n_warm} are excluded as warm-up: nothing is left to "
            "attribute; record more steps or exclude fewer (--warmup-steps; in Python, "
            "warmup_steps=)"
        )
    # Step boundaries: split tiny gaps/overlaps between consecutive steps at their midpoint.
    bounds = {s: list(extents[s]) for s in steps}
    for a, b in zip(steps[:-1], steps[1:], strict=True):
        if bounds[b][0] - bounds[a][1] <= gap_tolerance_s:
            m = 0.5 * (bounds[a][1] + bounds[b][0])
            bounds[a][1], bounds[b][0] = m, m
    if max_idle_gap_s is None:
        median_step = float(np.median([extents[s][1] - extents[s][0] for s in steps]))
        max_idle_gap_s = max(1.0, 3.0 * median_step)

    def between(t0: float, t1: float) -> _Seg:
        return _Seg(t0, t1, IDLE if t1 - t0 <= max_idle_gap_s else OUTSIDE)

    segs: list[_Seg] = [between(min(start_s, bounds[steps[0]][0]), bounds[steps[0]][0])]
    warm = set(steps[:n_warm])
    order: list[str] = []
    for i, s in enumerate(steps):
        t0, t1 = bounds[s]
        if s in warm:
            segs.append(_Seg(t0, t1, WARMUP))
        else:
            step_segs = _step_segments(by_step[s], t0, t1, gap_tolerance_s)
            for g in step_segs:
                if g.label not in order:
                    order.append(g.label)  # type: ignore[arg-type]
            segs += step_segs
        nxt = bounds[steps[i + 1]][0] if i + 1 < n else max(end_s, t1)
        segs.append(between(t1, nxt))
    segs = _merge(segs)
    names = [WARMUP, OUTSIDE, IDLE, *order]
    index = {nm: j for j, nm in enumerate(names)}
    edges = np.array([segs[0].t0_s] + [g.t1_s for g in segs])
    labels = np.array([index[g.label] for g in segs], dtype=int)  # type: ignore[index]
    analysed = steps[n_warm:]
    region = (bounds[analysed[0]][0], bounds[analysed[-1]][1])
    tl = Timeline(
        edges, labels, names, analysed, steps[:n_warm], region, {s: tuple(bounds[s]) for s in steps}
    )
    occupied = tl.overlap_s(np.array([region[0]]), np.array([region[1]]))[0]
    tl.time_s = {nm: float(occupied[index[nm]]) for nm in names if nm not in EXCLUDED}
    # Runs of analysed steps: the region split wherever excluded time lies.
    runs: list[tuple[float, float]] = []
    for g in segs:
        if g.t1_s <= region[0] or g.t0_s >= region[1]:
            continue
        if g.label in EXCLUDED:
            runs.append((np.nan, np.nan))
        elif runs and not np.isnan(runs[-1][1]):
            runs[-1] = (runs[-1][0], min(g.t1_s, region[1]))
        else:
            runs.append((max(g.t0_s, region[0]), min(g.t1_s, region[1])))
    tl.runs_s = [r for r in runs if not np.isnan(r[0])]
    tl.time_s = {k: v for k, v in tl.time_s.items() if v > 0 or k != IDLE}
    has_idle = tl.time_s.get(IDLE, 0.0) > 0
    tl.order = order + ([IDLE] if has_idle else [])
    incl: dict[str, float] = {}
    per_step: dict[str, np.ndarray] = {}  # each phase's spans in each analysed step
    for i, s in enumerate(analysed):
        for phase, t0, t1 in by_step[s]:
            incl[phase] = incl.get(phase, 0.0) + (t1 - t0)
            if phase not in per_step:
                per_step[phase] = np.zeros(len(analysed), dtype=int)
            per_step[phase][i] += 1
    tl.counts = {phase: int(n.sum()) for phase, n in per_step.items()}
    tl.inclusive_time_s = incl
    # Run once in most analysed steps and more in some: a replayed phase.
    tl.repeated = {phase: n for phase, n in per_step.items() if n.max() > 1 and np.median(n) == 1}
    return tl
