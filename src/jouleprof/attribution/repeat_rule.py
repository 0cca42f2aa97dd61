"""Where a run repeated phases on purpose and its own readings do not identify the power
buffer's window, the regression fits the energy counter's rows without the buffer's.

Why. A run whose replayable phases ran twice in some steps (`timeline.repeat`) holds steps that
differ by one more of a phase's energy. The energy counter integrates exactly and needs no
averaging window, so its rows see that difference and identify the phase. The power buffer's
rows carry a window whose length no H200 run could identify from its own residuals
(benchmarks/results/ref_loops: the neighbouring lengths' Δχ² ≤ 1.1), and on a simulated GPU
made to misfit as the H200 does they outweighed the counter's difference: a 15 ms copy
repeated in 30 % of 60 s of steps came to +0.3 … +2.4 % (±2.6–3.3 %) of its energy without
the buffer rows and +7.7 … +8.0 % (±10.4–10.7 %) with them
(benchmarks/results/ref_loops/simulated_repeat_rule). Where the run's residuals do identify the
window (each neighbouring length rejected, Δχ² above `regression_choice.WINDOW_CLEAR_CHI2`),
the buffer rows are right and worth keeping: on the simulated runs whose buffer follows the
regression's kernel and whose window was identified, leaving them out raised the median
error from 0.04 % to 0.19 % (benchmarks/results/interval_coverage, repeat30). Without
repetition the counter's rows are near-collinear and the buffer rows stay (they resolve
V-JEPA2's 6 ms optimizer step).

The rule applies where `RegressionConfig.use_buffer` is None (its default) and the run's
analysed steps hold at least MIN_REPEATED_STEPS steps with a phase that run.json
``extra["repeat"]`` names as replayed running more than once; ``use_buffer=True`` keeps the
buffer rows whatever was repeated.

Where the rule leaves the buffer's rows out, the fit with them has been made anyway; where it
puts a phase outside the chosen fit's interval, that interval spans both fits
(`span_both_fits`): the run cannot rank them, and on the GPU neither was right everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

MIN_REPEATED_STEPS = 20
"""Fewest analysed steps with a repeated phase for the rule to consider leaving the buffer rows
out (as `RegressionConfig.min_rows`: fewer differences than this carry too little to stand
alone; the simulated runs above had 130–400)."""


def replayed_phases(extra: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The phase names run.json ``extra["repeat"]`` says were run through `replay()`."""
    rep = (extra or {}).get("repeat")
    if not isinstance(rep, Mapping):
        return ()
    return tuple(str(p) for p in rep.get("phases") or ())


def repeated_steps(spans, phases: Iterable[str], steps: Iterable[int]) -> list[int]:
    """Of `steps`, those in which one of `phases` (a leaf name, at any depth) has more than
    one span."""
    names = set(phases)
    if not names or spans is None or len(spans) == 0:
        return []
    leaf = spans["phase"].astype(str).str.rsplit("/", n=1).str[-1]
    mine = spans[leaf.isin(names) & spans["step"].isin(list(steps))]
    if mine.empty:
        return []
    counts = mine.groupby(["step", "phase"]).size()
    twice = counts[counts > 1].index.get_level_values("step")
    return sorted({int(s) for s in twice})


def repetition(extra: Mapping[str, Any] | None, spans, steps: Iterable[int]) -> str | None:
    """A description of the run's repetition ("copy in 130 analysed steps") where it is enough
    for the rule (≥ MIN_REPEATED_STEPS analysed steps with a replayed phase twice); else None."""
    phases = replayed_phases(extra)
    if not phases:
        return None
    n = len(repeated_steps(spans, phases, steps))
    if n < MIN_REPEATED_STEPS:
        return None
    return f"{', '.join(phases)} in {n} analysed steps"


def window_identified(res: Any) -> bool:
    """Whether a fit with the buffer rows found the buffer window's length identified by its
    own residuals: every neighbouring length tried was rejected (its weight below 1,
    `regression_choice`)."""
    choice = res.diagnostics.get("buffer_window_choice") or {}
    weights = choice.get("neighbour_weight") or {}
    return bool(weights) and all(float(w) < 1.0 for w in weights.values())


def fits_with_rule(
    fit: Callable[[Any, Any], Any], cfg: Any, buffer: Any, what: str | None
) -> tuple[Any, Any]:
    """`fit(cfg, buffer)` (a DeviceAttribution) under the rule: where `cfg.use_buffer` is None,
    the run recorded enough repetition (`what`, the run's `repetition`; None where it did not)
    and its buffer rows leave the window unidentified, the fit again without the buffer rows,
    with a note (and ``diagnostics["buffer_rows_left_out"]``) saying why; otherwise the fit as
    asked (with a note where repetition was recorded and the buffer rows were kept). Returns
    (that fit, the fit with the buffer rows where the rule left them out, else None) for
    `span_both_fits`."""
    if buffer is None or cfg is None or cfg.use_buffer is not None:
        return fit(cfg, buffer), None
    with_buffer = fit(cfg, buffer)
    if what is None:
        return with_buffer, None
    if window_identified(with_buffer):
        with_buffer.notes.append(
            f"buffer rows: kept although the run repeated {what}, because its residuals "
            "identify the buffer's window"
        )
        return with_buffer, None
    res = fit(replace(cfg, use_buffer=False), None)
    why = (
        f"buffer rows: left out, because the run repeated {what}, which the energy counter's "
        "rows identify, and its residuals do not identify the buffer's window (pass "
        "use_buffer=True, or --buffer-rows, to keep them)"
    )
    res.notes.append(why)
    res.diagnostics["buffer_rows_left_out"] = why
    return res, with_buffer


