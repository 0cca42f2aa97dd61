"""The regression's per-phase results, built from one fitted model: each phase's energy and
interval (bootstrap quantiles combined with the sensor model's systematic spread), the checks that
report a phase unresolved (too few rows, power pinned at 0 W or above the power ceiling, interval
wider than its estimate), joint rows for back-to-back phases the fit cannot split, the demotion of
a resolved phase whose partner's fit is unphysical, and the step starts' coverage of the refresh
cycle (lockstep: intervals widened).

The fit itself is `attribution.regression`, which calls these.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from scipy.stats import norm

from jouleprof.attribution.bins import expand
from jouleprof.attribution.common import IDLE, Timeline
from jouleprof.attribution.groups import sum_row
from jouleprof.attribution.pinned import unphysical_side
from jouleprof.attribution.result import PhaseResult, pct_text, unresolved
from jouleprof.attribution.stall import StallSplit
from jouleprof.sensors.refresh import RefreshEstimate

METHOD = "regression"


def _energy_interval(power, boot, sens_w, idx, t_s, cfg, widen=1.0):
    """Energy of the columns `idx` over times `t_s` (s), and its interval: the bootstrap's
    quantiles combined with the systematic spread (sensor-model uncertainty: `sens_w`, one row
    per perturbation of the sensor model, the powers' joint response), half-widths times
    `widen`, never narrower than ± cfg.min_rel_halfwidth of the estimate."""
    alpha = 1.0 - cfg.confidence
    z = float(norm.ppf(1 - alpha / 2))
    e = float(power[idx] @ t_s)
    q_lo, q_hi = np.quantile(boot[:, idx] @ t_s, [alpha / 2, 1 - alpha / 2])
    s_j = z * float(np.sqrt(np.sum((np.atleast_2d(sens_w)[:, idx] @ t_s) ** 2)))
    floor = cfg.min_rel_halfwidth * e
    lo = e - max(widen * float(np.hypot(max(e - q_lo, 0.0), s_j)), floor)
    hi = e + max(widen * float(np.hypot(max(q_hi - e, 0.0), s_j)), floor)
    return e, lo, hi


def _terms(timeline: Timeline, split: StallSplit | None, col_of: dict[str, int], members=None):
    """names → (columns, seconds) whose powers × seconds are those phases' energy: each
    phase's column over its time, or with the stall model its work time plus the stall
    column over its stall time. `members` (a binned phase → its bins, `attribution.bins`)
    puts a phase's bins in its place; `timeline` is the one the fit's labels come from."""
    members = members or {}
    if split is not None:
        return lambda names: split.terms(expand(members, names), col_of)
    return lambda names: (
        [col_of[n] for n in expand(members, names)],
        np.array([timeline.time_s.get(n, 0.0) for n in expand(members, names)]),
    )


def _fitted(name: str, col_of: dict[str, int], members) -> bool:
    """Whether every column making `name` (itself, or its bins) was fitted."""
    return all(m in col_of for m in expand(members or {}, [name]))


def _phase_results(
    timeline,
    cols,
    col_of,
    terms,
    power,
    boot,
    sens_w,
    cover,
    cfg,
    device,
    widen,
    ceiling_w,
    members=None,
):
    """One PhaseResult per label of the reported `timeline`, resolved or not; the analysed
    steps' energy with bounds; and the labels whose fitted power is unphysical.

    `col_of`: fitted label → index into `cols` and `power` (the stall model adds "stall").
    `terms`: names → (columns, seconds) of their energy (`_terms`).
    `widen` multiplies each interval's half-widths (lockstep: see attribute_regression).
    `ceiling_w`: a fitted power above it is not physical (see `_power_ceiling_w`).
    `members`: a binned phase → its bins (`attribution.bins`); such a phase is checked on its
    mean power and on the intervals its most-covered bin overlaps.
    """
    members = members or {}
    n_steps = timeline.n_steps
    in_step = [n for n in timeline.in_step_labels if _fitted(n, col_of, members)]
    # Energy of the whole analysed steps: well determined even where its split is not.
    idx, t_vec = terms(in_step)
    step_e, step_lo, step_hi = _energy_interval(power, boot, sens_w, idx, t_vec, cfg)

    results: list[PhaseResult] = []
    unphysical: set[str] = set()
    for name in timeline.order:
        time_s = timeline.time_s[name]
        if not _fitted(name, col_of, members):
            why = "no sensor interval overlaps it"
            results.append(unresolved(name, time_s, n_steps, METHOD, why, device))
            continue
        labels = expand(members, [name])
        n_cover = max(int(cover[cols[col_of[m]]]) for m in labels)  # a bound on the union
        idx, t = terms([name])
        e, lo, hi = _energy_interval(power, boot, sens_w, idx, t, cfg, widen)
        noise = _noise_halfwidth_j(boot, idx, t, cfg, widen)
        # Its own power (without stalls); a binned phase's mean over its bins.
        if len(labels) == 1:
            power_w = float(power[col_of[name]])
        else:
            power_w = e / time_s if time_s > 0 else 0.0
        why = None
        side = unphysical_side(power_w, ceiling_w)
        if n_cover < cfg.min_rows:
            why = (
                f"only {n_cover} sensor interval"
                + (" overlaps" if n_cover == 1 else "s overlap")
                + f" it (need {cfg.min_rows})"
            )
        elif side == "floor":
            why = "the fit pins its power at 0 W: the data cannot separate it from its neighbours"
            unphysical.add(name)
        elif side == "ceiling":
            why = (
                f"its fitted power {power_w:.0f} W is above any the sensor read "
                f"(ceiling {ceiling_w:.0f} W): it absorbs a neighbour's energy"
            )
            unphysical.add(name)
        elif hi - lo > e:
            why = (
                f"its {100 * cfg.confidence:.0f}% interval [{lo:.4g}, {hi:.4g}] J over the run is "
                f"wider than the estimate {e:.4g} J"
            )
        if why is not None:
            row = unresolved(name, time_s, n_steps, METHOD, why, device)
            results.append(replace(row, estimate_j=e, estimate_lo_j=lo, estimate_hi_j=hi,
                                   n_rows=n_cover, noise_hw_j=noise))  # fmt: skip
            continue
        share = 100.0 * e / step_e if name != IDLE and step_e > 0 else None
        n_rows_text = f"{n_cover} sensor interval{'' if n_cover == 1 else 's'}"
        note = f"{n_rows_text}; ±{pct_text(50 * (hi - lo) / e)}%"
        results.append(
            PhaseResult(
                name,
                time_s,
                time_s / n_steps,
                e,
                max(lo, 0.0),
                hi,
                e / time_s if time_s > 0 else power_w,  # = its power, without stalls
                share,
                METHOD,
                True,
                note,
                device,
                n_steps,
                n_rows=n_cover,
                noise_hw_j=noise,
            )
        )
    return results, step_e, step_lo, step_hi, unphysical


def _noise_halfwidth_j(boot, idx, t_s, cfg, widen=1.0) -> float:
    """The bootstrap's own half-width of the energy of columns `idx` over `t_s` (no sensor-
    model spread, no floor): the part of the interval that more steps shrink."""
    alpha = 1.0 - cfg.confidence
    q_lo, q_hi = np.quantile(boot[:, idx] @ t_s, [alpha / 2, 1 - alpha / 2])
    return float(widen * 0.5 * (q_hi - q_lo))


CEILING_MARGIN = 1.15
"""A phase's mean power may exceed the highest power reading by this factor (the instant
field averages ~25 ms, so a short phase can peak above it) before the fit is called
unphysical."""


def _power_fields_in_region(dev, timeline: Timeline) -> list:
    """The power fields' readings (instant, average) inside the analysed region, one Series per
    field read there."""
    t0, t1 = timeline.region_s
    inside = dev[(dev["t_s"] >= t0) & (dev["t_s"] <= t1)]
    return [
        inside[c]
        for c in ("power_instant_w", "power_w")
        if c in inside.columns and inside[c].notna().any()
    ]


def _power_ceiling_w(dev, timeline: Timeline, buffer=None) -> float | None:
    """The most power any phase could draw: the highest power reading of the analysed
    region, times CEILING_MARGIN; None when no power field was read. `buffer` (the device's
    power-buffer samples, ~20 ms each) counts too: an H200 draws above its limit for tens of
    milliseconds, and the buffer sees more of such a burst than the instant field does."""
    peaks = [float(f.max()) for f in _power_fields_in_region(dev, timeline)]
    if buffer is not None and len(buffer):
        t0, t1 = timeline.region_s
        b = buffer[(buffer["t_s"] >= t0) & (buffer["t_s"] <= t1)]["power_w"]
        if b.notna().any():
            peaks.append(float(b.max()))
    return CEILING_MARGIN * max(peaks) if peaks else None


def _power_floor_w(dev, timeline: Timeline) -> float:
    """The least power any phase could draw: the lowest power reading of the analysed region
    (0 W when no power field was read). Each reading averages some window of the phases, so
    no phase drew less than the lowest of them for the whole of one."""
    lows = [float(f.min()) for f in _power_fields_in_region(dev, timeline)]
    return max(min(lows), 0.0) if lows else 0.0


def _adjacent_pairs(timeline: Timeline) -> dict[frozenset[str], int]:
    """How often two in-step labels follow each other directly on the timeline."""
    names, labels = timeline.names, timeline.labels
    in_step = set(timeline.in_step_labels)
    pairs: dict[frozenset[str], int] = {}
    for a, b in zip(labels[:-1], labels[1:], strict=True):
        na, nb = names[a], names[b]
        if na != nb and na in in_step and nb in in_step:
            key = frozenset((na, nb))
            pairs[key] = pairs.get(key, 0) + 1
    return pairs


def _nested(a: str, b: str) -> bool:
    """Whether one phase contains the other ("forward" and "forward/target")."""
    return a.startswith(b + "/") or b.startswith(a + "/")


def _joint_results(
    timeline, col_of, terms, power, boot, sens_w, cfg, device, widen, results, step_e, members=None
):
    """Rows for phases the fit cannot split but can weigh together.

    Two phases that follow each other in (nearly) every step and that the data cannot tell
    apart — one pinned at 0 W, or the other absorbing it above any power the sensor read —
    still have a well-measured sum. For each unresolved in-step phase, its most frequent
    direct neighbour joins it (an unresolved one first); between two in every step, the one it
    trades the most energy with (on a measured inference step an fp32 loss sat between a bf16
    encoder and a host-side logging phase, and traded with the logging: the pair with the
    encoder came out 13–15 % low, outside its interval, the pair with the logging within
    3 %). The pair's energy and interval come from the same fit and bootstrap (where the two
    trade energy, their sum stays put). Named "a+b" (step order), resolved when its interval
    is narrower than its estimate.
    """
    in_step = set(timeline.in_step_labels)
    unresolved_in_step = [
        r.phase
        for r in results
        if not r.resolved and _fitted(r.phase, col_of, members) and r.phase in in_step
    ]
    pairs = _adjacent_pairs(timeline)
    n_steps = timeline.n_steps
    done: set[frozenset[str]] = set()
    out: list[PhaseResult] = []

    def width_j(names):
        _, lo, hi = _energy_interval(power, boot, sens_w, *terms(names), cfg, widen)
        return hi - lo

    def trade(key) -> float:
        """The pair's interval against the quadrature of the two phases' own: near 1 where
        they are independent, small where the fit trades energy between them."""
        if not all(_fitted(p, col_of, members) for p in key):
            return float("inf")
        alone = float(np.hypot(*(width_j([p]) for p in key)))
        return width_j(list(key)) / alone if alone > 0 else float("inf")

    for name in unresolved_in_step:
        cands = [
            (key, n)
            for key, n in pairs.items()
            if name in key and n >= 0.5 * n_steps and not _nested(*key)
        ]
        if not cands:
            continue
        # An unresolved neighbour first (the two are what the fit could not split), then the
        # most frequent one; between equally frequent ones (both in every step), the one it
        # trades the most energy with.
        rank = lambda c: (all(p in unresolved_in_step for p in c[0]), c[1])  # noqa: E731
        top = max(rank(c) for c in cands)
        tied = [c[0] for c in cands if rank(c) == top]
        best = min(tied, key=trade) if len(tied) > 1 else tied[0]
        if best in done or not all(_fitted(p, col_of, members) for p in best):
            continue
        done.add(best)
        pair = [p for p in timeline.order if p in best]
        idx, t = terms(pair)
        e, lo, hi = _energy_interval(power, boot, sens_w, idx, t, cfg, widen)
        if e <= 0 or hi - lo > e:
            continue
        time_s = float(sum(timeline.time_s[p] for p in pair))
        label = "+".join(pair)
        note = (
            f"jointly: the data cannot split {' from '.join(pair)}, but weigh them together; "
            f"±{pct_text(50 * (hi - lo) / e)}%"
        )
        out.append(sum_row(label, time_s, n_steps, e, lo, hi, step_e, METHOD, note, device))
    return out


def _demote_partners(results, joint, unphysical: set[str], n_steps: int, device: str):
    """A phase whose back-to-back partner's fit is unphysical (pinned at 0 W, or above any power
    the sensor read: `unphysical`) has traded energy with it: its own figure is not a
    measurement either, only their sum (the joint row) is. On a simulated host-paced step the
    optimizer came out "resolved" at half its true energy, truth outside its interval, while
    the EMA beside it was fitted at 1046 W; the pair was within 7 %."""
    by_name = {r.phase: r for r in results}
    demote: dict[str, str] = {}
    also: dict[str, str] = {}  # already unresolved: say which neighbour it leans on
    for row in joint:
        members = row.phase.split("+")
        for a in members:
            for b in members:
                ra, rb = by_name.get(a), by_name.get(b)
                if a == b or ra is None or rb is None or b not in unphysical:
                    continue
                if ra.resolved:
                    demote[a] = (
                        f"its neighbour {b}'s fit is unphysical ({rb.note}), so the two traded "
                        f"energy: only {row.phase} is measured"
                    )
                elif a not in unphysical and a not in also:
                    also[a] = f"its neighbour {b}'s fit is unphysical: only {row.phase} is measured"
    return [
        replace(
            unresolved(r.phase, r.time_s, n_steps, METHOD, demote[r.phase], device),
            estimate_j=r.energy_j,
            estimate_lo_j=r.energy_lo_j,
            estimate_hi_j=r.energy_hi_j,
            n_rows=r.n_rows,
            noise_hw_j=r.noise_hw_j,
        )
        if r.phase in demote
        else replace(r, note=f"{also[r.phase]}; {r.note}")
        if r.phase in also
        else r
        for r in results
    ]


def _refresh_coverage(timeline: Timeline, grid: RefreshEstimate, bins: int = 20) -> float:
    """Fraction of the refresh cycle (in `bins` bins) at which analysed steps start.

    Steps that always start at the same point of the cycle put the refresh edges at the same
    points of every step: the equations then repeat and cannot separate neighbouring phases.
    """
    starts = np.array([timeline.step_extents_s[s][0] for s in timeline.analysed_steps])
    cycle = ((starts - grid.offset_s) / grid.period_s) % 1.0
    hit = np.unique(np.minimum((cycle * bins).astype(int), bins - 1))
    return len(hit) / bins


def _bounded_splits(results, floor_w: float, ceiling_w: float, device: str):
    """An unresolved phase whose joint row with a short partner is resolved, resolved from it.

    Whatever the fit gives the partner, its energy lies between `floor_w` and `ceiling_w` (the
    lowest and highest power the sensors read, `_power_floor_w`, `_power_ceiling_w`) times its
    time. So the phase is the joint energy less the partner's, and its interval is the joint
    one widened by the whole of that range: no assumption about where the energy sits at their
    boundary. Where the partner is short (pl_resnet50's 0.3 ms optimizer after its 10 ms
    backward on the H200) the range is narrow and the phase is reported resolved, under the
    rule every phase meets (interval narrower than the estimate). Not where either was fitted
    above the ceiling: a short partner can truly draw more than any reading shows, and a phase
    above it has absorbed a third phase's energy, in the joint row too. The partner stays
    unresolved; the joint row stays."""
    by_name = {r.phase: r for r in results}
    swap: dict[str, PhaseResult] = {}
    for row in results:
        members = row.phase.split("+")
        if len(members) != 2 or not row.resolved or row.energy_j is None:
            continue
        for name, other in (members, members[::-1]):
            r, o = by_name.get(name), by_name.get(other)
            if r is None or o is None or r.resolved or name in swap:
                continue
            if _above_ceiling(o, ceiling_w):
                # A phase shorter than the readings' windows can truly draw more than any of
                # them shows, and the fit says this one may: the ceiling bounds nothing
                # (simulated: 3 of 3 such splits missed).
                continue
            if _above_ceiling(r, ceiling_w):
                # The phase itself has absorbed a third phase's energy, and the joint row with
                # it (simulated: an optimizer at 1,471 W beside an uneven backward, the joint
                # 76 % above its truth).
                continue
            o_lo, o_hi = floor_w * o.time_s, ceiling_w * o.time_s
            # The partner's own (unreported) estimate, held within its physical range.
            o_point = 0.5 * (o_lo + o_hi) if o.estimate_j is None else o.estimate_j
            o_point = min(max(o_point, o_lo), o_hi)
            e = row.energy_j - o_point
            lo, hi = row.energy_lo_j - o_hi, row.energy_hi_j - o_lo
            if e <= 0 or lo < 0 or hi - lo > e:
                continue
            per_step_ms = 1e3 * o.time_s / max(r.n_steps, 1)
            note = (
                f"bounded: {other} ({per_step_ms:.2g} ms a step) drew between {floor_w:.0f} W "
                f"and the {ceiling_w:.0f} W ceiling whatever the fit gives it, so {name} is "
                f"{row.phase} less that range; ±{pct_text(50 * (hi - lo) / e)}%"
            )
            swap[name] = PhaseResult(
                name,
                r.time_s,
                r.time_per_step_s,
                e,
                lo,
                hi,
                e / r.time_s if r.time_s > 0 else None,
                None if row.share_pct is None else row.share_pct * e / row.energy_j,
                METHOD,
                True,
                note,
                device,
                r.n_steps,
                n_rows=r.n_rows,
                noise_hw_j=row.noise_hw_j,
            )
    return [swap.get(r.phase, r) for r in results]


def _above_ceiling(p: PhaseResult, ceiling_w: float) -> bool:
    """Whether an unresolved phase's unreported estimate puts its power above the ceiling
    (`unphysical_side`, the one test of it)."""
    if p.estimate_j is None or p.time_s <= 0:
        return False
    return unphysical_side(p.estimate_j / p.time_s, ceiling_w) == "ceiling"