def fit_with_rule(
    fit: Callable[[Any, Any], Any], fit_relabelled: Callable[[Any, Any, Any], Any], cfg: Any,
    buffer: Any, extra: Mapping[str, Any] | None, spans: Any, steps: Iterable[int],
) -> Any:  # fmt: skip
    """The regression of a run as `jouleprof attribute` gives it, wherever the run may have
    repeated phases: `fits_with_rule`; where the run repeated enough, the replay check
    (`repeat_check.with_replay_check`, fitted as the chosen fit was, with or without the
    buffer rows); last, where the rule left the buffer rows out, the span of both fits
    (`span_both_fits`: it spans what the other checks have not carried).

    `fit(cfg, buffer)` fits the run's own spans; `fit_relabelled(spans, cfg, buffer)` fits it
    on other spans (the replays named apart)."""
    from jouleprof.attribution.repeat_check import with_replay_check
    from jouleprof.attribution.shared_pairs import keep_shared, phases_before, with_pairs

    steps = list(steps)
    what = repetition(extra, spans, steps)
    repeated = what is not None
    # Each replayed phase weighed together with the one before it, kept where the replay
    # check finds energy they share (`shared_pairs`).
    pairs = (
        phases_before(spans, replayed_phases(extra))
        if repeated and cfg is not None and cfg.intervals
        else {}
    )
    asked = cfg.joint if cfg is not None else ()
    cfg = with_pairs(cfg, pairs) if pairs else cfg
    res, with_buffer = fits_with_rule(fit, cfg, buffer, what)
    if not repeated:
        return res
    left_out = with_buffer is not None
    c = cfg if cfg is None or not left_out else replace(cfg, use_buffer=False)
    b = None if left_out else buffer
    res = with_replay_check(
        res, lambda other: fit_relabelled(other, c, b), spans, replayed_phases(extra), cfg
    )
    if left_out:
        span_both_fits(res, with_buffer)
    if pairs:
        keep_shared(res, pairs, asked)
    return res


def span_both_fits(res: Any, with_buffer: Any) -> dict[str, dict[str, Any]]:
    """Where the fit with the buffer's rows (`with_buffer`) puts a phase resolved in both
    outside the interval of the fit without them (`res`, changed in place), that phase's
    interval becomes the span of both fits' intervals (its estimate stays `res`'s).

    Why. The rule chose between two fits the run's residuals cannot rank (the window is not
    identified), and neither is right everywhere: on the H100 an inference loop's replayed
    encoder came to −19.0 % (±12.0) of its reference without the buffer rows and −2.7 % (±6.1)
    with them, while user4's GEMM came to +1.6 … +5.3 % without them and +9.4 … +13.6 % with
    them (benchmarks/results/ref_loops/README.md, "Two fits the run cannot rank"). Where they
    disagree, the interval carries both. Returns, per phase compared, the two fits' energies
    and whether the interval was spanned; notes the phases spanned."""
    from jouleprof.attribution.regression_choice import widen_to

    other = {p.phase: p for p in with_buffer.phases}
    found: dict[str, dict[str, Any]] = {}
    bounds: dict[str, tuple[float, float, float]] = {}
    for p in res.phases:
        q = other.get(p.phase)
        if q is None or not (p.resolved and q.resolved):
            continue
        if None in (p.energy_lo_j, p.energy_hi_j, q.energy_lo_j, q.energy_hi_j):
            continue  # point fits (no intervals) have nothing to span
        outside = not p.energy_lo_j <= q.energy_j <= p.energy_hi_j
        found[p.phase] = {"without_buffer_j": p.energy_j, "with_buffer_j": q.energy_j,
                          "with_buffer_lo_j": q.energy_lo_j, "with_buffer_hi_j": q.energy_hi_j,
                          "spanned": outside}  # fmt: skip
        if outside:
            lo = min(p.energy_lo_j, q.energy_lo_j)
            hi = max(p.energy_hi_j, q.energy_hi_j)
            bounds[p.phase] = (lo, hi, abs(q.energy_j - p.energy_j))
    said = [
        f"{name} {_j(row['with_buffer_j'])} J [{_j(row['with_buffer_lo_j'])}, "
        f"{_j(row['with_buffer_hi_j'])}] against {_j(row['without_buffer_j'])} J without them"
        for name, row in found.items()
        if row["spanned"]
    ]
    widen_to(res, bounds, "the buffer's rows")
    if said:
        res.notes.append(
            "buffer rows check: the fit with them puts " + "; ".join(said) + ", outside this "
            "fit's interval; each such interval spans both fits"
        )
    elif found:
        res.notes.append(
            "buffer rows check: the fit with them puts every phase inside this fit's interval"
        )
    res.diagnostics["buffer_rows_check"] = found
    return found


def _j(x: float) -> str:
    """Joules for a note: four significant digits, whole joules from 10 kJ up (no exponent)."""
    return f"{x:.4g}" if abs(x) < 1e4 else f"{x:.0f}"
